// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Per-lane link-level pause, the half that decides: watches the lossless queues
 * of router ports as packets enter and leave them (qdisc_enqueue and
 * qdisc_dequeue tracepoints of the port's root HTB) and reads each queue's own
 * byte backlog from its leaf qdisc, found once through HTB's class hash.
 * (fentry/fexit on the TBF itself would be simpler; this kernel refuses them.)
 *
 *  - A packet whose enqueue brings its queue to xoff_bytes or more names the
 *    ingress port it came in by (skb_iif): one XOFF per ingress port and episode, so
 *    only the neighbours that fill the queue are paused, as a switch's
 *    per-ingress accounting would.
 *  - A dequeue that leaves it at or below xon_bytes after a pause ends the
 *    episode with one XON: every neighbour it paused resumes.
 *  - A watchdog timer, armed by each XOFF, looks at a paused queue every
 *    LK_PAUSE_WATCH_NS and ends the episode itself once the queue is empty. The
 *    kernel skips a tracing program that is already running on the CPU (a
 *    dequeue in softirq over one in a process), so the dequeue that should have
 *    sent the XON can go unseen; with every sender paused no packet comes after
 *    it, and the pause would hold for ever (seen: 4 s, to the end of a run). A
 *    PFC pause, too, expires unless it is refreshed.
 *
 * Events go to lk_pause_events with a wakeup each: the pauser
 * (labkit/kernel/pauser.py) acts on them at once, pausing or resuming the
 * neighbour's queue for that lane through netlink.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "labkit.h"

#define LK_HASH_CHAIN 8 /* classes tried per HTB hash bucket (a port has at most 5) */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LK_MAX_PAUSE_QUEUES);
	__type(key, struct lk_port_key);
	__type(value, struct lk_pause_port);
} lk_pause_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LK_MAX_PAUSE_QUEUES);
	__type(key, __u32);
	__type(value, struct lk_pause_queue);
} lk_pause_queues SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct lk_pause_hold);
	__type(value, __u32); /* episode + 1 */
} lk_pause_held SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} lk_pause_events SEC(".maps");

#define LK_PAUSE_WATCH_NS 2000000ULL /* how often the watchdog looks at a paused queue */
#define LK_CLOCK_MONOTONIC 1

/* lk_pause_watches: a paused queue's watchdog (kernel-only, by queue index) */
struct lk_pause_watch {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LK_MAX_PAUSE_QUEUES);
	__type(key, __u32);
	__type(value, struct lk_pause_watch);
} lk_pause_watches SEC(".maps");

/* [0]: events lost because the ring was full */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lk_pause_lost SEC(".maps");

/* The leaf qdisc of HTB class classid under root, by HTB's class hash
 * (qdisc_class_find() in include/net/sch_generic.h). */
static __always_inline __u64 lk_leaf_of(struct Qdisc *root, __u32 classid)
{
	struct htb_sched *htb = (void *)root + bpf_core_field_offset(struct Qdisc, privdata);
	struct hlist_head *buckets = BPF_CORE_READ(htb, clhash.hash);
	__u32 h = classid;
	struct hlist_node *node;

	h ^= h >> 8;
	h ^= h >> 4;
	h &= BPF_CORE_READ(htb, clhash.hashmask);
	node = BPF_CORE_READ(buckets + h, first);
	for (int i = 0; i < LK_HASH_CHAIN && node; i++) {
		struct htb_class *cl = container_of(node, struct htb_class, common.hnode);

		if (BPF_CORE_READ(cl, common.classid) == classid)
			return (__u64)BPF_CORE_READ(cl, leaf.q);
		node = BPF_CORE_READ(node, next);
	}
	return 0;
}

/* The lossless queue skb is in (or left) at dev, with its index; NULL if none. */
static __always_inline struct lk_pause_queue *lk_queue_of(struct Qdisc *root,
							   const struct netdev_queue *txq,
							   struct sk_buff *skb, __u32 *index)
{
	struct net_device *dev = BPF_CORE_READ(txq, dev);
	struct lk_port_key key = {
		.netns_ino = BPF_CORE_READ(dev, nd_net.net, ns.inum),
		.ifindex = BPF_CORE_READ(dev, ifindex),
	};
	struct lk_pause_port *port = bpf_map_lookup_elem(&lk_pause_ports, &key);
	struct lk_pause_queue *q;
	__u32 lane;

	if (!port)
		return NULL;
	switch (BPF_CORE_READ(skb, priority) & 0xffff) {
	case LK_LANE_MINOR(LK_LANE_VIP):
		lane = LK_LANE_VIP;
		break;
	case LK_LANE_MINOR(LK_LANE_LOW):
		lane = LK_LANE_LOW;
		break;
	default:
		lane = LK_LANE_NORMAL;
	}
	if (!port->queue[lane])
		return NULL;
	*index = port->queue[lane] - 1;
	q = bpf_map_lookup_elem(&lk_pause_queues, index);
	if (q && !q->leaf)
		q->leaf = lk_leaf_of(root, q->classid);
	return q && q->leaf ? q : NULL;
}

