"""A lab's self-check: the :class:`Verdict` a check function returns, the :func:`check`
decorator that turns whatever goes wrong while checking into a verdict (never a
traceback), and :func:`run_lab`, a lab's real run that says why when it cannot start.

A verdict shows as a coloured box in a notebook, as text in a terminal, and carries
itself as JSON under :data:`MIME` so that tests read what each check cell said.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

PASS, FAIL, TODO = "pass", "fail", "todo"
MIME = "application/vnd.labkit.verdict+json"
STYLE = {PASS: ("✔", "passed", "#1a7f37", "#dafbe1"),
         FAIL: ("✘", "not yet", "#b42318", "#fee4e2"),
         TODO: ("…", "not answered yet", "#9a6700", "#fff8c5")}


@dataclass(frozen=True)
class Verdict:
    """What a check says about an answer: ``status`` (pass, fail or todo), a ``message``
    in plain words and, unless it passed, a ``hint``."""

    check: str
    status: str
    message: str
    hint: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        mark, word, _, _ = STYLE[self.status]
        text = f"{mark} {self.check}: {word}\n  {self.message}"
        return text + (f"\n  hint: {self.hint}" if self.hint else "")

    def _repr_html_(self) -> str:
        mark, word, ink, paper = STYLE[self.status]
        hint = (f"<div style='margin-top:4px'><i>Hint:</i> {html.escape(self.hint)}</div>"
                if self.hint else "")
        return (f"<div style='border-left:6px solid {ink};background:{paper};color:#1f2328;"
                f"padding:8px 12px;margin:4px 0;border-radius:4px'>"
                f"<b style='color:{ink}'>{mark} {html.escape(self.check)}: {word}</b>"
                f"<div>{html.escape(self.message)}</div>{hint}</div>")

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/plain": str(self), "text/html": self._repr_html_(),
                MIME: self.as_dict()}


class Wrong(Exception):
    """Raised inside a check: the answer is wrong; becomes a failing verdict."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint


class Unanswered(Exception):
    """Raised inside a check: the answer is still the blank (or the starting point)."""

    def __init__(self, message: str = "fill in the answer cell above, run it, then this one"):
        super().__init__(message)
        self.message = message


def answered(value) -> bool:
    """Whether an answer cell's value was filled in (``...`` and None are blanks)."""
    return value is not Ellipsis and value is not None


def require(value, what: str):
    """``value``, or :class:`Unanswered` naming ``what`` when it is still blank."""
    if not answered(value):
        raise Unanswered(f"{what} is still blank: fill it in, run that cell, then this one")
    return value


def check(title: str) -> Callable:
    """Decorate a check function (which returns a message on success) so that it returns
    a :class:`Verdict` titled ``title`` whatever happens inside it."""
    def wrap(fn: Callable[..., str]) -> Callable[..., Verdict]:
        @functools.wraps(fn)
        def run(*args, **kwargs) -> Verdict:
            try:
                return Verdict(title, PASS, fn(*args, **kwargs))
            except Unanswered as exc:
                return Verdict(title, TODO, exc.message)
            except Wrong as exc:
                return Verdict(title, FAIL, exc.message, exc.hint)
            except Exception as exc:  # the student's code or data: say it, do not crash
                return Verdict(title, FAIL, f"checking it raised {type(exc).__name__}: {exc}",
                               "read the message, fix the cell it points to and run it again")
        return run
    return wrap


def call(fn: Callable, *args, what: str):
    """``fn(*args)`` for a student's function; what it raises becomes :class:`Wrong`."""
    try:
        return fn(*args)
    except NotImplementedError as exc:
        raise Unanswered(f"{what} is not written yet") from exc
    except Exception as exc:
        shown = ", ".join(map(repr, args))
        raise Wrong(f"{what}({shown}) raised {type(exc).__name__}: {exc}",
                    "try your function by hand on these arguments") from exc


def run_lab(scenario, policies: Sequence[str], *, duration: float | None = None,
            controllers: Mapping[str, type] | None = None, out: Path | None = None,
            document: dict | None = None):
    """Run a lab's experiment for real: the recorded :class:`~labkit.Run`, or None with the
    reason printed when it cannot run or did not finish. As root, here; without root,
    through ``labkit serve`` when the machine runs it and the run is ``document`` (the
    scenario as a document) with no ``controllers`` of the student's."""
    from labkit.kernel.registry import RunLockedError
    from labkit.model.scenario import ScenarioError
    from labkit.runs import runner
    from labkit.runs.rundir import load_run
    from labkit.ui import serve

    shown: set[tuple[str, str]] = set()

    def progress(p: runner.Progress) -> None:
        if (p.policy, p.stage) not in shown:
            shown.add((p.policy, p.stage))
            words = {"building": "building its fabric", "running": "running",
                     "done": f"done ({p.done} ops)"}[p.stage]
            print(f"{p.policy}: {words}", flush=True)

    problem = runner.not_ready()
    if problem == runner.ROOT_HINT and serve.available():
        if document is None or controllers:
            print("Not run: this run has code of yours in it, and labkit serve runs "
                  "labkit's own traffic only: it needs a kernel running as root")
            return None
        try:
            print(f"through labkit serve ({serve.SOCKET})", flush=True)
            return load_run(serve.request(document, getattr(scenario, "path", "") or "lab",
                                          policies, duration, out, on_progress=progress))
        except serve.Refused as exc:
            print(f"The run did not complete: {exc}")
            return None
    if problem:
        print(f"Not run: {problem}")
        return None
    try:
        return runner.run(scenario, list(policies), duration=duration, out=out,
                          controllers=dict(controllers or {}), on_progress=progress)
    except (ScenarioError, runner.NotReady, RunLockedError, runner.RunFailed) as exc:
        print(f"The run did not complete: {exc}")
        return None
