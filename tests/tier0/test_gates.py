"""A held class's ceiling follows its gate; an open gate leaves the link; a gate that
holds in the job's window keeps the rate outside it, a controller's hold the link."""

from labkit.kernel.gates import ceiling

MTU = 9000
FLOOR = MTU * 8 / 50e3  # Mbit/s at which one full-size packet fits a 50 ms bucket


def test_a_rate_is_the_ceiling():
    assert ceiling(24.5, 50.0, MTU) == 24.5
    assert ceiling(24.5, 50.0, MTU, 98.0) == 24.5
    assert ceiling(FLOOR * 1.01, 50.0, MTU) == FLOOR * 1.01


def test_an_open_gate_leaves_the_link():
    assert ceiling(float("inf"), 50.0, MTU) is None
    assert ceiling(float("inf"), 50.0, MTU, 98.0) is None


def test_a_hold_in_the_window_keeps_the_rate_outside_it():
    assert ceiling(0.49, 50.0, MTU, 98.0) == 98.0  # busy_share in the window, idle outside
    assert ceiling(FLOOR * 0.99, 50.0, MTU, 40.0) == 40.0
    assert ceiling(FLOOR * 1.01, 20.0, MTU, 40.0) == 40.0  # a shorter bucket holds more rates


def test_a_controllers_hold_leaves_the_link():
    assert ceiling(0.49, 50.0, MTU) is None  # open outside the window: no rate to keep
    assert ceiling(0.49, 50.0, MTU, 0.49) is None  # the controller's own rate holds
    assert ceiling(FLOOR * 0.99, 50.0, MTU, FLOOR * 0.99) is None
