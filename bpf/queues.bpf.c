// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Queue telemetry from tracepoints, per watched port and lane, whatever the
 * queue layout:
 *  - packets and bytes the port's root qdisc accepted (qdisc_enqueue) and the
 *    ones it dropped (kfree_skb with a qdisc drop reason);
 *  - each packet's time in the queue (sojourn): enqueue time kept per skb in
 *    lk_inflight, paired at qdisc_dequeue, into a log2 histogram and, one packet
 *    in sample_every, into the lk_events ring buffer (with the sender's stamp
 *    when the packet carries one);
 *  - the gap between two dequeues while packets were waiting (LK_EV_GAP, sampled
 *    the same way): with a backlog, a port that keeps time sends the next packet
 *    one wire time of the previous one later (labkit.analysis.metrics.dequeue_fidelity);
 *  - the same per watched port and DSCP instead of lane, for IPv4 packets only (each
 *    training job marks its packets with a DSCP of its own at its hosts' egress):
 *    lk_job_enqueued and lk_job_dropped (packets and bytes), lk_job_sojourn_hist (the
 *    sojourn's log2 histogram), each at slot * LK_NR_DSCP + dscp. A packet that is not
 *    IPv4 counts in its lane and in no DSCP's slot.
 *
 * Ports are selected by (network namespace inode, ifindex) in lk_ports; the
 * lane is read back from skb->priority, where the classifier left it, the DSCP from
 * the packet's IPv4 header (the bytes the fingerprint reads anyway at enqueue).
 *
 * What these programs cannot see: on this kernel (6.18) the BPF programs on the
 * qdisc and kfree_skb tracepoints are not run for about 1 in 300-1000 of the hits
 * that happen in softirq context (forwarding, NET_TX), while perf's handler on the
 * same tracepoint and the qdisc's own counters see every one, and the kernel
 * reports no recursion miss (measured: docs/data-model.md). So the counters may
 * fall short of the classifier's, never exceed them; a dequeue whose enqueue was
 * not seen is counted as unpaired and timed not at all.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "labkit.h"
#include "telemetry.h"

#define LK_DEQUEUE_BATCH 16 /* skbs of one bulk dequeue that are paired */
#define LK_PRINT_BYTES 48   /* IPv4 + TCP seq/ack, or IPv4 + UDP + BTH with its PSN */
#define LK_ETH_P_IP 0x0800

struct lk_inflight {
	__u64 t_ns;
	__u64 print; /* the packet's headers, folded: tells it from a later packet that
			reuses the same skb (and even the same data buffer) */
	__u32 idx;   /* slot * LK_NR_LANES + lane */
	__u32 dscp;  /* the IPv4 packet's DSCP; LK_NR_DSCP: not IPv4 */
};

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

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* the skb's address while it sits in a watched queue */
	__type(value, struct lk_inflight);
} lk_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_MAX_PORTS * LK_NR_LANES);
	__type(key, __u32);
	__type(value, struct lk_hist);
} lk_sojourn_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LK_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct lk_port_clock);
} lk_port_clock SEC(".maps");

/* Per watched port and DSCP (slot * LK_NR_DSCP + dscp), IPv4 packets only. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_MAX_PORTS * LK_NR_DSCP);
	__type(key, __u32);
	__type(value, struct lk_lane_counters);
} lk_job_enqueued SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_MAX_PORTS * LK_NR_DSCP);
	__type(key, __u32);
	__type(value, struct lk_lane_counters);
} lk_job_dropped SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_MAX_PORTS * LK_NR_DSCP);
	__type(key, __u32);
	__type(value, struct lk_hist);
} lk_job_sojourn_hist SEC(".maps");

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

/* The counter index (slot * LK_NR_LANES + lane) of skb at dev, or -1 if dev is not watched. */
static __always_inline int lk_index(const struct net_device *dev, struct sk_buff *skb)
{
	struct lk_port_key key;
	__u32 *slot;

	key.ifindex = BPF_CORE_READ(dev, ifindex);
	key.netns_ino = BPF_CORE_READ(dev, nd_net.net, ns.inum);
	slot = bpf_map_lookup_elem(&lk_ports, &key);
	if (!slot)
		return -1;
	return *slot * LK_NR_LANES + lk_lane_of(BPF_CORE_READ(skb, priority));
}

/* The DSCP of a packet whose network header starts with the bytes l3[0], l3[1], or
 * LK_NR_DSCP when it is not IPv4 (by its protocol and its header's version). */
