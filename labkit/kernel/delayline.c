// labkit's delay line: a link's propagation delay, for a kernel with no netem, fq, etf or
// BPF qdisc (nothing in it holds a packet for later; HTB, TBF and veth ignore skb->tstamp).
//
// It runs in a namespace of its own spliced into each delayed link (A -HTB-> veth -> D ->
// veth -> B, so the delay comes after the link's shaper, as on a wire) and forwards every
// frame of each direction ("pipe": in-interface to out-interface) once the pipe's delay
// has passed since the kernel received it. Jitter draws each frame's delay uniformly from
// delay +- jitter, but never before the frame ahead of it: a pipe never reorders.
//
// Frames keep their offloads: PACKET_VNET_HDR hands over the virtio header (GSO size,
// partial checksum) on receive and gives it back on send, so GRO-merged runs and local
// TCP's partial checksums cross the delay line as they would cross a veth. Sends bypass
// the qdisc layer (PACKET_QDISC_BYPASS): the shaper is before the delay line, not after.
// The receive time is the kernel's (SO_TIMESTAMPNS); sends wait on an absolute timerfd,
// under SCHED_FIFO when given one, armed early by the running mean of its wake-ups'
// lateness so that sends land on their deadlines on average.
//
// usage: _delayline [--fifo PRIO] [--stats FILE] IN,OUT,DELAY_NS,JITTER_NS,RING_BYTES,SEED ...
// A line "delay IN DELAY_NS JITTER_NS" on stdin gives the pipe from IN a new delay from
// its next frame on (the frames it holds keep theirs; none is reordered).
// It prints "ready" on stdout once every socket is bound. On SIGUSR1 it writes per pipe:
// frames, bytes, dropped (ring full or send failed) and how late sends were against their
// deadlines (p50, p99 and max, in ns; negative: early, and the most a send was early) as one JSON object to FILE (or stdout); on SIGTERM or SIGINT too, then exits 0.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define MAX_PIPES 64
#define MAX_FRAME (65536 + sizeof(struct virtio_net_hdr))
#define EARLY_BUCKETS 1000 /* 1 us each: a send up to 1 ms early ... */
#define LATE_BUCKETS 101000 /* ... to 100 ms late; beyond, the first or the last */
#define MAX_LEAD_NS 500000
#define WRAP 0xffffffffu

struct record { /* one frame in a pipe's ring, followed by its vnet header and bytes */
	int64_t deadline;
	uint32_t len; /* vnet header + frame; WRAP: the rest of the ring is unused */
	uint32_t pad;
};

struct pipe {
	char in_name[IF_NAMESIZE], out_name[IF_NAMESIZE];
	int in_fd, out_fd;
	int64_t delay, jitter, last_deadline;
	uint64_t rng;
	uint8_t *ring;
	size_t cap, head, tail, used; /* head: oldest record; tail: where the next goes */
	uint64_t frames, bytes, dropped;
	uint32_t *late; /* histogram of send - deadline, 1 us buckets from -1 ms */
	int64_t late_max, early_max;
};

static struct pipe pipes[MAX_PIPES];
static int npipes;
static volatile sig_atomic_t stopping, reporting;
static int64_t rt_minus_mono; /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns */
/* How much earlier than a deadline the timer is armed: the running mean of how late the
 * timer's wake-ups were, so that sends land on their deadlines on average. */
static int64_t lead;

static int64_t now_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		reporting = 1;
	else
		stopping = 1;
}

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "delayline: %s%s%s: %s\n", what, detail ? " " : "", detail ? detail : "",
		strerror(errno));
	exit(2);
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int packet_socket(const char *ifname, int protocol, int receive)
{
	int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol);
	int one = 1;
	struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = (uint16_t)protocol};

	if (fd < 0)
		die("socket for", ifname);
	sll.sll_ifindex = (int)if_nametoindex(ifname);
	if (!sll.sll_ifindex)
		die("no interface", ifname);
	if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)))
		die("PACKET_VNET_HDR on", ifname);
	if (receive) {
		int rcvbuf = 8 << 20;
		if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)))
			die("PACKET_IGNORE_OUTGOING on", ifname);
		if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)))
			die("SO_TIMESTAMPNS on", ifname);
		setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
	}
	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)))
		die("bind to", ifname);
	return fd;
}

