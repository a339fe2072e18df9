"""ping, the instrument labkit did not write: its round-trip times read from its output."""


def rtts_ms(output: str) -> list[float]:
    """Each reply's round-trip time (ms) in ping's output, in order."""
    return [float(w.split("=")[1]) for w in output.split() if w.startswith("time=")]
