// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * labkit's valve: a tc (clsact egress) program on a host's NIC that holds each
 * lane to the rate in lk_valve: a token bucket of horizon_ns at the rate, kept as
 * a virtual departure clock. A packet that finds the clock more than
 * ce_threshold_ns ahead is marked CE if it is ECN-capable; one that would leave it
 * more than horizon_ns ahead is dropped. Nothing is delayed: this kernel has no fq
 * for departure-time pacing.
 *
 * On a controlled host's NIC (held layout, labkit/kernel/tc.py; vip_class set) it is the
 * host's gate. vip packets go to their strict-priority HTB class; every other
 * packet that carries data, whoever sent it, is held to the low lane's setting
 * on one clock. A packet over it is dropped right here, before any queue, so the
 * sender's own stack is told (NET_XMIT_DROP): TCP keeps the segment, sends it
 * later and counts nothing as lost. TCP segments without data (acknowledgements,
 * SYN, FIN) are never held and skip the held queue (the vip class): they carry
 * the flows *towards* this host. When the gate opens, labkit/kernel/gates.py
 * wakes the host's TCP senders (wake.bpf.c).
 *
 * On a fabric port the same program, at the port's rate with one clock for all
 * lanes (one_clock), follows the port's FIFO queue exactly as long as the port
 * sends at its rate, and marks CE past a DCTCP-style threshold K in sojourn.
 *
 * The lane comes from the classifier's rules (lanes.h, the shared lk_config).
 * While the job on this host says it communicates (lk_phase, written by the job
 * itself or relayed to a storage host), from lead_ns before its window, a lane
 * runs at its busy rate; before that, it accepts no packet that would still be
 * leaving at its rate lead_ns before the window. Rates change by rewriting
 * lk_valve; nothing is reloaded.
 */
#include "tc_types.h"
#include <bpf/bpf_helpers.h>
#include "labkit.h"
#include "parse.h"
#include "lanes.h"
#include "phase.h"

#define TC_ACT_UNSPEC (-1)
#define NSEC_PER_SEC 1000000000ULL

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lk_valve_config);
} lk_valve SEC(".maps");

struct lk_valve_clock {
	struct bpf_spin_lock lock;
	__u64 next_ns; /* when the lane's last accepted byte leaves, at its rate */
	__u64 rate;    /* the rate next_ns was counted at */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LK_NR_LANES);
	__type(key, __u32);
	__type(value, struct lk_valve_clock);
} lk_valve_clock SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_NR_LANES);
	__type(key, __u32);
	__type(value, struct lk_valve_counters);
} lk_valve_stats SEC(".maps");

SEC("tc")
int lk_valve_egress(struct __sk_buff *skb)
{
	const struct lk_classifier_config *rules;
	const struct lk_valve_config *cfg;
	const struct lk_valve_lane *lc;
	const struct lk_job_phase *phase;
	struct lk_valve_counters *stats;
	struct lk_valve_clock *clock;
	__u64 now, rate, cost, delay, next, close_at;
	__u32 zero = 0, lane, held;
	int fits;

	cfg = bpf_map_lookup_elem(&lk_valve, &zero);
	rules = bpf_map_lookup_elem(&lk_config, &zero);
	if (!cfg || !rules)
		return TC_ACT_UNSPEC;
	lane = lk_skb_lane(skb, rules);
	if (lane >= LK_NR_LANES)
		return TC_ACT_UNSPEC;
	stats = bpf_map_lookup_elem(&lk_valve_stats, &lane);
	if (!stats)
		return TC_ACT_UNSPEC;
	held = lane;
	if (cfg->vip_class) {
		if (lane == LK_LANE_VIP) {
			skb->priority = cfg->vip_class;
		} else if (lk_bare_tcp((void *)(long)skb->data, (void *)(long)skb->data_end,
				       skb->len)) {
			/* never held, and never behind held data: it carries a flow *to* this host */
			skb->priority = cfg->vip_class;
			goto pass;
		} else {
			if (skb->priority == cfg->vip_class)
				skb->priority = 0; /* the held class (HTB's default) */
			held = LK_LANE_LOW;
		}
	}
	clock = bpf_map_lookup_elem(&lk_valve_clock, cfg->one_clock ? &zero : &held);
	if (!clock)
		return TC_ACT_UNSPEC;

	/* constant indices only: the verifier then needs no bounds proof for the array */
	lc = held == LK_LANE_VIP ? &cfg->lanes[LK_LANE_VIP] :
	     held == LK_LANE_LOW ? &cfg->lanes[LK_LANE_LOW] : &cfg->lanes[LK_LANE_NORMAL];
	now = bpf_ktime_get_ns();
	rate = lc->rate_bytes_per_s;
	close_at = 0; /* a known window: what is accepted must have left by then */
	phase = bpf_map_lookup_elem(&lk_phase, &zero);
	if (phase && lc->busy_rate_bytes_per_s && now < phase->busy_until_ns) {
		if (now + cfg->lead_ns >= phase->busy_from_ns)
			rate = lc->busy_rate_bytes_per_s;
		else
			close_at = phase->busy_from_ns - cfg->lead_ns;
	}
	if (rate) {
		cost = (__u64)skb->len * NSEC_PER_SEC / rate;
		bpf_spin_lock(&clock->lock);
		next = clock->next_ns > now ? clock->next_ns : now;
		if (clock->rate != rate && next > now && clock->rate) {
			/* the same bytes at the new rate, but never more than a bucket: a hold
			 * sends what waits on at the link (labkit/kernel/gates.py) */
			next = (next - now) * clock->rate / rate;
			next = now + (next < lc->horizon_ns ? next : lc->horizon_ns);
		}
		clock->rate = rate;
		delay = next - now;
		fits = delay + cost <= lc->horizon_ns && (!close_at || next + cost <= close_at);
		if (fits)
			clock->next_ns = next + cost;
		bpf_spin_unlock(&clock->lock);
		if (!fits) {
			stats->dropped++;
			return TC_ACT_SHOT;
		}
		if (delay > lc->ce_threshold_ns && bpf_skb_ecn_set_ce(skb))
			stats->ce_marked++;
	} else if (clock->next_ns > now) {
		/* an open lane carries no debt into its next limited spell */
		bpf_spin_lock(&clock->lock);
		clock->next_ns = now;
		bpf_spin_unlock(&clock->lock);
	}
pass:
	stats->packets += skb->gso_segs ? skb->gso_segs : 1;
	stats->bytes += skb->len;
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
