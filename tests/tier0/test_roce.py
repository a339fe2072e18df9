from scapy.contrib.roce import AETH, BTH

from labkit.model.traffic import roce, wire


def test_data_templates_are_rdma_write_segments():
    t = roce.data_templates(dqpn=0x105, payload_bytes=4096)
    expected = {"first": (wire.RDMA_WRITE_FIRST, True, 0), "middle": (wire.RDMA_WRITE_MIDDLE,
                False, 0), "last": (wire.RDMA_WRITE_LAST, False, 1),
                "only": (wire.RDMA_WRITE_ONLY, True, 1)}
    for kind, (opcode, has_reth, ackreq) in expected.items():
        raw = t[kind]
        pkt = roce.decode(raw)
        assert pkt[BTH].opcode == opcode and raw[wire.OPCODE] == opcode
        assert pkt[BTH].dqpn == 0x105 and pkt[BTH].version == 0
        assert pkt[BTH].ackreq == ackreq
        assert pkt.haslayer(roce.RETH) == has_reth
        header = wire.BTH_LEN + (wire.RETH_LEN if has_reth else 0)
        assert len(raw) == header + 4096 + wire.ICRC_LEN


def test_psn_patched_in_place_is_what_scapy_reads():
    raw = bytearray(roce.data_templates(1, 64)["middle"])
    raw[wire.PSN:wire.PSN + 3] = (0xABCDEF).to_bytes(3, "big")
    assert roce.decode(bytes(raw))[BTH].psn == 0xABCDEF


def test_ack_and_nak():
    ack = roce.decode(roce.ack_template(0x100))
    nak = roce.decode(roce.ack_template(0x100, wire.SYNDROME_NAK_PSN))
    assert ack[BTH].opcode == wire.ACKNOWLEDGE and ack[AETH].syndrome == wire.SYNDROME_ACK
    assert nak[AETH].syndrome == wire.SYNDROME_NAK_PSN
    assert roce.ack_template(1)[wire.BTH_LEN] == wire.SYNDROME_ACK
