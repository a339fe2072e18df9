/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Structs and enums shared between labkit's eBPF programs and its Python side.
 *
 * Fixed-width types only: labkit/lanes.py mirrors these with ctypes, and
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

/* The minor of a lane's skb->priority (HTB class 1:10, 1:20, 1:30; labkit/tc.py). */
#define LK_LANE_MINOR(lane) (0x10 * ((lane) + 1))

#define LK_MAX_RULES 32
#define LK_ANY_DSCP 0xff

enum lk_rule_flags {
	LK_RULE_REQUIRE_BTH = 1, /* UDP payload must start with a RoCEv2 base transport header */
};

/* One classifier rule. A packet matches when every field that is set matches;
 * rules are tried in order and the first match decides the lane. Ports are in
 * host byte order; 0 means "any". */
struct lk_rule {
	__u8 proto;  /* IPPROTO_TCP, IPPROTO_UDP, or 0 for any */
	__u8 dscp;   /* 0..63, or LK_ANY_DSCP */
	__u8 flags;  /* enum lk_rule_flags */
	__u8 lane;   /* enum lk_lane */
	__u16 sport;
	__u16 dport;
	__u16 port;  /* matches either the source or the destination port */
	__u16 pad;
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

#endif /* __LABKIT_H */
