// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * lk_dctcp: DCTCP (RFC 8257; Alizadeh et al., SIGCOMM 2010) as a BPF TCP congestion
 * control, registered for a run as struct_ops, and the cgroup sock_ops program that
 * picks it for the sockets of the hosts a scenario names.
 *
 * Sender: ECN is negotiated (TCP_CONG_NEEDS_ECN: the SYN asks for it and data leaves
 * ECT(0) whatever the namespace's tcp_ecn says). Per window of data (until snd_una
 * passes the snd_nxt of the window's start) it counts the bytes acknowledged and
 * those acknowledged with ECE, and updates alpha <- (1 - g) alpha + g F, g = 1/16,
 * F the marked fraction. On ECE the stack enters CWR once per window and asks
 * ssthresh(), which cuts cwnd by alpha/2. On a loss (fast recovery, or a timeout) it
 * halves as Reno does (RFC 8257 section 3.3); growth is Reno's. A connection whose
 * peer did not agree to ECN is Reno.
 *
 * Receiver: ECE echoes the CE state of the data exactly (RFC 8257 section 3.2): when
 * the state changes, a delayed ACK still owed for the old state leaves first, and the
 * next ACK is sent at once.
 *
 * Each window of data's end is published in lk_dctcp_samples (time, flow, alpha, cwnd, the
 * window's bytes and marked bytes) for labkit to read: alpha over time per flow.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "labkit.h"

#define SOL_TCP 6
#define TCP_CONGESTION 13
#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_OK 0x1		/* the connection negotiated ECN (RFC 3168 mode) */
#define TCP_ECN_DEMAND_CWR 0x4	/* the receiver sets ECE on its ACKs */
#define MAX_ALPHA 1024U		/* alpha 1.0 */
#define SHIFT_G 4		/* g = 1/16 */

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* the Reno pieces the kernel exports to BPF congestion controls */
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

struct lk_dctcp {		/* per socket, in icsk_ca_priv (at most 104 bytes) */
	__u32 alpha;		/* x MAX_ALPHA */
	__u32 window_end;	/* snd_nxt when the window began */
	__u32 prior_snd_una;
	__u32 acked;		/* bytes acknowledged in this window (a dupack: one MSS) */
	__u32 marked;		/* ... of them with ECE */
	__u32 delivered;	/* bytes snd_una advanced by in this window */
	__u32 loss_cwnd;
	__u32 ce_state;		/* receiver: the CE state of the last data packet */
	__u32 prior_rcv_nxt;	/* receiver: rcv_nxt when it was seen */
	__u32 started;		/* the first window has begun (sequence numbers are set) */
	__u32 receiving;	/* receiver: data has arrived (ce_state, prior_rcv_nxt are set) */
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} lk_dctcp_samples SEC(".maps");

/* the network namespaces (by cookie) whose TCP sockets use lk_dctcp */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} lk_dctcp_hosts SEC(".maps");

