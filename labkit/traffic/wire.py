"""RoCEv2 wire constants shared by the scapy templates and the agents' hot path.

Kept free of scapy so that traffic agents start fast: they patch and read
fields at these offsets in packets whose templates :mod:`labkit.traffic.roce`
built once with scapy. Offsets are within the UDP payload (BTH first).
"""

import struct

ROCEV2_PORT = 4791
BTH_LEN = 12
RETH_LEN = 16
ICRC_LEN = 4

# BTH byte offsets (opcode, SE|M|PadCnt|TVer, P_Key x2, FECN|BECN, DestQP x3, A, PSN x3)
OPCODE = 0
PSN = 9  # 3 bytes
PSN_MASK = 0xFFFFFF

# RC opcodes (IBTA vol. 1, table 38)
RDMA_WRITE_FIRST = 0x06
RDMA_WRITE_MIDDLE = 0x07
RDMA_WRITE_LAST = 0x08
RDMA_WRITE_ONLY = 0x0A
ACKNOWLEDGE = 0x11
DATA_OPCODES = frozenset({RDMA_WRITE_FIRST, RDMA_WRITE_MIDDLE, RDMA_WRITE_LAST, RDMA_WRITE_ONLY})
MESSAGE_END = frozenset({RDMA_WRITE_LAST, RDMA_WRITE_ONLY})

# labkit's stamp at the start of an RDMA WRITE payload (struct lk_stamp, host order):
# magic, seq (sender rank << 24 | PSN), CLOCK_MONOTONIC nanoseconds
STAMP = struct.Struct("=IIQ")
STAMP_MAGIC = 0x53544B4C
DATA_OFFSET = {RDMA_WRITE_FIRST: BTH_LEN + RETH_LEN, RDMA_WRITE_ONLY: BTH_LEN + RETH_LEN,
               RDMA_WRITE_MIDDLE: BTH_LEN, RDMA_WRITE_LAST: BTH_LEN}

# AETH syndromes
SYNDROME_ACK = 0x00  # ACK, credit field unused
SYNDROME_NAK_PSN = 0x60  # NAK: PSN sequence error
