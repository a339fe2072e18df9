"""The commands that build a scenario's fabric and run it: ``run`` (its policies, one after
another), ``shell`` (the fabric, and Mininet's command line in it) and ``calibrate`` (runs
at rising link rates); and the scenario and controllers their arguments name."""

from __future__ import annotations

import signal
import sys
from dataclasses import asdict

from rich.markup import escape
from rich.progress import TaskID

from labkit.model import scenario as scenario_mod
from labkit.ui.cli import signals
from labkit.ui.cli.output import console, err, failed, print_json, progress_bars
from labkit.ui.cli.reports import print_calibration, print_summary, rates_line


def scenario_of(args):
    """The scenario file named on the command line, with its ``--set`` changes written in."""
    from labkit.model import grid

    return grid.scenario_with(args.scenario, args.set) if args.set else (
        scenario_mod.load(args.scenario))


def _named_controllers(given: list[str]) -> dict[str, str]:
    named = {}
    for item in given:
        name, eq, spec = item.partition("=")
        if not eq or ":" not in spec:
            raise scenario_mod.ScenarioError("command line", "--controller",
                                             f"must be NAME=FILE.py:CLASS, got {item!r}")
        named[name] = spec
    return named


def cmd_run(args) -> int:
    from labkit.runs import runner

    signals.before_building()
    sc = scenario_of(args)
    signals.note_user_code(sc, args.controller)
    with progress_bars(to_stderr=args.json) as progress:
        tasks: dict[str, TaskID] = {}

        def show(p: runner.Progress) -> None:
            if p.policy not in tasks:
                tasks[p.policy] = progress.add_task("", total=p.total)
            what = {"building": "building fabric", "running": "running"}.get(p.stage, p.stage)
            progress.update(tasks[p.policy], completed=p.done,
                            description=f"{p.policy:<11} {what}")

        try:
            # parsed once; the run's errors name the file when nothing is changed
            run = runner.run(sc, args.policy or None, out=args.out, seed=args.seed,
                             duration=args.duration, on_progress=show,
                             controllers=_named_controllers(args.controller), pcap=args.pcap,
                             pcap_snaplen=args.pcap_snaplen, telemetry=not args.no_telemetry,
                             argv=sys.argv, source=None if args.set else str(args.scenario))
        except (FileExistsError, RuntimeError) as exc:
            return failed(exc)
    if args.json:
        print_json("report", {"run_dir": str(run.path), "status": "complete",
                              "summary": run.summary.to_json()})
        return 0
    if rates := run.manifest.rates:
        console.print(rates_line(rates), highlight=False)
    if auto := run.manifest.auto:
        console.print(f"algo auto: {auto.reason}", highlight=False)
    print_summary(run.summary)
    for note in run.manifest.notes or ():
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    console.print(f"\nrun recorded in [bold]{run.path}[/]")
    return 0


def cmd_shell(args) -> int:
    from labkit.kernel import interrupts
    from labkit.runs import runner

    # Ctrl-C stays Mininet's (it stops the command running in a node); SIGTERM and SIGHUP
    # (the terminal closed) end the shell, which Mininet's command line would take for a
    # Ctrl-C and ignore
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signals.exit_on_signal)
    signals.note_leftovers()
    sc = scenario_mod.load(args.scenario)
    signals.note_user_code(sc, args.controller, kinds=False)
    # a plain line, not a rich spinner: rich replaces stdout while one spins, and Mininet,
    # imported meanwhile, would keep writing to the replacement
    err.print(f"building {args.scenario} under {args.policy}, no traffic (a few seconds) ...")

    def interact(pf) -> None:
        roles = pf.topo.roles
        hosts = " ".join(n for n, role in roles.items() if role not in ("router", "nvswitch"))
        routers = " ".join(n for n, role in roles.items() if role in ("router", "nvswitch"))
        err.print(f"hosts: {hosts}\nrouters (and NVLink switches): {routers}\n"
                  "try: g1 ping -c 3 g5 · leaf1 tc -s qdisc · exit (or Ctrl-D) to tear down")
        pf.fabric.interact()

    try:
        with interrupts.reaching_the_main_thread((signal.SIGTERM, signal.SIGHUP)):
            notes = runner.shell(sc, args.policy, _named_controllers(args.controller),
                                 interact, source=str(args.scenario))
    except (FileExistsError, RuntimeError) as exc:
        return failed(exc)
    for note in notes:
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    err.print("fabric torn down")
    return 0


def cmd_calibrate(args) -> int:
    from labkit.runs import runner

    signals.before_building()
    sc = scenario_mod.load(args.scenario)
    signals.note_user_code(sc)
    with progress_bars("ops", to_stderr=args.json) as progress:
        tasks: dict[tuple[float, str], TaskID] = {}
        current = [1.0]

        def on_trial(factor: float, what: str) -> None:
            current[0] = factor
            if what != "running":
                style = "green" if what == "held" else "yellow"
                progress.console.print(f"x{factor:g}: [{style}]{what}[/]", highlight=False)

        def show(p: runner.Progress) -> None:
            key = (current[0], p.policy)
            if key not in tasks:
                tasks[key] = progress.add_task("", total=p.total)
            progress.update(tasks[key], completed=p.done,
                            description=f"x{current[0]:<5g} {p.policy:<11} {p.stage}")

        try:
            result = runner.calibrate(sc, args.policy or None, seconds=args.duration,
                                      out=args.out, on_trial=on_trial, on_progress=show,
                                      argv=sys.argv, source=str(args.scenario))
        except (FileExistsError, RuntimeError) as exc:
            return failed(exc)
    if args.json:
        print_json("calibrate", {**asdict(result),
                                 "trials": [{**asdict(t), "held": t.held}
                                            for t in result.trials],
                                 "best": result.best.factor if result.best else None,
                                 "advice": result.advice})
        return 0 if result.best else 1
    print_calibration(result)
    console.print(result.advice, highlight=False)
    return 0 if result.best else 1
