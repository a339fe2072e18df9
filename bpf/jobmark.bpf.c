// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * labkit's job marker: a tc (clsact egress) program on a rank host's NIC that tells
 * the packets of the user's own program (a scenario's kind: program) from everything
 * else on the host without the program's cooperation: by the cgroup v2 of the socket
 * that sent them (bpf_skb_ancestor_cgroup_id), whatever ports and protocol it uses.
 *
 * Every such IPv4 packet gets the collectives' DSCP (lk_jobmark_config.dscp, its ECN
 * bits kept, the header checksum fixed), so the lane rules that read DSCP put it in
 * the vip lane everywhere after: at the host's own gate, at every router port, in the
 * lane counters and the queue probes. Packets that no full socket sent (a listener's
 * SYN-ACK, a TIME-WAIT acknowledgement) carry no cgroup and are left as they are.
 *
 * The same pass keeps two records of the packets that carry data (a bare TCP
 * acknowledgement says nothing of when the job communicates), in the kernel, with no
 * userspace on the path:
 * - bursts of the job's traffic: a burst ends when the job sent nothing for quiet_ns;
 *   each ended burst goes to lk_job_bursts (the one under way stays in lk_job_state);
 * - the host's job phase (lk_phase, the valve's map when the host is held): while the
 *   job sends to a destination whose path crosses a bottleneck port (lk_jobmark_far,
 *   filled from the topology), its window is open until hold_ns after its latest such
 *   packet, and the phase says when the first such burst since the job cleared
 *   cross_start_ns began (labkit/torch.py clears it as each step starts) and when
 *   the latest such packet left (crossed_ns): what the job's forecasts are learned from;
 *   so the host's gate and the state-aware relay see the job contend as it happens,
 *   and only then. A window the job announced for later (labkit/torch.py, as a step
 *   ends) opens when the job said, or at a new burst if that comes first; the last
 *   sends of the step before do not open it. A burst across counts from its first
 *   open_bytes: a framework's handshake before a collective (gloo's receivers tell
 *   their peers they are ready, a few hundred bytes each, while the slowest rank still
 *   computes) opens nothing; on pytorch-ddp.yaml those came up to 50 ms before the data
 *   and held storage back for nothing.
 *
 * It never drops and never reorders: TC_ACT_UNSPEC hands each packet on to the next
 * filter (the valve) unchanged but for its DSCP.
 */
#include "tc_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "labkit.h"
#include "parse.h"
#include "phase.h" /* the valve's lk_phase when the host is held (a reused map) */

#define TC_ACT_UNSPEC (-1)
#define IP_TOS_OFF (ETH_HLEN + 1)
#define IP_CSUM_OFF (ETH_HLEN + 10)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lk_jobmark_config);
} lk_jobmark_cfg SEC(".maps");

/* the job's packets and bytes out of this NIC (per CPU) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lk_lane_counters);
} lk_jobmark_stats SEC(".maps");

struct lk_job_state {
	struct bpf_spin_lock lock;
	__u32 ended;          /* bursts ended so far (those past LK_MAX_BURSTS are lost) */
	struct lk_burst open; /* the burst under way; packets 0: none yet */
	__u64 cross_bytes;    /* of the burst across a bottleneck under way (no lock: a count) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lk_job_state);
} lk_job_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LK_MAX_BURSTS);
	__type(key, __u32);
	__type(value, struct lk_burst);
} lk_job_bursts SEC(".maps");

/* destinations (IPv4, network order) whose path from this host crosses a bottleneck */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} lk_jobmark_far SEC(".maps");

/* Write dscp into an IPv4 packet's TOS byte, ECN bits kept, and fix its checksum
 * (data, data_end: the packet's, as last read). */
static __always_inline void lk_set_dscp(struct __sk_buff *skb, void *data, void *data_end,
					__u32 dscp)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	__be16 old_word, new_word;
	__u8 tos;

	if (data + ETH_HLEN + sizeof(*ip) > data_end)
		return;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->version != 4)
		return;
	tos = (dscp << 2) | (ip->tos & 0x3);
	if (tos == ip->tos)
		return;
	old_word = *(__be16 *)ip;  /* version/IHL and TOS: the checksum's first word */
	new_word = bpf_htons((bpf_ntohs(old_word) & 0xff00) | tos);
	bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_word, new_word, sizeof(new_word));
	bpf_skb_store_bytes(skb, IP_TOS_OFF, &tos, sizeof(tos), 0);
}

