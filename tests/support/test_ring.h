/* SPDX-License-Identifier: MIT */
/*
 * Rings for the lab tests, set up the way the environment asks:
 *   RR_TEST_RING_FLAGS  io_uring setup flags (hex or decimal), e.g. 0x3000
 *                       (SINGLE_ISSUER|DEFER_TASKRUN), 0x100 (COOP_TASKRUN),
 *                       0x2 (SQPOLL); the same variable as the unit suite's.
 *   RR_TEST_SQ_ENTRIES  SQ size instead of the test's own, e.g. 8 so that
 *                       the bridge meets a full SQ.
 *   RR_TEST_BRIDGE_FLAGS rr_bridge_opts.flags the tests' bridges add, e.g.
 *                       8 (RR_BRIDGE_RING_READ).
 *   RR_TEST_CYCLES, RR_TEST_ROUNDS, RR_TEST_CONNS  how many connect
 *                       cycles, ping-pong rounds and connections the long
 *                       cases run: fewer where a flavour repeats a case the
 *                       plain run holds at full length.
 * tests/meson.build runs the bridge tests once per flavour.
 */
#ifndef RR_TESTS_TEST_RING_H
#define RR_TESTS_TEST_RING_H

#include <liburing.h>

#include "ringrdma.h"

/* io_uring_queue_init() with the flavour's flags and size; 0 or -errno. */
int rr_test_ring_init(struct io_uring *ring, unsigned int default_entries);
/* The flags the flavour asks for (0 without RR_TEST_RING_FLAGS). */
unsigned int rr_test_ring_flags(void);
/* Bridge flags the flavour adds (0 without RR_TEST_BRIDGE_FLAGS), and
 * bridge options with only those. */
unsigned int rr_test_bridge_flags(void);
const struct rr_bridge_opts *rr_test_bridge_opts(void);
/* A count the environment may lower (RR_TEST_CYCLES and the others):
 * @dflt without it, never below @least. */
unsigned int rr_test_count(const char *name, unsigned int dflt, unsigned int least);

#endif
