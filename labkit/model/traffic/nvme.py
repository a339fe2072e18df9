"""NVMe/TCP with scapy: the PDUs of the storage traffic, and their templates.

scapy has no NVMe/TCP layers; these follow the NVM Express TCP transport
specification (rev 1.0) in scapy's style: a common header (``NVMeTCP``) whose
``pdu_type`` selects the PDU-specific part. Multi-byte fields are little-endian.
Templates are built once here; the storage agent patches command ids, block
addresses and data offsets at the byte offsets in :mod:`labkit.model.traffic.wire`.
"""

from __future__ import annotations

from typing import Any

from scapy.fields import (
    ByteEnumField,
    ByteField,
    LEIntField,
    LELongField,
    LEShortField,
    StrFixedLenField,
    XByteField,
)
from scapy.layers.inet import TCP
from scapy.packet import Packet, bind_layers

from labkit.model.traffic import wire

PDU_TYPES = {wire.ICREQ: "ICReq", wire.ICRESP: "ICResp", 2: "H2CTermReq", 3: "C2HTermReq",
             wire.CAPSULE_CMD: "CapsuleCmd", wire.CAPSULE_RESP: "CapsuleResp",
             wire.H2C_DATA: "H2CData", wire.C2H_DATA: "C2HData", wire.R2T: "R2T"}


class NVMeTCP(Packet):
    """The 8-byte common header of every NVMe/TCP PDU."""

    name = "NVMe/TCP"
    fields_desc = [ByteEnumField("pdu_type", 0, PDU_TYPES), XByteField("flags", 0),
                   ByteField("hlen", 8), ByteField("pdo", 0), LEIntField("plen", None)]

    def post_build(self, p: bytes, pay: bytes) -> bytes:
        if self.plen is None:
            p = p[:4] + (len(p) + len(pay)).to_bytes(4, "little")
        return p + pay


class ICReq(Packet):
    name = "ICReq"
    fields_desc = [LEShortField("pfv", 0), ByteField("hpda", 0), XByteField("dgst", 0),
                   LEIntField("maxr2t", 0), StrFixedLenField("reserved", b"", 112)]


class ICResp(Packet):
    name = "ICResp"
    fields_desc = [LEShortField("pfv", 0), ByteField("cpda", 0), XByteField("dgst", 0),
                   LEIntField("maxh2cdata", 1 << 20), StrFixedLenField("reserved", b"", 112)]


class CapsuleCmd(Packet):
    """A submission queue entry (64 bytes) with a transport SGL data block descriptor."""

    name = "CapsuleCmd"
    fields_desc = [ByteEnumField("opcode", wire.NVME_READ, {wire.NVME_READ: "Read",
                                                             wire.NVME_WRITE: "Write"}),
                   XByteField("cflags", 0x40),  # PSDT: SGLs
                   LEShortField("cid", 0), LEIntField("nsid", 1), LELongField("rsvd", 0),
                   LELongField("mptr", 0), LELongField("sgl_addr", 0),
                   LEIntField("sgl_len", 0), StrFixedLenField("sgl_rsvd", b"", 3),
                   XByteField("sgl_type", 0x5A),  # transport SGL data block
                   LELongField("slba", 0), LEShortField("nlb", 0),
                   StrFixedLenField("cdw12_15", b"", 14)]


class CapsuleResp(Packet):
    """A completion queue entry (16 bytes)."""

    name = "CapsuleResp"
    fields_desc = [LEIntField("dw0", 0), LEIntField("dw1", 0), LEShortField("sqhd", 0),
                   LEShortField("sqid", 1), LEShortField("cid", 0), LEShortField("status", 0)]


class DataPDU(Packet):
    """The header of C2HData and H2CData (and, with ``datal`` as R2TL, of R2T)."""

    name = "Data"
    fields_desc = [LEShortField("cccid", 0), LEShortField("ttag", 0),
                   LEIntField("datao", 0), LEIntField("datal", 0), LEIntField("rsvd", 0)]


for _t, _cls in ((wire.ICREQ, ICReq), (wire.ICRESP, ICResp), (wire.CAPSULE_CMD, CapsuleCmd),
                 (wire.CAPSULE_RESP, CapsuleResp), (wire.H2C_DATA, DataPDU),
                 (wire.C2H_DATA, DataPDU), (wire.R2T, DataPDU)):
    bind_layers(NVMeTCP, _cls, pdu_type=_t)
bind_layers(TCP, NVMeTCP, dport=wire.NVME_TCP_PORT)
bind_layers(TCP, NVMeTCP, sport=wire.NVME_TCP_PORT)


def templates(io_bytes: int) -> dict[str, bytes]:
    """Every PDU the storage agent sends, for I/Os of ``io_bytes`` (data not included)."""
    blocks = io_bytes // wire.BLOCK
    # scapy fields, passed by keyword (a dict[str, int] could fill Packet's positional
    # parameters as far as a type checker can tell)
    ch: dict[str, Any] = dict(flags=0, pdo=0)
    data: dict[str, Any] = dict(hlen=wire.DATA_HDR_LEN, pdo=wire.DATA_HDR_LEN)
    return {k: bytes(v) for k, v in {
        "icreq": NVMeTCP(pdu_type=wire.ICREQ, hlen=wire.IC_LEN, **ch) / ICReq(),
        "icresp": NVMeTCP(pdu_type=wire.ICRESP, hlen=wire.IC_LEN, **ch) / ICResp(),
        "read": NVMeTCP(pdu_type=wire.CAPSULE_CMD, hlen=wire.CMD_LEN, **ch)
        / CapsuleCmd(opcode=wire.NVME_READ, sgl_len=io_bytes, nlb=blocks - 1),
        "write": NVMeTCP(pdu_type=wire.CAPSULE_CMD, hlen=wire.CMD_LEN, **ch)
        / CapsuleCmd(opcode=wire.NVME_WRITE, sgl_len=io_bytes, nlb=blocks - 1),
        "resp": NVMeTCP(pdu_type=wire.CAPSULE_RESP, hlen=wire.RESP_LEN, **ch) / CapsuleResp(),
        "r2t": NVMeTCP(pdu_type=wire.R2T, hlen=wire.DATA_HDR_LEN, **ch, plen=wire.DATA_HDR_LEN)
        / DataPDU(datal=io_bytes),
        "c2h": NVMeTCP(pdu_type=wire.C2H_DATA, flags=wire.LAST_PDU, **data,
                       plen=wire.DATA_HDR_LEN + io_bytes) / DataPDU(datal=io_bytes),
        "h2c": NVMeTCP(pdu_type=wire.H2C_DATA, flags=wire.LAST_PDU, **data,
                       plen=wire.DATA_HDR_LEN + io_bytes) / DataPDU(datal=io_bytes),
    }.items()}
