// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The rank agents' per-packet work, compiled (loaded by labkit/traffic/hotpath.py).
 *
 * Why C: on a 32-rank ring on 2 cores, ~80 % of the rank agents' Python time went to
 * per-packet work (a cProfile of one rank: copying templates into send slots, patching
 * PSN and stamp, the ICRC, splitting GRO reads, the receiver's state machine), about
 * 20 us of CPU per packet with the interpreter's caches cold among 30 processes. Here
 * that work runs once per packet in C; Python keeps the transport's decisions
 * (go-back-N, timers, DCQCN: labkit/traffic/rc.py) and sees one call per batch and
 * one event per message.
 *
 * lk_tx: the send side of one queue pair. Messages are queued as descriptors; a send
 * builds the packets of a PSN range from the RDMA WRITE templates (scapy's), patches
 * PSN, RETH, the chunk value and the stamp, writes the ICRC, and hands them to the
 * kernel in one sendmmsg, runs of up to `gso` equal-size packets as one UDP GSO send.
 *
 * lk_rx: the receive side of a rank: one socket, every peer's queue pair. It reads
 * whole GRO runs, splits them at their segment size, accepts only the next expected
 * PSN, ACKs each message end, NAKs the first packet of a gap once, answers CE with at
 * most one CNP per CNP_GAP_NS, and reports message ends, ACKs and CNPs as events.
 *
 * Byte layouts: labkit/model/traffic/wire.py (RoCEv2), struct lk_stamp (bpf/include).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <zlib.h>

#define BTH_LEN 12
#define RETH_LEN 16
#define ICRC_LEN 4
#define PSN_AT 9
#define PSN_MASK 0xFFFFFFu
#define RETH_VA (BTH_LEN)
#define RETH_DLEN (BTH_LEN + 12)
#define STAMP_LEN 16
#define STAMP_MAGIC 0x53544B4Cu
#define VALUE_AT STAMP_LEN /* a message's chunk value follows the stamp in its first packet */
#define MAX_RUN_BYTES (65535 - 8 - 20) /* one UDP datagram: a GSO run cannot be longer */
#define MAX_BATCH 64
#define MAX_REPLY 64
#define CNP_GAP_NS 2000000LL
#define READ_BYTES 65536
#define MAX_READ_PACKETS (READ_BYTES / (BTH_LEN + ICRC_LEN)) /* events one read can cause */

enum { OP_FIRST = 0x06, OP_MIDDLE = 0x07, OP_LAST = 0x08, OP_ONLY = 0x0A,
       OP_ACK = 0x11, OP_CNP = 0x81 };
enum { KIND_FIRST, KIND_MIDDLE, KIND_LAST, KIND_ONLY, KINDS };
enum { EV_DELIVER = 1, EV_ACK = 2, EV_CNP = 3 };

static void put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = v & 0xff;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++, v >>= 8)
		p[i] = v & 0xff;
}

