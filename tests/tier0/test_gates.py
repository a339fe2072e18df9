"""A held class's ceiling follows its gate, except when the gate is open or holds."""

from labkit.control.gates import GSO_BYTES, ceiling


def test_a_rate_is_the_ceiling():
    assert ceiling(24.5, 50.0) == 24.5


def test_open_and_holding_gates_leave_the_link():
    assert ceiling(float("inf"), 50.0) is None
    assert ceiling(0.125, 50.0) is None  # a busy_share hold: no GSO packet fits
    floor = GSO_BYTES * 8 / 50e3  # Mbit/s at which one GSO packet fits the bucket
    assert ceiling(floor * 0.99, 50.0) is None
    assert ceiling(floor * 1.01, 50.0) == floor * 1.01
    assert ceiling(floor * 1.01, 20.0) is None  # a shorter bucket holds more rates
