"""The classroom's commands: ``lab`` (JupyterLab on the notebooks, with the labkit kernel),
``labs`` (hand the labs out, grade what comes back) and ``serve`` (runs for a group's users
without root)."""

from __future__ import annotations

import os
import sys
import time

from rich.markup import escape
from rich.table import Table

from labkit.ui.cli import signals
from labkit.ui.cli.output import console, err, progress_bars


def cmd_lab(args) -> int:
    """Install the labkit kernel, then become JupyterLab on the notebooks."""
    from labkit.ui import lab

    where = lab.install_kernel(user=args.user)
    console.print(f"kernel `{lab.KERNEL}` installed in {where}")
    if args.kernel_only:
        return 0
    try:
        command = lab.lab_command(port=args.port, browser=not args.no_browser, ip=args.ip)
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    for note in command.notes:
        console.print(escape(note))
    sys.stdout.flush()
    os.execv(command.argv[0], command.argv)
    return 0  # not reached: JupyterLab runs in this process


def cmd_labs(args) -> int:
    """Release the labs, or grade submissions of them."""
    from labkit.ui.labs import handout

    try:
        if args.labs_command == "release":
            written = handout.release(args.out)
            console.print(f"{len(written)} files in {args.out}: "
                          + ", ".join(p.name for p in written), highlight=False)
            return 0
        out = args.out = args.out or handout.GRADES_DIR / time.strftime("%Y%m%d-%H%M%S")
        with progress_bars("notebooks") as progress:
            task = progress.add_task("grading", total=None)

            def show(done: int, total: int, what: str) -> None:
                progress.update(task, completed=done, total=total)
                progress.console.print(f"ran {escape(what)}", highlight=False)

            rows = handout.grade(args.submissions, out, live=args.live, on_progress=show)
    except (FileExistsError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    t = Table(title=f"grades in {out}")
    for col in ("student", "lab", "passed", "not yet", "ungraded"):
        t.add_column(col)
    for student, lab in dict.fromkeys((r.student, r.lab) for r in rows):
        mine = [r.status for r in rows if (r.student, r.lab) == (student, lab)]
        t.add_row(student, lab, str(mine.count("pass")),
                  str(len(mine) - mine.count("pass") - mine.count(handout.UNGRADED)),
                  str(mine.count(handout.UNGRADED)))
    console.print(t)
    return 0


def cmd_serve(args) -> int:
    """Serve runs until Ctrl-C."""
    from labkit.ui import serve

    try:
        service = serve.Service(args.socket or serve.SOCKET, args.group,
                                log=lambda line: console.print(escape(line), highlight=False))
        service.start()
    except serve.Refused as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    console.print(f"labkit serve: runs for group {args.group} at {service.path}, one at a "
                  "time (Ctrl-C stops)", highlight=False)
    signals.before_building()
    try:
        service.serve_forever()
    finally:
        service.close()
    return 0
