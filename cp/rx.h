/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp serve: one receiving connection. Whoever holds receivers
 * (serve.c) creates and drives them; they report back through the
 * struct rx_env it gives them, and know nothing of it.
 */
#ifndef CP_RX_H
#define CP_RX_H

#include <stdatomic.h>

#include "cp.h"
#include "gate.h"
#include "loop.h"
#include "store.h"
#include "tree.h"

struct rx;

#define RX_SENDS       8 /* WELCOME/READY/DONE/ERROR and at most 2 GRANTs */
#define RX_SPARE_RECVS 4

/* What the receivers of one loop run in and count into, and the hooks
 * by which they report to their holder. */
struct rx_env {
	struct cp_loop *lp;
	const struct cp_opts *o;
	int dirfd;	      /* where files are stored */
	struct cp_gate *gate; /* not yet admitted, source failures (every loop's) */
	struct cp_tally *n;   /* the loop's: chunks and files_ahead counted here */
	/* The directories MKDIRs made, every loop's: only those get their
	 * DIR_META without --force (NULL: none do). */
	struct cp_dirs *made;
	/* The token passed: admit the connection (0), or say why not in @why
	 * (-EBUSY). */
	int (*admit)(void *data, char *why, size_t len);
	/* A file was stored: @bytes with checksum @sum. */
	void (*stored)(void *data, uint64_t bytes, uint64_t sum);
	void *data;
};

struct rx *rx_create(struct rx_env *env, rr_ep *ep);
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
	RX_REFUSED, /* never admitted (token, HELLO, evicted, half-open); freed */
};
/* Called every loop pass. */
enum rx_poll_res rx_poll(struct rx *r, int *result);
/* Given up on for over RX_STUCK_S and still waiting for file I/O of its
 * own (a hung file system): its holder need not wait for it to end, and
 * must then never free it. */
#define RX_STUCK_S 3
bool rx_stuck(struct rx *r, uint64_t now);
/* The holder keeps its receivers in a list of their own links. */
struct rx *rx_next(struct rx *r);
void rx_set_next(struct rx *r, struct rx *next);

#endif
