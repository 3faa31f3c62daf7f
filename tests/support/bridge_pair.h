/* SPDX-License-Identifier: MIT */
/*
 * Test harness: a bridge on its own ring with a listener and a client
 * endpoint connected to it (both ends in one thread, through rxe).
 */
#ifndef RR_TESTS_BRIDGE_PAIR_H
#define RR_TESTS_BRIDGE_PAIR_H

#include <stdbool.h>
#include <stdint.h>

#include <ringrdma.h>

#include "test_ring.h"

struct bp_side {
	rr_ep *ep;
	int connect_status; /* on_connect's status; 1 until called */
	int connect_calls;
	int down_status; /* on_disconnect's status; 1 until called */
	int down_calls;
};

struct bridge_pair {
	struct io_uring ring;
	rr_bridge *b;
	rr_listener *l;
	struct bp_side srv, cli;
	int accepts;
};

/* Ring, bridge, listener on addr, client connected to it; 0 or -errno. */
int bp_open(struct bridge_pair *p, const char *addr, const struct rr_ep_opts *opts);
/* The same with the listener's and the client's options apart. */
int bp_open2(struct bridge_pair *p, const char *addr, const struct rr_ep_opts *srv_opts,
	     const struct rr_ep_opts *cli_opts);
/* Run the loop until *flag becomes non-zero or timeout_ms passes. */
int bp_run_until(struct bridge_pair *p, const volatile int *flag, int timeout_ms);
/* Run the loop until pred(arg) is true or timeout_ms passes; 0 or -ETIMEDOUT. */
int bp_run_pred(rr_bridge *b, bool (*pred)(void *), void *arg, int timeout_ms);
void bp_close(struct bridge_pair *p);

uint64_t bp_now_ms(void);
/* Open file descriptors of this process. */
int bp_count_fds(void);
/* Resident set size in KiB. */
long bp_rss_kib(void);

#endif
