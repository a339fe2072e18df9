"""A held class's ceiling follows its gate, except when the gate is open or holds."""

from labkit.control.gates import ceiling

MTU = 9000


def test_a_rate_is_the_ceiling():
    assert ceiling(24.5, 50.0, MTU) == 24.5


def test_open_and_holding_gates_leave_the_link():
    assert ceiling(float("inf"), 50.0, MTU) is None
    assert ceiling(0.125, 50.0, MTU) is None  # a busy_share hold: no full packet fits
    floor = MTU * 8 / 50e3  # Mbit/s at which one full-size packet fits the bucket
    assert ceiling(floor * 0.99, 50.0, MTU) is None
    assert ceiling(floor * 1.01, 50.0, MTU) == floor * 1.01
    assert ceiling(floor * 1.01, 20.0, MTU) is None  # a shorter bucket holds more rates
