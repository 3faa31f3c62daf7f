// SPDX-License-Identifier: MIT
/*
 * The bridge's written contract where it used to break, on the host with
 * stub verbs and through the public API only: a dead device freed once
 * while a callback drops its last user; a DEFER_TASKRUN ring with a busy
 * CQ; SQEs that find no room; application CQEs with no callback; an
 * application's linked chain around rr_ calls; rings the bridge cannot
 * serve; a poll that keeps failing; late CQEs of an earlier bridge.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <ringrdma.h>

#include "fake_verbs.h"

static unsigned int wcs;

static void count_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	wcs++;
}

static void init_ring(struct io_uring *ring, unsigned int entries, unsigned int flags)
{
	int rc = io_uring_queue_init(entries, ring, flags);

	if (rc == -EINVAL && flags)
		cr_skip_test("kernel without io_uring setup flags %#x", flags);
	cr_assert_eq(rc, 0, "io_uring_queue_init: %s", strerror(-rc));
}

/* A ring, a bridge on it, one channel and one CQ on that channel. */
static rr_bridge *open_one(struct io_uring *ring, unsigned int entries, unsigned int flags,
			   const struct rr_bridge_opts *o, const struct rr_cq_opts *co, rr_cq **cq)
{
	rr_channel *ch;
	rr_bridge *b;

	init_ring(ring, entries, flags);
	cr_assert_eq(rr_bridge_create(&b, ring, o, sizeof(struct rr_bridge_opts)), 0);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &ch), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, co, sizeof(struct rr_cq_opts), cq), 0);
	return b;
}

/* ---- a dead device ---- */

static rr_cq *victim;
static unsigned int async_seen;

static void destroy_on_fatal(rr_bridge *b, const struct ibv_async_event *ev, void *data)
{
	async_seen++;
	if (ev->event_type == IBV_EVENT_DEVICE_FATAL && victim) {
		cr_assert_eq(rr_cq_destroy(victim), 0);
		victim = NULL;
	}
}

Test(device, fatal_event_whose_callback_drops_the_last_user)
{
	struct rr_bridge_opts o = {.on_async_event = destroy_on_fatal};
	struct rr_cq_opts co = {.on_wc = count_wc};
	struct io_uring ring;
	rr_bridge *b;

	cr_assert_eq(fake_async_open(), 0);
	init_ring(&ring, 32, 0);
	cr_assert_eq(rr_bridge_create(&b, &ring, &o, sizeof(o)), 0);
	/* NULL channel: the CQ is the device's only user. */
	cr_assert_eq(rr_cq_create(b, NULL, &fake_ctx, &co, sizeof(co), &victim), 0);
	cr_assert_eq(fake_pds_live, 1);
	/* The device keeps reading events after the callback (ASan/valgrind
	 * catch a device freed under it). */
	fake_async_event(IBV_EVENT_DEVICE_FATAL);
	fake_async_event(IBV_EVENT_PORT_ERR);
	for (int i = 0; i < 50 && async_seen < 2; i++)
		cr_assert_geq(rr_bridge_run_once(b, 20), 0);
	cr_assert_eq(async_seen, 2, "both events reach the application");
	cr_assert_null(victim);
	cr_assert_eq(fake_pds_live, 0, "a dead device is let go once its last user is gone");
	cr_assert_eq(fake_channels_live, 0);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
	fake_async_close();
}

/* ---- one device, two bridges ---- */

static unsigned int heard[2];

static void count_async(rr_bridge *b, const struct ibv_async_event *ev, void *data)
{
	(void)b;
	(void)ev;
	heard[(uintptr_t)data]++;
}

/* Two bridges of one process on one device share its PD, and read its one
 * async fd: a group hears every event once even when the other bridge
 * read it (before, whoever read first kept it). */
