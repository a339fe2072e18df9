/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Shared pieces of labkit's telemetry programs: the event ring buffer and its
 * sampling, log2 histograms, and reading a sender's stamp out of a RoCEv2 packet.
 *
 * Programs in different objects share lk_events, lk_telemetry and lk_lost by
 * map reuse (labkit/kernel/telemetry.py), so one reader sees every event.
 */
#ifndef __LABKIT_TELEMETRY_H
#define __LABKIT_TELEMETRY_H

#include "labkit.h"

/* IPv4 without options + UDP + BTH + RETH + stamp: where a stamp can end. */
#define LK_STAMP_PROBE (20 + 8 + 12 + 16 + 16)

#define LK_EVENTS_BYTES (1 << 22)
#define LK_WAKE_BYTES (LK_EVENTS_BYTES / 4)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, LK_EVENTS_BYTES);
} lk_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lk_telemetry_config);
} lk_telemetry SEC(".maps");

/* lk_lost's slots (labkit.model.abi mirrors them) */
enum lk_lost_slot {
	LK_LOST_EVENTS = 0,   /* events lost because the ring buffer was full */
	LK_SEEN_PACKETS = 1,  /* packets considered for sampling */
	LK_LOST_UNPAIRED = 2, /* dequeues whose enqueue was not seen (no sojourn taken) */
	LK_SEEN_GAPS = 3,     /* dequeue gaps considered for sampling (counted apart, so that
			       * they and the packets are each sampled one in sample_every) */
	LK_NR_LOST = 4,
};
_Static_assert(LK_LOST_EVENTS == 0, "lk_sample_counted() counts lost events with key zero");
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LK_NR_LOST);
	__type(key, __u32);
	__type(value, __u64);
} lk_lost SEC(".maps");

static __always_inline __u32 lk_log2(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r < LK_HIST_BUCKETS ? r : LK_HIST_BUCKETS - 1;
}

static __always_inline void lk_hist_add(void *hists, __u32 idx, __u64 value_ns)
{
	struct lk_hist *h = bpf_map_lookup_elem(hists, &idx);
	__u32 b = lk_log2(value_ns);

	if (h && b < LK_HIST_BUCKETS)
		h->buckets[b]++;
}

/* Which packets a probe samples: a stamped packet's seq, mixed (Fibonacci hashing) so that
 * packets seen in steps of a GSO run (a probe sees a run's first packet only) are still
 * sampled one in sample_every, whatever the run length. */
static __always_inline __u32 lk_pick(__u64 seq)
{
	return (__u32)((seq * 0x9E3779B97F4A7C15ULL) >> 40);
}

/*
 * Send one event in sample_every to userspace; lost events are counted. A stamped
 * packet is chosen by its seq, so every probe picks the same packets and their
 * records join; other events by a per-CPU count of their kind (counter: LK_SEEN_*).
 */
static __always_inline void lk_sample_counted(const struct lk_event *ev, __u32 counter)
{
	struct lk_telemetry_config *cfg;
	__u32 zero = 0; /* also LK_LOST_EVENTS: one key on the stack (a second one moved the
			  * callers' buffers off 8-byte alignment and the verifier refused them) */
	__u64 *seen, *lost;
	struct lk_event *out;

	cfg = bpf_map_lookup_elem(&lk_telemetry, &zero);
	seen = bpf_map_lookup_elem(&lk_lost, &counter);
	if (!cfg || !seen || !cfg->sample_every)
		return;
	(*seen)++;
	if (lk_pick(ev->seq ? ev->seq : *seen) % cfg->sample_every)
		return;
	out = bpf_ringbuf_reserve(&lk_events, sizeof(*out), 0);
	if (!out) {
		lost = bpf_map_lookup_elem(&lk_lost, &zero); /* LK_LOST_EVENTS */
		if (lost)
			(*lost)++;
		return;
	}
	*out = *ev;
	/* No wakeup per record: the reader drains the ring every READ_MS (labkit/kernel/telemetry.py) anyway, and a
	 * wakeup is an interrupt to another CPU (a VM exit on a VM) inside the datapath. Only
	 * a ring filling up wakes it early. */
	bpf_ringbuf_submit(out, bpf_ringbuf_query(&lk_events, BPF_RB_AVAIL_DATA) > LK_WAKE_BYTES ?
			   BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

static __always_inline void lk_sample(const struct lk_event *ev)
{
	lk_sample_counted(ev, LK_SEEN_PACKETS);
}

/*
 * The sender's stamp in a RoCEv2 RDMA WRITE packet whose first LK_STAMP_PROBE
 * bytes from the IPv4 header are in b; 0 when there is none.
 */
static __always_inline int lk_stamp_of(const __u8 *b, struct lk_stamp *out)
{
	const struct lk_stamp *s;
	__u8 opcode;

	if (b[0] != 0x45 || b[9] != IPPROTO_UDP || b[22] != 0x12 || b[23] != 0xb7) /* 4791 */
		return -1;
	opcode = b[28];
	if (opcode == 0x06 || opcode == 0x0a)      /* FIRST, ONLY: a RETH precedes the data */
		s = (const void *)(b + 20 + 8 + 12 + 16);
	else if (opcode == 0x07 || opcode == 0x08) /* MIDDLE, LAST */
		s = (const void *)(b + 20 + 8 + 12);
	else
		return -1;
	if (s->magic != LK_STAMP_MAGIC)
		return -1;
	*out = *s;
	return 0;
}

#endif /* __LABKIT_TELEMETRY_H */
