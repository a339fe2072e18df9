// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * An example classifier: the scenario's lane rules, except that a packet the rules put
 * in the low lane goes to the normal lane when it is small (ACKs, NVMe/TCP response
 * capsules, commands): storage's control traffic then never waits behind storage's
 * bulk data. A rule cannot say this: rules see headers, not a packet's length.
 *
 * Name it in a scenario, and labkit compiles it with its own programs' flags and headers:
 *
 *     lanes:
 *       program: ../docs/examples/classifier.bpf.c
 *       vip: [{roce: true}]
 *       low: [{tcp_port: 4420}]
 *
 * What labkit needs of a classifier (checked before a run): a SEC("tc") program named
 * lk_classify; the lk_config map of lanes.h (the valves and the latency probe read the
 * same rules from it); and lk_lane_stats of classify.h, whose lk_sort() gives the lane's
 * HTB class and counts the packet where labkit reads lane figures.
 */
#include "tc_types.h" /* the kernel's types without CO-RE (it reads headers only): loads faster */
#include <bpf/bpf_helpers.h>
#include "labkit.h"
#include "parse.h"
#include "lanes.h"
#include "classify.h"

#define SMALL_BYTES 256 /* a frame this short carries no bulk data: ACKs, NVMe/TCP capsules */

SEC("tc")
int lk_classify(struct __sk_buff *skb)
{
	const struct lk_classifier_config *cfg;
	__u32 zero = 0, lane;

	cfg = bpf_map_lookup_elem(&lk_config, &zero);
	if (!cfg)
		return TC_ACT_OK;
	lane = lk_skb_lane(skb, cfg); /* the scenario's rules */
	if (lane == LK_LANE_LOW && skb->len <= SMALL_BYTES)
		lane = LK_LANE_NORMAL;
	return lk_sort(skb, cfg, lane); /* its class, and labkit's lane counters */
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
