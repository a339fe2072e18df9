/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Structs and enums shared between labkit's eBPF programs and its Python side.
 *
 * Fixed-width types only: labkit/model/abi.py mirrors these with ctypes, and
 * tests/tier1/test_abi.py checks the mirror against the BTF of the built objects.
 */
#ifndef __LABKIT_H
#define __LABKIT_H

/* Traffic lanes, most urgent first. Each lane maps onto one HTB class. */
enum lk_lane {
	LK_LANE_VIP = 0,     /* collectives (RoCEv2, named DSCP) */
	LK_LANE_NORMAL = 1,  /* everything no rule claims */
	LK_LANE_LOW = 2,     /* storage */
	LK_NR_LANES = 3,
};

/* The minor of a lane's skb->priority (HTB class 1:10, 1:20, 1:30; labkit/kernel/tc.py). */
#define LK_LANE_MINOR(lane) (0x10 * ((lane) + 1))

#define LK_MAX_RULES 32

/*
 * The packet key that rules match against (built by lk_parse() in parse.h):
 *   bits  0-15 destination port      bits 16-31 source port
 *   bits 32-39 L4 protocol           bits 40-45 DSCP
 *   bit  46    an IP header parsed   bit  47    the ports are valid
 *   bit  48    UDP to 4791 with room for a version-0 RoCEv2 BTH
 */
#define LK_KEY_SPORT_SHIFT 16
#define LK_KEY_PROTO_SHIFT 32
#define LK_KEY_DSCP_SHIFT 40
#define LK_KEY_L3 (1ULL << 46)
#define LK_KEY_PORTS (1ULL << 47)
#define LK_KEY_BTH (1ULL << 48)

/* One classifier rule: it matches when (key & mask) == value, or, with
 * either_port, when the key with its ports swapped does. Rules are tried in
 * order; the first match decides the lane. */
struct lk_rule {
	__u64 mask;
	__u64 value;
	__u32 lane;        /* enum lk_lane */
	__u32 either_port; /* the destination-port bits may match the source port */
};

/* The classifier's whole configuration: one element of lk_config. */
struct lk_classifier_config {
	__u32 lane_priority[LK_NR_LANES]; /* skb->priority per lane: the HTB class id */
	__u32 default_lane;
	__u32 nr_rules;
	struct lk_rule rules[LK_MAX_RULES];
};

/* Per-lane counters (per-CPU; userspace sums the CPUs). */
struct lk_lane_counters {
	__u64 packets;
	__u64 bytes;
};

/* A watched port, as the kernel names it: its namespace's inode and ifindex. */
#define LK_MAX_PORTS 16
struct lk_port_key {
	__u32 netns_ino;
	__u32 ifindex;
};

/* The DSCPs (0..63) of IPv4 packets: the queue probe counts and times each apart per
 * watched port (several training jobs, each marking its packets with a DSCP of its own). */
#define LK_NR_DSCP 64

/* Latency histograms: bucket b counts values in [2^b, 2^(b+1)) nanoseconds. */
#define LK_HIST_BUCKETS 32
struct lk_hist {
	__u64 buckets[LK_HIST_BUCKETS];
};

/* What a sender writes at the start of an RDMA WRITE payload (host byte order:
 * sender and receiver share the machine). t_ns is CLOCK_MONOTONIC, the clock of
 * bpf_ktime_get_ns(); seq carries the sender's rank in its top byte. */
#define LK_STAMP_MAGIC 0x53544b4c /* "LKTS" in memory */
struct lk_stamp {
	__u32 magic;
	__u32 seq;
	__u64 t_ns;
};

/* A sampled per-packet record, sent to userspace through lk_events. */
enum lk_event_kind {
	LK_EV_SOJOURN = 1, /* time in a watched port's queue; where = port slot */
	LK_EV_LATENCY = 2, /* sender stamp to tc ingress at the receiver; where = 0 */
	LK_EV_GAP = 3,     /* two dequeues of a watched port with packets waiting between
			      them: value_ns = the gap, len = the first packet's length as
			      the qdisc counts it, stamp_ns = the bytes the port sent since
			      its queue was last empty, before that packet; where = slot */
};
struct lk_event {
	__u64 t_ns;     /* dequeue or arrival time */
	__u64 stamp_ns; /* the sender's stamp, 0 when the packet has none */
	__u32 value_ns; /* the sojourn or the one-way delay */
	__u32 len;
	__u16 where;
	__u8 lane;
	__u8 kind;
	__u32 seq;      /* the stamp's seq, 0 when none */
};

/* A watched port's last dequeue (queues.bpf.c), for the gap to the next one. Only
 * the port's root qdisc lock holder writes it: dequeues of one port are serial. */
struct lk_port_clock {
	__u64 t_ns;   /* when */
	__u64 sent;   /* the root qdisc's byte counter after it */
	__u64 busy;   /* the byte counter when the port's current busy period began */
	__u32 len;    /* the packet's length as the qdisc counts it (qdisc_pkt_len); 0
			 after a bulk dequeue */
	__u32 queued; /* packets left in the queue after it */
};

/* Run-time knobs of the telemetry programs (lk_telemetry, one element). */
struct lk_telemetry_config {
	__u32 sample_every; /* send one packet in this many to lk_events; 0: none */
	__u32 pad;
};

/*
 * The valve (valve.bpf.c): a rate per lane on a host's egress, a token bucket
 * that holds horizon_ns of the rate. Each lane keeps a virtual departure clock; a
 * packet's delay is how far that clock runs ahead of now. Past ce_threshold_ns an
 * ECN-capable packet is marked CE; a packet that would leave the clock more than
 * horizon_ns ahead is dropped. rate_bytes_per_s 0 leaves the lane open.
 */