static void parse_pipe(struct pipe *p, char *arg)
{
	char *fields[6];
	int n = 0;

	for (char *tok = strtok(arg, ","); tok && n < 6; tok = strtok(NULL, ","))
		fields[n++] = tok;
	if (n != 6 || strlen(fields[0]) >= IF_NAMESIZE || strlen(fields[1]) >= IF_NAMESIZE) {
		fprintf(stderr, "delayline: a pipe is IN,OUT,DELAY_NS,JITTER_NS,RING_BYTES,SEED\n");
		exit(2);
	}
	strcpy(p->in_name, fields[0]);
	strcpy(p->out_name, fields[1]);
	p->delay = strtoll(fields[2], NULL, 10);
	p->jitter = strtoll(fields[3], NULL, 10);
	p->cap = strtoull(fields[4], NULL, 10) & ~(size_t)7;
	p->rng = strtoull(fields[5], NULL, 10) | 1;
	if (p->delay < 0 || p->jitter < 0 || p->jitter > p->delay || p->cap < 4 * MAX_FRAME) {
		fprintf(stderr, "delayline: pipe %s->%s: need 0 <= jitter <= delay and a ring of "
			"at least %zu bytes\n", p->in_name, p->out_name, 4 * MAX_FRAME);
		exit(2);
	}
	p->ring = malloc(p->cap);
	p->late = calloc(LATE_BUCKETS, sizeof(*p->late));
	if (!p->ring || !p->late)
		die("memory for", p->in_name);
}

/* The control lines on stdin: "delay IN DELAY_NS JITTER_NS" (anything else is ignored).
 * Returns 0 at the end of stdin. */
static int control(void)
{
	static char buf[4096];
	static size_t have;
	ssize_t n = read(0, buf + have, sizeof(buf) - 1 - have);

	if (n <= 0)
		return n < 0 && errno == EAGAIN;
	have += (size_t)n;
	buf[have] = 0;
	char *line = buf, *nl;
	while ((nl = strchr(line, '\n'))) {
		char in[IF_NAMESIZE + 1];
		long long delay, jitter;
		*nl = 0;
		if (sscanf(line, "delay %16s %lld %lld", in, &delay, &jitter) == 3 && delay >= 0 &&
		    jitter >= 0 && jitter <= delay)
			for (int i = 0; i < npipes; i++)
				if (!strcmp(pipes[i].in_name, in)) {
					pipes[i].delay = delay;
					pipes[i].jitter = jitter;
				}
		line = nl + 1;
	}
	have -= (size_t)(line - buf);
	memmove(buf, line, have);
	if (have == sizeof(buf) - 1) /* a line too long to be one of ours */
		have = 0;
	return 1;
}

/* Room for one more frame of any size at the ring's tail (wrapping if needed), or NULL. */
static struct record *room(struct pipe *p)
{
	size_t need = sizeof(struct record) + MAX_FRAME;

	if (!p->used)
		p->head = p->tail = 0;
	else if (p->tail <= p->head) /* wrapped: the free space is tail .. head */
		return p->head - p->tail >= need ? (struct record *)(p->ring + p->tail) : NULL;
	if (p->cap - p->tail >= need) /* the free space is tail .. end, then 0 .. head */
		return (struct record *)(p->ring + p->tail);
	if (p->head < need)
		return NULL;
	if (p->cap - p->tail >= sizeof(struct record))
		((struct record *)(p->ring + p->tail))->len = WRAP;
	p->used += p->cap - p->tail; /* given back when the head reaches it (oldest) */
	p->tail = 0;
	return (struct record *)p->ring;
}

static size_t record_size(uint32_t len)
{
	return (sizeof(struct record) + len + 7) & ~(size_t)7;
}

#define BATCH 32 /* frames received from one pipe before the due ones are sent */

