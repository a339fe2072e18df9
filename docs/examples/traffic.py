"""An example traffic kind: incast, many hosts sending to one at the same moments.

Name it in a scenario, then use it like a built-in kind:

    kinds:
      incast: ../docs/examples/traffic.py:Incast
    traffic:
      - {kind: incast, to: g1, senders: [st1, g5], bytes: 2MiB, every_ms: 300}

Each sender runs a loop of ``iperf3`` transfers of ``bytes`` to its own server on the
receiver (iperf3 serves one client at a time), starting a new one every ``every_ms``:
the transfers of all senders start together and converge on the receiver's link. The
entry becomes one ``kind: command`` entry per sender, so its traffic is started, stopped,
counted per lane and held by a controller like any program a scenario names.

A traffic kind subclasses :class:`labkit.model.extend.TrafficKind`: ``keys`` and ``required``
name what an entry may and must hold; ``expand(entry, hosts)`` returns the command
entries (``hosts`` maps each role, ``gpu`` and ``storage``, to its hosts). A ValueError
it raises is shown with the entry's place in the file.
"""

from labkit.model.extend import TrafficKind

FIRST_PORT = 5301  # one iperf3 server per sender, from here up


class Incast(TrafficKind):
    keys = frozenset({"to", "senders", "bytes", "every_ms"})
    required = frozenset({"to", "senders"})

    def expand(self, entry: dict, hosts: dict[str, tuple[str, ...]]) -> list[dict]:
        to = entry["to"]
        senders = entry["senders"]
        senders = list(hosts[senders]) if isinstance(senders, str) else list(senders)
        if to in senders:
            raise ValueError(f"{to} cannot send to itself: leave it out of senders")
        size = str(entry.get("bytes", "1M")).removesuffix("iB").removesuffix("B")
        pause_s = float(entry.get("every_ms", 500)) / 1000
        commands = []
        for i, sender in enumerate(senders):
            port = FIRST_PORT + i
            loop = (f"while :; do iperf3 -c {{{to}}} -p {port} -n {size} >/dev/null 2>&1; "
                    f"sleep {pause_s:g}; done")
            commands.append({"name": f"incast-{sender}", "host": sender,
                             "run": ["sh", "-c", loop],
                             "serve": {"host": to, "run": f"iperf3 -s -p {port}"}})
        return commands
