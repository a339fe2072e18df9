/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A host's job phase (struct lk_job_phase): the window in which the job on the host
 * communicates. The valve (valve.bpf.c) reads it; the job writes it (labkit's ranks,
 * labkit/torch.py), and so does the job marker (jobmark.bpf.c), which shares the
 * valve's map on a held host.
 */
#ifndef __LABKIT_PHASE_H
#define __LABKIT_PHASE_H

#include "labkit.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lk_job_phase);
} lk_phase SEC(".maps");

#endif /* __LABKIT_PHASE_H */