static void receive(struct pipe *p)
{
	static uint8_t scratch[MAX_FRAME];
	char control[CMSG_SPACE(sizeof(struct timespec))];

	for (int i = 0; i < BATCH; i++) {
		struct record *r = room(p);
		struct iovec iov = {.iov_base = r ? (void *)(r + 1) : scratch, .iov_len = MAX_FRAME};
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
				     .msg_controllen = sizeof(control)};
		ssize_t n = recvmsg(p->in_fd, &msg, 0);
		int64_t at = 0;

		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			die("receive on", p->in_name);
		}
		if (!r) {
			p->dropped++;
			continue;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
				struct timespec ts;
				memcpy(&ts, CMSG_DATA(c), sizeof(ts));
				at = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - rt_minus_mono;
			}
		if (!at)
			at = now_ns(CLOCK_MONOTONIC);
		int64_t delay = p->delay;
		if (p->jitter)
			delay += (int64_t)(xorshift(&p->rng) % (uint64_t)(2 * p->jitter + 1)) - p->jitter;
		r->deadline = at + delay > p->last_deadline ? at + delay : p->last_deadline;
		p->last_deadline = r->deadline;
		r->len = (uint32_t)n;
		p->tail += record_size(r->len);
		p->used += record_size(r->len);
	}
}

/* The pipe's oldest record (skipping a wrap marker), or NULL when it is empty. */
static struct record *oldest(struct pipe *p)
{
	if (!p->used)
		return NULL;
	if (p->cap - p->head < sizeof(struct record) ||
	    ((struct record *)(p->ring + p->head))->len == WRAP) {
		p->used -= p->cap - p->head;
		p->head = 0;
		if (!p->used)
			return NULL;
	}
	return (struct record *)(p->ring + p->head);
}

/* Send every frame whose time has come (``woken``: the timer's wake-up brought us here,
 * whose lateness the first send measures); the earliest deadline still ahead (or 0). */
static int64_t send_due(int woken)
{
	int64_t next = 0;

	for (int i = 0; i < npipes; i++) {
		struct pipe *p = &pipes[i];
		struct record *r;
		while ((r = oldest(p))) {
			int64_t now = now_ns(CLOCK_MONOTONIC);
			if (r->deadline - lead > now) {
				if (!next || r->deadline < next)
					next = r->deadline;
				break;
			}
			if (send(p->out_fd, r + 1, r->len, 0) < 0) {
				p->dropped++;
			} else {
				int64_t late = now - r->deadline, b = late / 1000 + EARLY_BUCKETS;
				p->frames++;
				p->bytes += r->len - sizeof(struct virtio_net_hdr);
				p->late[b < 0 ? 0 : b < LATE_BUCKETS ? b : LATE_BUCKETS - 1]++;
				if (late > p->late_max)
					p->late_max = late;
				if (-late > p->early_max)
					p->early_max = -late;
				if (woken) { /* follow the timer's lateness, within bounds */
					lead += late / 8;
					lead = lead < 0 ? 0 : lead > MAX_LEAD_NS ? MAX_LEAD_NS : lead;
					woken = 0;
				}
			}
			p->head += record_size(r->len);
			p->used -= record_size(r->len);
			if (!p->used)
				p->head = p->tail = 0;
		}
	}
	return next;
}

static int64_t late_quantile(const struct pipe *p, double q)
{
	uint64_t seen = 0, want = (uint64_t)(q * (double)p->frames);

	if (!p->frames)
		return -1;
	for (int b = 0; b < LATE_BUCKETS; b++) {
		seen += p->late[b];
		if (seen > want || seen == p->frames)
			return (int64_t)(b - EARLY_BUCKETS) * 1000;
	}
	return (int64_t)(LATE_BUCKETS - 1 - EARLY_BUCKETS) * 1000;
}

