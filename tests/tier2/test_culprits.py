"""A run names the culprit of a fault it was never told of (issue 49): one run for each
kind of fault (a host's link at 40 % of its rate, the link losing 3 %, the host's rank
computing twice as long), its host chosen by seed; the summary's worst slow phase must
name that host, as a link or a rank (labkit.analysis.culprits never reads the events,
which are the truth here). Each runs at twice its rates (``emulation.rate_factor: 2``,
which divides the compute and the fault's times by 2 too: the same run in half the time;
20 such runs, of all three kinds, were all named right). `make localise` scores 20 such
runs at the scenario's own rates."""

from __future__ import annotations

import pytest

from tests.leaks import assert_no_leaks
from tests.localise import localise


@pytest.mark.parametrize("kind, seed", [("rate", 3), ("loss", 5), ("slow", 8)])
def test_the_worst_slow_phase_names_the_faults_host(kind, seed, fabric_ready, tmp_path):
    row = localise(seed, kind, tmp_path / "run", rate_factor=2)
    assert row["right"], row
    assert_no_leaks()
