// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * labkit's lane classifier: a tc (clsact egress) program that sorts packets
 * into the vip / normal / low lanes by the rules in lk_config, sets
 * skb->priority to the lane's HTB class id, and counts packets and bytes per
 * lane. It never drops: the qdisc beneath it decides what waits.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "labkit.h"
#include "parse.h"
#include "lanes.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_NR_LANES);
	__type(key, __u32);
	__type(value, struct lk_lane_counters);
} lk_lane_stats SEC(".maps");

SEC("tc")
int lk_classify(struct __sk_buff *skb)
{
	const struct lk_classifier_config *cfg;
	struct lk_lane_counters *counters;
	__u32 zero = 0, lane;

	cfg = bpf_map_lookup_elem(&lk_config, &zero);
	if (!cfg)
		return TC_ACT_OK;

	lane = lk_skb_lane(skb, cfg);
	/* constant indices only: the verifier then needs no bounds proof for the array */
	if (lane == LK_LANE_VIP)
		skb->priority = cfg->lane_priority[LK_LANE_VIP];
	else if (lane == LK_LANE_LOW)
		skb->priority = cfg->lane_priority[LK_LANE_LOW];
	else
		lane = LK_LANE_NORMAL, skb->priority = cfg->lane_priority[LK_LANE_NORMAL];

	counters = bpf_map_lookup_elem(&lk_lane_stats, &lane);
	if (counters) {
		counters->packets += skb->gso_segs ? skb->gso_segs : 1; /* wire packets */
		counters->bytes += skb->len;
	}
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
