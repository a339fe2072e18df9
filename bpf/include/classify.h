/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What every lane classifier does once it has chosen a lane: the lane's skb->priority
 * (its HTB class) and the per-lane counters labkit reads. Shared by the built-in
 * classifier and any user's own (docs/examples/classifier.bpf.c): labkit checks that a
 * classifier object defines lk_lane_stats as here. Include lanes.h first.
 */
#ifndef __LABKIT_CLASSIFY_H
#define __LABKIT_CLASSIFY_H

#include "labkit.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_NR_LANES);
	__type(key, __u32);
	__type(value, struct lk_lane_counters);
} lk_lane_stats SEC(".maps");

/* Put the packet in ``lane`` (anything but vip or low is normal), count it; the verdict. */
static __always_inline int lk_sort(struct __sk_buff *skb,
				   const struct lk_classifier_config *cfg, __u32 lane)
{
	struct lk_lane_counters *counters;

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

#endif /* __LABKIT_CLASSIFY_H */
