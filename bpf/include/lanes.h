/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The lane rules: the lk_config map the scenario fills and the first-match
 * lookup over it. Shared by the classifier (egress), the valve (egress) and the
 * latency probe (ingress), which reuse the classifier's map so all see the same rules.
 * Include parse.h first.
 */
#ifndef __LABKIT_LANES_H
#define __LABKIT_LANES_H

#include "labkit.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lk_classifier_config);
} lk_config SEC(".maps");

static __always_inline __u32 lk_match(const struct lk_classifier_config *cfg, __u64 key)
{
	/* the same key with source and destination ports swapped, for either-port rules */
	__u64 swapped = (key & ~0xffffffffULL) | (key & 0xffff) << LK_KEY_SPORT_SHIFT |
			(key >> LK_KEY_SPORT_SHIFT & 0xffff);

	for (__u32 i = 0; i < LK_MAX_RULES; i++) {
		const struct lk_rule *r = &cfg->rules[i];

		if (i >= cfg->nr_rules)
			break;
		if ((key & r->mask) == r->value ||
		    (r->either_port && (swapped & r->mask) == r->value))
			return r->lane;
	}
	return cfg->default_lane;
}

/* The lane of an egress skb (its headers pulled into the linear area first). */
static __always_inline __u32 lk_skb_lane(struct __sk_buff *skb,
					 const struct lk_classifier_config *cfg)
{
	void *data, *data_end;

	LK_PULL_HEADERS(skb, data, data_end);
	return lk_match(cfg, lk_parse(data, data_end));
}

#endif /* __LABKIT_LANES_H */
