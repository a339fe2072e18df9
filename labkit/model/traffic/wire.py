"""Wire constants shared by the scapy templates and the agents (the C hot path,
``hotpath.c``, keeps its own copies of the RoCEv2 ones).

Kept free of scapy so that traffic agents start fast: they patch and read fields
at these offsets in packets whose templates :mod:`labkit.model.traffic.roce` (RoCEv2;
offsets within the UDP payload, BTH first) and :mod:`labkit.model.traffic.nvme`
(NVMe/TCP; offsets within a PDU) built once with scapy.
"""

import struct

ROCEV2_PORT = 4791
BTH_LEN = 12
RETH_LEN = 16
ICRC_LEN = 4

# BTH byte offsets (opcode, SE|M|PadCnt|TVer, P_Key x2, FECN|BECN, DestQP x3, A, PSN x3)
OPCODE = 0
DQPN = 5  # 3 bytes
PSN = 9  # 3 bytes
PSN_MASK = 0xFFFFFF

# RC opcodes (IBTA vol. 1, table 38)
RDMA_WRITE_FIRST = 0x06
RDMA_WRITE_MIDDLE = 0x07
RDMA_WRITE_LAST = 0x08
RDMA_WRITE_ONLY = 0x0A
ACKNOWLEDGE = 0x11
CNP = 0x81  # congestion notification packet (RoCEv2 annex A17)
DATA_OPCODES = frozenset({RDMA_WRITE_FIRST, RDMA_WRITE_MIDDLE, RDMA_WRITE_LAST, RDMA_WRITE_ONLY})
MESSAGE_START = frozenset({RDMA_WRITE_FIRST, RDMA_WRITE_ONLY})
MESSAGE_END = frozenset({RDMA_WRITE_LAST, RDMA_WRITE_ONLY})

# labkit's stamp at the start of an RDMA WRITE payload: labkit.model.abi.STAMP (lk_stamp)
DATA_OFFSET = {RDMA_WRITE_FIRST: BTH_LEN + RETH_LEN, RDMA_WRITE_ONLY: BTH_LEN + RETH_LEN,
               RDMA_WRITE_MIDDLE: BTH_LEN, RDMA_WRITE_LAST: BTH_LEN}

# the ECN field of the IPv4 TOS byte
ECN_MASK = 0x03
ECT0 = 0x02
CE = 0x03

# The ICRC (hotpath.c writes it, scapy's BTH checks it in the tests) covers 8 bytes of
# 0xff, the IPv4 and UDP headers with their variant fields (TOS, TTL, checksums) set to
# ones, the BTH with its FECN/BECN/reserved byte set to ones, and the payload; it is
# stored little-endian in the last 4 bytes. The IPv4 header is the kernel's: DF set and
# ID 0, as an unconnected socket with path-MTU discovery sends it.

# AETH syndromes
SYNDROME_ACK = 0x00  # ACK, credit field unused
SYNDROME_NAK_PSN = 0x60  # NAK: PSN sequence error


# --- NVMe/TCP (NVM Express over TCP transport, rev 1.0): little-endian fields ---------

NVME_TCP_PORT = 4420
CH = struct.Struct("<BBBBI")  # common header: pdu-type, flags, hlen, pdo, plen
ICREQ, ICRESP, CAPSULE_CMD, CAPSULE_RESP, H2C_DATA, C2H_DATA, R2T = 0, 1, 4, 5, 6, 7, 9
IC_LEN = 128  # ICReq/ICResp PDUs
CMD_LEN = 8 + 64  # CapsuleCmd: header + submission queue entry
RESP_LEN = 8 + 16  # CapsuleResp: header + completion queue entry
DATA_HDR_LEN = 24  # C2HData / H2CData / R2T headers
LAST_PDU, SUCCESS = 0x04, 0x08  # C2HData flags
NVME_READ, NVME_WRITE = 0x02, 0x01
BLOCK = 512
# byte offsets inside a PDU
CMD_OPCODE, CMD_CID, CMD_SGL_LEN, CMD_SLBA, CMD_NLB = 8, 10, 8 + 32, 8 + 40, 8 + 48
RESP_CID = 8 + 12
DATA_CCCID, DATA_TTAG, DATA_OFFSET_AT, DATA_LEN_AT = 8, 10, 12, 16

