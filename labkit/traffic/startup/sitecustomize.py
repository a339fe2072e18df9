"""labkit's start-up hook for the ranks of a user's program (docs/programs.md).

Python imports ``sitecustomize`` as it starts. labkit puts this folder first on the
``PYTHONPATH`` of the ranks it starts, with ``LABKIT_OPS_DIR`` set: the job's
collectives are then timed from outside its code (:mod:`labkit.traffic.torchhook`).
The ``sitecustomize`` this one hides (Debian's, or a virtual environment's) runs first,
as it would have. Anything that goes wrong here is one line on stderr, never the job's
failure. This folder holds nothing else: it is not a package.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _run_hidden() -> None:
    """The next ``sitecustomize`` on the path, run as Python would have run it."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


try:
    _run_hidden()
except Exception as e:
    print(f"labkit: the sitecustomize labkit's hook hides failed: {e!r}", file=sys.stderr)

if os.environ.get("LABKIT_OPS_DIR"):
    try:
        from labkit.traffic import torchhook

        torchhook.install()
    except Exception as e:
        print(f"labkit: the job's collectives are not timed: {e!r}", file=sys.stderr)
