"""Lab 3, write a controller: a student's :class:`~labkit.control.Controller` rehearsed
without root against a small model of the checkpoint-burst bottleneck, then run for real
beside ``reactive`` and judged on the collective's p99 completion time.

The rehearsal is a fluid model, not the fabric: one FIFO port at the bottleneck's rate
and buffer, the ring offering its line rate while an op runs (it needs as many bytes
as the port sends in ``OP_ALONE_MS``), storage offering what its gate lets through (at
most ``offered_load`` x the port), the port serving both in proportion to what they
offer once a queue stands. The controller sees the port through labkit's own telemetry
feed (sampled every 8 ms, ``telemetry_delay_ms`` late) and is called every
``interval_ms`` of simulated time, exactly as in a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from labkit.control import CONTROLLERS, Controller, Plant
from labkit.control.session import storage_senders
from labkit.kernel.feed import FabricFeed
from labkit.kernel.tc import FIFO_CLASS, ClassStats
from labkit.model import scenario
from labkit.model.paths import REPO_ROOT
from labkit.model.topo import Topology
from labkit.runs.rundir import Run
from labkit.ui.labs.lanes import _run
from labkit.ui.labs.verdict import Unanswered, Wrong, check, require

SCENARIO = REPO_ROOT / "topologies" / "checkpoint-burst.yaml"
SAMPLE = REPO_ROOT / "data" / "sample" / "checkpoint-burst"
PORT = "spine1-eth0"
POLL_MS = 8  # the telemetry's sampling period (labkit.kernel.capture.QueuePoller)
OP_ALONE_MS = 300  # an op's time with the port to itself
OPS = 4
HELD = 0.1  # a sender at most this share of its fair share counts as held
REACT_MS = 50  # the rehearsal wants storage held this soon after an op starts ...
RELEASE_SHARE = 0.5  # ... and at least this share, on average, while the ring computes


@dataclass
class RecordingValves:
    """Stands in for :class:`labkit.kernel.valve.Valves`: keeps each host's lane rate."""

    mbps: dict[tuple[str, str], float | None] = field(default_factory=dict)
    decisions: int = 0

    def set(self, host: str, lane: str, reason: str, **changes) -> None:
        if "mbps" in changes and self.mbps.get((host, lane)) != changes["mbps"]:
            self.mbps[(host, lane)] = changes["mbps"]
            self.decisions += 1


@dataclass
class Rehearsal:
    """What a controller did in the model: each op's time (ms), storage's share of its
    fair share while ops ran and while the ring computed, and how long after each op
    began storage was first held (ms; None: never)."""

    name: str
    op_ms: list[float]
    share_in_ops: float
    share_in_gaps: float
    held_after_ms: list[float | None]

    @property
    def slowdown(self) -> float:
        return max(self.op_ms) / OP_ALONE_MS


def rehearse(cls: type[Controller], path: Path = SCENARIO) -> Rehearsal:
    """Run ``cls`` for :data:`OPS` ops and their compute phases in the fluid model of
    ``path``'s bottleneck port (1 ms steps)."""
    sc = scenario.load(path)
    topo = Topology(sc.fabric)
    a, b = sc.fabric.bottlenecks[0]
    link = topo.port_towards(b, a).link
    senders = storage_senders(sc, topo)
    feed = FabricFeed({PORT: link.rate_mbps}, "fifo", sc.control.telemetry_delay_ms)
    valves = RecordingValves()
    ctl = cls(Plant(valves, senders, list(sc.ranks), link.rate_mbps, feed, sc.control))
    port = link.rate_mbps * 1e3 / 8  # bytes per ms
    offered = max(st.offered_load for st in sc.storage if st.server in senders) * port
    buffer = link.buffer_kb * 1024
    host = next(st.server for st in sc.storage if st.server in senders)
    if sc.allreduce is None:
        raise ValueError(f"{path}: the rehearsal models an All-Reduce, and this has none")
    gap_ms = int(sc.allreduce.compute_ms)
    queue = vip = 0.0
    op_ms: list[float] = []
    held_after: list[float | None] = []
    in_ops: list[float] = []
    in_gaps: list[float] = []
    t, next_step = 0, 0
    for _ in range(OPS):
        for phase in ("gap", "op"):
            start, left, held = t, OP_ALONE_MS * port, None
            while (t - start < gap_ms) if phase == "gap" else left > 0:
                gate = valves.mbps.get((host, "low"))
                share = 1.0 if gate is None else gate / senders[host]
                storage = min(offered, share * senders[host] * 1e3 / 8)
                ring = port if phase == "op" else 0.0
                if phase == "op":
                    in_ops.append(share)
                    held = held if held is not None or share > HELD else t - start
                    left -= port * ring / (ring + storage) if queue or ring + storage > port \
                        else ring
                elif t - start >= gap_ms // 3:  # what it gives once the op is surely over
                    in_gaps.append(share)
                queue = min(buffer, max(0.0, queue + ring + storage - port))
                vip += ring
                if t % POLL_MS == 0:
                    feed.push(t * 1_000_000, PORT, [ClassStats(FIFO_CLASS, 0, 0, 0, 0,
                                                               int(queue), 0)],
                              {"vip": (0, int(vip))})
                while next_step <= t * 1_000_000:
                    ctl.step(next_step)
                    next_step += ctl.interval_ns
                t += 1
            if phase == "op":
                op_ms.append(t - start + queue / port)
                held_after.append(held)
    return Rehearsal(cls.__name__, op_ms, sum(in_ops) / len(in_ops),
                     sum(in_gaps) / len(in_gaps), held_after)