Test(device, a_group_hears_the_events_another_bridge_read)
{
	struct rr_bridge_opts oa = {.on_async_event = count_async, .data = (void *)0};
	struct rr_bridge_opts ob = {
		.on_async_event = count_async, .data = (void *)1, .flags = RR_BRIDGE_GROUP};
	struct rr_cq_opts co = {.on_wc = count_wc};
	struct io_uring ra, rb;
	rr_bridge *a, *b;
	rr_cq *ca, *cb;

	heard[0] = heard[1] = 0;
	cr_assert_eq(fake_async_open(), 0);
	init_ring(&ra, 32, 0);
	init_ring(&rb, 32, 0);
	cr_assert_eq(rr_bridge_create(&a, &ra, &oa, sizeof(oa)), 0);
	cr_assert_eq(rr_bridge_create(&b, &rb, &ob, sizeof(ob)), 0);
	cr_assert_eq(rr_cq_create(a, NULL, &fake_ctx, &co, sizeof(co), &ca), 0);
	cr_assert_eq(rr_cq_create(b, NULL, &fake_ctx, &co, sizeof(co), &cb), 0);
	cr_assert_eq(fake_pds_live, 1, "one PD per device for the process");
	cr_assert_geq(rr_bridge_run_once(b, 0), 0); /* b's polls reach the kernel */
	for (int i = 0; i < 3; i++)
		fake_async_event(IBV_EVENT_PORT_ERR);
	/* Only a runs: it reads all three. */
	for (int i = 0; i < 50 && heard[0] < 3; i++)
		cr_assert_geq(rr_bridge_run_once(a, 20), 0);
	cr_assert_eq(heard[0], 3);
	cr_assert_eq(heard[1], 0);
	/* a's next pass submits what it owes b (MSG_RING, or its eventfd). */
	cr_assert_geq(rr_bridge_run_once(a, 0), 0);
	for (int i = 0; i < 50 && heard[1] < 3; i++)
		cr_assert_geq(rr_bridge_run_once(b, 20), 0);
	for (int i = 0; i < 5; i++)
		cr_assert_geq(rr_bridge_run_once(b, 5), 0);
	cr_assert_eq(heard[1], 3, "the group heard %u of 3", heard[1]);
	cr_assert_eq(heard[0], 3);
	cr_assert_eq(rr_cq_destroy(ca), 0);
	cr_assert_eq(rr_cq_destroy(cb), 0);
	cr_assert_eq(rr_bridge_destroy(a), 0);
	cr_assert_eq(fake_pds_live, 1, "the other bridge still uses it");
	cr_assert_eq(rr_bridge_destroy(b), 0);
	cr_assert_eq(fake_pds_live, 0);
	io_uring_queue_exit(&ra);
	io_uring_queue_exit(&rb);
	fake_async_close();
}

/* ---- the built-in loop on a DEFER_TASKRUN ring ---- */

Test(loop, defer_taskrun_ring_with_a_busy_cq_still_hears_channels)
{
	struct rr_cq_opts busy = {.on_wc = count_wc, .mode = RR_WAIT_BUSY};
	struct rr_cq_opts event = {.on_wc = count_wc};
	rr_cq *cq_busy, *cq_event;
	struct io_uring ring;
	rr_channel *ch;
	rr_bridge *b;

	wcs = 0;
	init_ring(&ring, 32, IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &ch), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, &busy, sizeof(busy), &cq_busy), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, &event, sizeof(event), &cq_event), 0);
	for (int i = 0; i < 5; i++)
		cr_assert_geq(rr_bridge_run_once(b, 0), 0);
	/* The event CQ is armed: this raises an event on the channel. */
	fake_complete(fake_cq_of(rr_cq_ibv(cq_event)), 3, 1);
	for (int i = 0; i < 2000 && wcs < 3; i++) {
		cr_assert_geq(rr_bridge_run_once(b, 0), 0);
		if (i > 100)
			usleep(1000);
	}
	cr_assert_eq(wcs, 3, "the channel's poll completion never arrived");
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* A busy CQ keeps every pass from waiting; how often does such a pass
 * enter the kernel just to collect deferred completions? */
static void quiet_enters_case(unsigned int flags, unsigned int most)
{
	struct rr_cq_opts busy = {.on_wc = count_wc, .mode = RR_WAIT_BUSY};
	struct rr_cq_opts event = {.on_wc = count_wc};
	rr_cq *cq_busy, *cq_event;
	struct io_uring ring;
	unsigned int enters;
	rr_channel *ch;
	rr_bridge *b;

	wcs = 0;
	init_ring(&ring, 32, flags);
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &ch), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, &busy, sizeof(busy), &cq_busy), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, &event, sizeof(event), &cq_event), 0);
	for (int i = 0; i < 5; i++)
		cr_assert_geq(rr_bridge_run_once(b, 0), 0);
	enters = fake_get_events;
	for (int i = 0; i < 160; i++)
		cr_assert_geq(rr_bridge_run_once(b, 0), 0);
	enters = fake_get_events - enters;
	cr_assert_leq(enters, most, "%u of 160 quiet passes entered the kernel", enters);
	/* Without the flag nothing else would run deferred completions. */
	if (most)
		cr_assert_geq(enters, 1, "no quiet pass ever entered the kernel");
	/* And the channel is still heard. */
	fake_complete(fake_cq_of(rr_cq_ibv(cq_event)), 3, 1);
	for (int i = 0; i < 2000 && wcs < 3; i++) {
		cr_assert_geq(rr_bridge_run_once(b, 0), 0);
		if (i > 100)
			usleep(1000);
	}
	cr_assert_eq(wcs, 3, "the channel's poll completion never arrived");
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

