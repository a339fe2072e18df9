"""Packet senders side by side on one path: scapy's sendp, labkit's sender, iperf3 -u.

All three send 1 KiB payloads from h1 to h2 through router r1 (veth links, shaped
far above what two cores forward); packets/s is what h2's interface received, so
a sender is credited only for packets that made it. scapy builds each packet (a
PSN sequence needs a new packet per send, which is how scapy is used to send one);
scapy gets its best use: one sendp call over a generator, so one socket for all.
labkit sends as a rank does (labkit.traffic.hotpath: packets built in C from templates
scapy made once, PSN, stamp and ICRC patched, batches sent with sendmmsg); iperf3 -u
is the C reference.
"""

import json
import subprocess
import sys
import time

from pyroute2 import IPRoute

from benchmarks.path import two_hosts
from labkit.kernel.fabric import Fabric, mac_for
from labkit.kernel.registry import Registry
from labkit.model import topo

PAYLOAD = 1024
SECONDS = 3
SCAPY_PACKETS = 3000
SCAPY = """
import sys, time
from scapy.all import Ether, IP, UDP, Raw, sendp, conf
from scapy.contrib.roce import BTH
conf.verb = 0
dst, mac, iface, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t0 = time.monotonic()
sendp((Ether(dst=mac) / IP(dst=dst) / UDP(dport=4791) / BTH(opcode=7, dqpn=0x101, psn=psn)
       / Raw(bytes(1024)) for psn in range(n)), iface=iface)  # one socket, a packet per PSN
print(time.monotonic() - t0)
"""
SINK = ("import socket, time\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.bind(('0.0.0.0', 4791))\n"
        "time.sleep(3600)\n")


def _rx_packets(ifname: str) -> int:
    with IPRoute() as ipr:
        (link,) = ipr.get_links(ifname=ifname)
        return link.get_attr("IFLA_STATS64")["rx_packets"]


def path() -> topo.Topology:
    """h1 -> r1 -> h2 at 40 Gbit/s with 9000-byte frames: far above what two cores
    forward, so the senders are the limit."""
    return topo.Topology(two_hosts(40000, 9000, 4096).fabric)


def run() -> list[dict]:
    t = path()
    dst, rx_if = t.host_ip("h2"), t.ports["h2"][0].ifname
    h1 = t.ports["h1"][0]
    with Fabric(t, Registry("bench-sender")) as f:
        f.popen("h2", ["iperf3", "-s"], "iperf3 server", stdout=subprocess.DEVNULL)
        f.popen("h2", [sys.executable, "-c", SINK], "udp sink")
        time.sleep(0.5)

        def measured(argv, what):
            before = f.ns["h2"].run(_rx_packets, rx_if)
            t0 = time.monotonic()
            proc = f.popen("h1", argv, what, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = proc.communicate(timeout=120)
            elapsed = time.monotonic() - t0
            got = f.ns["h2"].run(_rx_packets, rx_if) - before
            return got, elapsed, out

        got, _, out = measured([sys.executable, "-c", SCAPY, dst, mac_for(h1.peer_ip),
                                h1.ifname, str(SCAPY_PACKETS)], "scapy sendp")
        scapy_pps = got / float(out)
        got, _, out = measured([sys.executable, "-m", "labkit.traffic.hotpath", dst,
                                str(SECONDS)], "labkit sender")
        labkit_pps = got / SECONDS
        got, _, out = measured(["iperf3", "-c", dst, "-u", "-b", "0", "-l", str(PAYLOAD),
                                "-t", str(SECONDS), "-J"], "iperf3 -u")
        iperf_pps = got / json.loads(out)["end"]["sum"]["seconds"]
    return [
        {"name": "scapy_sendp_pps", "value": scapy_pps, "unit": "packets/s", "goal": None},
        {"name": "iperf3_udp_pps", "value": iperf_pps, "unit": "packets/s", "goal": None},
        {"name": "sender_pps", "value": labkit_pps, "unit": "packets/s", "goal": ">= 200000"},
        {"name": "sender_vs_scapy", "value": labkit_pps / scapy_pps, "unit": "ratio",
         "goal": ">= 300"},
        {"name": "sender_vs_iperf3", "value": labkit_pps / iperf_pps, "unit": "ratio",
         "goal": ">= 0.7"},
    ]