static __always_inline __u32 lk_dscp_of(struct sk_buff *skb, const __u8 *l3)
{
	if (BPF_CORE_READ(skb, protocol) != bpf_htons(LK_ETH_P_IP) || l3[0] >> 4 != 4)
		return LK_NR_DSCP;
	return l3[1] >> 2;
}

/* The first LK_PRINT_BYTES from the network header folded into 64 bits, mixed with
 * the buffer's address: equal at enqueue and dequeue of one packet, different for a
 * later packet in a reused skb unless its headers are identical to the byte. With
 * dscp, also the packet's DSCP (lk_dscp_of), from the same bytes. */
static __always_inline __u64 lk_fingerprint(struct sk_buff *skb, __u32 *dscp)
{
	__u64 words[LK_PRINT_BYTES / 8] = {};
	void *head = BPF_CORE_READ(skb, head);
	__u64 print = (__u64)head;

	bpf_probe_read_kernel(words, sizeof(words), head + BPF_CORE_READ(skb, network_header));
	for (int i = 0; i < LK_PRINT_BYTES / 8; i++)
		print = (print ^ words[i]) * 0x100000001b3ULL;
	if (dscp)
		*dscp = lk_dscp_of(skb, (const __u8 *)words);
	return print;
}

/* The DSCP alone (lk_dscp_of), for a packet whose headers were not read otherwise. */
static __always_inline __u32 lk_dscp(struct sk_buff *skb)
{
	__u8 l3[2] = {};
	void *head = BPF_CORE_READ(skb, head);

	bpf_probe_read_kernel(l3, sizeof(l3), head + BPF_CORE_READ(skb, network_header));
	return lk_dscp_of(skb, l3);
}

/* The lk_job_* index of a DSCP at the port of counter index idx (slot * LK_NR_LANES + lane). */
static __always_inline __u32 lk_job_index(__u32 idx, __u32 dscp)
{
	return idx / LK_NR_LANES * LK_NR_DSCP + dscp;
}

static __always_inline void lk_add(void *counters, __u32 idx, __u64 packets, __u64 bytes)
{
	struct lk_lane_counters *c = bpf_map_lookup_elem(counters, &idx);

	if (c) {
		c->packets += packets;
		c->bytes += bytes;
	}
}

/* Count skb at idx of counters (its lane's) and, when it is IPv4, at its DSCP's index of
 * jobs: segments and bytes read once for both. */
static __always_inline void lk_count(void *counters, void *jobs, __u32 idx, __u32 dscp,
				     struct sk_buff *skb)
{
	__u64 segments = lk_segments(skb), len = BPF_CORE_READ(skb, len);