Test(loop, quiet_passes_on_a_taskrun_flag_ring_do_not_enter)
{
	quiet_enters_case(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
				  IORING_SETUP_TASKRUN_FLAG,
			  0);
	quiet_enters_case(IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG, 0);
}

Test(loop, quiet_passes_on_a_defer_ring_enter_now_and_then)
{
	quiet_enters_case(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, 160 / 8);
}

/* ---- SQEs that find no room ---- */

static struct io_uring *fill_ring;
static unsigned int app_cqes;

static void fill_sq(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	struct io_uring_sqe *sqe;

	wcs++;
	/* Application work that takes every SQE just before the bridge has
	 * to re-arm its single-shot poll. */
	while ((sqe = io_uring_get_sqe(fill_ring))) {
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, 7);
	}
}

static void count_app(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	app_cqes++;
}

static void sq_full_case(unsigned int flags)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_SINGLESHOT, .on_app_cqe = count_app};
	struct rr_cq_opts co = {.on_wc = fill_sq};
	struct rr_bridge_stats st;
	struct io_uring ring;
	rr_cq *cq;
	rr_bridge *b;

	wcs = app_cqes = 0;
	fill_ring = &ring;
	b = open_one(&ring, 8, flags, &o, &co, &cq);
	for (unsigned int round = 1; round <= 5; round++) {
		cr_assert_geq(rr_bridge_run_once(b, 0), 0);
		fake_complete(fake_cq_of(rr_cq_ibv(cq)), 1, round);
		for (int i = 0; i < 500 && wcs < round; i++)
			cr_assert_geq(rr_bridge_run_once(b, 10), 0);
		cr_assert_eq(wcs, round, "round %u: the channel went deaf", round);
	}
	rr_bridge_get_stats(b, &st, sizeof(st));
	cr_assert_gt(st.sq_full, 0, "the SQ was never full: the test did not test");
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

Test(sq, rearm_that_finds_the_sq_full_is_written_later)
{
	sq_full_case(0);
}

Test(sq, rearm_that_finds_the_sq_full_is_written_later_sqpoll)
{
	sq_full_case(IORING_SETUP_SQPOLL);
}

/* ---- application CQEs ---- */

Test(loop, app_cqe_without_callback_is_left_in_the_ring)
{
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	struct io_uring ring;
	rr_bridge *b;

	init_ring(&ring, 8, 0);
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, 0x1234);
	cr_assert_eq(rr_bridge_run_once(b, 100), -EPROTO);
	cr_assert_eq(io_uring_peek_cqe(&ring, &cqe), 0, "the application's CQE was consumed");
	cr_assert_eq(cqe->user_data, 0x1234);
	io_uring_cqe_seen(&ring, cqe);
	cr_assert_eq(rr_bridge_run_once(b, 0), 0);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* ---- an application's linked chain ---- */

static int chain_res[2];

