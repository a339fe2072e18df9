// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * One-way latency at the receivers: a tc (clsact ingress) program on GPU hosts
 * that finds the sender's stamp in RoCEv2 RDMA WRITE packets and takes its age
 * with the kernel clock the sender read (CLOCK_MONOTONIC is shared by every
 * namespace of the machine). Per lane (the same rules as the classifier), into
 * a log2 histogram and, sampled, into the shared lk_events ring buffer.
 */
#include "tc_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "labkit.h"
#include "parse.h"
#include "lanes.h"
#include "telemetry.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_NR_LANES);
	__type(key, __u32);
	__type(value, struct lk_hist);
} lk_latency_hist SEC(".maps");

/* The packet's lane by the rules, in a global function: the verifier checks it once,
 * apart, and what follows it once, not once for each rule that could have matched
 * (inlined, the program took 89,783 instructions to verify; now about 4,300). */
__noinline __u32 lk_rule_lane(struct __sk_buff *skb, const struct lk_classifier_config *cfg)
{
	if (!cfg)
		return LK_LANE_NORMAL;
	return lk_match(cfg, lk_parse((void *)(long)skb->data, (void *)(long)skb->data_end));
}

SEC("tc")
int lk_latency(struct __sk_buff *skb)
{
	struct lk_event ev = { .kind = LK_EV_LATENCY };
	const struct lk_classifier_config *cfg;
	__u8 head[LK_STAMP_PROBE];
	__u64 now = bpf_ktime_get_ns();
	struct lk_stamp stamp;
	__u32 zero = 0, lane;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, head, sizeof(head)) || lk_stamp_of(head, &stamp))
		return TC_ACT_OK;
	if (stamp.t_ns > now)
		return TC_ACT_OK;
	cfg = bpf_map_lookup_elem(&lk_config, &zero);
	if (!cfg)
		return TC_ACT_OK;
	lane = lk_rule_lane(skb, cfg);
	lk_hist_add(&lk_latency_hist, lane, now - stamp.t_ns);
	ev.t_ns = now;
	ev.stamp_ns = stamp.t_ns;
	ev.seq = stamp.seq;
	ev.value_ns = now - stamp.t_ns;
	ev.len = skb->len;
	ev.lane = lane;
	lk_sample(&ev);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
