// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Queue telemetry from tracepoints: per watched port and lane, the packets and
 * bytes its root qdisc accepted (qdisc_enqueue) and the ones its queue dropped
 * (kfree_skb with a qdisc drop reason), whatever the queue layout.
 *
 * Ports are selected by (network namespace inode, ifindex) in lk_ports; the
 * lane is read back from skb->priority, where the classifier left it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "labkit.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LK_MAX_PORTS);
	__type(key, struct lk_port_key);
	__type(value, __u32); /* slot: 0 .. LK_MAX_PORTS-1 */
} lk_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_MAX_PORTS * LK_NR_LANES);
	__type(key, __u32);
	__type(value, struct lk_lane_counters);
} lk_enqueued SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_MAX_PORTS * LK_NR_LANES);
	__type(key, __u32);
	__type(value, struct lk_lane_counters);
} lk_dropped SEC(".maps");

static __always_inline __u32 lk_lane_of(__u32 priority)
{
	switch (priority & 0xffff) {
	case LK_LANE_MINOR(LK_LANE_VIP):
		return LK_LANE_VIP;
	case LK_LANE_MINOR(LK_LANE_LOW):
		return LK_LANE_LOW;
	default:
		return LK_LANE_NORMAL;
	}
}

/* Wire packets in an skb: a GSO super-packet counts as its segments. */
static __always_inline __u64 lk_segments(struct sk_buff *skb)
{
	struct skb_shared_info *shinfo = (void *)(BPF_CORE_READ(skb, head) + BPF_CORE_READ(skb, end));
	__u16 segs = 0;

	bpf_probe_read_kernel(&segs, sizeof(segs), &shinfo->gso_segs);
	return segs ? segs : 1;
}

/* Count skb against its lane at dev, if dev is a watched port. */
static __always_inline void lk_count(void *counters, const struct net_device *dev,
				     struct sk_buff *skb)
{
	struct lk_lane_counters *c;
	struct lk_port_key key;
	__u32 *slot, idx;

	key.ifindex = BPF_CORE_READ(dev, ifindex);
	key.netns_ino = BPF_CORE_READ(dev, nd_net.net, ns.inum);
	slot = bpf_map_lookup_elem(&lk_ports, &key);
	if (!slot)
		return;
	idx = *slot * LK_NR_LANES + lk_lane_of(BPF_CORE_READ(skb, priority));
	c = bpf_map_lookup_elem(counters, &idx);
	if (c) {
		c->packets += lk_segments(skb);
		c->bytes += BPF_CORE_READ(skb, len);
	}
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(lk_qdisc_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	lk_count(&lk_enqueued, BPF_CORE_READ(txq, dev), skb);
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(lk_qdisc_drop, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	if (reason < bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_QDISC_DROP) ||
	    reason > bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_FQ_FLOW_LIMIT))
		return 0;
	lk_count(&lk_dropped, BPF_CORE_READ(skb, dev), skb);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
