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
#include "loop.h"

struct rx;

#define RX_SENDS       8 /* WELCOME/READY/DONE/ERROR and at most 2 GRANTs */
#define RX_SPARE_RECVS 4

/* What every thread of serve shares. */
struct serve_all {
	const struct cp_opts *o;
	int dirfd;
	atomic_uint unauth;   /* not yet admitted, not closing: --max-pending */
	atomic_bool mw_warned; /* said once: the device has no memory windows */
	/* Set once: every connection is aborted with why, and no new one
	 * starts; each group's loop sees it at its next pass (a tick at the
	 * latest, every 100 ms). */
	atomic_bool closing;
	const char *_Atomic why;
	atomic_bool exit; /* the listener is gone: groups leave their loops */
	pthread_mutex_t mu; /* the rest */
	unsigned int active;   /* admitted (token checked) and not ended */
	unsigned int admitted; /* ever admitted: what --count counts */
	int result;	       /* first failure's exit code */
	uint64_t files, bytes, last_checksum, first_ns;
	struct serve **groups; /* --threads N > 1: N groups */
	unsigned int ngroups;
};

/* One loop: the listener's thread, or a group's. */
struct serve {
	struct cp_loop lp;
	struct serve_all *all;
	const struct cp_opts *o; /* all->o */
	int dirfd;		 /* all->dirfd */
	bool group;		 /* a --threads group, not the listener's loop */
	rr_listener *l;		 /* the listener's loop only */
	struct rx *conns;	 /* every connection not yet freed */
	unsigned int ended, failures, refused; /* of admitted; refused: all others */
	bool closing;
	atomic_bool drained; /* a group: closing and no connection left */
	uint64_t chunks;
	uint64_t files_ahead; /* files begun before the one before was stored */
	/* a group's thread */
	pthread_t thread;
	sem_t ready;
	int init_rc;
};

/* serve.c, for rx.c: admit a connection whose token passed (0), or say
 * why not in @why (-EBUSY). */
int serve_admit(struct serve *s, char *why, size_t len);
/* A file was stored. */
void serve_stored(struct serve *s, uint64_t bytes, uint64_t checksum);

/* rx.c: one receiving connection. */
struct rx *rx_create(struct serve *s, rr_ep *ep);
/* The connection is established (on_accept). */
void rx_accepted(struct rx *r);
/* Give up on the connection (interrupted, shutting down). */
void rx_abort(struct rx *r, const char *why);
/* Free @r's memory windows now: before its endpoint goes with the bridge. */
void rx_free_windows(struct rx *r);
enum rx_poll_res {
	RX_ALIVE,   /* still running */
	RX_ENDED,   /* an established connection ended; freed; *result set */
	RX_DROPPED, /* never established; freed */
	RX_REFUSED, /* established but never admitted (token, HELLO); freed */
};
/* Called every loop pass. */
enum rx_poll_res rx_poll(struct rx *r, int *result);
struct rx *rx_next(struct rx *r);
/* --max-pending reached: drop the oldest connection still without HELLO
 * (of this thread's). */
bool rx_evict_oldest(struct serve *s);
void rx_set_next(struct rx *r, struct rx *next);

#endif
