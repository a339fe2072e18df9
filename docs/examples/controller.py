"""An example controller: hold storage back while the bottleneck carries a queue.

Run it on the checkpoint-burst scenario beside the built-in ones:

    labkit run topologies/checkpoint-burst.yaml \\
        --controller calm=docs/examples/controller.py:Calm --policy fifo --policy calm

or from Python: ``labkit.run(scenario, ["fifo", "calm"], controllers={"calm": Calm})``.

A controller subclasses :class:`labkit.control.Controller` and defines ``step(now_ns)``,
which labkit calls every ``control.interval_ms`` in a thread of its own. ``self.plant``
is what it may know and touch: ``feed.view(now_ns)`` (each bottleneck port as the fabric's
telemetry last showed it, ``control.telemetry_delay_ms`` old), ``senders`` (the hosts whose
storage meets the collectives, each with its fair share in Mbit/s), ``spec`` (the
scenario's ``control:`` knobs) and ``valves``. ``self.hold(share, reason)`` sets every
sender's storage to ``share`` of its fair share; each change becomes a row of the run's
``controller.parquet`` with its reason.
"""

from labkit.control import Controller

QUIET_STEPS = 5  # intervals without a queue before storage may go at full speed again


class Calm(Controller):
    """Bang-bang with a memory: any backlog at a bottleneck port holds storage to its
    busy share at once; only after ``QUIET_STEPS`` quiet intervals does it open again."""

    name = "calm"

    def __init__(self, plant):
        super().__init__(plant)
        self.quiet = QUIET_STEPS

    def step(self, now_ns: int) -> None:
        ports = self.plant.feed.view(now_ns)
        queued = max((p.backlog_bytes for p in ports.values()), default=0)
        self.quiet = 0 if queued else self.quiet + 1
        if queued:
            self.hold(self.plant.spec.busy_share, f"backlog {queued} B at the bottleneck")
        elif self.quiet >= QUIET_STEPS:
            self.hold(self.plant.spec.idle_share, f"no backlog for {self.quiet} intervals")
