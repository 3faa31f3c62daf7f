// SPDX-License-Identifier: MIT
/*
 * Structs cross the ABI with their size: a caller built against another
 * header than the library's gets what its size covers, never a read or a
 * write past its struct (see "Structs" in ringrdma.h).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <ringrdma.h>

#include "abi.h"

static struct io_uring ring;

static void ring_up(void)
{
	cr_assert_eq(io_uring_queue_init(8, &ring, 0), 0);
}

static void ring_down(void)
{
	io_uring_queue_exit(&ring);
}

TestSuite(abi, .init = ring_up, .fini = ring_down);

static void no_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
}

static void no_ep_cb(rr_ep *ep, int status, void *data)
{
}

static void no_accept(rr_listener *l, rr_ep *ep, void *data)
{
}

/* A struct from a header newer than the library: ours, then members this
 * library does not know. */
struct newer_bridge_opts {
	struct rr_bridge_opts known;
	uint64_t unknown;
};

Test(abi, a_struct_older_than_the_soname_is_refused)
{
	struct rr_bridge_opts o = {.budget = 7};
	struct rr_ep_opts eo = {0};
	struct rr_cq_opts co = {.on_wc = no_wc};
	struct {
		struct rr_cq_opts known;
		char unknown;
	} big = {.known = {.on_wc = no_wc}, .unknown = 1};
	struct ibv_context *ctx = (struct ibv_context *)&co; /* never used */
	rr_bridge *b = NULL;
	rr_cq *cq = NULL;
	rr_ep *ep = NULL;
	rr_listener *l = NULL;

	cr_expect_eq(rr_bridge_create(&b, &ring, &o, RR__BRIDGE_OPTS_SIZE_0_8 - sizeof(void *)),
		     -EINVAL);
	cr_expect_eq(rr_bridge_create(&b, &ring, &o, 0), -EINVAL);
	cr_assert_null(b);
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	/* Every other argument is valid: the size is the only fault (the
	 * -E2BIG control shows the size is judged before anything else). */
	cr_expect_eq(rr_cq_create(b, NULL, ctx, &co, RR__CQ_OPTS_SIZE_0_8 - 1, &cq), -EINVAL);
	cr_expect_eq(rr_cq_create(b, NULL, ctx, &big.known, sizeof(big), &cq), -E2BIG);
	cr_expect_eq(rr_connect(b, "127.0.0.1", 1, &eo, sizeof(eo) - sizeof(int), no_ep_cb, &ep),
		     -EINVAL);
	cr_expect_eq(rr_listen(b, "127.0.0.1", 0, &eo, 4, no_accept, NULL, &l), -EINVAL);
	cr_expect_null(cq);
	cr_expect_null(ep);
	cr_expect_null(l);
	cr_assert_eq(rr_bridge_destroy(b), 0);
}

Test(abi, a_newer_struct_is_taken_when_its_unknown_members_are_zero)
{
	struct newer_bridge_opts o = {.known = {.budget = 3}, .unknown = 0};
	rr_bridge *b = NULL;

	cr_assert_eq(rr_bridge_create(&b, &ring, &o.known, sizeof(o)), 0);
	cr_assert_eq(rr_bridge_destroy(b), 0);
}

Test(abi, a_newer_struct_asking_for_more_is_refused)
{
	struct newer_bridge_opts o = {.known = {.budget = 3}, .unknown = 1};
	struct {
		struct rr_ep_opts known;
		char unknown[3];
	} eo = {.unknown = {0, 0, 1}};
	rr_bridge *b = NULL;
	rr_ep *ep = NULL;

	cr_expect_eq(rr_bridge_create(&b, &ring, &o.known, sizeof(o)), -E2BIG);
	cr_assert_null(b);
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_expect_eq(rr_connect(b, "127.0.0.1", 1, &eo.known, sizeof(eo), NULL, &ep), -E2BIG);
	cr_expect_null(ep);
	cr_assert_eq(rr_bridge_destroy(b), 0);
}

/*
 * A flag this library does not know asks for a feature it lacks: refused,
 * as a newer struct's members are. (Unknown bits were taken and ignored.)
 */