static void write_stats(const char *path, const char *sched)
{
	char tmp[4096];
	FILE *out = stdout;

	if (path) { /* written whole, then renamed: a reader never sees half of it */
		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		if (!(out = fopen(tmp, "w")))
			die("open", tmp);
	}
	fprintf(out, "{\"sched\": \"%s\", \"pipes\": [", sched);
	for (int i = 0; i < npipes; i++) {
		const struct pipe *p = &pipes[i];
		fprintf(out, "%s{\"in\": \"%s\", \"out\": \"%s\", \"delay_ns\": %lld, "
			"\"jitter_ns\": %lld, \"frames\": %llu, \"bytes\": %llu, \"dropped\": %llu, "
			"\"late_p50_ns\": %lld, \"late_p99_ns\": %lld, \"late_max_ns\": %lld, "
			"\"early_max_ns\": %lld}",
			i ? ", " : "", p->in_name, p->out_name, (long long)p->delay,
			(long long)p->jitter, (unsigned long long)p->frames,
			(unsigned long long)p->bytes, (unsigned long long)p->dropped,
			(long long)late_quantile(p, 0.5), (long long)late_quantile(p, 0.99),
			(long long)p->late_max, (long long)p->early_max);
	}
	fprintf(out, "]}\n");
	if (path && (fclose(out) || rename(tmp, path)))
		die("write", path);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *stats = NULL, *sched = "other";
	int fifo = 0, ep, timer;
	struct sigaction sa = {.sa_handler = on_signal};

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--fifo") && i + 1 < argc)
			fifo = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--stats") && i + 1 < argc)
			stats = argv[++i];
		else if (npipes < MAX_PIPES)
			parse_pipe(&pipes[npipes++], argv[i]);
	}
	if (!npipes) {
		fprintf(stderr, "usage: %s [--fifo PRIO] [--stats FILE] "
			"IN,OUT,DELAY_NS,JITTER_NS,RING_BYTES,SEED ...\n", argv[0]);
		return 2;
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	if (fifo) {
		struct sched_param sp = {.sched_priority = fifo};
		if (!sched_setscheduler(0, SCHED_FIFO, &sp))
			sched = "fifo";
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (ep < 0 || timer < 0)
		die("epoll or timerfd", NULL);
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = MAX_PIPES};
	epoll_ctl(ep, EPOLL_CTL_ADD, timer, &ev);
	ev.data.u32 = MAX_PIPES + 1; /* stdin, when it is a pipe: the control lines */
	int controlled = !epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev);
	for (int i = 0; i < npipes; i++) {
		pipes[i].in_fd = packet_socket(pipes[i].in_name, htons(ETH_P_ALL), 1);
		pipes[i].out_fd = packet_socket(pipes[i].out_name, 0, 0);
		ev.data.u32 = (uint32_t)i;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, pipes[i].in_fd, &ev))
			die("epoll on", pipes[i].in_name);
	}
	rt_minus_mono = now_ns(CLOCK_REALTIME) - now_ns(CLOCK_MONOTONIC);
	printf("ready\n");
	fflush(stdout);

	int64_t armed = 0, offset_at = now_ns(CLOCK_MONOTONIC);
	while (!stopping) {
		struct epoll_event events[MAX_PIPES + 2];
		int n = epoll_wait(ep, events, MAX_PIPES + 2, 1000);
		if (n < 0 && errno != EINTR)
			die("epoll_wait", NULL);
		int woken = 0;
		for (int i = 0; i < n; i++) {
			if (events[i].data.u32 == MAX_PIPES + 1) {
				if (!control() && controlled) { /* its end: nothing more to say */
					epoll_ctl(ep, EPOLL_CTL_DEL, 0, NULL);
					controlled = 0;
				}
			} else if (events[i].data.u32 == MAX_PIPES) {
				uint64_t expirations;
				if (read(timer, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
					die("timerfd read", NULL);
				armed = 0;
				woken = 1;
			} else {
				receive(&pipes[events[i].data.u32]);
			}
		}
		int64_t next = send_due(woken);
		if (next && next != armed) {
			int64_t at = next - lead;
			struct itimerspec its = {.it_value = {.tv_sec = at / 1000000000,
							      .tv_nsec = at % 1000000000}};
			timerfd_settime(timer, TFD_TIMER_ABSTIME, &its, NULL);
			armed = next;
		}
		if (reporting) {
			reporting = 0;
			write_stats(stats, sched);
		}
		if (now_ns(CLOCK_MONOTONIC) - offset_at > 1000000000) { /* follow NTP's slews */
			rt_minus_mono = now_ns(CLOCK_REALTIME) - now_ns(CLOCK_MONOTONIC);
			offset_at = now_ns(CLOCK_MONOTONIC);
		}
	}
	write_stats(stats, sched);
	return 0;
}
