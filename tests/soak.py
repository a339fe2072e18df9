"""`make soak`: 20 consecutive short runs of the bottleneck scenario.

After every run, nothing labkit creates may be left in the kernel; at the end,
the spread of the headline metrics per policy is reported (coefficient of
variation = standard deviation / mean). Writes data/bench/soak.json; exits 1 on
any leak or failed run.
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labkit.runs import rundir
from tests.leaks import labkit_objects

REPO = Path(__file__).resolve().parents[1]
RUNS = 20
DURATION_S = 5
METRICS = {"slowdown_p99": lambda p: p.workload.slowdown_p99,  # of a PolicySummary
           "slowdown_p50": lambda p: p.workload.slowdown_p50,
           "busbw_mbps": lambda p: p.workload.busbw_mbps,
           "utilization": lambda p: p.bottleneck.utilization}


def main() -> int:
    values: dict[tuple[str, str], list[float]] = {}
    leaks, failures = 0, 0
    with tempfile.TemporaryDirectory(prefix="labkit-soak-") as tmp:
        for i in range(1, RUNS + 1):
            out = Path(tmp) / f"run-{i:02d}"
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "labkit.ui.cli", "run",
                                   str(REPO / "topologies/bottleneck.yaml"), "--duration",
                                   str(DURATION_S), "--out", str(out)], cwd=REPO,
                                  capture_output=True, text=True)
            left = {k: v for k, v in labkit_objects().items() if v}
            leaks += bool(left)
            if proc.returncode != 0:
                failures += 1
                print(f"run {i:2d}: FAILED\n{proc.stderr[-2000:]}")
                continue
            summary = rundir.load_run(out).summary
            for policy, p in summary.policies.items():
                for name, figure in METRICS.items():
                    if (value := figure(p)) is not None:
                        values.setdefault((policy, name), []).append(value)
            fifo = summary.policies["fifo"].workload.slowdown_p99
            prio = summary.policies["priority"].workload.slowdown_p99
            print(f"run {i:2d}: {time.monotonic() - t0:5.1f} s  slowdown p99 fifo {fifo:.2f} "
                  f"priority {prio:.2f}  leaks: {left or 'none'}", flush=True)
    report = []
    print(f"\n{'policy':<9} {'metric':<13} {'mean':>8} {'stdev':>8} {'CV':>6}  n")
    for (policy, name), xs in sorted(values.items()):
        mean = statistics.fmean(xs)
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        cv = sd / mean if mean else 0.0
        report.append({"policy": policy, "metric": name, "mean": mean, "stdev": sd, "cv": cv,
                       "n": len(xs)})
        print(f"{policy:<9} {name:<13} {mean:8.3f} {sd:8.3f} {cv:6.1%}  {len(xs)}")
    print(f"\n{RUNS} runs, {failures} failed, {leaks} left objects behind")
    path = REPO / "data" / "bench" / "soak.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"runs": RUNS, "failed": failures, "runs_with_leaks": leaks,
                                "duration_s": DURATION_S, "spread": report}, indent=2) + "\n")
    return 1 if leaks or failures else 0


if __name__ == "__main__":
    sys.exit(main())
