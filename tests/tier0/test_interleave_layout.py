"""interleave's layout (labkit.runs.features.interleave.layout), on the figures of a real
run of two-jobs.yaml at twice its rates: a 277.6 ms period, heavy's All-Reduce 127.6 ms
and light's 63.8 ms alone at the bottleneck."""

import pytest

from labkit.runs.features.interleave import CLEARANCE, apart, layout

MS = 1_000_000
PERIOD, COMM = 277_600_000, {"heavy": 127_600_000, "light": 63_800_000}
ORDER = ["heavy", "light"]
GAP = (PERIOD - sum(COMM.values())) // 2


def test_phases_that_do_not_meet_are_left_as_they_are():
    assert layout(ORDER, {"heavy": 0, "light": 171 * MS}, COMM, PERIOD) is None


def test_the_job_whose_shift_is_shorter_is_put_off():
    """Light ends 3 ms before heavy's next phase: putting heavy off by 40 ms takes less
    than putting light off by 237 ms (the run's third shift before this layout)."""
    shifts = layout(ORDER, {"heavy": 0, "light": 211 * MS}, COMM, PERIOD)
    assert shifts == {"heavy": 211 * MS - COMM["heavy"] - GAP, "light": 0}
    assert shifts["heavy"] < 41 * MS


@pytest.mark.parametrize("light", [0, 30 * MS, 100 * MS, 230 * MS, 270 * MS])
def test_after_the_shifts_each_phase_begins_a_gap_after_the_other_ends(light):
    begins = {"heavy": 0, "light": light}
    shifts = layout(ORDER, begins, COMM, PERIOD)
    assert shifts is not None and min(shifts.values()) == 0
    moved = {job: begins[job] + shifts[job] for job in ORDER}
    assert (moved["light"] - moved["heavy"]) % PERIOD == COMM["heavy"] + GAP
    assert apart(moved, COMM, PERIOD, int(CLEARANCE * PERIOD))
    # no other placement of the same layout puts them off less in all
    assert sum(shifts.values()) <= min(
        (PERIOD - light + COMM["heavy"] + GAP) % PERIOD,  # light alone put off
        (light - COMM["heavy"] - GAP) % PERIOD)  # heavy alone


def test_phases_that_come_within_the_clearance_meet():
    assert not apart({"a": 0, "b": 100}, {"a": 95, "b": 50}, 1000, 10)
    assert apart({"a": 0, "b": 105}, {"a": 95, "b": 50}, 1000, 10)
    assert not apart({"a": 0, "b": 945}, {"a": 95, "b": 50}, 1000, 10)  # b wraps onto a


def test_three_jobs_take_turns_in_the_order_each_a_gap_after_the_one_before():
    comm = {"a": 100, "b": 200, "c": 300}
    begins = {"a": 0, "b": 50, "c": 400}  # a and b meet
    shifts = layout(["a", "b", "c"], begins, comm, 1000)
    assert shifts is not None and min(shifts.values()) == 0
    moved = {job: begins[job] + shifts[job] for job in comm}
    gap = (1000 - 600) // 3
    assert (moved["b"] - moved["a"]) % 1000 == 100 + gap
    assert (moved["c"] - moved["b"]) % 1000 == 200 + gap
    # no common offset of that layout puts them off less in all (every one tried)
    wanted = [0, (233 - 50) % 1000, (566 - 400) % 1000]  # places 0, 100 + gap, 300 + 2 gaps
    assert sum(shifts.values()) == min(sum((w + e) % 1000 for w in wanted)
                                       for e in range(1000))


def test_phases_that_cannot_fit_apart_are_left_alone():
    """Their gaps would be narrower than the clearance: no layout keeps them apart, and
    shifting at every layout would only chase the noise."""
    busy = {"heavy": 127_600_000, "light": 140_000_000}  # 267.6 of the 277.6 ms period
    assert layout(ORDER, {"heavy": 0, "light": 30 * MS}, busy, PERIOD) is None