static __always_inline __u32 lk_backlog(const struct lk_pause_queue *q)
{
	struct Qdisc *leaf = (struct Qdisc *)q->leaf; /* outside the macro: not a kernel type */

	return BPF_CORE_READ(leaf, qstats.backlog);
}

/* A slot for one event in lk_pause_events, or NULL (counted as lost) when the ring is
 * full. Callers reserve before they change any state, so an event that cannot be sent
 * leaves the queue as it was and the next packet tries again. */
static __always_inline struct lk_pause_event *lk_pause_reserve(void)
{
	struct lk_pause_event *ev = bpf_ringbuf_reserve(&lk_pause_events, sizeof(*ev), 0);
	__u32 zero = 0;

	if (!ev) {
		__u64 *lost = bpf_map_lookup_elem(&lk_pause_lost, &zero);

		if (lost)
			(*lost)++;
	}
	return ev;
}

static __always_inline void lk_pause_send(struct lk_pause_event *ev, __u32 kind, __u32 index,
					  __u32 iif, __u32 episode, __u32 backlog)
{
	ev->t_ns = bpf_ktime_get_ns();
	ev->queue = index;
	ev->iif = iif;
	ev->episode = episode;
	ev->backlog = backlog;
	ev->kind = kind;
	ev->pad = 0;
	bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
}

/* The watchdog of queue *index: while it is paused, look again later; once it is empty,
 * end the episode with an XON (no packet is left to dequeue, so none can race it; an XOFF
 * needs xoff_bytes queued). */
static int lk_pause_watchdog(void *map, int *index, struct lk_pause_watch *watch)
{
	struct lk_pause_queue *q = bpf_map_lookup_elem(&lk_pause_queues, index);
	struct lk_pause_event *ev;

	if (!q || !q->leaf || !q->paused)
		return 0; /* a dequeue ended the episode: the watch ends with it */
	if (lk_backlog(q))
		goto later;
	ev = lk_pause_reserve();
	if (!ev)
		goto later;
	if (__sync_val_compare_and_swap(&q->paused, 1, 0) != 1) {
		bpf_ringbuf_discard(ev, 0); /* a dequeue ended it meanwhile */
		return 0;
	}
	lk_pause_send(ev, LK_PAUSE_XON, *index, 0, (__u32)__sync_fetch_and_add(&q->episode, 1), 0);
	return 0;
later:
	bpf_timer_start(&watch->timer, LK_PAUSE_WATCH_NS, 0);
	return 0;
}

static __always_inline void lk_pause_watch(__u32 index)
{
	struct lk_pause_watch *watch = bpf_map_lookup_elem(&lk_pause_watches, &index);

	if (!watch)
		return;
	bpf_timer_init(&watch->timer, &lk_pause_watches, LK_CLOCK_MONOTONIC); /* -EBUSY: done */
	bpf_timer_set_callback(&watch->timer, lk_pause_watchdog);
	bpf_timer_start(&watch->timer, LK_PAUSE_WATCH_NS, 0);
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(lk_pause_enqueue, struct Qdisc *root, const struct netdev_queue *txq,
	     struct sk_buff *skb)
{
	struct lk_pause_event *ev;
	struct lk_pause_hold hold;
	struct lk_pause_queue *q;
	__u32 backlog, episode, *held;

	q = lk_queue_of(root, txq, skb, &hold.queue);
	if (!q)
		return 0;
	backlog = lk_backlog(q);
	hold.iif = BPF_CORE_READ(skb, skb_iif);
	if (backlog < q->xoff_bytes || !hold.iif)
		return 0;
	episode = (__u32)q->episode + 1;
	held = bpf_map_lookup_elem(&lk_pause_held, &hold);
	if (held && *held == episode)
		return 0; /* this neighbour is paused already */
	ev = lk_pause_reserve();
	if (!ev)
		return 0;
	bpf_map_update_elem(&lk_pause_held, &hold, &episode, BPF_ANY);
	q->paused = 1;
	lk_pause_send(ev, LK_PAUSE_XOFF, hold.queue, hold.iif, episode - 1, backlog);
	lk_pause_watch(hold.queue);
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(lk_pause_dequeue, struct Qdisc *root, const struct netdev_queue *txq, int packets,
	     struct sk_buff *skb)
{
	struct lk_pause_event *ev;
	struct lk_pause_queue *q;
	__u32 backlog, index;

	if (!skb)
		return 0;
	q = lk_queue_of(root, txq, skb, &index);
	if (!q || !q->paused)
		return 0;
	backlog = lk_backlog(q);
	if (backlog > q->xon_bytes)
		return 0;
	ev = lk_pause_reserve();
	if (!ev)
		return 0; /* still paused: the next dequeue tries again */
	/* Enqueues and dequeues of one port run under its root qdisc's lock, so this cannot
	 * race in practice; the atomics keep it right should the kernel ever run them apart:
	 * the episode ends before the flag is cleared, so an XOFF in between counts in the
	 * next one. */
	if (!q->paused) {
		bpf_ringbuf_discard(ev, 0);
		return 0;
	}
	lk_pause_send(ev, LK_PAUSE_XON, index, 0, (__u32)__sync_fetch_and_add(&q->episode, 1),
		      backlog);
	__sync_lock_test_and_set(&q->paused, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