struct lk_valve_lane {
	__u64 rate_bytes_per_s;
	__u64 ce_threshold_ns;
	__u64 horizon_ns;
	__u64 busy_rate_bytes_per_s; /* the rate while the job communicates; 0: rate */
};
struct lk_valve_config {
	struct lk_valve_lane lanes[LK_NR_LANES];
	__u32 one_clock; /* every lane on lane 0's clock: a port with one FIFO */
	__u32 vip_class; /* nonzero: a held NIC. vip packets get this skb->priority (an HTB
			    class), no other packet keeps it, and every other packet that
			    carries data is held to the low lane's setting */
	__u64 lead_ns;   /* the busy rate applies from this long before the job's window */
};

/* What the job tells its own host's valve (state-aware control): the valve uses
 * busy_rate_bytes_per_s while busy_from_ns <= now < busy_until_ns. */
struct lk_job_phase {
	__u64 busy_from_ns;
	__u64 busy_until_ns;
	__u64 bytes_left;  /* of the collective under way, for the record */
	__u32 phase;       /* enum lk_phase */
	__u32 flags;       /* LK_PHASE_CROSSES */
	/* the job marker's record of the job's data across a bottleneck from this host: */
	__u64 cross_start_ns; /* the first packet of the first burst since the job set it 0 */
	__u64 crossed_ns;     /* its latest packet */
};
/* The job marker has seen the job's packets from this host cross a bottleneck port. */
#define LK_PHASE_CROSSES 1
enum lk_phase {
	LK_PHASE_COMPUTE = 0,
	LK_PHASE_SOON = 1,        /* about to communicate */
	LK_PHASE_COMMUNICATE = 2,
};

/* Per-lane valve counters (per-CPU). */
struct lk_valve_counters {
	__u64 packets;
	__u64 bytes;
	__u64 ce_marked;
	__u64 dropped;
};

/*
 * Lossless queues (pause.bpf.c): router ports' leaf queues that pause their
 * neighbours. lk_pause_ports maps a port (struct lk_port_key) to the queue of each
 * lane, lk_pause_queues holds each queue's thresholds and state.
 */
#define LK_MAX_PAUSE_QUEUES 512
struct lk_pause_port {
	__u32 queue[LK_NR_LANES]; /* per lane: its queue's index + 1; 0: not lossless */
	__u32 pad;
};
struct lk_pause_queue {
	__u64 leaf;        /* the class's leaf qdisc (a TBF), found by the programs */
	__u64 episode;     /* pauses so far: an XON ends one (64-bit: clang 14 has 64-bit */
	__u64 paused;      /*   atomics only); paused: an XOFF was sent in this episode */
	__u32 classid;     /* the HTB class that holds the queue: 0x10010 is 1:10 */
	__u32 xoff_bytes;  /* at or above this backlog, the sender of each packet is paused */
	__u32 xon_bytes;   /* at or below it, after a pause, every paused sender resumes */
	__u32 pad;
};
/* lk_pause_held: (queue, ingress ifindex) -> the episode + 1 in which it was paused */
struct lk_pause_hold {
	__u32 queue;
	__u32 iif;
};
enum lk_pause_kind {
	LK_PAUSE_XOFF = 1, /* pause whoever sends into ingress port iif */
	LK_PAUSE_XON = 2,  /* resume everyone this queue paused */
};
struct lk_pause_event {
	__u64 t_ns;
	__u32 queue;
	__u32 iif;         /* XOFF: the ingress ifindex the packet came in by */
	__u32 episode;
	__u32 backlog;     /* the queue's bytes then */
	__u32 kind;        /* enum lk_pause_kind */
	__u32 pad;
};

/*
 * The job marker (jobmark.bpf.c): a tc egress program on a rank host's NIC that knows
 * the processes of the user's own program (kind: program) by their cgroup v2, whatever
 * ports they use, and writes the collectives' DSCP into every IPv4 packet they send.
 * It also cuts the job's traffic into bursts (a quiet gap ends one) and, while the job
 * sends across a bottleneck (to an address in lk_jobmark_far), keeps the host's
 * lk_job_phase "communicating" (state-aware control).
 */
struct lk_jobmark_config {
	__u64 cgroup_id; /* the rank's cgroup: its directory's inode in the cgroup2 tree */
	__u64 quiet_ns;  /* a burst ends when the job sends nothing for this long */
	__u64 hold_ns;   /* the phase stays "communicating" this long after a packet */
	__u32 level;     /* the cgroup's depth below the cgroup2 root (the root is 0) */
	__u32 dscp;      /* written into every IPv4 packet of the job; ECN bits are kept */
	__u64 open_bytes; /* a burst across a bottleneck opens the window from this many bytes */
};

/* One burst of the job's traffic out of a host's NIC: its first and last packet. */
struct lk_burst {
	__u64 start_ns;
	__u64 end_ns;
	__u64 bytes;
	__u64 packets;
};
#define LK_MAX_BURSTS 4096 /* per host and policy; more are counted, not kept */

/* One window of a lk_dctcp sender (dctcp.bpf.c), as it ends. */
struct lk_dctcp_sample {
	__u64 t_ns;
	__u32 saddr;  /* network order */
	__u32 daddr;
	__u16 sport;  /* host order */
	__u16 dport;
	__u32 alpha;  /* x 1024 */
	__u32 cwnd;   /* packets */
	__u32 acked;  /* the window's bytes ... */
	__u32 marked; /* ... and those acknowledged with ECE */
	__u32 pad;
};

#endif /* __LABKIT_H */