Test(chain, bridge_sqe_never_joins_an_application_chain)
{
	struct rr_cq_opts co = {.on_wc = count_wc};
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	struct io_uring ring;
	unsigned int got = 0;
	rr_cq *cq;
	rr_bridge *b;

	b = open_one(&ring, 16, 0, NULL, &co, &cq);
	cr_assert_eq(rr_bridge_flush(b), 0);
	io_uring_submit(&ring);
	/* A fails, so B, linked to it, must be cancelled... */
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_read(sqe, -1, NULL, 0, 0);
	sqe->flags |= IOSQE_IO_LINK;
	io_uring_sqe_set_data64(sqe, 1);
	/* ...whatever the bridge needs in between (here a kick NOP). */
	cr_assert_eq(rr_cq_set_mode(cq, RR_WAIT_BUSY, 0), 0);
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, 2);
	cr_assert_geq(rr_bridge_flush(b), 0); /* the chain is closed: B has no link */
	io_uring_submit(&ring);
	for (int i = 0; i < 100 && got < 2; i++) {
		if (io_uring_wait_cqe_nr(&ring, &cqe, 1))
			continue;
		if (!rr_bridge_handle_cqe(b, cqe)) {
			cr_assert(cqe->user_data == 1 || cqe->user_data == 2);
			chain_res[cqe->user_data - 1] = cqe->res;
			got++;
		}
		io_uring_cqe_seen(&ring, cqe);
		rr_bridge_flush(b);
		io_uring_submit(&ring);
	}
	cr_assert_eq(got, 2);
	cr_assert_eq(chain_res[0], -EBADF);
	cr_assert_eq(chain_res[1], -ECANCELED, "B left the chain: it ran after A failed (res %d)",
		     chain_res[1]);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/*
 * An SQE owed while a chain was open must not wait for a flush or a bridge
 * CQE: in a loop that never flushes, the chain's own CQEs (the
 * application's) may be all that comes.
 */
Test(chain, sqe_owed_during_a_chain_is_written_without_a_flush)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_SINGLESHOT};
	struct rr_cq_opts co = {.on_wc = count_wc};
	struct __kernel_timespec ts = {.tv_nsec = 10 * 1000000};
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	struct io_uring ring;
	unsigned int app = 0;
	rr_channel *ch;
	rr_cq *cq, *cq2;
	rr_bridge *b;

	wcs = 0;
	b = open_one(&ring, 8, 0, &o, &co, &cq);
	io_uring_submit(&ring);
	/* A chain, and a channel created inside it: its poll is owed. */
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_timeout(sqe, &ts, 0, IORING_TIMEOUT_ETIME_SUCCESS);
	sqe->flags |= IOSQE_IO_LINK;
	io_uring_sqe_set_data64(sqe, 1);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &ch), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, &co, sizeof(co), &cq2), 0);
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, 2);
	fake_complete(fake_cq_of(rr_cq_ibv(cq2)), 1, 1);
	/* The application's loop: no rr_bridge_flush(). */
	for (int i = 0; i < 300 && !wcs; i++) {
		io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &ts, NULL);
		while (!io_uring_peek_cqe(&ring, &cqe)) {
			if (!rr_bridge_handle_cqe(b, cqe))
				app++;
			io_uring_cqe_seen(&ring, cqe);
		}
	}
	cr_assert_eq(app, 2);
	cr_assert_eq(wcs, 1, "the poll owed during the chain was never written");
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* ---- rings and polls the bridge cannot serve ---- */

Test(create, iopoll_ring_is_refused)
{
	struct io_uring ring;
	rr_bridge *b = NULL;

	init_ring(&ring, 8, IORING_SETUP_IOPOLL);
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), -EINVAL);
	cr_assert_null(b);
	io_uring_queue_exit(&ring);
}

/*
 * The library publishes SQEs by the tail alone, as liburing >= 2.2 does:
 * the SQ array must map entry i to SQE i, which io_uring_queue_init()
 * sets up there. An older liburing linked into the application wrote it
 * at each submit instead, and a fresh ring of it holds zeros: its first
 * SQEs published by the library would all run SQE 0. Such a ring is
 * refused; before, rr_bridge_create() took it (returned 0).
 */
