/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp --mpi: send and serve as ranks of an MPI job (mpirun, srun).
 * MPI only coordinates; every byte of the copy goes over RDMA as without
 * it (docs/ringrdma-cp.md, "Ranks on MPI").
 *
 * send: rank 0 walks the operands and gives every rank a copy of the
 * list before anything moves; rank 0's is the one the rules of
 * cp/sendq.c run on. A thread of rank 0 answers the other ranks'
 * connections: which entry to take next, which entry was stored. Their
 * copies of the list give each entry's path and name.
 *
 * Built without MPI (-Dmpi=disabled, or none installed) the cp_mpi_
 * functions answer as a job of one rank (-ENOSYS where MPI would move
 * something) and --mpi is refused before anything starts; cp_mpiq runs
 * on the send's own list in every build.
 */
#ifndef CP_RANKS_H
#define CP_RANKS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cp.h"
#include "sendq.h"

/* Whether this ringrdma-cp was built with MPI. */
bool cp_mpi_built(void);
/*
 * cp_mpi_init() - join the MPI job (SIGINT and SIGTERM blocked first, so
 * that MPI's own threads never take them: the loop's signalfd reads
 * them). 0, or -1 with the reason logged.
 */
int cp_mpi_init(int *argc, char ***argv);
void cp_mpi_fini(void);
int cp_mpi_rank(void);
int cp_mpi_size(void);
/* This rank's number among the job's ranks on its host (0 first). */
int cp_mpi_local_rank(void);

/* cp_mpi_abort() - end the whole job with @status: only where a rank can
 * no longer take part and the others would wait for it for ever. */
void cp_mpi_abort(int status);
/* The worst of every rank's @status (each rank gets it): the largest. */
int cp_mpi_worst(int status);

/* What one rank did, gathered at rank 0 for --json and the last line. */
struct cp_rank_figs {
	struct cp_tally n;
	uint64_t data_start, data_end; /* CLOCK_MONOTONIC of each rank's host */
	uint64_t requests;	       /* MPI messages this rank sent to rank 0 */
	uint64_t walked;	       /* entries its walk listed (send: rank 0 alone walks) */
	int exit_code;
	char host[64];
};

/*
 * cp_mpi_gather() - every rank's @mine at rank 0, into @all (size() of
 * them; ignored elsewhere). 0, or a negative errno.
 */
int cp_mpi_gather(const struct cp_rank_figs *mine, struct cp_rank_figs *all);

struct cp_summary;
/*
 * cp_mpi_summary() - every rank, at the end: @mine (its host filled in
 * here) to rank 0, where @sum gets the ranks' tallies added up, the
 * longest of their data spans and each rank's in @all (room for size()
 * of them); the worst rank's exit status, in @sum and returned, on every
 * rank.
 */
int cp_mpi_summary(struct cp_rank_figs *mine, struct cp_summary *sum, struct cp_rank_figs *all);

/*
 * cp_mpi_share_list() - rank 0's walked list @q (and the bytes it holds,
 * *@total) on every rank: the others' @q, empty, gets a copy, so that
 * the tree is walked once however many ranks send it. @walk_ret: rank
 * 0's walk's status, or another rank's check of the operands. 0 when
 * none failed; else the worst status, with why in @msg.
 */
int cp_mpi_share_list(struct cp_sendq *q, int walk_ret, uint64_t *total, char *msg, size_t len);

/*
 * cp_mpi_same_dir() - serve: whether every rank's @dirfd is one directory
 * whose locks every rank sees (rank 0 makes a file there and holds a
 * lock over it; every other rank must find the file and be refused the
 * lock). 0, or CP_EXIT_LOCAL_IO with why in @msg (every rank gets it).
 */
int cp_mpi_same_dir(int dirfd, char *msg, size_t len);

/*
 * The list's rules for every connection of a send: on its own list when
 * not --mpi (and on rank 0), across ranks with --mpi. The other ranks
 * take in batches and tell their stores in batches, so that MPI's
 * messages (and the waits for its answers) per file do not grow with the
 * ranks: an answer gives a connection up to CP_MPIQ_BATCH entries, fewer
 * once they hold CP_MPIQ_BATCH_BYTES, and a connection asks for its
 * next batch when half of one went, so that it seldom waits for the
 * answer; a store is told with the rank's next request, at once where
 * others may wait for it (a MKDIR, a range), or by cp_mpiq_tick().
 */