	lk_add(counters, idx, segments, len);
	if (dscp < LK_NR_DSCP)
		lk_add(jobs, lk_job_index(idx, dscp), segments, len);
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(lk_qdisc_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	struct lk_inflight in = {};
	__u64 addr = (__u64)skb;
	int idx = lk_index(BPF_CORE_READ(txq, dev), skb);

	if (idx < 0)
		return 0;
	in.t_ns = bpf_ktime_get_ns();
	in.print = lk_fingerprint(skb, &in.dscp);
	in.idx = idx;
	lk_count(&lk_enqueued, &lk_job_enqueued, idx, in.dscp, skb);
	bpf_map_update_elem(&lk_inflight, &addr, &in, BPF_ANY);
	return 0;
}

/* One dequeued skb, by its address, in a global function: the verifier checks it once,
 * apart, not once for each skb of a bulk dequeue (inlined, the program took 75,580
 * instructions to verify, 80 ms at each load; now about 5,000). A global function takes
 * no kernel pointer, only numbers: so lk_qdisc_dequeue is a raw tracepoint, whose
 * arguments are numbers, and every read of the kernel's structs is a CO-RE probe read
 * (BPF_CORE_READ, or bpf_probe_read_kernel of a __builtin_preserve_access_index address). */
__noinline int lk_dequeued(__u64 addr, __u64 now)
{
	struct sk_buff *skb = (struct sk_buff *)addr;
	struct lk_event ev = { .kind = LK_EV_SOJOURN };
	__u8 head[LK_STAMP_PROBE] = {};
	struct lk_inflight *in;
	struct lk_stamp stamp;
	__u64 sojourn;
	void *l3;

	in = bpf_map_lookup_elem(&lk_inflight, &addr);
	if (!in)
		return 0;
	if (in->print != lk_fingerprint(skb, NULL)) {
		/* a stale entry: this packet's enqueue was not seen; count it, time nothing */
		__u32 unpaired = LK_LOST_UNPAIRED;
		__u64 *n = bpf_map_lookup_elem(&lk_lost, &unpaired);

		if (n)
			(*n)++;
		bpf_map_delete_elem(&lk_inflight, &addr);
		return 0;
	}
	sojourn = now - in->t_ns;
	ev.value_ns = sojourn;
	ev.where = in->idx / LK_NR_LANES;
	ev.lane = in->idx % LK_NR_LANES;
	lk_hist_add(&lk_sojourn_hist, in->idx, sojourn);
	if (in->dscp < LK_NR_DSCP)
		lk_hist_add(&lk_job_sojourn_hist, lk_job_index(in->idx, in->dscp), sojourn);
	bpf_map_delete_elem(&lk_inflight, &addr);
	ev.t_ns = now;
	ev.len = BPF_CORE_READ(skb, len);
	l3 = BPF_CORE_READ(skb, head) + BPF_CORE_READ(skb, network_header);
	if (bpf_probe_read_kernel(head, sizeof(head), l3) == 0 && lk_stamp_of(head, &stamp) == 0) {
		ev.stamp_ns = stamp.t_ns;
		ev.seq = stamp.seq;
	}
	lk_sample(&ev);
	return 0;
}

/* The gap since the port's previous dequeue, sampled when that dequeue took one packet,
 * packets were waiting all along, and no dequeue in between went unseen (the qdisc's byte
 * counter grew by exactly this packet: the tracepoint programs miss a few softirq hits,
 * see the top; a packet dequeued again after a requeue does not move it either). */
static __always_inline void lk_gap(struct Qdisc *q, struct sk_buff *skb, int idx, int packets,
				   __u64 now)
{
	struct qdisc_skb_cb cb;
	struct lk_port_clock *c;
	__u32 slot = idx / LK_NR_LANES;
	__u64 sent = 0;

	c = bpf_map_lookup_elem(&lk_port_clock, &slot);
	if (!c || bpf_probe_read_kernel(&cb, sizeof(cb), __builtin_preserve_access_index(&skb->cb)) ||
	    bpf_probe_read_kernel(&sent, sizeof(sent), __builtin_preserve_access_index(
					   &q->bstats.bytes)))
		return;
	if (packets == 1 && c->t_ns && c->queued && c->len && sent - c->sent == cb.pkt_len &&
	    now - c->t_ns < 0xffffffffULL) {
		struct lk_event ev = { .kind = LK_EV_GAP, .t_ns = now, .value_ns = now - c->t_ns,
				       .len = c->len, .where = slot,
				       .stamp_ns = c->sent - c->len - c->busy };

		lk_sample_counted(&ev, LK_SEEN_GAPS);
	}
	if (!c->t_ns)  /* the first dequeue seen: its busy period starts with it */
		c->busy = sent - cb.pkt_len;
	else if (!c->queued)  /* the queue was empty: a busy period starts after it */
		c->busy = c->sent;
	c->t_ns = now;
	c->sent = sent;
	c->len = packets == 1 ? cb.pkt_len : 0; /* a bulk dequeue's length is not known */
	c->queued = BPF_CORE_READ(q, q.qlen);
}

SEC("raw_tp/qdisc_dequeue")
int BPF_PROG(lk_qdisc_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets,
	     struct sk_buff *skb)
{
	__u64 now = bpf_ktime_get_ns();
	int idx;

	if (!skb)
		return 0;
	idx = lk_index(BPF_CORE_READ(txq, dev), skb);
	if (idx >= 0)
		lk_gap(q, skb, idx, packets, now);
	for (int i = 0; i < LK_DEQUEUE_BATCH && skb && i < packets; i++) {
		lk_dequeued((__u64)skb, now);
		skb = BPF_CORE_READ(skb, next);
	}
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(lk_qdisc_drop, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	int idx;

	if (reason < bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_QDISC_DROP) ||
	    reason > bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_FQ_FLOW_LIMIT))
		return 0;
	idx = lk_index(BPF_CORE_READ(skb, dev), skb);
	if (idx >= 0)
		lk_count(&lk_dropped, &lk_job_dropped, idx, lk_dscp(skb), skb);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
