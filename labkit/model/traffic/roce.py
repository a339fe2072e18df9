"""RoCEv2 framing with scapy: the RETH layer scapy lacks, and packet templates.

scapy's ``scapy.contrib.roce`` provides BTH and AETH; RETH (RDMA extended
transport header) is defined here in the same style. Templates are built once
per queue pair, as bytes of the UDP payload (BTH onwards, ICRC field last);
agents patch the PSN in place and never build packets on the hot path.

The ICRC field is left zero here; senders compute it per packet, over the headers
the kernel writes (:mod:`labkit.traffic.hotpath`).
"""

from __future__ import annotations

from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.fields import IntField, XIntField, XLongField
from scapy.packet import Packet, bind_layers

from labkit.model.traffic import wire


class RETH(Packet):
    """RDMA Extended Transport Header: virtual address, remote key, DMA length."""

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dlen", 0)]


for _op in (wire.RDMA_WRITE_FIRST, wire.RDMA_WRITE_ONLY):
    bind_layers(BTH, RETH, opcode=_op)


def _bth(opcode: int, dqpn: int, ackreq: bool = False) -> BTH:
    # icrc=0: the trailer stays in place but is not computed (see module docstring)
    return BTH(opcode=opcode, dqpn=dqpn, ackreq=int(ackreq), psn=0, icrc=0)


def data_templates(dqpn: int, payload_bytes: int, rkey: int = 0x1234) -> dict[str, bytes]:
    """UDP payloads for RDMA WRITE FIRST/MIDDLE/LAST/ONLY with ``payload_bytes`` of data.

    Bytes are ``BTH [RETH] data ICRC``; the agent trims the data of a message's
    last packet and patches PSN (and RETH's length) in place.
    """
    data = bytes(payload_bytes)
    out = {}
    for kind, opcode, ackreq in (("first", wire.RDMA_WRITE_FIRST, False),
                                 ("middle", wire.RDMA_WRITE_MIDDLE, False),
                                 ("last", wire.RDMA_WRITE_LAST, True),
                                 ("only", wire.RDMA_WRITE_ONLY, True)):
        bth = _bth(opcode, dqpn, ackreq)
        head = bth / RETH(rkey=rkey) if kind in ("first", "only") else bth
        out[kind] = _with_payload(head, data)
    return out


def _with_payload(head: Packet, data: bytes) -> bytes:
    raw = bytes(head)  # BTH's FCS-style trailer (ICRC) is the last 4 bytes
    return raw[:-wire.ICRC_LEN] + data + raw[-wire.ICRC_LEN:]


def ack_template(dqpn: int, syndrome: int = wire.SYNDROME_ACK) -> bytes:
    """An RC ACKNOWLEDGE (BTH + AETH) to the queue pair ``dqpn``; PSN patched per use."""
    return bytes(_bth(wire.ACKNOWLEDGE, dqpn) / AETH(syndrome=syndrome, msn=0))


def cnp_template(dqpn: int) -> bytes:
    """A congestion notification packet (BTH + 16 reserved bytes) to the queue pair
    ``dqpn``: the receiver's word to a sender whose packets arrived marked CE."""
    return bytes(_bth(wire.CNP, dqpn) / CNPPadding())


def decode(payload: bytes) -> Packet:
    """Parse a RoCEv2 UDP payload back into scapy layers (tests, debugging)."""
    return BTH(payload)