Test(create, ring_without_an_identity_sq_array_is_refused)
{
	struct io_uring ring;
	rr_bridge *b = NULL;
	unsigned int keep;

	init_ring(&ring, 8, 0);
	if (!ring.sq.array)
		cr_skip_test("IORING_SETUP_NO_SQARRAY: no array to check");
	keep = ring.sq.array[1];
	ring.sq.array[1] = 0; /* as a ring of liburing < 2.2 starts */
	cr_expect_eq(rr_bridge_create(&b, &ring, NULL, 0), -EINVAL);
	cr_expect_null(b);
	if (b)
		rr_bridge_destroy(b);
	b = NULL;
	ring.sq.array[1] = keep;
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

Test(poll, channel_whose_poll_keeps_failing_is_surfaced_and_polled)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_SINGLESHOT};
	struct rr_cq_opts co = {.on_wc = count_wc};
	struct rr_bridge_stats st;
	struct io_uring ring;
	rr_cq *cq;
	rr_bridge *b;
	int fd, path, keep;

	wcs = 0;
	b = open_one(&ring, 16, 0, &o, &co, &cq);
	fake_complete(fake_cq_of(rr_cq_ibv(cq)), 1, 1);
	for (int i = 0; i < 50 && wcs < 1; i++)
		cr_assert_geq(rr_bridge_run_once(b, 10), 0);
	cr_assert_eq(wcs, 1);
	/* From now on the channel's fd cannot be polled (an O_PATH file):
	 * every re-arm fails with -EBADF. */
	fd = rr_cq_ibv(cq)->channel->fd;
	keep = dup(fd); /* the pipe keeps a reader: the fake still writes to it */
	path = open("/", O_PATH);
	cr_assert_geq(path, 0);
	cr_assert_eq(dup2(path, fd), fd);
	close(path);
	fake_complete(fake_cq_of(rr_cq_ibv(cq)), 2, 10); /* no event: the fd is gone */
	/* The passes that the failing poll's CQEs wake may hand the two out
	 * before the poll is given up: wait for both. */
	memset(&st, 0, sizeof(st));
	for (int i = 0; i < 200 && (wcs < 3 || !st.poll_failures); i++) {
		cr_assert_geq(rr_bridge_run_once(b, 10), 0);
		rr_bridge_get_stats(b, &st, sizeof(st));
	}
	cr_assert_eq(st.poll_failures, 1, "the failing poll was not reported");
	cr_assert_eq(wcs, 3, "the channel's CQ went deaf");
	cr_assert_eq(rr_bridge_destroy(b), 0);
	close(keep);
	io_uring_queue_exit(&ring);
}

/* ---- late CQEs of an earlier bridge on the same ring ---- */

Test(contract, late_cqe_of_an_earlier_bridge_matches_nothing)
{
	struct rr_cq_opts co = {.on_wc = count_wc};
	struct io_uring_sqe *sqe;
	struct io_uring_cqe late = {.res = POLLIN, .flags = IORING_CQE_F_MORE};
	struct io_uring ring;
	rr_channel *ch;
	rr_cq *cq;
	rr_bridge *b;

	wcs = 0;
	init_ring(&ring, 16, 0);
	/* Catch the first bridge's first poll SQE as it goes out. */
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &ch), 0);
	sqe = &ring.sq.sqes[(ring.sq.sqe_tail - 1) & ring.sq.ring_mask];
	cr_assert_eq(sqe->opcode, IORING_OP_POLL_ADD);
	late.user_data = sqe->user_data;
	cr_assert_eq(rr_bridge_destroy(b), 0);

	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &ch), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, &co, sizeof(co), &cq), 0);
	/* An event is pending: a CQE matched to this channel would hand the
	 * completion out. */
	fake_complete(fake_cq_of(rr_cq_ibv(cq)), 1, 1);
	cr_assert_eq(rr_bridge_handle_cqe(b, &late), 1, "still a bridge CQE");
	cr_assert_eq(wcs, 0, "a late CQE of the destroyed bridge reached the new one");
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* ---- the channel read off the critical path ---- */

static unsigned int delivered_at_wc[4];

static void note_delivered(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	if (wcs < 4)
		delivered_at_wc[wcs] = fake_cq_of(rr_cq_ibv(cq))->delivered;
	wcs++;
}

Test(dispatch, lone_armed_cq_handed_out_before_its_event_is_read)
{
	struct rr_cq_opts co = {.on_wc = note_delivered};
	struct io_uring ring;
	rr_cq *cq;
	rr_bridge *b;

	wcs = 0;
	b = open_one(&ring, 16, 0, NULL, &co, &cq);
	fake_complete(fake_cq_of(rr_cq_ibv(cq)), 2, 1);
	for (int i = 0; i < 50 && wcs < 2; i++)
		cr_assert_geq(rr_bridge_run_once(b, 10), 0);
	cr_assert_eq(wcs, 2);
	cr_assert_eq(delivered_at_wc[0], 0, "the event was read before the completion went out");
	cr_assert_eq(fake_cq_of(rr_cq_ibv(cq))->delivered, 1, "and read afterwards");
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* ---- destroying from callbacks (endpoint callbacks: the lab suite) ---- */

static rr_cq *sibling, *mine;
static rr_channel *mine_ch;
static unsigned int sibling_wcs_after;
static bool sibling_gone;

static void destroy_sibling(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	wcs++;
	if (sibling) {
		cr_assert_eq(rr_cq_destroy(sibling), 0);
		sibling = NULL;
		sibling_gone = true;
	}
}

static void sibling_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	if (sibling_gone)
		sibling_wcs_after++;
}