static uint64_t get_be(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* The ICRC of packets from one UDP socket to one destination (wire.py says what it
 * covers). The CRC of the masked IPv4 and UDP headers depends only on the packet's
 * length: it is kept for the last length seen. */
struct icrc {
	uint8_t addrs[8]; /* source, destination: network order */
	uint16_t sport, dport;
	uint32_t len;
	uLong prefix;
};

static uLong icrc_prefix(struct icrc *c, uint32_t n)
{
	if (c->len != n) {
		uint8_t h[8 + 20 + 8], *ip = h + 8, *udp = h + 28;

		memset(h, 0xff, 8);
		ip[0] = 0x45, ip[1] = 0xff; /* TOS masked */
		put_be(ip + 2, 28 + n, 2);
		put_be(ip + 4, 0, 2); /* IP ID 0: DF set, as the kernel sends it */
		put_be(ip + 6, 0x4000, 2);
		ip[8] = 0xff, ip[9] = IPPROTO_UDP; /* TTL masked */
		put_be(ip + 10, 0xffff, 2); /* checksum masked */
		memcpy(ip + 12, c->addrs, 8);
		put_be(udp, c->sport, 2);
		put_be(udp + 2, c->dport, 2);
		put_be(udp + 4, 8 + n, 2);
		put_be(udp + 6, 0xffff, 2);
		c->prefix = crc32(0, h, sizeof(h));
		c->len = n;
	}
	return c->prefix;
}

static void icrc_put(struct icrc *c, uint8_t *p, uint32_t n)
{
	static const uint8_t masked = 0xff; /* BTH byte 4: FECN, BECN, reserved */
	uLong crc = crc32(icrc_prefix(c, n), p, 4);

	crc = crc32(crc, &masked, 1);
	crc = crc32(crc, p + 5, n - 5 - ICRC_LEN);
	put_le(p + n - ICRC_LEN, crc, 4);
}

static void icrc_init(struct icrc *c, uint32_t src, uint32_t dst, uint16_t sport,
		      uint16_t dport)
{
	memcpy(c->addrs, &src, 4);
	memcpy(c->addrs + 4, &dst, 4);
	c->sport = sport, c->dport = dport, c->len = 0;
}

/* ---- send side ------------------------------------------------------------------- */

struct lk_msg {
	uint64_t first; /* PSN of its first packet */
	uint64_t chunk, value;
	uint32_t nbytes, count;
};

struct lk_tx {
	int fd, gso, batch;
	uint32_t mtu, seq_base, slot_bytes;
	struct sockaddr_in dest;
	struct icrc icrc;
	uint8_t *tmpl[KINDS];
	uint32_t tmpl_len[KINDS];
	struct lk_msg *msgs;
	size_t nmsgs, cap;
	uint64_t packets; /* queued so far: the next message's first PSN */
	uint8_t *buf;
	struct mmsghdr hdr[MAX_BATCH];
	struct iovec iov[MAX_BATCH];
	uint32_t run[MAX_BATCH]; /* packets in each send */
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} ctl[MAX_BATCH];
};

void lk_tx_free(struct lk_tx *tx)
{
	if (!tx)
		return;
	for (int k = 0; k < KINDS; k++)
		free(tx->tmpl[k]);
	free(tx->msgs);
	free(tx->buf);
	free(tx);
}

/* addresses in network order; templates: first, middle, last, only, each `mtu` bytes of
 * data; NULL (ENOMEM, EINVAL) when they do not fit. */
struct lk_tx *lk_tx_new(int fd, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport,
			int gso, int batch, uint32_t mtu, uint32_t seq_base,
			const uint8_t *const tmpl[KINDS], const uint32_t tmpl_len[KINDS])
{
	struct lk_tx *tx = calloc(1, sizeof(*tx));

	if (!tx)
		return NULL;
	if (batch < 1 || batch > MAX_BATCH || mtu < VALUE_AT + 8)
		goto invalid;
	tx->fd = fd, tx->gso = gso < 1 ? 1 : gso, tx->batch = batch;
	tx->mtu = mtu, tx->seq_base = seq_base;
	tx->dest.sin_family = AF_INET;
	tx->dest.sin_addr.s_addr = dst;
	tx->dest.sin_port = htons(dport);
	icrc_init(&tx->icrc, src, dst, sport, dport);
	for (int k = 0; k < KINDS; k++) {
		if (tmpl_len[k] < mtu + BTH_LEN + ICRC_LEN || tmpl_len[k] > mtu + 256)
			goto invalid;
		tx->tmpl[k] = malloc(tmpl_len[k]);
		if (!tx->tmpl[k])
			goto fail;
		memcpy(tx->tmpl[k], tmpl[k], tmpl_len[k]);
		tx->tmpl_len[k] = tmpl_len[k];
		if (tmpl_len[k] > tx->slot_bytes)
			tx->slot_bytes = tmpl_len[k];
	}
	tx->buf = malloc((size_t)batch * tx->slot_bytes);
	if (!tx->buf)
		goto fail;
	for (int i = 0; i < batch; i++) {
		struct msghdr *m = &tx->hdr[i].msg_hdr;
		struct cmsghdr *c = (struct cmsghdr *)tx->ctl[i].buf;

		m->msg_name = &tx->dest;
		m->msg_namelen = sizeof(tx->dest);
		m->msg_iov = &tx->iov[i];
		m->msg_iovlen = 1;
		c->cmsg_level = SOL_UDP;
		c->cmsg_type = UDP_SEGMENT;
		c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
	}
	return tx;
invalid:
	errno = EINVAL;
fail:
	lk_tx_free(tx);
	return NULL;
}