Test(abi, an_unknown_flag_is_refused)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_LOOP_WAITS << 1};
	struct rr_ep_opts eo = {.flags = RR_EP_POST_NOW << 1};
	rr_bridge *b = NULL;
	rr_listener *l = NULL;
	rr_ep *ep = NULL;

	cr_expect_eq(rr_bridge_create(&b, &ring, &o, sizeof(o)), -EINVAL);
	cr_assert_null(b);
	o.flags = 1u << 31;
	cr_expect_eq(rr_bridge_create(&b, &ring, &o, sizeof(o)), -EINVAL);
	cr_assert_null(b);
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_expect_eq(rr_connect(b, "127.0.0.1", 1, &eo, sizeof(eo), no_ep_cb, &ep), -EINVAL);
	cr_expect_eq(rr_listen(b, "127.0.0.1", 0, &eo, sizeof(eo), no_accept, NULL, &l), -EINVAL);
	cr_expect_null(ep);
	cr_expect_null(l);
	cr_assert_eq(rr_bridge_destroy(b), 0);
}

/* A size no options struct will ever have (over a page) is refused before
 * anything is read past the caller's struct. */
Test(abi, an_absurd_size_is_refused_unread)
{
	long page = sysconf(_SC_PAGESIZE);
	/* The struct ends where an unreadable page begins. */
	char *map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct rr_bridge_opts *o;
	rr_bridge *b = NULL;

	cr_assert_neq(map, MAP_FAILED);
	cr_assert_eq(mprotect(map + page, (size_t)page, PROT_NONE), 0);
	o = (struct rr_bridge_opts *)(map + page - sizeof(*o));
	cr_expect_eq(rr_bridge_create(&b, &ring, o, (size_t)page + 1), -E2BIG);
	cr_assert_null(b);
	cr_expect_eq(rr_bridge_create(&b, &ring, o, (size_t)1 << 40), -E2BIG);
	cr_assert_null(b);
	munmap(map, 2 * (size_t)page);
}

Test(abi, stats_fill_exactly_the_callers_size)
{
	struct {
		struct rr_bridge_stats known;
		uint64_t unknown;
	} big;
	struct rr_bridge_stats st;
	size_t head = offsetof(struct rr_bridge_stats, cm_events);
	rr_bridge *b = NULL;

	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	memset(&big, 0xff, sizeof(big));
	cr_assert_eq(rr_bridge_get_stats(b, &big.known, sizeof(big)), 0);
	cr_expect_eq(big.known.cqes, 0);
	cr_expect_eq(big.unknown, 0, "a newer caller's extra counters read as zero");
	memset(&st, 0xff, sizeof(st));
	cr_assert_eq(rr_bridge_get_stats(b, &st, head), 0);
	cr_expect_eq(st.kicks, 0);
	cr_expect_eq(st.cm_events, UINT64_MAX, "written past the caller's size");
	/* A caller built against 0.9.0's header, which ends at wrs. */
	memset(&st, 0xff, sizeof(st));
	cr_assert_eq(rr_bridge_get_stats(b, &st, offsetof(struct rr_bridge_stats, placed_dropped)),
		     0);
	cr_expect_eq(st.wrs, 0);
	cr_expect_eq(st.placed_dropped, UINT64_MAX, "written past a 0.9.0 caller's size");
	/* One built before min_waits, which ends at placed_dropped. */
	memset(&st, 0xff, sizeof(st));
	cr_assert_eq(rr_bridge_get_stats(b, &st, offsetof(struct rr_bridge_stats, min_waits)), 0);
	cr_expect_eq(st.placed_dropped, 0);
	cr_expect_eq(st.min_waits, UINT64_MAX, "written past a pre-min_waits caller's size");
	cr_expect_eq(rr_bridge_get_stats(b, NULL, sizeof(st)), -EINVAL);
	cr_expect_eq(rr_bridge_get_stats(NULL, &st, sizeof(st)), -EINVAL);
	cr_assert_eq(rr_bridge_destroy(b), 0);
}

/* A stats size no struct will ever have (over a page, as for options) is
 * refused with -E2BIG and nothing written; up to a page, what the caller
 * has beyond our counters reads as zero. */
