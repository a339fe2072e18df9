/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Bounds-checked header parsers for tc programs.
 *
 * lk_parse() builds the rule key of an Ethernet frame (labkit.h): DSCP, L4
 * protocol, ports, and whether a UDP payload carries a RoCEv2 BTH. It never
 * reads past data_end; what it cannot parse stays zero in the key.
 */
#ifndef __LABKIT_PARSE_H
#define __LABKIT_PARSE_H

#include <bpf/bpf_endian.h>
#include "labkit.h"

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

struct lk_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

static __always_inline __u64 lk_l4_key(void *l4, void *data_end, __u8 proto)
{
	__u64 key = (__u64)proto << LK_KEY_PROTO_SHIFT;

	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > data_end)
			return key;
		return key | LK_KEY_PORTS | bpf_ntohs(tcp->dest) |
		       (__u64)bpf_ntohs(tcp->source) << LK_KEY_SPORT_SHIFT;
	}
	if (proto == IPPROTO_UDP) {
		struct udphdr *udp = l4;
		__u8 *bth = (void *)(udp + 1);
		__u16 dport;

		if ((void *)(udp + 1) > data_end)
			return key;
		dport = bpf_ntohs(udp->dest);
		key |= LK_KEY_PORTS | dport | (__u64)bpf_ntohs(udp->source) << LK_KEY_SPORT_SHIFT;
		/* byte 1 of the BTH: SE | M | PadCnt(2) | TVer(4); RoCEv2 uses TVer 0 */
		if (dport == ROCEV2_UDP_PORT && (void *)(bth + BTH_LEN) <= data_end &&
		    (bth[1] & 0x0f) == 0)
			key |= LK_KEY_BTH;
	}
	return key;
}

/* The rule key of an Ethernet frame (see labkit.h); 0 when it carries no IP. */
static __always_inline __u64 lk_parse(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	void *cursor = eth + 1;
	__u16 proto;

	if (cursor > data_end)
		return 0;
	proto = bpf_ntohs(eth->h_proto);
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		struct lk_vlan_hdr *vlan = cursor;

		if ((void *)(vlan + 1) > data_end)
			return 0;
		proto = bpf_ntohs(vlan->proto);
		cursor = vlan + 1;
	}

	if (proto == ETH_P_IP) {
		struct iphdr *ip = cursor;
		__u32 ihl_bytes;
		__u64 key;

		if ((void *)(ip + 1) > data_end)
			return 0;
		ihl_bytes = ip->ihl * 4;
		if (ip->version != 4 || ihl_bytes < sizeof(*ip))
			return 0;
		key = LK_KEY_L3 | (__u64)(ip->tos >> 2) << LK_KEY_DSCP_SHIFT;
		/* a non-first fragment carries no L4 header */
		if ((bpf_ntohs(ip->frag_off) & IP_OFFSET) || cursor + ihl_bytes > data_end)
			return key;
		return key | lk_l4_key(cursor + ihl_bytes, data_end, ip->protocol);
	}
	if (proto == ETH_P_IPV6) {
		struct ipv6hdr *ip6 = cursor;
		__u64 key;

		if ((void *)(ip6 + 1) > data_end || ip6->version != 6)
			return 0;
		key = LK_KEY_L3 |
		      (__u64)(((ip6->priority << 4) | (ip6->flow_lbl[0] >> 4)) >> 2) << LK_KEY_DSCP_SHIFT;
		/* extension headers are not followed: such packets match on DSCP only */
		if (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP)
			return key;
		return key | lk_l4_key(ip6 + 1, data_end, ip6->nexthdr);
	}
	return 0;
}

/* Headers we may need to look at: Ethernet + VLAN + IPv6 + TCP + BTH. */
#define LK_PARSE_BYTES 128

/* Point data and data_end at an egress skb's headers. A non-linear skb may hold them
 * outside its linear area: they are pulled in first, and only then (a pull costs a
 * helper call). A macro, not a function: clang would otherwise fold the reloads of
 * skb->data into offsets from skb, which the verifier refuses. */
#define LK_PULL_HEADERS(skb, data, data_end)                                            \
	do {                                                                            \
		data = (void *)(long)(skb)->data;                                       \
		data_end = (void *)(long)(skb)->data_end;                               \
		if (data + LK_PARSE_BYTES > data_end) {                                 \
			__u32 want = (skb)->len < LK_PARSE_BYTES ? (skb)->len : LK_PARSE_BYTES; \
			if (data + want > data_end) {                                   \
				bpf_skb_pull_data(skb, want);                           \
				data = (void *)(long)(skb)->data;                       \
				data_end = (void *)(long)(skb)->data_end;               \
			}                                                               \
		}                                                                       \
	} while (0)

/* Whether an Ethernet frame of len bytes is a TCP segment without data (an
 * acknowledgement, a SYN, a FIN): untagged, IPv4 (not a fragment) or IPv6 without
 * extension headers. */
static __always_inline int lk_bare_tcp(void *data, void *data_end, __u32 len)
{
	struct ethhdr *eth = data;
	struct tcphdr *tcp;
	__u32 l3 = ETH_HLEN, l4;

	if ((void *)(eth + 1) > data_end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + ETH_HLEN;

		if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5 ||
		    ip->protocol != IPPROTO_TCP || (bpf_ntohs(ip->frag_off) & (IP_MF | IP_OFFSET)))
			return 0;
		l4 = l3 + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + ETH_HLEN;

		if ((void *)(ip6 + 1) > data_end || ip6->version != 6 ||
		    ip6->nexthdr != IPPROTO_TCP)
			return 0;
		l4 = l3 + sizeof(*ip6);
	} else {
		return 0;
	}
	if (l4 > 128)
		return 0;
	tcp = data + l4;
	if ((void *)(tcp + 1) > data_end)
		return 0;
	return len <= l4 + tcp->doff * 4;
}

#endif /* __LABKIT_PARSE_H */
