"""The checkout's upkeep: ``samples`` (record the shipped samples again, and the numbers
the docs quote from them) and ``clean`` (remove what killed runs left in the kernel)."""

from __future__ import annotations

import os
import shlex
import shutil
from collections import Counter
from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from labkit.ui.cli.output import console, err


def cmd_samples(args) -> int:
    """Record the samples again, one labkit process each, with progress and an estimate."""
    from labkit.runs import samples as samples_mod

    try:
        chosen = samples_mod.select(samples_mod.load(), args.only)
        estimates = {s.path: samples_mod.estimate_s(s) for s in chosen}
        if args.quotes:
            return _requote()
        if args.list:
            table = Table("sample", "labkit command", "figures", "estimate")
            for s in chosen:
                table.add_row(s.path, escape(shlex.join(s.command)), ", ".join(s.figures),
                              _minutes(estimates[s.path]))
            console.print(table)
            console.print(f"{len(chosen)} samples, about {_minutes(sum(estimates.values()))}")
            return 0
        rev = samples_mod.check_revision(args.allow_dirty)
    except samples_mod.SamplesError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    console.print(f"recording {len(chosen)} samples at labkit {rev[:12]}, about "
                  f"{_minutes(sum(estimates.values()))} on the machine that last did")
    with Progress(TextColumn("{task.description:<40}"), BarColumn(), TimeElapsedColumn(),
                  TextColumn("left ~"), TimeRemainingColumn(), console=console) as progress:
        task = progress.add_task("samples", total=sum(estimates.values()))
        for s in chosen:
            progress.update(task, description=s.path)
            try:
                done = samples_mod.record(s)
            except RuntimeError as exc:
                progress.stop()
                err.print(f"[red]error:[/] {escape(str(exc))}")
                return 1
            progress.advance(task, estimates[s.path])
            drawn = "".join(f"; {f}" for f in done.figures)
            progress.console.print(f"{s.path}: recorded in {_minutes(done.seconds)} "
                                   f"(estimated {_minutes(estimates[s.path])}){drawn}")
    return _requote()


def _requote() -> int:
    """Write the docs' quoted numbers from the samples; print what moved (and markers that
    name no number: exit 1)."""
    from labkit.runs.quotes import requote_documents

    changed = requote_documents()
    moved = [q for q in changed if q.value is not None]
    for q in moved:
        console.print(f"{q.where}:{q.line}: {q.quoted}{escape(q.unit)} → {q.value}"
                      f"{escape(q.unit)} ({q.sample} {q.key})")
    console.print(f"the docs' quoted numbers: {len(moved)} written again from the samples"
                  if moved else "the docs' quoted numbers are the samples' own")
    for q in changed:
        if q.value is None:
            err.print(f"[red]error:[/] {escape(q.describe())}")
    return 1 if len(moved) < len(changed) else 0


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def cmd_clean(args) -> int:
    from labkit.kernel import registry

    if os.geteuid() != 0:
        from labkit.runs.runner import WITHOUT_ROOT

        err.print("[red]error:[/] labkit clean needs root: it removes what a killed run left "
                  f"in the kernel. {WITHOUT_ROOT}")
        return 1
    try:
        with registry.RunLock(registry.CLEANING):
            return _clean(registry.leftover_registries(), registry.leftover_work_dirs(),
                          args.dry_run)
    except registry.RunLockedError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        return 1


def _clean(leftovers: list, work_dirs: list[Path], dry_run: bool) -> int:
    from labkit.kernel import registry

    if not leftovers and not work_dirs:
        console.print("nothing to clean: no labkit run left objects behind")
        return 0
    failed = 0
    for reg in leftovers:
        if dry_run:
            kinds = Counter(e["kind"] for e in reg.entries)
            console.print(f"run {reg.run_id}: recorded " +
                          ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())))
            continue
        struct_ops = [e for e in reg.entries if e["kind"] == "struct_ops"]
        try:
            removed = reg.teardown()
        except registry.TeardownIncomplete as exc:
            err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
            failed = 1
            continue
        console.print(f"run {reg.run_id}: " + ("; ".join(removed) or "nothing was left"))
        for note in [*reg.held.values(), *registry.wait_freed(struct_ops)]:
            console.print(f"run {reg.run_id}: {note}", highlight=False)
    for path in work_dirs:  # scratch files of a killed run (none is running: we hold the lock)
        try:
            if not dry_run:
                shutil.rmtree(path)
        except OSError as exc:
            err.print(f"[red]error:[/] cannot remove {escape(str(path))}: {exc.strerror}",
                      highlight=False)
            failed = 1
            continue
        console.print(f"run {path.name}: {'would remove' if dry_run else 'removed'} its "
                      f"scratch directory {path}", highlight=False)
    return failed
