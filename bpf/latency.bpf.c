// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * One-way latency at the receivers: a tc (clsact ingress) program on GPU hosts
 * that finds the sender's stamp in RoCEv2 RDMA WRITE packets and takes its age
 * with the kernel clock the sender read (CLOCK_MONOTONIC is shared by every
 * namespace of the machine). Per lane (the same rules as the classifier), into
 * a log2 histogram and, sampled, into the shared lk_events ring buffer.
 */
#include "vmlinux.h"
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
	lane = lk_match(cfg, lk_parse((void *)(long)skb->data, (void *)(long)skb->data_end));
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