static void destroy_on_app(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	cr_assert_eq(rr_cq_destroy(mine), 0);
	cr_assert_eq(rr_channel_destroy(mine_ch), 0);
	mine = NULL;
}

static rr_cq *all_cqs[2];
static rr_channel *all_ch;

static void destroy_all(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	wcs++;
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(rr_cq_destroy(all_cqs[i]), 0);
		all_cqs[i] = NULL;
	}
	cr_assert_eq(rr_channel_destroy(all_ch), 0);
	all_ch = NULL;
}

/* A callback of one CQ destroys every CQ of the channel and the channel
 * itself while the channel's events are being handled. */
Test(destroy, channel_and_its_cqs_from_a_wc_of_the_channel)
{
	struct rr_cq_opts killer = {.on_wc = destroy_all};
	struct rr_cq_opts other = {.on_wc = count_wc};
	struct io_uring ring;
	rr_bridge *b;

	wcs = 0;
	init_ring(&ring, 16, 0);
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &all_ch), 0);
	cr_assert_eq(rr_cq_create(b, all_ch, &fake_ctx, &killer, sizeof(killer), &all_cqs[0]), 0);
	cr_assert_eq(rr_cq_create(b, all_ch, &fake_ctx, &other, sizeof(other), &all_cqs[1]), 0);
	fake_complete(fake_cq_of(rr_cq_ibv(all_cqs[1])), 1, 1);
	fake_complete(fake_cq_of(rr_cq_ibv(all_cqs[0])), 1, 2);
	for (int i = 0; i < 200 && all_ch; i++)
		cr_assert_geq(rr_bridge_run_once(b, 20), 0);
	cr_assert_null(all_ch, "the callback never ran");
	cr_assert_eq(fake_cqs_live, 0);
	cr_assert_eq(fake_channels_live, 0);
	for (int i = 0; i < 3; i++)
		cr_assert_geq(rr_bridge_run_once(b, 0), 0);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

Test(destroy, cqs_and_channels_from_wc_and_app_callbacks)
{
	struct rr_bridge_opts o = {.on_app_cqe = destroy_on_app};
	struct rr_cq_opts first = {.on_wc = destroy_sibling};
	struct rr_cq_opts second = {.on_wc = sibling_wc};
	struct io_uring_sqe *sqe;
	struct io_uring ring;
	rr_channel *ch;
	rr_cq *cq;
	rr_bridge *b;

	wcs = sibling_wcs_after = 0;
	sibling_gone = false;
	init_ring(&ring, 16, 0);
	cr_assert_eq(rr_bridge_create(&b, &ring, &o, sizeof(o)), 0);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &ch), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, &first, sizeof(first), &cq), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, &second, sizeof(second), &sibling), 0);
	/* Both fire in one drain: the sibling is queued when it dies. */
	fake_complete(fake_cq_of(rr_cq_ibv(cq)), 1, 1);
	fake_complete(fake_cq_of(rr_cq_ibv(sibling)), 4, 1);
	for (int i = 0; i < 50 && wcs < 1; i++)
		cr_assert_geq(rr_bridge_run_once(b, 10), 0);
	cr_assert_eq(wcs, 1);
	cr_assert(sibling_gone);
	/* An application CQE whose callback destroys a CQ and its channel. */
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &mine_ch), 0);
	cr_assert_eq(rr_cq_create(b, mine_ch, &fake_ctx, &second, sizeof(second), &mine), 0);
	fake_complete(fake_cq_of(rr_cq_ibv(mine)), 2, 1);
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, 9);
	for (int i = 0; i < 50 && mine; i++)
		cr_assert_geq(rr_bridge_run_once(b, 10), 0);
	cr_assert_null(mine);
	for (int i = 0; i < 5; i++)
		cr_assert_geq(rr_bridge_run_once(b, 5), 0);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	cr_assert_eq(fake_cqs_live, 0);
	cr_assert_eq(fake_channels_live, 0);
	io_uring_queue_exit(&ring);
}