/* Count the packet into the burst under way, or end that burst and start one. */
static __always_inline void lk_burst(const struct lk_jobmark_config *cfg, __u64 now,
				     __u32 len, __u32 segs)
{
	struct lk_job_state *st;
	struct lk_burst done, *slot;
	__u32 zero = 0, index = 0;
	int ended = 0;

	st = bpf_map_lookup_elem(&lk_job_state, &zero);
	if (!st)
		return;
	bpf_spin_lock(&st->lock);
	/* another CPU may have taken a later time and the lock first: never count back */
	if (st->open.packets && now > st->open.end_ns && now - st->open.end_ns > cfg->quiet_ns) {
		done = st->open;
		index = st->ended++;
		ended = 1;
		st->open.packets = 0;
		st->open.bytes = 0;
	}
	if (!st->open.packets)
		st->open.start_ns = now;
	if (now > st->open.end_ns)
		st->open.end_ns = now;
	st->open.packets += segs;
	st->open.bytes += len;
	bpf_spin_unlock(&st->lock);
	if (ended && (slot = bpf_map_lookup_elem(&lk_job_bursts, &index)))
		*slot = done;
}

/* The job sends len bytes of data across a bottleneck now. Once the burst under way has
 * carried open_bytes, its window is open now, until hold_ns from now at least. A window
 * the job announced for later stays as announced while the burst under way goes on (a
 * step's last sends, after the job announced the next step); a new burst opens it as it
 * reaches open_bytes: the traffic knows better than the forecast. */
static __always_inline void lk_communicating(const struct lk_jobmark_config *cfg, __u64 now,
					     __u32 len)
{
	struct lk_job_phase *p;
	struct lk_job_state *st;
	__u32 zero = 0;
	__u64 before;
	int counts_now;

	p = bpf_map_lookup_elem(&lk_phase, &zero);
	st = bpf_map_lookup_elem(&lk_job_state, &zero);
	if (!p || !st)
		return;
	before = now > p->crossed_ns + cfg->quiet_ns ? 0 : st->cross_bytes; /* 0: a new burst */
	st->cross_bytes = before + len;
	if (now > p->crossed_ns)
		p->crossed_ns = now;
	p->flags |= LK_PHASE_CROSSES;
	if (before + len < cfg->open_bytes)
		return; /* a handshake's few bytes, so far */
	counts_now = before < cfg->open_bytes; /* this packet makes the burst one that counts */
	if (counts_now && !p->cross_start_ns)
		p->cross_start_ns = now; /* the first burst since the job last cleared it */
	if (p->busy_from_ns > now && !counts_now)
		return;
	if (p->busy_from_ns > now || now >= p->busy_until_ns)
		p->busy_from_ns = now;
	if (p->busy_until_ns < now + cfg->hold_ns)
		p->busy_until_ns = now + cfg->hold_ns;
	p->phase = LK_PHASE_COMMUNICATE;
}

/* Whether an IPv4 packet goes where its path crosses a bottleneck port. */
static __always_inline int lk_crosses(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	__u32 daddr;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	daddr = ip->daddr;
	return bpf_map_lookup_elem(&lk_jobmark_far, &daddr) != NULL;
}

SEC("tc")
int lk_jobmark(struct __sk_buff *skb)
{
	const struct lk_jobmark_config *cfg;
	struct lk_lane_counters *stats;
	void *data, *data_end;
	__u32 zero = 0, segs;
	__u64 now;

	cfg = bpf_map_lookup_elem(&lk_jobmark_cfg, &zero);
	if (!cfg || !cfg->cgroup_id)
		return TC_ACT_UNSPEC;
	if (bpf_skb_ancestor_cgroup_id(skb, cfg->level) != cfg->cgroup_id)
		return TC_ACT_UNSPEC;
	segs = skb->gso_segs ? skb->gso_segs : 1; /* wire packets */
	stats = bpf_map_lookup_elem(&lk_jobmark_stats, &zero);
	if (stats) {
		stats->packets += segs;
		stats->bytes += skb->len;
	}
	LK_PULL_HEADERS(skb, data, data_end);
	if (!lk_bare_tcp(data, data_end, skb->len)) {
		now = bpf_ktime_get_ns();
		lk_burst(cfg, now, skb->len, segs);
		if (lk_crosses(data, data_end))
			lk_communicating(cfg, now, skb->len);
	}
	lk_set_dscp(skb, data, data_end, cfg->dscp);
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
