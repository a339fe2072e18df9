// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A lossy link on purpose: a tc (clsact egress) program that drops each packet
 * with the probability in lk_loss (per million), and counts what it dropped.
 * It runs before the lane classifier and hands every packet it keeps on to it
 * (TC_ACT_UNSPEC), so a lab can show what loss costs a go-back-N transport.
 */
#include "tc_types.h"
#include <bpf/bpf_helpers.h>
#include "parse.h"

#define TC_ACT_UNSPEC (-1)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32); /* drop probability, per million */
} lk_loss SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lk_loss_drops SEC(".maps");

SEC("tc")
int lk_lossy(struct __sk_buff *skb)
{
	__u32 zero = 0, *per_million = bpf_map_lookup_elem(&lk_loss, &zero);
	__u64 *drops;

	if (!per_million || bpf_get_prandom_u32() % 1000000 >= *per_million)
		return TC_ACT_UNSPEC;
	drops = bpf_map_lookup_elem(&lk_loss_drops, &zero);
	if (drops)
		(*drops)++;
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
