"""Time an unmodified PyTorch job's collectives from outside its code.

labkit starts a program's ranks with :mod:`labkit.traffic.startup` first on their
``PYTHONPATH``; its ``sitecustomize`` calls :func:`install` as the interpreter starts
(``LABKIT_OPS_DIR`` set), before the job's first line. From then on, as soon as the job
imports them:

* ``torch.distributed``'s collectives (:data:`PAYLOAD`) are timed around their call, an
  ``async_op=True`` one until its ``wait()``: name, bytes, start and end;
* a ``DistributedDataParallel`` model's gradient buckets are timed by a communication
  hook around DDP's own all_reduce (or around the job's own hook, if it registers one;
  a built-in hook the job registers is left untimed), and each forward pass starts an
  iteration;
* without DDP, each op is written as it ends, without an iteration (the analysis cuts
  them by the job's rhythm afterwards, :mod:`labkit.analysis.jobtiming`); online, the
  steps are cut from the ops as :mod:`labkit.traffic.opsteps` says, for the phase.

What it times goes, as :mod:`labkit.model.traffic.lines`' lines, to
``$LABKIT_OPS_DIR/rank<N>.ops`` (never the job's stdout), through a
:class:`labkit.torch.Steps` of labkit's own: under a controller the same steps announce
the job's phase to its host (``LABKIT_PHASE_FD``), as ``labkit.torch`` does for a job that
imports it, so ``state-aware`` holds storage before the job's traffic comes. A job that
makes ``Steps`` of its own is timed by those: this hook then records and announces
nothing more. Nothing here may break the job: a failure to install says one line on
stderr and leaves the job as it is.

Standard library only until the job imports torch.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import inspect
import os
import sys
import threading
import time
from collections.abc import Mapping
from importlib.abc import MetaPathFinder

from labkit import torch as steps_mod
from labkit.traffic.opsteps import OpSteps, ops_file

# the collectives timed, and the argument that holds what each sends (None: nothing)
PAYLOAD = {
    "all_reduce": "tensor", "broadcast": "tensor", "reduce": "tensor",
    "all_gather": "tensor", "all_gather_into_tensor": "input_tensor",
    "reduce_scatter": "output", "reduce_scatter_tensor": "output",
    "all_to_all": "input_tensor_list", "all_to_all_single": "input",
    "gather": "tensor", "scatter": "tensor", "barrier": None,
}
C10D = "torch.distributed.distributed_c10d"
DDP = "torch.nn.parallel.distributed"


def ops_path(env: Mapping[str, str] | None = None) -> str:
    """This rank's file of timed ops: ``rank<N>.ops`` under ``LABKIT_OPS_DIR``, N from
    torchrun's ``RANK`` or Open MPI's ``OMPI_COMM_WORLD_RANK`` (else this process's id)."""
    env = os.environ if env is None else env
    assert env is not None
    rank = env.get("RANK") or env.get("OMPI_COMM_WORLD_RANK") or f"pid{os.getpid()}"
    return str(ops_file(env["LABKIT_OPS_DIR"], rank))


def _nbytes(value) -> int | None:
    """A tensor's bytes, or a list of tensors'."""
    if isinstance(value, (list, tuple)):
        sizes = [_nbytes(v) for v in value]
        return sum(s for s in sizes if s) if sizes else None
    try:
        return int(value.numel() * value.element_size())
    except AttributeError:
        return None


class _Pending:
    """An ``async_op`` collective's work: timed until the job waits for it."""

    def __init__(self, work, done):
        self._work, self._done = work, done

    def wait(self, *args, **kwargs):
        result = self._work.wait(*args, **kwargs)
        if self._done:
            self._done, done = None, self._done
            done()
        return result

    def __getattr__(self, name):
        return getattr(self._work, name)


class Hook(OpSteps):
    """The job's steps as this hook sees them (see the module docstring)."""

    def __init__(self, out):
        super().__init__(out)
        self._local = threading.local()  # inside a timed collective: nested ones are its own

    @property
    def on(self) -> bool:
        return not steps_mod.USERS_STEPS

    def forward(self) -> None:
        """A DDP model's forward pass: a step begins."""
        if self.on:
            self.ddp = True
            self.cut(time.monotonic_ns())

    def close(self) -> None:
        """At exit: the job communicates no more (a DDP job's last step, whose end no
        forward pass marks, is left out)."""
        if self.on:
            super().close()
        if self.out is not None:
            self.out.flush()

    # --- collectives --------------------------------------------------------------------

    def timed(self, name: str, fn):
        """``fn``, a collective of torch.distributed, timed."""
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            return fn
        payload = PAYLOAD[name]
        names = list(signature.parameters)
        at = {n: names.index(n) if n in names else None for n in (payload, "async_op")}

        def given(args, kwargs, arg):
            """An argument by name, wherever the call put it (bind's cost, without it)."""
            if arg in kwargs:
                return kwargs[arg]
            k = at.get(arg)
            return args[k] if k is not None and k < len(args) else None

        @functools.wraps(fn)
        def collective(*args, **kwargs):
            if not self.on or getattr(self._local, "inside", False):
                return fn(*args, **kwargs)
            nbytes = _nbytes(given(args, kwargs, payload)) if payload else None
            t0 = time.monotonic_ns()
            self.starting(t0)
            self._local.inside = True
            try:
                work = fn(*args, **kwargs)
            finally:
                self._local.inside = False
            if given(args, kwargs, "async_op") and work is not None:
                return _Pending(work, lambda: self.ended(name, nbytes, t0,
                                                         time.monotonic_ns()))
            self.ended(name, nbytes, t0, time.monotonic_ns())
            return work

        setattr(collective, "__labkit_timed__", True)  # noqa: B010 (a function's attribute)
        return collective

    # --- patches, as torch's modules are imported ------------------------------------------

    def patch_c10d(self, module) -> None:
        for name in PAYLOAD:
            fn = getattr(module, name, None)
            if callable(fn) and not getattr(fn, "__labkit_timed__", False):
                setattr(module, name, self.timed(name, fn))

    def patch_ddp(self, module) -> None:
        cls = getattr(module, "DistributedDataParallel", None)
        if cls is None:
            return
        hook = self
        register, builtin, forward = (cls.register_comm_hook, cls._register_builtin_comm_hook,
                                      cls.forward)

        @functools.wraps(register)
        def register_comm_hook(ddp, state, fn):
            ddp._labkit_hooked = True
            timed = hook.steps.timed_hook(fn, hook.starting, hook.ended)
            return register(ddp, state, timed if hook.on else fn)

        @functools.wraps(builtin)
        def register_builtin_comm_hook(ddp, comm_hook_type):
            ddp._labkit_hooked = True  # C++'s own: left untimed
            return builtin(ddp, comm_hook_type)

        @functools.wraps(forward)
        def timed_forward(ddp, *args, **kwargs):
            if hook.on and not getattr(ddp, "_labkit_hooked", False):
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
                register_comm_hook(ddp, None, default_hooks.allreduce_hook)
            import torch
            if torch.is_grad_enabled() and ddp.training:
                hook.forward()
            return forward(ddp, *args, **kwargs)

        cls.register_comm_hook = register_comm_hook
        cls._register_builtin_comm_hook = register_builtin_comm_hook
        cls.forward = timed_forward


class _AfterImport(MetaPathFinder):
    """Runs a patch on a module right after it executes, whoever imports it."""

    def __init__(self, patches):
        self.patches, self._finding = patches, set()

    def find_spec(self, name, path=None, target=None):
        if name not in self.patches or name in self._finding:
            return None
        self._finding.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, patch = spec.loader, self.patches[name]
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            try:
                patch(module)
            except Exception as e:  # never the job's failure
                print(f"labkit: {name} not timed: {e}", file=sys.stderr)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> Hook:
    """Time this process's collectives from now on (the module docstring)."""
    out = open(ops_path(), "a", buffering=1)
    hook = Hook(out)
    patches = {C10D: hook.patch_c10d, DDP: hook.patch_ddp}
    for name, patch in patches.items():  # imported already (by another sitecustomize)
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport(patches))
    atexit.register(hook.close)
    return hook
