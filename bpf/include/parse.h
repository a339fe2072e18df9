/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Bounds-checked header parsers for tc programs.
 *
 * lk_parse() fills a struct lk_pkt from an Ethernet frame: DSCP, L4 protocol,
 * ports, and whether a UDP payload carries a RoCEv2 BTH. It never reads past
 * data_end; anything it cannot parse leaves the matching fields unset.
 */
#ifndef __LABKIT_PARSE_H
#define __LABKIT_PARSE_H

#include <bpf/bpf_endian.h>

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define ETH_HLEN 14
#define IP_MF 0x2000
#define IP_OFFSET 0x1FFF
#define ROCEV2_UDP_PORT 4791
#define BTH_LEN 12

#define TC_ACT_OK 0
#define TC_ACT_SHOT 2

struct lk_pkt {
	__u8 l3_ok;     /* an IPv4/IPv6 header was parsed */
	__u8 proto;     /* L4 protocol (0 when unknown) */
	__u8 dscp;
	__u8 has_ports; /* sport/dport are valid */
	__u8 has_bth;   /* UDP to 4791 with room for a version-0 BTH */
	__u16 sport;    /* host byte order */
	__u16 dport;
};

struct lk_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

static __always_inline int lk_parse_l4(void *l4, void *data_end, struct lk_pkt *pkt)
{
	if (pkt->proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > data_end)
			return -1;
		pkt->sport = bpf_ntohs(tcp->source);
		pkt->dport = bpf_ntohs(tcp->dest);
		pkt->has_ports = 1;
	} else if (pkt->proto == IPPROTO_UDP) {
		struct udphdr *udp = l4;
		__u8 *bth = (void *)(udp + 1);

		if ((void *)(udp + 1) > data_end)
			return -1;
		pkt->sport = bpf_ntohs(udp->source);
		pkt->dport = bpf_ntohs(udp->dest);
		pkt->has_ports = 1;
		/* byte 1 of the BTH: SE | M | PadCnt(2) | TVer(4); RoCEv2 uses TVer 0 */
		if (pkt->dport == ROCEV2_UDP_PORT && (void *)(bth + BTH_LEN) <= data_end &&
		    (bth[1] & 0x0f) == 0)
			pkt->has_bth = 1;
	}
	return 0;
}

static __always_inline int lk_parse(void *data, void *data_end, struct lk_pkt *pkt)
{
	struct ethhdr *eth = data;
	void *cursor = eth + 1;
	__u16 proto;

	if (cursor > data_end)
		return -1;
	proto = bpf_ntohs(eth->h_proto);
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		struct lk_vlan_hdr *vlan = cursor;

		if ((void *)(vlan + 1) > data_end)
			return -1;
		proto = bpf_ntohs(vlan->proto);
		cursor = vlan + 1;
	}

	if (proto == ETH_P_IP) {
		struct iphdr *ip = cursor;
		__u32 ihl_bytes;

		if ((void *)(ip + 1) > data_end)
			return -1;
		ihl_bytes = ip->ihl * 4;
		if (ip->version != 4 || ihl_bytes < sizeof(*ip))
			return -1;
		pkt->dscp = ip->tos >> 2;
		pkt->l3_ok = 1;
		/* a non-first fragment carries no L4 header */
		if (bpf_ntohs(ip->frag_off) & IP_OFFSET)
			return 0;
		pkt->proto = ip->protocol;
		if (cursor + ihl_bytes > data_end)
			return -1;
		return lk_parse_l4(cursor + ihl_bytes, data_end, pkt);
	}
	if (proto == ETH_P_IPV6) {
		struct ipv6hdr *ip6 = cursor;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		if (ip6->version != 6)
			return -1;
		pkt->dscp = ((ip6->priority << 4) | (ip6->flow_lbl[0] >> 4)) >> 2;
		pkt->l3_ok = 1;
		/* extension headers are not followed: such packets match on DSCP only */
		if (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP)
			return 0;
		pkt->proto = ip6->nexthdr;
		return lk_parse_l4(ip6 + 1, data_end, pkt);
	}
	return -1;
}

#endif /* __LABKIT_PARSE_H */
