"""JupyterLab on labkit's notebooks and labs (``labkit lab``, ``make lab``), and the
``labkit`` kernel: this environment's interpreter, under a name a shared Jupyter can offer.

The kernel spec is written into this environment (``sys.prefix``), where its own JupyterLab
finds it, or, with ``--user``, into the user's Jupyter directory for a JupyterLab or
JupyterHub installed elsewhere (ipykernel's spec, installed by jupyter_client). A live run needs
root; as root, Jupyter has to be told that it may run (``--allow-root``), and is.

JupyterLab serves the whole checkout and opens on ``notebooks/``: the notebooks' static
figures are images in ``docs/figures/`` (``../docs/figures/...`` from a notebook), and a
server rooted at ``notebooks/`` could not fetch them.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from labkit.model.paths import REPO_ROOT

KERNEL = "labkit"
LOOPBACK = "127.0.0.1"
NOTEBOOKS = REPO_ROOT / "notebooks"


def install_kernel(user: bool = False, prefix: str | None = None) -> Path:
    """The ``labkit`` kernel spec for this interpreter: into ``prefix`` (default: this
    environment) or, with ``user``, the user's Jupyter directory; its folder."""
    from ipykernel import kernelspec
    from jupyter_client.kernelspec import KernelSpecManager

    # the spec is staged in a folder this function owns and removes: ipykernel's own
    # install() stages it in a mkdtemp() folder and leaves that folder behind in /tmp
    with tempfile.TemporaryDirectory(prefix="labkit-kernel-") as staging:
        spec = kernelspec.write_kernel_spec(Path(staging) / KERNEL,
                                            overrides={"display_name": "labkit (Python)"},
                                            # as ipykernel's install(): the debugger's
                                            # frozen-modules warning off
                                            python_arguments=["-Xfrozen_modules=off"])
        where = KernelSpecManager().install_kernel_spec(
            spec, kernel_name=KERNEL, user=user, prefix=None if user else (prefix or sys.prefix))
    return Path(where)


@dataclass(frozen=True)
class LabCommand:
    """How JupyterLab is started: its command line and what to tell the user first."""

    argv: list[str]
    notes: list[str]


def lab_command(port: int | None = None, browser: bool = True, root: Path = REPO_ROOT,
                opened: Path = NOTEBOOKS, euid: int | None = None,
                ip: str = LOOPBACK) -> LabCommand:
    """JupyterLab from this environment, serving ``root`` and opened on ``opened`` (a folder
    inside it), as the user running labkit, listening on ``ip`` (a container's: 0.0.0.0,
    published on the host's loopback)."""
    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.exists():
        raise FileNotFoundError(f"{jupyter} is not installed: run `make setup` (JupyterLab is "
                                "in labkit's notebooks extra)")
    opened_api = opened.resolve().relative_to(root.resolve()).as_posix()
    argv = [str(jupyter), "lab", f"--ServerApp.root_dir={root}",
            f"--FileContentsManager.preferred_dir={opened_api}", f"--ip={ip}"]
    if port is not None:
        argv.append(f"--port={port}")
    if not browser:
        argv.append("--no-browser")
    notes = [f"the notebooks and labs in {opened} (JupyterLab serves {root}, so the "
             f"notebooks' static figures show); kernel `{KERNEL}` ({sys.executable})"]
    if (os.geteuid() if euid is None else euid) == 0:
        argv.append("--allow-root")
        notes.append("as root: live runs work from the notebooks (labs 2 and 3 need them)")
    else:
        notes.append("not root: recorded runs, the sample notebooks and labs 1, 4 and 5 work; "
                     "a live run (labs 2 and 3) needs JupyterLab started as root")
    notes.append(f"listening on {ip} only" if ip == LOOPBACK else
                 f"listening on {ip}: whoever reaches it with the token runs code as this "
                 "user; publish the port on the host's loopback only")
    return LabCommand(argv, notes)