def _controller(cls) -> type[Controller]:
    cls = require(cls, "your controller class")
    if not (isinstance(cls, type) and issubclass(cls, Controller)):
        raise Wrong(f"{cls!r} is not a controller class",
                    "define class Mine(Controller) with a step(self, now_ns) method")
    if cls.step is Controller.step:
        raise Unanswered(f"{cls.__name__}.step is not written yet")
    return cls


@check("Your controller in rehearsal")
def check_rehearsal(cls, path: Path = SCENARIO) -> str:
    """Pass when, in the model, ``cls`` holds storage within ``REACT_MS`` of every op's
    start (after the first) and gives it back while the ring computes."""
    cls = _controller(cls)
    try:
        mine = rehearse(cls, path)
    except NotImplementedError as exc:
        raise Unanswered(f"{cls.__name__}.step is not written yet") from exc
    except Exception as exc:
        raise Wrong(f"{cls.__name__} raised {type(exc).__name__}: {exc}",
                    "in a run this would stop the controller and fail the run; "
                    "fix step and run its cell again") from exc
    reactive = rehearse(CONTROLLERS["reactive"], path)
    late = [ms for ms in mine.held_after_ms[1:] if ms is None or ms > REACT_MS]
    said = (f"in the model, ops took up to {mine.slowdown:.2f}x their time alone "
            f"(reactive: {reactive.slowdown:.2f}x); storage got {mine.share_in_ops:.0%} of its "
            f"fair share during ops and {mine.share_in_gaps:.0%} while the ring computed")
    if late:
        when = ", ".join("never" if ms is None else f"{ms:.0f} ms" for ms in late)
        raise Wrong(f"{said}. After an op started, storage was held only after: {when}",
                    f"hold storage (at most {HELD:.0%} of its fair share) within {REACT_MS} ms "
                    "of the ring's packets showing up at the bottleneck (vip_new_bytes)")
    if mine.share_in_gaps < RELEASE_SHARE:
        raise Wrong(f"{said}. Storage starves while the ring computes",
                    "give storage its share back once the ring's packets stop arriving")
    return f"{said}. Now run it for real against reactive."


def run_against(cls, baseline: str = "reactive", duration: float = 6.0,
                path: Path = SCENARIO) -> Run | None:
    """``path`` run for real under ``baseline`` and under ``cls`` (policy ``mine``; root);
    None, saying why, when the class cannot even get through the rehearsal or the run
    cannot happen."""
    from labkit.ui.labs.verdict import run_lab

    try:
        rehearse(_controller(cls), path)
    except (Unanswered, Wrong) as exc:
        print(f"Not run: {exc.message}")
        return None
    except Exception as exc:  # the student's step: it would fail the run the same way
        print(f"Not run: in the rehearsal, {cls.__name__} raised {type(exc).__name__}: {exc}")
        return None
    return run_lab(path, [baseline, "mine"], controllers={"mine": cls}, duration=duration)


@check("Your controller against reactive")
def check_beats(run, mine: str = "mine", baseline: str = "reactive") -> str:
    """Pass when the collective's p99 completion time in ``run`` (a recorded
    :class:`~labkit.Run` or its directory) is lower under ``mine`` than under ``baseline``
    (the same as a lower p99 slowdown: both divide by the same isolated p99)."""
    policies = _run(run).summary.policies
    missing = [p for p in (mine, baseline) if p not in policies]
    if missing:
        raise Wrong(f"this run has no {' or '.join(missing)} policy "
                    f"(it has {', '.join(policies)})",
                    f'run it with policies=["{baseline}", "{mine}"]')
    ours, theirs = policies[mine].workload, policies[baseline].workload
    if ours.p99_ms is None or theirs.p99_ms is None:  # a program that timed no iteration
        untimed = mine if ours.p99_ms is None else baseline
        raise Wrong(f"the collective timed no iteration under {untimed}",
                    "see the run's fidelity notes, and run it again")
    if ours.slowdown_p99 is not None and theirs.slowdown_p99 is not None:
        said = (f"p99 slowdown {ours.slowdown_p99:.2f} under {mine} against "
                f"{theirs.slowdown_p99:.2f} under {baseline}")
    else:
        said = f"p99 {ours.p99_ms:.0f} ms under {mine} against {theirs.p99_ms:.0f} ms"
    storage = (f"storage moved {policies[mine].storage.goodput_mbps:.0f} Mbit/s "
               f"({policies[baseline].storage.goodput_mbps:.0f} under {baseline})")
    if ours.p99_ms < theirs.p99_ms:
        return f"{said}; {storage}."
    raise Wrong(f"{said}: not better yet; {storage}",
                "hold storage as soon as the ring's packets appear, all at once rather than "
                "step by step, and open again once they stop; the rehearsal shows how fast "
                "yours reacts")
