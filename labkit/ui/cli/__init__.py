"""labkit's command line: :func:`main` parses the arguments (:mod:`.parser`), runs the
command (one module per group of commands), turns a scenario error into one line and
Ctrl-C into exit code 130, and under sudo hands what the command wrote back to the user.

``--json`` (doctor, validate, inspect, run, sweep, tune, calibrate, batch, report, figures,
runs) prints one JSON document on stdout whose ``"schema"`` names its shape and version
(docs/data-model.md); progress goes to stderr.
Without ``--out``, what a command writes goes under data/: runs, sweeps, tunings and
batches to data/runs/<id>/, figures to data/figures/<run-id>/.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from rich.markup import escape

from labkit.model import scenario as scenario_mod
from labkit.ui.cli.batch import cmd_batch
from labkit.ui.cli.checks import cmd_doctor, cmd_inspect, cmd_schema, cmd_validate
from labkit.ui.cli.classroom import cmd_lab, cmd_labs, cmd_serve
from labkit.ui.cli.output import err
from labkit.ui.cli.parser import build_parser
from labkit.ui.cli.recorded import cmd_figures, cmd_report, cmd_runs
from labkit.ui.cli.running import cmd_calibrate, cmd_run, cmd_shell
from labkit.ui.cli.sweeps import cmd_sweep, cmd_tune
from labkit.ui.cli.upkeep import cmd_clean, cmd_samples

__all__ = ["build_parser", "main"]

COMMANDS = {"doctor": cmd_doctor, "validate": cmd_validate, "inspect": cmd_inspect,
            "schema": cmd_schema, "run": cmd_run, "shell": cmd_shell, "sweep": cmd_sweep,
            "tune": cmd_tune, "calibrate": cmd_calibrate, "batch": cmd_batch,
            "report": cmd_report, "figures": cmd_figures, "runs": cmd_runs,
            "samples": cmd_samples, "clean": cmd_clean, "lab": cmd_lab,
            "labs": cmd_labs, "serve": cmd_serve}


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default: this process's arguments) names; its exit code."""
    args = build_parser().parse_args(argv)
    began_ns = time.time_ns() - 1_000_000_000  # file systems' clocks are coarser than ours
    try:
        return COMMANDS[args.command](args)
    except scenario_mod.ScenarioError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        return 2
    except KeyboardInterrupt:
        from labkit.kernel.interrupts import ENDING

        for sig in ENDING:  # more Ctrl-C as we leave
            signal.signal(sig, signal.SIG_IGN)
        err.print("[yellow]interrupted[/]: everything labkit created was torn down")
        return 130
    finally:
        _hand_back(args, began_ns)


def _hand_back(args, since_ns: int) -> None:
    """Under sudo, what this command wrote in the checkout or its ``--out`` is the user's."""
    from labkit.model.paths import REPO_ROOT
    from labkit.runs.owner import hand_back, invoking_user

    owner = invoking_user()
    if owner is None:
        return
    out, page = getattr(args, "out", None), getattr(args, "html", None)
    written = [Path(out)] if out else []
    if page:
        from labkit.ui.figures import PLOTLY_JS

        written += [Path(page), Path(page).with_name(PLOTLY_JS)]
    hand_back([REPO_ROOT, *written], owner, since_ns)
