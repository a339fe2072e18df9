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
 * ssthresh(), the window cut by alpha/2, and lk_dctcp's cong_control (it owns the
 * window: the stack's PRR does not run) applies it at once. On a loss (fast recovery,
 * or a timeout) it halves as Reno does (RFC 8257 section 3.3); growth is Reno's. A
 * connection whose peer did not agree to ECN is Reno.
 *
 * Receiver: ECE echoes the CE state of the data exactly (RFC 8257 section 3.2): when
 * the state changes, a delayed ACK still owed for the old state leaves first, and the
 * next ACK is sent at once.
 *
 * Each window of data's end is published in lk_dctcp_samples (time, flow, alpha, cwnd, the
 * window's bytes and marked bytes) for labkit to read: alpha over time per flow.
 *
 * Guard: on this kernel (6.18), about 1 call in 300 to a BPF congestion control's hook
 * hands the stack a value the program did not return (measured with a struct_ops that
 * only calls Reno's kfuncs: ssthresh 0x81104110, the low half of a kernel text address,
 * and the hook's run count short by as many calls; docs/dctcp.md). The stack then
 * computes a window near 10^9 and the sender floods the port. So lk_dctcp owns the
 * window (cong_control: neither PRR nor the end of a reduction applies an ssthresh it
 * did not check), and repairs what such a value left, in set_state (right after
 * ssthresh()) and on every ACK before anything is sent: a window larger than any
 * lk_dctcp grew to, an ssthresh larger than the window it cut.
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
#define INFINITE_SSTHRESH 0x7fffffffU	/* a connection's ssthresh before its first cut */
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
	__u32 max_cwnd;		/* the largest window this connection has grown to */
	__u32 cut_carry;	/* the fraction of a packet the last cut rounded away, x 2048 */
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
	ca->cut_carry = 0;
	ca->max_cwnd = 0;
	/* chosen by lk_dctcp_select as the socket connects (or its listener as it starts to
	 * listen: an accepted socket inherits this state), this runs before the sequence
	 * numbers are set: the first window begins at the first ACK, the receiver's state at
	 * the first data */
	ca->started = 0;
	ca->receiving = 0;
}

/* DCTCP's cut of window ``cwnd``: by alpha/2 (by half without ECN, as Reno). The part of
 * a packet the cut rounds away is carried to the next cut: else a flow with a small
 * window and a small alpha (23 packets at 5 %: 0.6 of a packet) never cuts at all,
 * holds the queue past K, and the flows beside it, marked on every packet, starve. */
static __always_inline __u32 cut_window(struct tcp_sock *tp, struct lk_dctcp *ca, __u32 cwnd)
{
	__u64 scaled = (__u64)cwnd * ca->alpha + ca->cut_carry; /* packets x 2048 */
	__u32 cut = (__u32)(scaled >> 11);

	ca->cut_carry = (__u32)(scaled & 2047);
	if (!(tp->ecn_flags & TCP_ECN_OK))
		cut = cwnd >> 1;
	return cwnd - cut > 2 ? cwnd - cut : 2;
}

/* Repair what a lost hook's value left (see the guard above): a window lk_dctcp never
 * grew to, an ssthresh above the window it cut. Outside cong_control's growth windows
 * only shrink (reductions, undo to an earlier window), so none exceeds max_cwnd. */
static __always_inline void repair(struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct lk_dctcp *ca = ca_of(sk);
	__u32 bound = ca->max_cwnd, cut;

	if (!ca->started)
		return;
	if (tp->snd_ssthresh != INFINITE_SSTHRESH && tp->snd_ssthresh > bound) {
		cut = tp->prior_cwnd && tp->prior_cwnd <= bound ? tp->prior_cwnd : bound;
		ca->loss_cwnd = cut;
		tp->snd_ssthresh = cut_window(tp, ca, cut);
	}
	if (tp->snd_cwnd > bound)
		tp->snd_cwnd = tp->snd_ssthresh < bound ? tp->snd_ssthresh : bound;
}

SEC("struct_ops")
__u32 BPF_PROG(lk_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct lk_dctcp *ca = ca_of(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	return cut_window(tp, ca, tp->snd_cwnd);
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
		ca->max_cwnd = tp->snd_cwnd;
		ca->prior_snd_una = tp->snd_una;
		new_window(tp, ca);
		return;
	}
	repair(sk);
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
	repair(sk); /* ssthresh() has just run, its value is not used yet */
	/* fast recovery begins (set_state runs before icsk_ca_state changes) */
	if (new_state == TCP_CA_Recovery &&
	    ((struct inet_connection_sock *)sk)->icsk_ca_state != TCP_CA_Recovery)
		react_to_loss(sk);
}

/* The pacing rate, as the stack sets it after its own window update (which lk_dctcp's
 * cong_control replaces): 120 % of a window per round trip (200 % in slow start). It
 * sizes TSO bursts too: left at its initial "unlimited", each burst would be 64 KB. */
static __always_inline void pace(struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	__u32 cwnd = tp->snd_cwnd > tp->packets_out ? tp->snd_cwnd : tp->packets_out;
	__u64 rate = (__u64)tp->mss_cache * ((1000000 / 100) << 3); /* srtt_us is x 8 */

	rate *= tp->snd_cwnd < tp->snd_ssthresh / 2 ? 200 : 120;
	rate *= cwnd;
	if (tp->srtt_us)
		rate /= tp->srtt_us;
	sk->sk_pacing_rate = rate < sk->sk_max_pacing_rate ? rate : sk->sk_max_pacing_rate;
}

/* The window, on every ACK (the stack's own PRR and growth do not run: the last word on
 * the window before anything is sent is lk_dctcp's, whatever a lost hook left).
 * In a reduction (CWR on ECE, Recovery on loss) the window is cut to ssthresh at once,
 * as RFC 8257 writes it; otherwise it grows as Reno's, while the flow is window-limited. */
SEC("struct_ops")
void BPF_PROG(lk_dctcp_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = tcp_of(sk);
	struct lk_dctcp *ca = ca_of(sk);
	__u8 state = icsk->icsk_ca_state;

	repair(sk);
	if (state == TCP_CA_CWR || state == TCP_CA_Recovery) {
		if (tp->snd_cwnd > tp->snd_ssthresh)
			tp->snd_cwnd = tp->snd_ssthresh > 2 ? tp->snd_ssthresh : 2;
	} else {
		tcp_reno_cong_avoid(sk, ack, rs->acked_sacked);
		if (ca->started && tp->snd_cwnd > ca->max_cwnd)
			ca->max_cwnd = tp->snd_cwnd;
	}
	pace(sk);
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
	.cong_control = (void *)lk_dctcp_cong_control,
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
