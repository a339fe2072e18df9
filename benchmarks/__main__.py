"""Run every benchmark, print a table, write data/bench/latest.json.

Each record is {"name", "value", "unit", "goal"}; ``goal`` is a string such as
"<= 1.5" or null. This machine is shared and noisy: compare the ratios, which are
measured side by side in the same run, more than the absolute times.
"""

import json
import sys
from pathlib import Path

from benchmarks import capacity, classifier, delayline, sender, telemetry, timing

OUT = Path(__file__).resolve().parent.parent / "data" / "bench" / "latest.json"


def main() -> int:
    records = []
    for module, takes in ((classifier, "~10 s"), (telemetry, "~7 min"), (sender, "~30 s"),
                          (timing, "~30 s"), (delayline, "~1 min"),
                          (capacity, "~10 min")):
        name = module.__name__.split(".")[-1]
        print(f"bench {name}: running ({takes}) ...", file=sys.stderr, flush=True)
        try:
            records += module.run()
        except Exception as exc:  # the other benchmarks' figures still count
            print(f"bench {name}: failed: {exc}", file=sys.stderr, flush=True)
            records.append({"name": f"{name}_completed", "value": 0, "unit": "",
                            "goal": ">= 1"})
    width = max(len(r["name"]) for r in records)
    failed = 0
    for r in records:
        verdict = ""
        if r["goal"]:
            op, target = r["goal"].split()
            ok = r["value"] <= float(target) if op == "<=" else r["value"] >= float(target)
            verdict = "meets" if ok else "MISSES"
            failed += not ok
            verdict += f" goal {r['goal']}"
        print(f"{r['name']:<{width}}  {r['value']:>10.2f} {r['unit']:<12} {verdict}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(records, indent=2) + "\n")
    print(f"written to {OUT}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
