// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * labkit's waker: a TCP socket iterator (iter/tcp) that makes every socket of the
 * network namespace it is read in that may still send (ESTABLISHED, CLOSE_WAIT)
 * send what it has queued, now.
 *
 * A host's gate (valve.bpf.c) holds data by dropping it before any queue; TCP
 * keeps the refused segment and retries on its next acknowledgement or, when
 * nothing is in flight, on a timer of 200-500 ms. When the gate opens, reading
 * this iterator in the host's namespace (labkit/kernel/gates.py) restarts every
 * sender at once: TCP_NODELAY set on a socket pushes its pending frames (and is
 * put back as it was; a corked socket's partial frame goes out too).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define SOL_TCP 6
#define TCP_NODELAY 1
#define TCP_ESTABLISHED 1
#define TCP_CLOSE_WAIT 8

SEC("iter/tcp")
int lk_wake(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;
	int was = 0, on = 1;

	/* the states in which a socket may still send data */
	if (!skc || (skc->skc_state != TCP_ESTABLISHED && skc->skc_state != TCP_CLOSE_WAIT))
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	if (bpf_getsockopt(tp, SOL_TCP, TCP_NODELAY, &was, sizeof(was)))
		return 0;
	bpf_setsockopt(tp, SOL_TCP, TCP_NODELAY, &on, sizeof(on));
	if (!was)
		bpf_setsockopt(tp, SOL_TCP, TCP_NODELAY, &was, sizeof(was));
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
