"""A held class's ceiling follows its gate, never below the rate at which the largest
packet takes a bucket's time; an open gate leaves the link; a gate that holds in the
job's window keeps the rate outside it, a controller's hold the ceiling in force (what
was queued leaves at the rate it was admitted at)."""

from labkit.kernel.gates import GSO_MAX_BYTES, ceiling

MTU = 9000
FLOOR = MTU * 8 / 50e3  # Mbit/s at which one full-size packet fits a 50 ms bucket
LOWEST = GSO_MAX_BYTES * 8 / 50e3  # Mbit/s at which a 64 KiB packet takes 50 ms


def test_a_rate_is_the_ceiling():
    assert ceiling(24.5, 50.0, MTU) == 24.5
    assert ceiling(24.5, 50.0, MTU, 98.0) == 24.5


def test_no_packet_charges_the_class_more_than_a_bucket():
    assert ceiling(FLOOR * 1.01, 50.0, MTU) == LOWEST  # the gate admits, the class is faster
    assert ceiling(4.0, 20.0, MTU) == GSO_MAX_BYTES * 8 / 20e3  # a shorter bucket
    assert ceiling(0.49, 50.0, MTU, 3.0) == LOWEST  # the rate outside the window, likewise


def test_an_open_gate_leaves_the_link():
    assert ceiling(float("inf"), 50.0, MTU) is None
    assert ceiling(float("inf"), 50.0, MTU, 98.0) is None


def test_a_hold_in_the_window_keeps_the_rate_outside_it():
    assert ceiling(0.49, 50.0, MTU, 98.0) == 98.0  # busy_share in the window, idle outside
    assert ceiling(FLOOR * 0.99, 50.0, MTU, 40.0) == 40.0
    assert ceiling(FLOOR * 1.01, 20.0, MTU, 40.0) == 40.0  # a shorter bucket holds more rates


def test_a_controllers_hold_keeps_the_ceiling_in_force():
    assert ceiling(0.49, 50.0, MTU, current=12.25) == 12.25  # reactive's cut below a packet
    assert ceiling(0.49, 50.0, MTU, 0.49, 98.0) == 98.0  # the controller's own rate holds
    assert ceiling(FLOOR * 0.99, 50.0, MTU, FLOOR * 0.99, LOWEST) == LOWEST
    assert ceiling(0.49, 50.0, MTU) is None  # nothing in force yet: the link
