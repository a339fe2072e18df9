"""What a command does around building fabrics: SIGINT, SIGTERM and SIGHUP turned into a
teardown (``labkit shell``: into leaving), and the notes on stderr before it builds (runs
that left objects behind, the user's own files it is about to load)."""

from __future__ import annotations

import signal
from collections.abc import Sequence

from rich.markup import escape

from labkit.model import scenario as scenario_mod
from labkit.ui.cli.output import err


def before_building() -> None:
    """Before a command builds fabrics: SIGINT, SIGTERM and SIGHUP (a closed terminal)
    stop it, and a note if a killed run left objects behind."""
    from labkit.kernel import interrupts

    for sig in interrupts.ENDING:
        signal.signal(sig, _raise_interrupt)
    note_leftovers()


def note_user_code(sc: scenario_mod.Scenario, controllers: Sequence[str] = (),
                   kinds: bool = True) -> None:
    """Say which of the user's own files a run is about to load (they run as root);
    ``kinds=False``: not its traffic kinds (a shell starts no traffic)."""
    lines = scenario_mod.user_files(sc, kinds) + [f"controller {c.replace('=', ': ', 1)}"
                                                  for c in controllers]
    for line in lines:
        err.print(f"loading your {line} (it runs as root)", highlight=False, soft_wrap=True)


def note_leftovers() -> None:
    """A line on stderr if a killed run left objects behind (labkit run, shell)."""
    from labkit.kernel import registry

    if note := registry.leftovers_line():
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False)


_stopping: list[int] = []  # the signals that stopped the run


def _raise_interrupt(signum, _frame):
    """First SIGINT, SIGTERM or SIGHUP: stop the run (teardown runs in ``finally``, with
    signals held, :mod:`labkit.kernel.interrupts`). Later ones only say so."""
    if _stopping:
        err.print("[yellow]still tearing down; one moment[/]")
        return
    _stopping.append(signum)
    raise KeyboardInterrupt


def exit_on_signal(signum, _frame):
    """SIGTERM or SIGHUP in `labkit shell`: leave (teardown runs on the way out), once."""
    signal.signal(signum, signal.SIG_IGN)
    raise SystemExit(128 + signum)