/* Queue a message of `nbytes` (at least VALUE_AT + 8): its packet count, or -ENOMEM. */
int lk_tx_enqueue(struct lk_tx *tx, uint32_t nbytes, uint64_t chunk, uint64_t value)
{
	if (nbytes < VALUE_AT + 8)
		return -EINVAL;
	if (tx->nmsgs == tx->cap) {
		size_t cap = tx->cap ? 2 * tx->cap : 256;
		struct lk_msg *m = realloc(tx->msgs, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		tx->msgs = m, tx->cap = cap;
	}
	struct lk_msg *m = &tx->msgs[tx->nmsgs++];

	m->first = tx->packets;
	m->chunk = chunk, m->value = value, m->nbytes = nbytes;
	m->count = ((uint64_t)nbytes + tx->mtu - 1) / tx->mtu;
	tx->packets += m->count;
	return m->count;
}

static size_t message_of(const struct lk_tx *tx, uint64_t psn)
{
	size_t lo = 0, hi = tx->nmsgs; /* the last message whose first PSN <= psn */

	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;

		if (tx->msgs[mid].first <= psn)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Packet `psn` of message `m` into `out`: its length. */
static uint32_t build(struct lk_tx *tx, const struct lk_msg *m, uint64_t psn, uint8_t *out)
{
	uint32_t i = psn - m->first;
	int kind = m->count == 1 ? KIND_ONLY : i == 0 ? KIND_FIRST
		 : i == m->count - 1 ? KIND_LAST : KIND_MIDDLE;
	uint32_t head = tx->tmpl_len[kind] - tx->mtu - ICRC_LEN; /* BTH [RETH]: where data starts */
	uint32_t size = m->nbytes - i * tx->mtu;
	uint32_t n;

	if (size > tx->mtu)
		size = tx->mtu;
	n = head + size + ICRC_LEN;
	memcpy(out, tx->tmpl[kind], head + size);
	put_be(out + PSN_AT, psn & PSN_MASK, 3);
	if (i == 0) { /* the RETH names the chunk and the message length; the value follows */
		put_be(out + RETH_VA, m->chunk, 8);
		put_be(out + RETH_DLEN, m->nbytes, 4);
		put_le(out + head + VALUE_AT, m->value, 8);
	}
	if (size >= STAMP_LEN) { /* struct lk_stamp, for one-way latency (bpf/latency.bpf.c) */
		put_le(out + head, STAMP_MAGIC, 4);
		put_le(out + head + 4, tx->seq_base | (psn & PSN_MASK), 4);
		put_le(out + head + 8, monotonic_ns(), 8);
	}
	icrc_put(&tx->icrc, out, n);
	return n;
}

/* Send packets [first, stop) (at most `batch`) in one sendmmsg: how many the kernel
 * took (0 when the socket is full), or -errno. */
int lk_tx_send(struct lk_tx *tx, uint64_t first, uint64_t stop, int blocking)
{
	int sends = 0, sent, took = 0;
	uint32_t end = 0, seg = 0;
	size_t mi;

	if (stop > tx->packets)
		stop = tx->packets;
	if (stop > first + tx->batch)
		stop = first + tx->batch;
	if (first >= stop)
		return 0;
	mi = message_of(tx, first);
	for (uint64_t psn = first; psn < stop; psn++) {
		if (mi + 1 < tx->nmsgs && tx->msgs[mi + 1].first <= psn)
			mi++;
		uint8_t *out = tx->buf + end;
		uint32_t n = build(tx, &tx->msgs[mi], psn, out);
		int last = sends - 1;

		if (seg && n <= seg && tx->run[last] < (uint32_t)tx->gso &&
		    tx->iov[last].iov_len + n <= MAX_RUN_BYTES) {
			/* joins the open run: the kernel cuts it back into these datagrams */
			struct msghdr *m = &tx->hdr[last].msg_hdr;

			tx->iov[last].iov_len += n;
			tx->run[last]++;
			m->msg_control = tx->ctl[last].buf;
			m->msg_controllen = sizeof(tx->ctl[last].buf);
			memcpy(CMSG_DATA((struct cmsghdr *)tx->ctl[last].buf), &(uint16_t){seg},
			       sizeof(uint16_t));
			if (n < seg)
				seg = 0; /* a shorter packet ends a run */
		} else {
			tx->iov[sends].iov_base = out;
			tx->iov[sends].iov_len = n;
			tx->hdr[sends].msg_hdr.msg_control = NULL;
			tx->hdr[sends].msg_hdr.msg_controllen = 0;
			tx->run[sends++] = 1;
			seg = tx->gso > 1 ? n : 0;
		}
		end += n;
	}
	sent = sendmmsg(tx->fd, tx->hdr, sends, blocking ? 0 : MSG_DONTWAIT);
	if (sent < 0)
		return errno == EAGAIN || errno == ENOBUFS ? 0 : -errno;
	for (int i = 0; i < sent; i++)
		took += tx->run[i];
	return took;
}

/* ---- receive side ---------------------------------------------------------------- */

struct lk_rx_stats {
	uint64_t messages, bytes, out_of_order, cnps;
};

struct lk_peer {
	uint32_t addr; /* network order */
	struct sockaddr_in dest;
	struct icrc icrc;
	uint8_t reply[3][MAX_REPLY]; /* ACK, NAK, CNP (length 0: no CNPs) */
	uint32_t reply_len[3];
	uint64_t expected;
	int64_t nak_sent_for, last_cnp;
	uint64_t chunk, value, sent_ns; /* of the message being received */
	struct lk_rx_stats stats;
};

enum { REPLY_ACK, REPLY_NAK, REPLY_CNP };

struct lk_event {
	uint32_t kind, peer;
	uint64_t a, b, c; /* DELIVER: chunk, value, sent_ns; ACK: PSN, syndrome */
};

struct lk_rx {
	int fd, npeers, cap;
	uint32_t self; /* the socket's address (network order) and port */
	uint16_t port;
	struct lk_peer *peers;
	uint8_t buf[READ_BYTES];
};

struct lk_rx *lk_rx_new(int fd, uint32_t self, uint16_t port)
{
	struct lk_rx *rx = calloc(1, sizeof(*rx));

	if (rx)
		rx->fd = fd, rx->self = self, rx->port = port;
	return rx;
}

void lk_rx_free(struct lk_rx *rx)
{
	if (rx)
		free(rx->peers);
	free(rx);
}

/* A peer's queue pair at `addr` (network order), answered at its port `port`: its
 * index, or -errno. `cnp_len` 0: no CNPs. */
int lk_rx_peer(struct lk_rx *rx, uint32_t addr, uint16_t port, const uint8_t *ack,
	       uint32_t ack_len, const uint8_t *nak, uint32_t nak_len, const uint8_t *cnp,
	       uint32_t cnp_len)
{
	const uint8_t *reply[3] = { ack, nak, cnp };
	uint32_t len[3] = { ack_len, nak_len, cnp_len };
	struct lk_peer *p;

	if (rx->npeers == rx->cap) {
		int cap = rx->cap ? 2 * rx->cap : 8;

		p = realloc(rx->peers, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		rx->peers = p, rx->cap = cap;
	}
	for (int r = 0; r < 3; r++) /* ACK and NAK needed; no CNP: length 0 */
		if (len[r] > MAX_REPLY || ((r < REPLY_CNP || len[r]) && len[r] < BTH_LEN + ICRC_LEN))
			return -EINVAL;
	p = &rx->peers[rx->npeers];
	memset(p, 0, sizeof(*p));
	p->addr = addr;
	p->dest.sin_family = AF_INET;
	p->dest.sin_addr.s_addr = addr;
	p->dest.sin_port = htons(port);
	icrc_init(&p->icrc, rx->self, addr, rx->port, port);
	for (int r = 0; r < 3; r++) {
		memcpy(p->reply[r], reply[r], len[r]);
		p->reply_len[r] = len[r];
	}
	p->nak_sent_for = -1;
	p->last_cnp = -CNP_GAP_NS;
	return rx->npeers++;
}

int lk_rx_stats(const struct lk_rx *rx, int peer, struct lk_rx_stats *out)
{
	if (peer < 0 || peer >= rx->npeers)
		return -EINVAL;
	*out = rx->peers[peer].stats;
	return 0;
}

static void reply(struct lk_rx *rx, struct lk_peer *p, int r, uint64_t psn)
{
	uint8_t *t = p->reply[r];
	uint32_t n = p->reply_len[r];

	put_be(t + PSN_AT, psn & PSN_MASK, 3);
	icrc_put(&p->icrc, t, n);
	/* a full socket loses it like any packet: the sender's timer recovers */
	sendto(rx->fd, t, n, MSG_DONTWAIT, (struct sockaddr *)&p->dest, sizeof(p->dest));
}

static int is_start(uint8_t op)
{
	return op == OP_FIRST || op == OP_ONLY;
}

static int is_end(uint8_t op)
{
	return op == OP_LAST || op == OP_ONLY;
}

/* One packet from peer `pi`: the events it causes (0 or 1) into `ev`. */
static int handle(struct lk_rx *rx, int pi, const uint8_t *pkt, uint32_t n, int ce,
		  struct lk_event *ev)
{
	struct lk_peer *p = &rx->peers[pi];
	uint8_t op = pkt[0];

	if (n < BTH_LEN + ICRC_LEN)
		return 0;
	if (op == OP_ACK) {
		if (n < BTH_LEN + 4 + ICRC_LEN)
			return 0;
		*ev = (struct lk_event){ EV_ACK, pi, get_be(pkt + PSN_AT, 3), pkt[BTH_LEN], 0 };
		return 1;
	}
	if (op == OP_CNP) {
		*ev = (struct lk_event){ EV_CNP, pi, 0, 0, 0 };
		return 1;
	}
	if (op != OP_FIRST && op != OP_MIDDLE && op != OP_LAST && op != OP_ONLY)
		return 0;
	if (ce && p->reply_len[REPLY_CNP]) {
		int64_t now = monotonic_ns();

		if (now - p->last_cnp >= CNP_GAP_NS) {
			p->last_cnp = now;
			p->stats.cnps++;
			reply(rx, p, REPLY_CNP, 0);
		}
	}
	uint64_t diff = (get_be(pkt + PSN_AT, 3) - p->expected) & PSN_MASK;

	if (diff == 0) {
		uint32_t data_at = BTH_LEN + RETH_LEN;

		if (is_start(op)) {
			if (n < data_at + VALUE_AT + 8 + ICRC_LEN)
				return 0; /* not a message labkit sent */
			p->chunk = get_be(pkt + RETH_VA, 8);
			p->value = get_le(pkt + data_at + VALUE_AT, 8);
			p->sent_ns = get_le(pkt + data_at + 8, 8); /* the stamp: when it left */
		}
		p->expected++;
		p->stats.bytes += n;
		if (is_end(op)) {
			p->stats.messages++;
			reply(rx, p, REPLY_ACK, p->expected - 1);
			*ev = (struct lk_event){ EV_DELIVER, pi, p->chunk, p->value, p->sent_ns };
			return 1;
		}
	} else if (diff < 0x800000) { /* ahead: a gap, NAK once per expected PSN */
		p->stats.out_of_order++;
		if (p->nak_sent_for != (int64_t)p->expected) {
			p->nak_sent_for = p->expected;
			reply(rx, p, REPLY_NAK, p->expected);
		}
	} else if (is_end(op)) { /* a duplicate message end: ACK again */
		reply(rx, p, REPLY_ACK, p->expected - 1);
	}
	return 0;
}

/* Handle every datagram waiting at the socket (a GSO run arrives whole with UDP_GRO
 * and is split at its segment size) while `max` leaves room for one more read's
 * events: the number of events, or -errno. */
int lk_rx_drain(struct lk_rx *rx, struct lk_event *ev, int max)
{
	int nev = 0;

	if (max < 2 * MAX_READ_PACKETS)
		return -EINVAL; /* the caller tells a full buffer from an empty socket by this */

	while (max - nev >= MAX_READ_PACKETS) {
		struct sockaddr_in from;
		union {
			char buf[2 * CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = { rx->buf, sizeof(rx->buf) };
		struct msghdr mh = { .msg_name = &from, .msg_namelen = sizeof(from),
				     .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
		ssize_t got = recvmsg(rx->fd, &mh, MSG_DONTWAIT);
		int pi = -1, ce = 0;
		uint32_t seg;

		if (got < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? nev : -errno;
		}
		for (int i = 0; i < rx->npeers; i++)
			if (rx->peers[i].addr == from.sin_addr.s_addr) {
				pi = i;
				break;
			}
		if (pi < 0)
			continue;
		seg = got;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
				int s;

				memcpy(&s, CMSG_DATA(c), sizeof(s));
				if (s > 0)
					seg = s;
			} else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
				ce = (*CMSG_DATA(c) & 0x03) == 0x03;
			}
		}
		for (uint32_t at = 0; at < (uint32_t)got; at += seg) {
			uint32_t n = (uint32_t)got - at < seg ? (uint32_t)got - at : seg;

			nev += handle(rx, pi, rx->buf + at, n, ce, &ev[nev]);
		}
	}
	return nev;
}
