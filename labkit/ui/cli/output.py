"""What every command prints with: the consoles (stdout, stderr), the ``--json`` envelope,
progress bars, number cells, and the one-line errors with their exit codes."""

from __future__ import annotations

import json

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

console = Console(width=max(120, Console().width))
err = Console(stderr=True, soft_wrap=True)


JSON_SCHEMA = 1  # the version of every --json document's shape; bumped when one changes


def print_json(kind: str, body: dict) -> None:
    """One JSON document on stdout: {"schema": "labkit.<kind>", "version": N, ...}."""
    print(json.dumps({"schema": f"labkit.{kind}", "version": JSON_SCHEMA, **body}, indent=2))


def progress_bars(unit: str = "ops", to_stderr: bool = False) -> Progress:
    """Progress bars, on stderr when stdout carries a JSON document."""
    return Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn(unit), TimeElapsedColumn(), console=err if to_stderr else console,
                    transient=False)


def fmt(value, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def refused(exc: Exception) -> int:
    """Say what is wrong with the command's input, in one line; exit code 2."""
    err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
    return 2


def failed(exc: Exception) -> int:
    """Exit code and message for a run that could not start or did not finish."""
    from labkit.kernel.registry import RunLockedError
    from labkit.runs.runner import NotReady, RunFailed

    if isinstance(exc, FileExistsError):
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    if isinstance(exc, NotReady | RunLockedError):
        err.print(f"[red]error:[/] {escape(str(exc))}")
    else:  # RunFailed, or a kernel-side failure while `labkit shell` built its fabric
        err.print(f"[red]{'run' if isinstance(exc, RunFailed) else 'shell'} failed:[/] {exc}")
    return 1