Test(abi, stats_refuse_an_absurd_size_untouched)
{
	long page = sysconf(_SC_PAGESIZE);
	/* A page, then one the caller never granted. */
	char *map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct rr_bridge_stats *st;
	size_t old = offsetof(struct rr_bridge_stats, min_waits);
	rr_bridge *b = NULL;

	cr_assert_geq(page, RR__STRUCT_SIZE_MAX);
	cr_assert_neq(map, MAP_FAILED);
	cr_assert_eq(mprotect(map + page, (size_t)page, PROT_NONE), 0);
	st = (struct rr_bridge_stats *)map;
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	/* An older caller's size: its prefix only. */
	memset(map, 0xff, (size_t)page);
	cr_assert_eq(rr_bridge_get_stats(b, st, old), 0);
	cr_expect_eq(st->cqes, 0);
	cr_expect_eq(st->min_waits, UINT64_MAX, "written past an older caller's size");
	/* This header's size, exactly. */
	memset(map, 0xff, (size_t)page);
	cr_assert_eq(rr_bridge_get_stats(b, st, sizeof(*st)), 0);
	cr_expect_eq(st->min_waits, 0);
	cr_expect_eq((unsigned char)map[sizeof(*st)], 0xff, "written past the caller's size");
	/* The most a newer caller may have: all of it filled, the rest zero. */
	memset(map, 0xff, (size_t)page);
	cr_assert_eq(rr_bridge_get_stats(b, st, RR__STRUCT_SIZE_MAX), 0);
	for (long i = 0; i < RR__STRUCT_SIZE_MAX; i++)
		if (map[i])
			cr_assert_fail("byte %ld of a page-sized caller left %#x", i,
				       (unsigned char)map[i]);
	/* Over a page, up to absurd: refused, not one byte written. */
	memset(map, 0xff, (size_t)page);
	cr_expect_eq(rr_bridge_get_stats(b, st, RR__STRUCT_SIZE_MAX + 1), -E2BIG);
	cr_expect_eq(rr_bridge_get_stats(b, st, (size_t)1 << 40), -E2BIG);
	cr_expect_eq(rr_bridge_get_stats(b, st, SIZE_MAX), -E2BIG);
	for (long i = 0; i < page; i++)
		if ((unsigned char)map[i] != 0xff)
			cr_assert_fail("byte %ld written by a refused call", i);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	munmap(map, 2 * (size_t)page);
}

/* What a later library does with this release's callers: members past
 * their size take the default, and nothing past it is read. */
Test(abi, members_past_an_older_callers_size_are_defaults)
{
	struct rr_ep_opts dst;
	struct rr_ep_opts src;
	size_t head = offsetof(struct rr_ep_opts, initiator_depth);

	memset(&src, 0xab, sizeof(src));
	cr_assert_eq(rr__opts_in(&dst, sizeof(dst), &src, head, head), 0);
	cr_expect_eq(memcmp(&dst, &src, head), 0);
	cr_expect_eq(dst.initiator_depth, 0);
	cr_expect_eq(dst.flags, 0);
	cr_expect_eq(dst.private_data, NULL);
	cr_expect_eq(rr__opts_in(&dst, sizeof(dst), &src, head - 1, head), -EINVAL);
	cr_expect_eq(rr__opts_in(&dst, sizeof(dst), NULL, 12345, head), 0);
	cr_expect_eq(dst.max_send_wr, 0);
}

/* rr_bridge_opts before min_wait_us (0.9.0's): taken, and min-wait is off. */
Test(abi, bridge_opts_without_min_wait_take_the_default)
{
	struct rr_bridge_opts dst, src;
	rr_bridge *b = NULL;

	memset(&src, 0xab, sizeof(src));
	cr_assert_eq(rr__opts_in(&dst, sizeof(dst), &src, RR__BRIDGE_OPTS_SIZE_0_8,
				 RR__BRIDGE_OPTS_SIZE_0_8),
		     0);
	cr_expect_eq(dst.min_wait_us, 0);
	cr_expect_eq(dst.wait_nr, 0);
	cr_expect_eq(dst.cq_batch, src.cq_batch);
	memset(&src, 0, sizeof(src));
	src.min_wait_us = 100;
	cr_assert_eq(rr_bridge_create(&b, &ring, &src, RR__BRIDGE_OPTS_SIZE_0_8), 0);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	cr_assert_eq(rr_bridge_create(&b, &ring, &src, sizeof(src)), 0);
	cr_assert_eq(rr_bridge_destroy(b), 0);
}
