// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * labkit's lane classifier: a tc (clsact egress) program that sorts packets
 * into the vip / normal / low lanes by the rules in lk_config, sets
 * skb->priority to the lane's HTB class id, and counts packets and bytes per
 * lane. It never drops: the qdisc beneath it decides what waits.
 */
#include "tc_types.h"
#include <bpf/bpf_helpers.h>
#include "labkit.h"
#include "parse.h"
#include "lanes.h"
#include "classify.h"

SEC("tc")
int lk_classify(struct __sk_buff *skb)
{
	const struct lk_classifier_config *cfg;
	__u32 zero = 0;

	cfg = bpf_map_lookup_elem(&lk_config, &zero);
	if (!cfg)
		return TC_ACT_OK;
	return lk_sort(skb, cfg, lk_skb_lane(skb, cfg));
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
