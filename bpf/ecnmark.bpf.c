// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Step marking at a port, as DCTCP's switches mark (tc, clsact egress): a packet that
 * finds K bytes or more already queued at the port (its root qdisc's backlog, read as the
 * packet is about to be enqueued) is marked CE if it is ECN-capable: a TCP sender that
 * negotiated ECN, a RoCE rank under DCQCN. K is in lk_mark_k, set by labkit from the
 * scenario's packets (transport.ecn_k_packets) at the port's MTU. A GSO run is one skb,
 * marked whole or not at all, but the packets it stands for would each have found the
 * queue longer by the ones before it: it is marked with the probability that is the
 * share of them that would have found K or more. (Marked on its first packet's view
 * alone, a run of 5 would go unmarked where single packets behind it are marked, and
 * the flows that send runs would take the port from those that do not.)
 * Marked and ECN-capable packets are counted (lk_mark_counts). Every packet goes on to
 * the next filter (the lane classifier) whatever it did.
 */
#include "vmlinux.h" /* with CO-RE: it reads the kernel's own sk_buff, net_device and Qdisc */
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "parse.h"

#define TC_ACT_UNSPEC (-1)
#define ECN_MASK 0x3
#define ECN_CE 0x3

extern void *bpf_cast_to_kern_ctx(void *) __ksym;

enum { LK_MARK_ECT, LK_MARK_CE, LK_MARK_COUNTS };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32); /* K, bytes queued */
} lk_mark_k SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_MARK_COUNTS);
	__type(key, __u32);
	__type(value, __u64); /* packets (a GSO run counts its segments) */
} lk_mark_counts SEC(".maps");

static __always_inline void count(__u32 key, __u64 packets)
{
	__u64 *n = bpf_map_lookup_elem(&lk_mark_counts, &key);

	if (n)
		*n += packets;
}

SEC("tc")
int lk_mark(struct __sk_buff *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct net_device *dev;
	struct Qdisc *root;
	__u32 zero = 0, *k, backlog, frame, short_of, marked;
	__u16 old, new;
	__u32 packets;
	__u8 tos;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_UNSPEC;
	tos = ip->tos;
	if (!(tos & ECN_MASK))
		return TC_ACT_UNSPEC; /* not ECN-capable */
	packets = ctx->gso_segs > 1 ? ctx->gso_segs : 1;
	count(LK_MARK_ECT, packets);
	k = bpf_map_lookup_elem(&lk_mark_k, &zero);
	dev = skb->dev;
	root = dev ? dev->qdisc : NULL;
	if (!k || !root)
		return TC_ACT_UNSPEC;
	backlog = root->qstats.backlog;
	if (backlog < *k) {
		/* the run's packets that would find K queued: those past the first short_of */
		frame = ctx->len / packets;
		short_of = frame ? (*k - backlog + frame - 1) / frame : packets;
		marked = short_of < packets ? packets - short_of : 0;
		if (!marked || bpf_get_prandom_u32() % packets >= marked)
			return TC_ACT_UNSPEC;
	}
	if ((tos & ECN_MASK) != ECN_CE) {
		old = bpf_htons(((__u16)((__u8 *)ip)[0] << 8) | tos);
		new = bpf_htons(((__u16)((__u8 *)ip)[0] << 8) | tos | ECN_CE);
		tos |= ECN_CE;
		bpf_l3_csum_replace(ctx, ETH_HLEN + offsetof(struct iphdr, check), old, new, 2);
		bpf_skb_store_bytes(ctx, ETH_HLEN + offsetof(struct iphdr, tos), &tos, 1, 0);
	}
	count(LK_MARK_CE, packets);
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
