/* SPDX-License-Identifier: MIT */
/* ringrdma-cp serve: the listener and its connections (rx.c). */
#ifndef CP_SERVE_H
#define CP_SERVE_H

#include "cp.h"
#include "loop.h"

struct rx;

#define RX_SENDS       8 /* WELCOME/READY/DONE/ERROR and at most 2 GRANTs */
#define RX_SPARE_RECVS 4

struct serve {
	struct cp_loop lp;
	const struct cp_opts *o;
	int dirfd;
	rr_listener *l;
	struct rx *conns; /* every connection not yet freed */
	unsigned int active;   /* admitted (token checked) and not ended */
	unsigned int admitted; /* ever admitted: what --count counts */
	unsigned int unauth;   /* not yet admitted, not closing: --max-pending */
	unsigned int ended, failures, refused; /* of admitted; refused: all others */
	bool closing;
	bool mw_warned; /* said once: the device has no memory windows */
	int result; /* first failure's exit code */
	uint64_t files, bytes, chunks, last_checksum;
	uint64_t start_ns, first_ns;
};

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
/* --max-pending reached: drop the oldest connection still without HELLO. */
bool rx_evict_oldest(struct serve *s);
void rx_set_next(struct rx *r, struct rx *next);

#endif
