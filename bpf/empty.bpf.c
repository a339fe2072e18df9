// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The baseline for overhead measurements: a tc program that does nothing. */
#include "tc_types.h"
#include <bpf/bpf_helpers.h>

SEC("tc")
int lk_empty(struct __sk_buff *skb)
{
	return 0; /* TC_ACT_OK */
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
