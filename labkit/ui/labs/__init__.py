"""Hands-on labs (notebooks/labs/): what their self-check cells call.

* :mod:`.verdict` — the answer a check gives: passed, failed (what is wrong, and a hint)
  or not answered yet; it shows as a coloured box in a notebook and as text in a terminal;
* :mod:`.bottleneck` — lab 1, find the bottleneck (recorded data);
* :mod:`.lanes` — lab 2, protect the collective with lane rules (a real run);
* :mod:`.controller` — lab 3, write a controller that beats ``reactive`` (a real run);
* :mod:`.parallelism` — lab 4, pipeline vs tensor parallelism (labkit's own job plans);
* :mod:`.sharing` — lab 5, whose All-Reduce is vip: two jobs share the uplink (recorded
  data, or a real run);
* :mod:`.straggler` — lab 6, find the straggler: a recorded run with a fault the student
  is not told of, graded against the run's events (recorded data);
* :mod:`.notebook` — a lab with its instructor's answers filled in, run headless, and the
  verdicts its check cells gave (tests, and ``python -m labkit.ui.labs``);
* :mod:`.handout` — the labs released without their solutions, and students' answers
  graded in the labs as shipped (``labkit labs release`` and ``grade``).

A check never raises for a wrong answer: whatever is wrong with it becomes the verdict.
"""

from labkit.ui.labs.verdict import FAIL, PASS, TODO, Verdict, run_lab

__all__ = ["FAIL", "PASS", "TODO", "Verdict", "run_lab"]
