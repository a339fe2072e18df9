// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * labkit's MPI timing shim: an unmodified MPI job's collectives timed from outside its
 * code, through MPI's profiling interface (PMPI), as mpiP and IPM do.
 *
 * labkit preloads this library into the ranks that mpirun starts (LD_PRELOAD, exported
 * with -x, with LABKIT_OPS_DIR). Each MPI_<collective> below is found before Open MPI's
 * own, times the call to PMPI_<collective> with CLOCK_MONOTONIC (the clock of labkit's
 * eBPF programs and line protocol), and appends one line of labkit's line protocol
 * (labkit/model/traffic/lines.py) to $LABKIT_OPS_DIR/rank<OMPI_COMM_WORLD_RANK>.ops:
 *
 *   {"labkit": "op", "op": "all_reduce", "bytes": 2097152, "start_ns": ..., "end_ns": ...}
 *
 * and, as each starts, its start time (decimal ns, one per line) to rank<N>.starts:
 * labkit's own process reads both as they grow and announces the rank's phase to its
 * host for it (labkit/traffic/opsteps.py), since Open MPI's daemons close the phase
 * map's descriptor before they start a rank.
 *
 * Names are torch.distributed's, so an MPI job's report reads like a PyTorch job's;
 * bytes are what the rank contributes (count x the datatype's size). Without
 * LABKIT_OPS_DIR, or when the file cannot be opened, every call goes straight through.
 *
 * Open MPI's handles are pointers (MPI_Comm, MPI_Datatype, MPI_Op), which is all this
 * file needs to know of them: it is built without mpi.h (make setup, no MPI installed)
 * and serves Open MPI 4.1 and 5.0 alike. MPICH's integer handles are not supported.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef void *lk_comm;
typedef void *lk_type;
typedef void *lk_op;

int PMPI_Type_size(lk_type type, int *size);
int PMPI_Allreduce(const void *s, void *r, int n, lk_type t, lk_op op, lk_comm c);
int PMPI_Reduce(const void *s, void *r, int n, lk_type t, lk_op op, int root, lk_comm c);
int PMPI_Bcast(void *b, int n, lk_type t, int root, lk_comm c);
int PMPI_Allgather(const void *s, int sn, lk_type st, void *r, int rn, lk_type rt,
		   lk_comm c);
int PMPI_Reduce_scatter_block(const void *s, void *r, int n, lk_type t, lk_op op,
			      lk_comm c);
int PMPI_Alltoall(const void *s, int sn, lk_type st, void *r, int rn, lk_type rt,
		  lk_comm c);
int PMPI_Gather(const void *s, int sn, lk_type st, void *r, int rn, lk_type rt, int root,
		lk_comm c);
int PMPI_Scatter(const void *s, int sn, lk_type st, void *r, int rn, lk_type rt, int root,
		 lk_comm c);
int PMPI_Barrier(lk_comm c);

static int lk_fd = -2; /* -2: not opened yet; -1: not timing */
static int lk_starts_fd = -1;
static pthread_once_t lk_once = PTHREAD_ONCE_INIT;

/* $LABKIT_OPS_DIR/rank<N>.<kind>, opened to append; -1 when it cannot be. */
static int lk_open_file(const char *dir, const char *rank, const char *kind)
{
	char path[4096];

	if (snprintf(path, sizeof(path), "%s/rank%s.%s", dir, rank, kind) >= (int)sizeof(path))
		return -1;
	return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static void lk_open(void)
{
	const char *dir = getenv("LABKIT_OPS_DIR");
	const char *rank = getenv("OMPI_COMM_WORLD_RANK");

	lk_fd = -1;
	if (!dir || !rank)
		return;
	lk_fd = lk_open_file(dir, rank, "ops");
	if (lk_fd >= 0)
		lk_starts_fd = lk_open_file(dir, rank, "starts");
}

static unsigned long long lk_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static long long lk_bytes(int count, lk_type type)
{
	int size = 0;

	if (PMPI_Type_size(type, &size) != 0)
		return -1;
	return (long long)count * size;
}

/* One line per op, in one write (O_APPEND: whole lines, whichever thread writes). */
static void lk_record(const char *name, long long bytes, unsigned long long t0)
{
	unsigned long long t1 = lk_now();
	char line[256];
	int n;

	if (bytes >= 0)
		n = snprintf(line, sizeof(line), "{\"labkit\": \"op\", \"op\": \"%s\", \"bytes\": "
			     "%lld, \"start_ns\": %llu, \"end_ns\": %llu}\n", name, bytes, t0, t1);
	else
		n = snprintf(line, sizeof(line), "{\"labkit\": \"op\", \"op\": \"%s\", "
			     "\"start_ns\": %llu, \"end_ns\": %llu}\n", name, t0, t1);
	if (n > 0 && n < (int)sizeof(line) && write(lk_fd, line, n) < 0)
		lk_fd = -1; /* never the job's failure: stop timing */
}

/* An op starts at T0: one line, in one write. */
static void lk_started(unsigned long long t0)
{
	char line[32];
	int n = snprintf(line, sizeof(line), "%llu\n", t0);

	if (lk_starts_fd >= 0 && n > 0 && n < (int)sizeof(line) &&
	    write(lk_starts_fd, line, n) < 0)
		lk_starts_fd = -1;
}

static int lk_timing(void)
{
	pthread_once(&lk_once, lk_open);
	return lk_fd >= 0;
}

/* Time CALL as op NAME of BYTES. */
#define LK_TIMED(name, bytes, call)                                   \
	do {                                                          \
		unsigned long long t0;                                \
		long long nbytes;                                     \
		int rc;                                               \
		if (!lk_timing())                                     \
			return call;                                  \
		nbytes = (bytes);                                     \
		t0 = lk_now();                                        \
		lk_started(t0);                                       \
		rc = call;                                            \
		lk_record(name, nbytes, t0);                          \
		return rc;                                            \
	} while (0)

int MPI_Allreduce(const void *s, void *r, int n, lk_type t, lk_op op, lk_comm c)
{
	LK_TIMED("all_reduce", lk_bytes(n, t), PMPI_Allreduce(s, r, n, t, op, c));
}

int MPI_Reduce(const void *s, void *r, int n, lk_type t, lk_op op, int root, lk_comm c)
{
	LK_TIMED("reduce", lk_bytes(n, t), PMPI_Reduce(s, r, n, t, op, root, c));
}

int MPI_Bcast(void *b, int n, lk_type t, int root, lk_comm c)
{
	LK_TIMED("broadcast", lk_bytes(n, t), PMPI_Bcast(b, n, t, root, c));
}

int MPI_Allgather(const void *s, int sn, lk_type st, void *r, int rn, lk_type rt, lk_comm c)
{
	LK_TIMED("all_gather", lk_bytes(sn, st), PMPI_Allgather(s, sn, st, r, rn, rt, c));
}

int MPI_Reduce_scatter_block(const void *s, void *r, int n, lk_type t, lk_op op, lk_comm c)
{
	LK_TIMED("reduce_scatter", lk_bytes(n, t), PMPI_Reduce_scatter_block(s, r, n, t, op, c));
}

int MPI_Alltoall(const void *s, int sn, lk_type st, void *r, int rn, lk_type rt, lk_comm c)
{
	LK_TIMED("all_to_all", lk_bytes(sn, st), PMPI_Alltoall(s, sn, st, r, rn, rt, c));
}

int MPI_Gather(const void *s, int sn, lk_type st, void *r, int rn, lk_type rt, int root,
	       lk_comm c)
{
	LK_TIMED("gather", lk_bytes(sn, st), PMPI_Gather(s, sn, st, r, rn, rt, root, c));
}

int MPI_Scatter(const void *s, int sn, lk_type st, void *r, int rn, lk_type rt, int root,
		lk_comm c)
{
	LK_TIMED("scatter", lk_bytes(rn, rt), PMPI_Scatter(s, sn, st, r, rn, rt, root, c));
}

int MPI_Barrier(lk_comm c)
{
	LK_TIMED("barrier", -1, PMPI_Barrier(c));
}