static __always_inline struct lk_dctcp *ca_of(struct sock *sk)
{
	return (void *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct tcp_sock *tcp_of(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline int before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

static __always_inline void new_window(struct tcp_sock *tp, struct lk_dctcp *ca)
{
	ca->window_end = tp->snd_nxt;
	ca->acked = 0;
	ca->marked = 0;
	ca->delivered = 0;
}

SEC("struct_ops")
void BPF_PROG(lk_dctcp_init, struct sock *sk)
{
	struct lk_dctcp *ca = ca_of(sk);

	ca->alpha = MAX_ALPHA; /* as Linux's DCTCP: cut by half at the first marks */
	ca->loss_cwnd = 0;
	/* chosen by lk_dctcp_select as the socket connects (or its listener as it starts to
	 * listen: an accepted socket inherits this state), this runs before the sequence
	 * numbers are set: the first window begins at the first ACK, the receiver's state at
	 * the first data */
	ca->started = 0;
	ca->receiving = 0;
}

SEC("struct_ops")
__u32 BPF_PROG(lk_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct lk_dctcp *ca = ca_of(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u32 cut = (__u32)(((__u64)cwnd * ca->alpha) >> 11); /* cwnd * alpha / 2 */

	ca->loss_cwnd = cwnd;
	if (!(tp->ecn_flags & TCP_ECN_OK))
		cut = cwnd >> 1; /* no ECN: Reno */
	return cwnd - cut > 2 ? cwnd - cut : 2;
}

SEC("struct_ops")
void BPF_PROG(lk_dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct lk_dctcp *ca = ca_of(sk);
	struct lk_dctcp_sample *s;
	__u32 acked, alpha;

	if (!ca->started) {
		ca->started = 1;
		ca->prior_snd_una = tp->snd_una;
		new_window(tp, ca);
		return;
	}
	acked = tp->snd_una - ca->prior_snd_una;
	ca->delivered += acked;
	/* a duplicate ACK stands for one segment; a window update for nothing */
	if (!acked && !(flags & CA_ACK_WIN_UPDATE))
		acked = ((struct inet_connection_sock *)sk)->icsk_ack.rcv_mss;
	if (acked) {
		ca->acked += acked;
		ca->prior_snd_una = tp->snd_una;
		if (flags & CA_ACK_ECE)
			ca->marked += acked;
	}
	if (before(tp->snd_una, ca->window_end))
		return;
	alpha = ca->alpha - (ca->alpha >> SHIFT_G);
	if (ca->marked && ca->acked)
		alpha += (__u32)(((__u64)ca->marked << (10 - SHIFT_G)) / ca->acked);
	ca->alpha = alpha < MAX_ALPHA ? alpha : MAX_ALPHA;
	/* published for windows that carried data (a receiver's end every ACK otherwise) */
	s = ca->delivered ? bpf_ringbuf_reserve(&lk_dctcp_samples, sizeof(*s), 0) : NULL;
	if (s) {
		s->t_ns = bpf_ktime_get_ns();
		s->saddr = sk->__sk_common.skc_rcv_saddr;
		s->daddr = sk->__sk_common.skc_daddr;
		s->sport = sk->__sk_common.skc_num;
		s->dport = bpf_ntohs(sk->__sk_common.skc_dport);
		s->alpha = ca->alpha;
		s->cwnd = tp->snd_cwnd;
		s->acked = ca->acked;
		s->marked = ca->marked;
		bpf_ringbuf_submit(s, 0);
	}
	new_window(tp, ca);
}

/* Receiver: the ACKs' ECE follows the CE state of the data (RFC 8257 section 3.2). */
static __always_inline void echo_ce(struct sock *sk, __u32 ce)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = tcp_of(sk);
	struct lk_dctcp *ca = ca_of(sk);

	if (!ca->receiving) { /* the first data: rcv_nxt is set only now */
		ca->receiving = 1;
		ca->ce_state = ce;
		ca->prior_rcv_nxt = tp->rcv_nxt;
	}
	if (ca->ce_state != ce) {
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			/* the delayed ACK owed for the earlier data carries the earlier state */
			if (ca->ce_state)
				tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
			else
				tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
			bpf_tcp_send_ack(tp, ca->prior_rcv_nxt);
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = ce;
	if (ce)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

/* A loss: as Reno (RFC 8257 section 3.3), once per round trip: halve the window the
 * flow had as it was lost, not DCTCP's alpha/2 (with a small alpha that would keep a
 * full queue full). */
static __always_inline void react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);

	ca_of(sk)->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = tp->snd_cwnd >> 1 > 2 ? tp->snd_cwnd >> 1 : 2;
}

SEC("struct_ops")
void BPF_PROG(lk_dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	if (ev == CA_EVENT_ECN_IS_CE)
		echo_ce(sk, 1);
	else if (ev == CA_EVENT_ECN_NO_CE)
		echo_ce(sk, 0);
	else if (ev == CA_EVENT_LOSS) /* a retransmission timeout, before cwnd is reset */
		react_to_loss(sk);
}

SEC("struct_ops")
void BPF_PROG(lk_dctcp_set_state, struct sock *sk, __u8 new_state)
{
	/* fast recovery begins (set_state runs before icsk_ca_state changes) */
	if (new_state == TCP_CA_Recovery &&
	    ((struct inet_connection_sock *)sk)->icsk_ca_state != TCP_CA_Recovery)
		react_to_loss(sk);
}

SEC("struct_ops")
void BPF_PROG(lk_dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(lk_dctcp_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	__u32 loss_cwnd = ca_of(sk)->loss_cwnd;

	return tp->snd_cwnd > loss_cwnd ? tp->snd_cwnd : loss_cwnd;
}

SEC(".struct_ops")
struct tcp_congestion_ops lk_dctcp = {
	.init = (void *)lk_dctcp_init,
	.ssthresh = (void *)lk_dctcp_ssthresh,
	.in_ack_event = (void *)lk_dctcp_in_ack_event,
	.cwnd_event = (void *)lk_dctcp_cwnd_event,
	.set_state = (void *)lk_dctcp_set_state,
	.cong_avoid = (void *)lk_dctcp_cong_avoid,
	.undo_cwnd = (void *)lk_dctcp_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "lk_dctcp",
};

/* sock_ops on the run's cgroup: a TCP socket of a listed namespace, as it connects or
 * starts to listen (before its SYN or SYN-ACK: ECN is negotiated there), takes lk_dctcp */
SEC("sockops")
int lk_dctcp_select(struct bpf_sock_ops *skops)
{
	static const char name[] = "lk_dctcp";
	__u64 cookie;

	if (skops->op != BPF_SOCK_OPS_TCP_CONNECT_CB && skops->op != BPF_SOCK_OPS_TCP_LISTEN_CB)
		return 1;
	cookie = bpf_get_netns_cookie(skops);
	if (bpf_map_lookup_elem(&lk_dctcp_hosts, &cookie))
		bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, (void *)name, sizeof(name));
	return 1;
}
