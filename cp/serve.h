/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp serve: the listener and its connections (rx.c), on one
 * thread, or spread over --threads poll groups, each a thread with a ring
 * and bridge of its own (struct serve), sharing struct serve_all.
 */
#ifndef CP_SERVE_H
#define CP_SERVE_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>

#include "cp.h"
#include "gate.h"
#include "loop.h"
#include "rx.h"

/* What every thread of serve shares. */
struct serve_all {
	const struct cp_opts *o;
	int dirfd;
	struct cp_gate gate; /* not yet admitted: --max-pending, failures per source */
	struct cp_dirs made; /* directories made by the run's MKDIRs */
	/* Set once: every connection is aborted with why, and no new one
	 * starts; each group's loop sees it at its next pass (a tick at the
	 * latest, every 100 ms). */
	atomic_bool closing;
	const char *_Atomic why;
	atomic_bool exit;      /* the listener is gone: groups leave their loops */
	pthread_mutex_t mu;    /* the rest */
	unsigned int active;   /* admitted (token checked) and not ended */
	unsigned int admitted; /* ever admitted: what --count counts */
	int result;	       /* first failure's exit code */
	struct cp_tally n;     /* files, bytes, checksum */
	uint64_t first_ns;
	struct serve **groups; /* --threads N > 1: N groups */
	unsigned int ngroups;
};

/* One loop: the listener's thread, or a group's. */
struct serve {
	struct cp_loop lp;
	struct serve_all *all;
	struct rx_env env; /* its connections' */
	bool group;	   /* a --threads group, not the listener's loop */
	rr_listener *l;	   /* the listener's loop only */
	struct rx *conns;  /* every connection not yet freed */
	/* connections: admitted, ended; failures: of those; refused: all
	 * others; chunks, files_ahead: its connections' (env.n) */
	struct cp_tally n;
	bool closing;
	atomic_bool drained; /* a group: closing and no connection left */
	/* a group's thread */
	pthread_t thread;
	sem_t ready;
	int init_rc;
};

#endif