#define CP_MPIQ_BATCH	    32
#define CP_MPIQ_BATCH_BYTES (1u << 20)

struct cp_mpiq_pair {
	int32_t idx, pad;
	uint64_t sum;
};

struct cp_mpiq {
	struct cp_sendq *q;
	int rank, size;
	pthread_mutex_t mu; /* over what follows but stop; one request to rank 0 at a time */
	/* rank 0: the thread answering the others, until each said done */
	pthread_t server;
	bool server_on;
	/* rank 0, on the server's thread: another rank stored an entry that
	 * lets one go (wake the waiting connections), or failed with
	 * @result (end every connection; m->stop is set already) */
	void (*on_ready)(void *data);
	void (*on_fail)(void *data, int result, const char *msg);
	/* rank 0, optional: entry @i was taken for connection @conn (numbered
	 * across ranks: rank r's k is r * CP_SEND_CONNS_MAX + k), under no lock */
	void (*on_take)(void *data, int conn, int i);
	void *data;
	/* What every rank ends with once one failed (the first failure, set
	 * by cp_mpiq_fail() on rank 0 and by a failure another rank told it;
	 * answered to every request after; learned by the others from it). */
	atomic_int stop;
	pthread_mutex_t stop_mu; /* over stop_msg */
	char stop_msg[200];
	uint64_t requests; /* sent (other ranks) or answered (rank 0) */
	/* rank 0: each other rank's acknowledged bytes, as it last said */
	_Atomic uint64_t *bytes;
	/* the other ranks: each connection's entries taken, not yet handed
	 * out ([k][CP_MPIQ_BATCH], held[k] of them from next[k]) */
	struct cp_mpiq_pair (*taken)[CP_MPIQ_BATCH];
	int held[CP_SEND_CONNS_MAX], next[CP_SEND_CONNS_MAX];
	/* the other ranks: stores not yet told, since told_ns */
	struct cp_mpiq_pair untold[CP_MPIQ_BATCH];
	int nuntold;
	uint64_t told_ns;
	/* the other ranks: each connection's next take, asked ahead once
	 * half of a batch of several went (cp/ranks.c) */
	void *ahead;
};

/* cp_mpiq_start() - @q's rules for this send; with @mpi across the job's
 * ranks (between cp_mpi_init() and cp_mpi_fini(); rank 0 starts its
 * server). 0, or a negative errno. */
int cp_mpiq_start(struct cp_mpiq *m, struct cp_sendq *q, bool mpi);
/*
 * cp_mpiq_take() - cp_sendq_take() on rank 0's list for this rank's
 * connection @conn: the entry, -1 when every entry went, -2 to wait, -3
 * when the run stops (m->stop says with what), -ENOMEM. A CP_FILE_COMMIT
 * entry's folded sum in *sum.
 */
int cp_mpiq_take(struct cp_mpiq *m, int conn, uint64_t *sum);
/* cp_mpiq_stored() - cp_sendq_stored() on rank 0's list: whether an
 * entry may go now (on rank 0 only; the others' waiting connections ask
 * again on their next pass). */
bool cp_mpiq_stored(struct cp_mpiq *m, int i, uint64_t sum);
/* cp_mpiq_tick() - the other ranks, on a pass of the loop: stores kept
 * back for @hold_ns or longer are told now. */
void cp_mpiq_tick(struct cp_mpiq *m, uint64_t hold_ns);
/* cp_mpiq_fail() - this rank failed with @result (@msg): every rank
 * stops (on rank 0 at once, the others as they ask it next). */
void cp_mpiq_fail(struct cp_mpiq *m, int result, const char *msg);
/* cp_mpiq_stopped() - 0, or the result every rank stops with (asking
 * rank 0 from the other ranks, telling it this rank's @bytes so far). */
int cp_mpiq_stopped(struct cp_mpiq *m, uint64_t bytes);
/* cp_mpiq_others_bytes() - rank 0: the other ranks' bytes, as each last
 * said; 0 elsewhere. */
uint64_t cp_mpiq_others_bytes(const struct cp_mpiq *m);
/* cp_mpiq_finish() - this rank's connections all ended, with @result
 * (@msg): the others tell rank 0 (and every store kept back); rank 0
 * waits for every rank to have done so. */
void cp_mpiq_finish(struct cp_mpiq *m, int result, const char *msg);

#endif
