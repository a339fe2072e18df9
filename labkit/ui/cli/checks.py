"""The commands that read a scenario without root and without running the user's code
(``validate``, ``inspect``, ``schema``), and ``doctor``, which checks this machine."""

from __future__ import annotations

import json
import os
from dataclasses import asdict

from rich.markup import escape

from labkit.model import scenario as scenario_mod
from labkit.ui.cli.output import console, err, print_json
from labkit.ui.cli.reports import print_fabric


def cmd_doctor(args) -> int:
    from labkit.ui import doctor, serve

    found = doctor.checks()
    failed = sum(1 for c in found if c.required and not c.ok)
    if args.json:
        print_json("doctor", {"ready": not failed, "root": os.geteuid() == 0,
                              "checks": [asdict(c) for c in found]})
        return 1 if failed else 0
    serving = serve.SOCKET if serve.available() else None
    for i, line in enumerate(doctor.report(found, os.geteuid() == 0, serving)):
        console.print(line, highlight=False, soft_wrap=i > len(found))
    return 1 if failed else 0


def cmd_validate(args) -> int:
    """Parse a scenario or grid file as a run would (every point of a grid), with none of
    the checks that need root or the machine, and without importing the user's files."""
    from labkit.model import grid

    file = str(args.file)
    try:
        text, doc = scenario_mod.read_yaml(file)
        is_grid = scenario_mod.is_grid(doc)
        found = grid.parse(doc, file, text) if is_grid else scenario_mod.parse(doc, file)
    except scenario_mod.ScenarioError as exc:
        if not args.json:
            raise  # main() prints it, one line, and exits 2
        print_json("validate", {"ok": False, "file": exc.file, "key": exc.key,
                                "reason": exc.reason})
        return 2
    if args.json:
        print_json("validate", {"ok": True, "file": file, "key": None, "reason": None,
                                "kind": "grid" if is_grid else "scenario"})
        return 0
    if isinstance(found, grid.Grid):
        sc = found.base
        what = (f"grid {found.name}: {found.size} runs of {escape(found.scenario_path)}, "
                "each a valid scenario")
    else:
        sc, fabric = found, found.fabric
        what = (f"scenario {sc.name}: {len(fabric.routers)} routers, {len(fabric.hosts)} "
                f"hosts, {len(fabric.links) + len(fabric.nvlinks)} links; policies "
                f"{', '.join(sc.policies)}")
    console.print(f"{escape(file)}: ok, {what}", highlight=False, soft_wrap=True)
    if sc.kinds:
        console.print(f"note: entries of your own traffic kinds "
                      f"({', '.join(name for name, _ in sc.kinds)}) are checked by their "
                      "classes when a run starts", highlight=False)
    return 0


def cmd_inspect(args) -> int:
    """The fabric of a scenario, read without root and without importing the user's files."""
    from labkit.analysis import describe

    desc = describe.fabric(scenario_mod.load(args.scenario))
    if args.html:
        from labkit.ui import figures, plots

        try:
            args.html.parent.mkdir(parents=True, exist_ok=True)
            figures.write_page(plots.fabric_map(desc), args.html, "fabric")
        except OSError as exc:
            err.print(f"[red]error:[/] cannot write {escape(str(args.html))}: {exc.strerror}",
                      highlight=False)
            return 2
    if args.json:
        print_json("inspect", desc)
    else:
        print_fabric(desc)
    if args.html:
        (err if args.json else console).print(f"drew the fabric into {escape(str(args.html))}",
                                              highlight=False)
    return 0


def cmd_schema(_args) -> int:
    from labkit.model.schema import scenario_schema

    print(json.dumps(scenario_schema(), indent=2))
    return 0
