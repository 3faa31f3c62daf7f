// SPDX-License-Identifier: MIT
/*
 * Bridge plumbing on the host: a pipe stands in for each completion channel
 * and stub verbs (fake_verbs.c) for the CQs. Covers poll re-arming, fds
 * that fail for good (POLLERR, POLLHUP), the user_data contract with
 * interleaved application CQEs, the arm-then-poll race, batched acks,
 * budget fairness, wait modes, timers and teardown with polls in flight.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "fake_verbs.h"
#include "abi.h"
#include "bridge.h"

#define MAX_LOG 4096

/* What callbacks saw, in order. */
static struct {
	char who[MAX_LOG]; /* 'A', 'B' work completions; 'U' application CQE */
	uint64_t id[MAX_LOG];
	int res[MAX_LOG];
	unsigned int n;
	unsigned int wcs[2];
} L;

static void log_it(char who, uint64_t id, int res)
{
	if (L.n < MAX_LOG) {
		L.who[L.n] = who;
		L.id[L.n] = id;
		L.res[L.n] = res;
	}
	L.n++;
}

/* Called by on_wc after logging, where a test sets it. */
static void (*wc_hook)(int which, uint64_t id);

static void on_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	int which = (int)(uintptr_t)data;

	L.wcs[which]++;
	log_it(which ? 'B' : 'A', wc->wr_id, 0);
	if (wc_hook)
		wc_hook(which, wc->wr_id);
}

static void on_app(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	log_it('U', cqe->user_data, cqe->res);
}

struct fixture {
	struct io_uring ring;
	rr_bridge *b;
	rr_channel *ch;
	rr_cq *cq[2];
};

/* The suite runs on every ring flavour (tests/meson.build): setup flags
 * from RR_TEST_RING_FLAGS, SQ size from RR_TEST_SQ_ENTRIES. */
static unsigned int ring_flags(void)
{
	const char *e = getenv("RR_TEST_RING_FLAGS");

	return e ? (unsigned int)strtoul(e, NULL, 0) : 0;
}

static void init_ring(struct io_uring *ring, unsigned int entries)
{
	const char *sq = getenv("RR_TEST_SQ_ENTRIES");
	int rc;

	if (sq)
		entries = (unsigned int)strtoul(sq, NULL, 0);
	rc = io_uring_queue_init(entries, ring, ring_flags());

	if (rc == -EINVAL && ring_flags())
		cr_skip_test("kernel without io_uring setup flags %#x", ring_flags());
	cr_assert_eq(rc, 0);
}

static void setup_on(struct fixture *f, const struct rr_bridge_opts *o, enum rr_wait_mode mode,
		     struct ibv_context *ctx)
{
	struct rr_bridge_opts opts = o ? *o : (struct rr_bridge_opts){0};
	/* A spin window wide enough for valgrind's pace. */
	struct rr_cq_opts co = {.mode = mode, .on_wc = on_wc, .spin_us = 300000};

	memset(&L, 0, sizeof(L));
	wc_hook = NULL;
	if (!opts.on_app_cqe)
		opts.on_app_cqe = on_app;
	init_ring(&f->ring, 64);
	cr_assert_eq(rr_bridge_create(&f->b, &f->ring, &opts, sizeof(opts)), 0);
	cr_assert_eq(rr_channel_create(f->b, ctx, &f->ch), 0);
	for (int i = 0; i < 2; i++) {
		co.data = (void *)(uintptr_t)i;
		cr_assert_eq(rr_cq_create(f->b, f->ch, ctx, &co, sizeof(co), &f->cq[i]), 0);
	}
}

/* On fake_ctx: channels read with ibv_get_cq_event(). */
static void setup_fx(struct fixture *f, const struct rr_bridge_opts *o, enum rr_wait_mode mode)
{
	setup_on(f, o, mode, &fake_ctx);
}

static struct fake_cq *fcq(struct fixture *f, int i)
{
	return fake_cq_of(rr_cq_ibv(f->cq[i]));
}

static bool sqpoll(void);

static void pass(struct fixture *f, int n)
{
	for (int i = 0; i < n; i++) {
		cr_assert_geq(rr_bridge_run_once(f->b, 20), 0);
		/* SQPOLL: a poll is armed when the kernel thread takes its
		 * SQE, not at submit; let it, so a pass means the same on
		 * every ring. (Elsewhere an SQE left queued is the bridge's
		 * on purpose: it goes with the next enter.) */
		for (int k = 0; k < 2000 && sqpoll() && io_uring_sq_ready(&f->ring); k++)
			usleep(100);
	}
}

/* Passes until *count reaches want, or a generous watchdog: with SQPOLL
 * (slower still under valgrind) a poll reaches the kernel when the kernel
 * thread gets to it, not at submit. */
static void pass_until(struct fixture *f, const unsigned int *count, unsigned int want)
{
	for (int i = 0; i < 250 && *count < want; i++)
		pass(f, 1);
}

static void teardown_fx(struct fixture *f)
{
#ifndef NDEBUG
	cr_assert_eq(f->b->ring.owing_wrong, 0, "a flush found the ring's owing flag wrong");
#endif
	cr_assert_eq(rr_bridge_destroy(f->b), 0);
	cr_assert_eq(fake_cqs_live, 0, "CQs leaked");
	cr_assert_eq(fake_channels_live, 0, "channels leaked");
	cr_assert_eq(fake_unacked_at_destroy, 0, "a CQ was destroyed with unacknowledged events");
	io_uring_queue_exit(&f->ring);
}

static struct fixture f_room;

static uint64_t channel_ud(struct fixture *f)
{

	return rr__ring_poll_ud(&f->b->ring, f->ch->slot);
}

/* ---- polls ---- */

/* The ring's owing flag stands for slots queued, MSG_RINGs and a kick
 * owed: a debug build's flush checks it (every fixture's teardown asserts
 * no flush found it wrong). Here it is put out of step on purpose, both
 * ways, and each flush counts it and sets it right. */
Test(poll, a_flush_counts_an_owing_flag_out_of_step)
{
#ifdef NDEBUG
	cr_skip_test("the check is in debug builds only");
#else
	struct fixture f;
	struct rr__ring *r;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	pass(&f, 1);
	r = &f.b->ring;
	cr_assert_eq(r->owing_wrong, 0);
	r->owing = true; /* nothing is owed */
	rr__ring_flush_owed(r);
	cr_assert_eq(r->owing_wrong, 1, "a flag owing nothing went unnoticed");
	cr_assert(!r->owing, "the flush left the flag wrong");
	r->kick_wanted = true; /* a kick owed, the flag not set */
	rr__ring_flush_owed(r);
	cr_assert_eq(r->owing_wrong, 2, "a kick owed without the flag went unnoticed");
	r->owing_wrong = 0;
	pass(&f, 1);
	teardown_fx(&f);
#endif
}

Test(poll, rearmed_after_cqe_without_more)
{
	struct fixture f;
	struct io_uring_sqe *sqe;
	struct rr_bridge_stats st;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	fake_complete(fcq(&f, 0), 1, 1);
	pass(&f, 2);
	cr_assert_eq(L.wcs[0], 1);
	/* Someone else ends the poll: its CQE comes without F_MORE. */
	sqe = io_uring_get_sqe(&f.ring);
	io_uring_prep_poll_remove(sqe, channel_ud(&f));
	io_uring_sqe_set_data64(sqe, 42);
	pass(&f, 3);
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_geq(st.rearms, 1, "poll not re-armed");
	fake_complete(fcq(&f, 0), 1, 2);
	pass(&f, 3);
	cr_assert_eq(L.wcs[0], 2, "completion after the re-arm was not delivered");
	/* The remove's own CQE is the application's and arrived once. */
	int seen42 = 0;

	for (unsigned int i = 0; i < L.n; i++)
		seen42 += L.who[i] == 'U' && L.id[i] == 42;
	cr_assert_eq(seen42, 1);
	teardown_fx(&f);
}

Test(poll, singleshot_rearms_every_time)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_SINGLESHOT};
	struct rr_bridge_stats st;
	struct fixture f;

	setup_fx(&f, &o, RR_WAIT_EVENT);
	for (unsigned int i = 0; i < 5; i++) {
		fake_complete(fcq(&f, i % 2), 1, (uint64_t)i);
		/* One event at a time: two that come before their poll is
		 * armed again (SQPOLL on a loaded host) are one readable fd
		 * and rightly one re-arm. A pass may also hand the WC out
		 * before its event's poll CQE came: wait for both. */
		for (int n = 0; n < 250; n++) {
			rr_bridge_get_stats(f.b, &st, sizeof(st));
			if (fcq(&f, 0)->delivered + fcq(&f, 1)->delivered > i && st.rearms > i)
				break;
			pass(&f, 1);
		}
	}
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_eq(L.wcs[0] + L.wcs[1], 5);
	cr_assert_geq(st.rearms, 5);
	teardown_fx(&f);
}

/*
 * io_uring_submit() as the library calls it (wrapped in this suite):
 * counted, and failing with -EBUSY while submit_fails is set, as it does
 * on a kernel whose CQ overflowed.
 */
int __real_io_uring_submit(struct io_uring *ring);
int __wrap_io_uring_submit(struct io_uring *ring);
static bool submit_fails;
static unsigned int failed_submits;

int __wrap_io_uring_submit(struct io_uring *ring)
{
	if (submit_fails) {
		failed_submits++;
		return -EBUSY;
	}
	return __real_io_uring_submit(ring);
}

/*
 * The application filled the SQ and has not submitted; every poll CQE of
 * a single-shot ring owes a re-arm SQE, and writing one with the SQ full
 * submits to make room. When that submit fails, trying again on each
 * later CQE costs a failing io_uring_enter() every time with nothing
 * changed: the bridge tries once, then waits until the SQ head moves.
 * Before the fix: one failed submit per CQE.
 */
Test(poll, a_failed_submit_for_room_waits_for_the_sq_head_to_move)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_SINGLESHOT};
	struct rr_cq_opts co = {.mode = RR_WAIT_EVENT, .on_wc = on_wc};
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	rr_channel *ch[3];
	rr_cq *cq[3];
	unsigned int handled = 0;

	if (ring_flags() & IORING_SETUP_SQPOLL)
		cr_skip_test("SQPOLL: the kernel thread consumes the SQ by itself");
	setup_fx(&f_room, &o, RR_WAIT_EVENT);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(rr_channel_create(f_room.b, &fake_ctx, &ch[i]), 0);
		cr_assert_eq(rr_cq_create(f_room.b, ch[i], &fake_ctx, &co, sizeof(co), &cq[i]), 0);
	}
	cr_assert_eq(rr_bridge_flush(f_room.b), 0);
	cr_assert_geq(io_uring_submit(&f_room.ring), 0); /* the polls */
	while ((sqe = io_uring_get_sqe(&f_room.ring))) {
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, 77);
	}
	submit_fails = true;
	failed_submits = 0;
	for (int i = 0; i < 3; i++)
		fake_complete(fake_cq_of(rr_cq_ibv(cq[i])), 1, 100 + (uint64_t)i);
	while (handled < 3) {
		struct __kernel_timespec ts = {.tv_sec = 2};
		cr_assert_eq(io_uring_wait_cqe_timeout(&f_room.ring, &cqe, &ts), 0, "handled %u",
			     handled);
		if (rr_bridge_handle_cqe(f_room.b, cqe) == 1)
			handled++;
		io_uring_cqe_seen(&f_room.ring, cqe);
	}
	submit_fails = false;
	cr_expect_eq(L.wcs[0], 3, "%u completions handed out", L.wcs[0]);
	cr_expect_eq(failed_submits, 1, "%u failed submits for 3 CQEs", failed_submits);
	/* The application submits: the head moves, what was owed is written. */
	cr_assert_geq(io_uring_submit(&f_room.ring), 0);
	cr_assert_eq(rr_bridge_flush(f_room.b), 0);
	for (int i = 0; i < 3; i++)
		fake_complete(fake_cq_of(rr_cq_ibv(cq[i])), 1, 200 + (uint64_t)i);
	pass_until(&f_room, &L.wcs[0], 6);
	cr_expect_eq(L.wcs[0], 6, "re-armed polls: %u completions", L.wcs[0]);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(rr_cq_destroy(cq[i]), 0);
		cr_assert_eq(rr_channel_destroy(ch[i]), 0);
	}
	teardown_fx(&f_room);
}

/* Hand every CQE there over, as an application's loop does; returns how
 * many were the application's. */
static unsigned int hand_over_all(struct fixture *f)
{
	struct io_uring_cqe *cqe;
	unsigned int head, n = 0, app = 0;

	io_uring_for_each_cqe(&f->ring, head, cqe)
	{
		if (!rr_bridge_handle_cqe(f->b, cqe))
			app++;
		n++;
	}
	io_uring_cq_advance(&f->ring, n);
	return app;
}

/*
 * The header's loop that never calls rr_bridge_flush(): it waits in its
 * own submit, hands every CQE over, and its own SQEs (polls of a pipe
 * nobody writes) never complete. A re-arm that found the SQ full and a
 * failing submit is owed; nothing of the bridge's was in flight, so the
 * loop waited for ever and the second completion was never handed out
 * (before the fix: 1 of 2 after the watchdog, on every flavour). The
 * bridge now sets a timerfd it polls, whose CQE comes back to the loop
 * after its submit made room.
 */
Test(poll, an_sqe_owed_for_room_reaches_a_loop_that_never_flushes)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_SINGLESHOT};
	struct rr_cq_opts co = {.mode = RR_WAIT_EVENT, .on_wc = on_wc};
	struct io_uring_sqe *sqe;
	rr_channel *ch;
	rr_cq *cq;
	int pfd[2];
	bool second = false;
	unsigned int napp = 0, app_done = 0;

	cr_assert_eq(pipe(pfd), 0);
	setup_fx(&f_room, &o, RR_WAIT_EVENT);
	cr_assert_eq(rr_channel_create(f_room.b, &fake_ctx, &ch), 0);
	cr_assert_eq(rr_cq_create(f_room.b, ch, &fake_ctx, &co, sizeof(co), &cq), 0);
	cr_assert_eq(rr_bridge_flush(f_room.b), 0);
	cr_assert_geq(io_uring_submit(&f_room.ring), 0); /* the polls */
	fake_complete(fake_cq_of(rr_cq_ibv(cq)), 1, 100);
	for (int i = 0; i < 8 && L.wcs[0] < 2; i++) {
		struct __kernel_timespec ts = {.tv_sec = 1};
		struct io_uring_cqe *cqe;

		/* The loop: its own submit and wait, then every CQE. */
		io_uring_submit_and_wait_timeout(&f_room.ring, &cqe, 1, &ts, NULL);
		if (i == 0) {
			/* Its SQEs for this turn fill the SQ (they never
			 * complete), and a submit fails for a while, as
			 * under a CQ overflow. */
			while ((sqe = io_uring_get_sqe(&f_room.ring))) {
				io_uring_prep_poll_add(sqe, pfd[0], POLLIN);
				io_uring_sqe_set_data64(sqe, 77);
				napp++;
			}
			submit_fails = true;
		}
		app_done += hand_over_all(&f_room);
		submit_fails = false;
		if (i == 0) {
			/* The loop looks at its CQ once more before it submits
			 * again, after the room timer fired: its CQE is handed
			 * over while the SQ is still full. A single-shot poll
			 * of the timer would then need an SQE to fire again. */
			usleep(20000);
			app_done += hand_over_all(&f_room);
		}
		if (L.wcs[0] == 1 && !second) {
			second = true;
			fake_complete(fake_cq_of(rr_cq_ibv(cq)), 1, 101);
		}
	}
	cr_expect_eq(L.wcs[0], 2, "%u of 2 completions handed out", L.wcs[0]);
	close(pfd[1]); /* the application's polls complete: POLLHUP */
	for (int i = 0; i < 50 && app_done < napp; i++) {
		struct __kernel_timespec ts = {.tv_sec = 1};
		struct io_uring_cqe *cqe;

		io_uring_submit_and_wait_timeout(&f_room.ring, &cqe, 1, &ts, NULL);
		app_done += hand_over_all(&f_room);
	}
	cr_assert_eq(app_done, napp);
	cr_assert_eq(rr_cq_destroy(cq), 0);
	cr_assert_eq(rr_channel_destroy(ch), 0);
	teardown_fx(&f_room);
	close(pfd[0]);
}

/* A callback that runs the loop again: what the nested call returned. */
static rr_bridge *nested_b;
static int nested_rc = 1;

static void run_from_callback(int which, uint64_t wr_id)
{
	if (nested_b)
		nested_rc = rr_bridge_run_once(nested_b, 0);
}

/*
 * rr_bridge_run_once() from a completion callback would refill the batch
 * being handed out under it (outside the contract). It is refused with
 * -EDEADLK and nothing else happens; every completion is still handed
 * out once. Before, the nested pass ran (it returned >= 0).
 */
Test(poll, run_once_from_a_callback_is_refused)
{
	struct rr_bridge_opts o = {0};
	struct fixture f;

	setup_fx(&f, &o, RR_WAIT_EVENT);
	pass(&f, 1);
	nested_b = f.b;
	wc_hook = run_from_callback;
	fake_complete(fcq(&f, 0), 3, 1);
	pass_until(&f, &L.wcs[0], 3);
	wc_hook = NULL;
	nested_b = NULL;
	cr_expect_eq(nested_rc, -EDEADLK, "nested rr_bridge_run_once(): %d", nested_rc);
	pass(&f, 3);
	cr_expect_eq(L.wcs[0], 3, "%u completions for 3", L.wcs[0]);
	teardown_fx(&f);
}

/* ---- fds that fail for good: POLLERR, POLLHUP ---- */

/* What a ring-level poll's owner saw. */
static struct {
	unsigned int calls; /* revents >= 0 */
	unsigned int lost;  /* negative: the poll was given up */
	int last;
} dead;

static void dead_ready(void *ctx, int revents)
{
	char buf[64];

	if (revents < 0) {
		dead.lost++;
		dead.last = revents;
		return;
	}
	dead.calls++;
	while (read((int)(intptr_t)ctx, buf, sizeof(buf)) > 0) {
	}
}

/*
 * A pipe whose writer is gone reports POLLHUP for ever, as a disassociated
 * device's async fd reports POLLERR: re-armed single-shot, its poll would
 * complete at once on every pass. It must be given up after
 * RR__MAX_ARM_ERRORS polls, once, the owner told, and the ring go quiet.
 */
static void hung_up_fd_case(unsigned int flags)
{
	struct rr_bridge_opts o = {.flags = flags};
	struct rr_bridge_stats st0, st;
	struct fixture f;
	unsigned int passes = 0;
	uint32_t slot;
	int p[2];

	setup_fx(&f, &o, RR_WAIT_EVENT);
	memset(&dead, 0, sizeof(dead));
	cr_assert_eq(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
	cr_assert_eq(rr__poll_add(&f.b->ring, p[0], dead_ready, (void *)(intptr_t)p[0], &slot), 0);
	pass(&f, 2);
	rr_bridge_get_stats(f.b, &st0, sizeof(st0));
	close(p[1]);
	/* A generous watchdog: it takes about RR__MAX_ARM_ERRORS passes. A
	 * pass that spins returns at once, one that idles after 50 ms. */
	while (passes < 60 && !dead.lost) {
		cr_assert_geq(rr_bridge_run_once(f.b, 50), 0);
		passes++;
	}
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_eq(dead.lost, 1, "not given up after %u passes: %llu re-arms, %u handler calls",
		     passes, (unsigned long long)(st.rearms - st0.rearms), dead.calls);
	cr_assert_eq(dead.last, -EPIPE);
	cr_assert_eq(dead.calls, 0, "POLLHUP without POLLIN reached the handler");
	pass(&f, 5);
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_eq(dead.lost, 1, "the owner was told twice");
	cr_assert_eq(dead.calls, 0);
	cr_assert_eq(st.poll_failures - st0.poll_failures, 1);
	cr_assert_leq(st.rearms - st0.rearms, RR__MAX_ARM_ERRORS + 1, "%llu re-arms",
		      (unsigned long long)(st.rearms - st0.rearms));
	cr_assert(!rr__ring_slot_armed(&f.b->ring, slot), "the given-up poll is still armed");
	/* Quiet: nothing of it is left to handle. */
	cr_assert_eq(rr_bridge_run_once(f.b, 0), 0);
	teardown_fx(&f);
	close(p[0]);
}

Test(poll, hung_up_fd_is_given_up_singleshot)
{
	hung_up_fd_case(RR_BRIDGE_SINGLESHOT);
}

Test(poll, hung_up_fd_is_given_up_multishot)
{
	hung_up_fd_case(0);
}

/* Only consecutive failures count: a clean POLLIN starts the count again.
 * A failure that comes with POLLIN lets the handler drain the data first. */
Test(poll, only_consecutive_failures_give_a_poll_up)
{
	struct io_uring_cqe cqe = {.flags = IORING_CQE_F_MORE};
	struct rr_bridge_stats st;
	struct fixture f;
	uint32_t slot;
	int p[2];

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	memset(&dead, 0, sizeof(dead));
	cr_assert_eq(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
	cr_assert_eq(rr__poll_add(&f.b->ring, p[0], dead_ready, (void *)(intptr_t)p[0], &slot), 0);
	pass(&f, 2);
	/* The kernel's CQEs, as a multishot poll's, handed in directly. */
	cqe.user_data = rr__ring_poll_ud(&f.b->ring, slot);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < RR__MAX_ARM_ERRORS - 1; i++) {
			cqe.res = POLLERR;
			cr_assert_eq(rr_bridge_handle_cqe(f.b, &cqe), 1);
		}
		cqe.res = POLLIN;
		cr_assert_eq(rr_bridge_handle_cqe(f.b, &cqe), 1);
	}
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_eq(dead.lost, 0, "given up after failures that were not consecutive");
	cr_assert_eq(dead.calls, 3);
	cr_assert_eq(st.poll_failures, 0);
	for (int i = 0; i < RR__MAX_ARM_ERRORS; i++) {
		cqe.res = i ? POLLERR : POLLIN | POLLHUP;
		cr_assert_eq(rr_bridge_handle_cqe(f.b, &cqe), 1);
	}
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_eq(dead.calls, 4, "the data that came with POLLHUP was not handed out");
	cr_assert_eq(dead.lost, 1);
	cr_assert_eq(dead.last, -EIO);
	cr_assert_eq(st.poll_failures, 1);
	/* No CQE of the poll reaches its owner after that. */
	cqe.res = POLLIN;
	cr_assert_eq(rr_bridge_handle_cqe(f.b, &cqe), 1);
	pass(&f, 3);
	cr_assert_eq(dead.calls, 4);
	cr_assert_eq(dead.lost, 1);
	cr_assert(!rr__ring_slot_armed(&f.b->ring, slot), "the given-up poll is still armed");
	teardown_fx(&f);
	close(p[0]);
}

/* A completion channel that hangs up: its poll is given up, the channel's
 * owner polls its CQs instead (none goes deaf), and nothing spins. */
static void hung_up_channel_case(unsigned int flags)
{
	struct rr_bridge_opts o = {.flags = flags};
	struct rr_bridge_stats st;
	struct fake_channel *ch;
	struct fixture f;
	unsigned int reads0;

	setup_fx(&f, &o, RR_WAIT_EVENT);
	pass(&f, 2);
	ch = (struct fake_channel *)f.ch->ch;
	close(ch->wfd);
	ch->wfd = -1;
	reads0 = fake_event_reads;
	for (int i = 0; i < 60 && !f.ch->deaf; i++)
		cr_assert_geq(rr_bridge_run_once(f.b, 50), 0);
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert(f.ch->deaf, "the hung-up channel's poll was not given up: %llu re-arms",
		  (unsigned long long)st.rearms);
	cr_assert_eq(st.poll_failures, 1);
	cr_assert_leq(st.rearms, RR__MAX_ARM_ERRORS + 1, "%llu re-arms",
		      (unsigned long long)st.rearms);
	cr_assert_leq(fake_event_reads - reads0, 2, "%u reads of a hung-up channel",
		      fake_event_reads - reads0);
	for (int i = 0; i < 2; i++) {
		fake_complete(fcq(&f, i), 1, 10 + (uint64_t)i);
		pass_until(&f, &L.wcs[i], 1);
		cr_assert_eq(L.wcs[i], 1, "a CQ of the hung-up channel went deaf");
	}
	teardown_fx(&f);
}

Test(dispatch, hung_up_channel_is_given_up_and_polled_around)
{
	hung_up_channel_case(RR_BRIDGE_SINGLESHOT);
	hung_up_channel_case(0);
}

/* ---- the user_data contract ---- */

Test(contract, bridge_sqes_are_tagged)
{
	struct fixture f;
	struct io_uring_sq *sq;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	sq = &f.ring.sq;
	cr_assert_gt(sq->sqe_tail - sq->sqe_head, 0, "no bridge SQE queued");
	for (unsigned int i = sq->sqe_head; i != sq->sqe_tail; i++)
		cr_assert(rr_is_bridge_user_data(sq->sqes[i & *sq->kring_mask].user_data));
	teardown_fx(&f);
}

Test(contract, app_cqes_pass_through_untouched)
{
	static const uint64_t uds[] = {0,
				       1,
				       2,
				       0x7fffffffffffULL,
				       0x7271ffffffffffffULL,
				       0x7273000000000000ULL,
				       UINT64_MAX,
				       0xdeadbeef};
	const int rounds = 20, nuds = sizeof(uds) / sizeof(uds[0]);
	int count[8] = {0};
	struct fixture f;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	cr_assert_eq(rr_is_bridge_user_data((uintptr_t)&f), 0, "a pointer looks like the bridge's");
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < nuds; i++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&f.ring);

			if (!sqe) {
				io_uring_submit(&f.ring);
				sqe = io_uring_get_sqe(&f.ring);
			}
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data64(sqe, uds[i]);
		}
		fake_complete(fcq(&f, r % 2), 3, (uint64_t)r * 10);
		pass(&f, 2);
	}
	pass(&f, 3);
	for (unsigned int i = 0; i < L.n; i++) {
		if (L.who[i] != 'U')
			continue;
		for (int k = 0; k < nuds; k++)
			if (L.id[i] == uds[k])
				count[k]++;
	}
	for (int k = 0; k < nuds; k++)
		cr_assert_eq(count[k], rounds, "user_data %#llx seen %d times",
			     (unsigned long long)uds[k], count[k]);
	cr_assert_eq(L.wcs[0] + L.wcs[1], (unsigned int)rounds * 3);
	teardown_fx(&f);
}

Test(contract, handle_cqe_rejects_app_and_swallows_stale)
{
	struct fixture f;
	struct io_uring_cqe cqe = {0};
	uint32_t slot;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	cqe.user_data = 12345;
	cr_assert_eq(rr_bridge_handle_cqe(f.b, &cqe), 0);
	/* Tagged, but for a slot that does not exist, or an old generation. */
	cqe.user_data = rr__ud(RR__UD_POLL, f.b->ring.inst, 0, 999999);
	cqe.res = POLLIN;
	cr_assert_eq(rr_bridge_handle_cqe(f.b, &cqe), 1);
	slot = f.ch->slot;
	cqe.user_data = rr__ud(RR__UD_POLL, f.b->ring.inst,
			       rr__ud_gen(rr__ring_poll_ud(&f.b->ring, slot)) + 1, slot);
	cqe.flags = 0;
	cr_assert_eq(rr_bridge_handle_cqe(f.b, &cqe), 1);
	cr_assert(rr__ring_slot_armed(&f.b->ring, slot), "a stale CQE disarmed a live slot");
	teardown_fx(&f);
}

/* ---- CQ dispatch ---- */

Test(dispatch, completion_racing_the_arm_is_not_stranded)
{
	struct fixture f;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	fcq(&f, 0)->inject_on_arm = 1;
	fake_complete(fcq(&f, 0), 1, 7);
	pass_until(&f, &L.wcs[0], 2);
	/* The injected completion raised no event; only the poll after the
	 * arm can have found it. */
	cr_assert_eq(L.wcs[0], 2, "%u work completions", L.wcs[0]);
	cr_assert_eq(fcq(&f, 0)->events, 1);
	teardown_fx(&f);
}

/*
 * A multishot poll posts a CQE on a wake-up of the fd, not while it stays
 * readable: an event left in the channel after a drain would wait for an
 * unrelated later event. The drain stops when no CQ of the channel is
 * left armed (each armed CQ raises one event at most), which must be
 * exactly when the channel is empty. One poll CQE, handed in once, must
 * bring both CQs' events and completions, with no read beyond them.
 */
Test(dispatch, one_wake_up_drains_every_armed_cq)
{
	struct fixture f;
	struct io_uring_cqe cqe = {0};
	unsigned int reads0;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	cr_assert_eq(rr_bridge_flush(f.b), 0);
	cr_assert(fcq(&f, 0)->armed && fcq(&f, 1)->armed, "flush armed the CQs");
	fake_complete(fcq(&f, 0), 1, 1);
	fake_complete(fcq(&f, 1), 1, 2);
	reads0 = fake_event_reads;
	cqe.user_data = channel_ud(&f);
	cqe.res = POLLIN;
	cqe.flags = IORING_CQE_F_MORE;
	cr_assert_eq(rr_bridge_handle_cqe(f.b, &cqe), 1);
	cr_assert_eq(L.wcs[0], 1, "CQ 0: %u work completions", L.wcs[0]);
	cr_assert_eq(L.wcs[1], 1, "CQ 1: %u work completions (its event stranded)", L.wcs[1]);
	cr_assert_eq(fcq(&f, 0)->delivered + fcq(&f, 1)->delivered, 2);
	/* Two events, two reads: none that finds the channel empty. */
	cr_assert_eq(fake_event_reads - reads0, 2, "%u reads", fake_event_reads - reads0);
	teardown_fx(&f);
}

/* ---- a pass that woke for any CQE; arming only before blocking ---- */

/* Queue an application NOP and wait until its CQE is in the ring (on
 * SQPOLL the kernel's thread completes it when it gets to it). */
static struct io_uring *nop_ring;
/* The fixture a wc_hook works on. */
static struct fixture *hook_fx;

static void queue_app_nop(uint64_t ud)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(nop_ring);

	cr_assert_not_null(sqe);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, ud);
	cr_assert_geq(io_uring_submit(nop_ring), 0);
	for (int i = 0; i < 20000 && !io_uring_cq_ready(nop_ring); i++)
		usleep(100);
	cr_assert_gt(io_uring_cq_ready(nop_ring), 0, "the NOP never completed");
}

static bool logged_app(uint64_t ud)
{
	for (unsigned int i = 0; i < L.n && i < MAX_LOG; i++)
		if (L.who[i] == 'U' && L.id[i] == ud)
			return true;
	return false;
}

/*
 * A completion visible in an armed CQ whose event has not come yet (rxe
 * raises it from a tasklet after the WC is written): a pass woken by an
 * application CQE hands it out by itself, with no event read and no
 * channel read, and the event that comes later is read and acknowledged
 * as usual, hands nothing out twice, and the CQ is armed again.
 */
Test(wakeup, pass_woken_by_an_app_cqe_hands_out_a_ready_completion)
{
	struct fixture f;
	unsigned int reads0, arms0;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	pass(&f, 1);
	cr_assert(fcq(&f, 0)->armed);
	arms0 = fcq(&f, 0)->arms;
	fcq(&f, 0)->late_event = true;
	fake_complete(fcq(&f, 0), 1, 1);
	reads0 = fake_event_reads;
	nop_ring = &f.ring;
	queue_app_nop(42);
	cr_assert_geq(rr_bridge_run_once(f.b, 20), 0);
	cr_assert(logged_app(42), "the pass did not reap the application's CQE");
	cr_assert_eq(L.wcs[0], 1, "a pass woken by an application CQE left a WC in the CQ");
	cr_assert_eq(L.who[0], 'U');
	cr_assert_eq(fcq(&f, 0)->delivered, 0);
	cr_assert_eq(fake_event_reads, reads0, "the channel was read without an event");
	cr_assert_eq(fcq(&f, 0)->arms, arms0, "armed again before its event was read");

	/* The event comes after all: read once, nothing handed out twice.
	 * A completion landing between the poll and the arm that follows is
	 * found by the poll after the arm. */
	fcq(&f, 0)->late_event = false;
	fcq(&f, 0)->inject_on_arm = 1;
	fake_raise_late(fcq(&f, 0));
	pass_until(&f, &fcq(&f, 0)->delivered, 1);
	pass_until(&f, &L.wcs[0], 2);
	cr_assert_eq(fcq(&f, 0)->delivered, 1);
	cr_assert_eq(L.wcs[0], 2, "%u WCs: the one injected before the arm was stranded", L.wcs[0]);
	cr_assert_eq(fcq(&f, 0)->events, 1, "the injected WC raised an event");
	cr_assert(fcq(&f, 0)->armed, "not armed again before the loop blocked");
	fake_complete(fcq(&f, 0), 1, 3);
	pass_until(&f, &L.wcs[0], 3);
	cr_assert_eq(L.wcs[0], 3, "deaf after the late event");
	cr_assert_eq(fcq(&f, 0)->delivered, 2);
	teardown_fx(&f);
}

/* On CQ 0's WC 1 a second WC lands, with the CQ disarmed by the event
 * just read (no event); handing that one out queues an application CQE. */
static void arm_case_hook(int which, uint64_t id)
{
	if (which == 0 && id == 1)
		fake_complete(fake_cq_of(rr_cq_ibv(hook_fx->cq[0])), 1, 2);
	else if (which == 0 && id == 2)
		queue_app_nop(43);
}

/*
 * The loop arms an event CQ only when it could block: a pass that ends
 * with a CQE waiting (its next wait returns at once) leaves the CQ
 * unarmed and the next pass polls it; the pass that could block arms it,
 * or, when the application's own loop takes over, rr_bridge_handle_cqe()
 * of that CQE does: no wake-up is lost either way.
 */
static void arm_before_blocking_case(bool embedded)
{
	struct io_uring_cqe *cqe;
	struct fixture f;
	unsigned int arms0;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	pass(&f, 1);
	cr_assert(fcq(&f, 0)->armed && fcq(&f, 1)->armed);
	arms0 = fcq(&f, 0)->arms;
	nop_ring = &f.ring;
	hook_fx = &f;
	wc_hook = arm_case_hook;
	fake_complete(fcq(&f, 0), 1, 1);
	pass_until(&f, &L.wcs[0], 2);
	cr_assert_eq(L.wcs[0], 2);
	cr_assert_eq(fcq(&f, 0)->events, 1);
	cr_assert_eq(fcq(&f, 0)->arms, arms0,
		     "armed although a CQE waited: the loop could not block");
	cr_assert(io_uring_cq_ready(&f.ring) > 0 && !logged_app(43));
	cr_assert(!fcq(&f, 0)->armed);
	wc_hook = NULL;
	if (embedded) {
		/* The application's loop reaps the CQE and may then sleep. */
		cr_assert_eq(io_uring_peek_cqe(&f.ring, &cqe), 0);
		cr_assert_eq(cqe->user_data, 43);
		cr_assert_eq(rr_bridge_handle_cqe(f.b, cqe), 0);
		io_uring_cqe_seen(&f.ring, cqe);
	} else {
		cr_assert_geq(rr_bridge_run_once(f.b, 20), 0);
		cr_assert(logged_app(43));
	}
	cr_assert(fcq(&f, 0)->armed, "left unarmed with nothing to bring the loop back");
	cr_assert_eq(fcq(&f, 0)->arms, arms0 + 1);
	fake_complete(fcq(&f, 0), 1, 3);
	cr_assert_eq(fcq(&f, 0)->events, 2, "a completion after the loop's turn raised no event");
	pass_until(&f, &L.wcs[0], 3);
	cr_assert_eq(L.wcs[0], 3);
	teardown_fx(&f);
}

Test(wakeup, armed_only_when_the_loop_could_block)
{
	arm_before_blocking_case(false);
}

Test(wakeup, armed_when_an_application_loop_takes_over)
{
	arm_before_blocking_case(true);
}

/* ---- many channels, one fires: a wake-up's cost does not grow ---- */

#define FAN 32

/* FAN more channels of one armed event CQ each (handing out as CQ 1). */
static void fan_out(struct fixture *f, rr_cq **cq)
{
	struct rr_cq_opts co = {.on_wc = on_wc, .data = (void *)(uintptr_t)1};

	for (int i = 0; i < FAN; i++) {
		rr_channel *ch;

		cr_assert_eq(rr_channel_create(f->b, &fake_ctx, &ch), 0);
		cr_assert_eq(rr_cq_create(f->b, ch, &fake_ctx, &co, sizeof(co), &cq[i]), 0);
	}
	pass(f, 1);
	for (int i = 0; i < FAN; i++)
		cr_assert(fake_cq_of(rr_cq_ibv(cq[i]))->armed);
}

static unsigned int fan_polls(rr_cq **cq, unsigned int *each)
{
	unsigned int sum = 0;

	for (int i = 0; i < FAN; i++) {
		unsigned int p = fake_cq_of(rr_cq_ibv(cq[i]))->polls;

		sum += p - (each ? each[i] : 0);
		if (each)
			each[i] = p;
	}
	return sum;
}

/*
 * One channel's event wakes the pass: it polls that channel's CQ and no
 * other. The others are armed and raise their own events; polling one of
 * each channel's would cost every wake-up a poll per channel.
 */
Test(wakeup, a_channel_wake_up_polls_no_other_cq)
{
	unsigned int polls[FAN];
	struct fixture f;
	rr_cq *cq[FAN];

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	fan_out(&f, cq);
	fan_polls(cq, polls);
	fake_complete(fake_cq_of(rr_cq_ibv(cq[FAN / 2])), 1, 1);
	pass_until(&f, &L.wcs[1], 1);
	cr_assert_eq(L.wcs[1], 1);
	for (int i = 0; i < FAN; i++) {
		unsigned int p = fake_cq_of(rr_cq_ibv(cq[i]))->polls;

		if (i != FAN / 2)
			cr_expect_eq(p, polls[i], "CQ %d of another channel polled %u times", i,
				     p - polls[i]);
	}
	/* Every CQ still heard, the one that fired too. */
	fake_complete(fake_cq_of(rr_cq_ibv(cq[3])), 1, 2);
	pass_until(&f, &L.wcs[1], 2);
	fake_complete(fake_cq_of(rr_cq_ibv(cq[FAN / 2])), 1, 3);
	pass_until(&f, &L.wcs[1], 3);
	cr_assert_eq(L.wcs[1], 3, "%u of 3 completions", L.wcs[1]);
	teardown_fx(&f);
}

/*
 * A pass woken by an application CQE polls one armed CQ, in turn, not one
 * per channel: a completion visible before its event (rxe raises it from
 * a tasklet) is handed out within as many such passes as CQs are armed.
 */
Test(wakeup, an_app_wake_up_polls_one_armed_cq_in_turn)
{
	unsigned int polls[FAN], k;
	struct fixture f;
	rr_cq *cq[FAN];

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	fan_out(&f, cq);
	fan_polls(cq, polls);
	nop_ring = &f.ring;
	queue_app_nop(42);
	cr_assert_geq(rr_bridge_run_once(f.b, 20), 0);
	cr_assert(logged_app(42));
	k = fan_polls(cq, polls);
	cr_assert_leq(k, 1, "an application's CQE polled %u armed CQs of other channels", k);
	fake_cq_of(rr_cq_ibv(cq[FAN - 1]))->late_event = true;
	fake_complete(fake_cq_of(rr_cq_ibv(cq[FAN - 1])), 1, 7);
	for (k = 0; k < FAN + 2 && !L.wcs[1]; k++) {
		queue_app_nop(43 + k);
		cr_assert_geq(rr_bridge_run_once(f.b, 20), 0);
	}
	cr_assert_eq(L.wcs[1], 1, "a completion visible before its event never handed out");
	cr_assert_eq(fake_cq_of(rr_cq_ibv(cq[FAN - 1]))->delivered, 0);
	fake_cq_of(rr_cq_ibv(cq[FAN - 1]))->late_event = false;
	fake_raise_late(fake_cq_of(rr_cq_ibv(cq[FAN - 1])));
	pass_until(&f, &fake_cq_of(rr_cq_ibv(cq[FAN - 1]))->delivered, 1);
	pass(&f, 2);
	cr_assert_eq(L.wcs[1], 1, "handed out twice");
	teardown_fx(&f);
}

/* Each completion of CQ 0 brings the next, as a peer's answers do while
 * the loop hands out, up to TRICKLE. */
#define TRICKLE 40

static void trickle_hook(int which, uint64_t id)
{
	if (which == 0 && id < TRICKLE)
		fake_complete(fake_cq_of(rr_cq_ibv(hook_fx->cq[0])), 1, id + 1);
}

/*
 * Completions that keep arriving after the arm raise one event, and the
 * wake-up it brings costs the same whatever it finds: an event CQ is
 * polled until a poll finds nothing, as a loop on epoll polls until the
 * CQ is empty, so a stream that never lets the CQ run dry costs two
 * events (the first, and the one the stream raised after the arm), not
 * one for every few completions.
 */
Test(wakeup, a_stream_after_the_arm_is_taken_until_the_cq_is_empty)
{
	struct fixture f;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	pass(&f, 1);
	cr_assert(fcq(&f, 0)->armed);
	hook_fx = &f;
	wc_hook = trickle_hook;
	fake_complete(fcq(&f, 0), 1, 1);
	pass_until(&f, &L.wcs[0], TRICKLE);
	cr_assert_eq(L.wcs[0], TRICKLE);
	wc_hook = NULL;
	pass(&f, 2);
	cr_expect_leq(fcq(&f, 0)->events, 2, "%u events for one stream of %d completions",
		      fcq(&f, 0)->events, TRICKLE);
	cr_assert(fcq(&f, 0)->armed, "left unarmed at the end of the stream");
	teardown_fx(&f);
}

/*
 * RR_BRIDGE_LOOP_WAITS: a pass leaves the event CQ it drained unarmed.
 * The next one submits what the application queued in between and, when
 * that completes at once, polls the CQ instead of arming it: the answer
 * that came meanwhile raises no event. A pass that would block arms the
 * CQ first, so a completion after it still wakes the loop.
 */
Test(wakeup, loop_waits_arms_only_before_a_wait)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_LOOP_WAITS};
	struct io_uring_sqe *sqe;
	unsigned int arms0, events0;
	struct fixture f;

	setup_fx(&f, &o, RR_WAIT_EVENT);
	pass(&f, 1);
	cr_assert(fcq(&f, 0)->armed);
	fake_complete(fcq(&f, 0), 1, 1);
	pass_until(&f, &L.wcs[0], 1);
	cr_assert_eq(L.wcs[0], 1);
	cr_expect(!fcq(&f, 0)->armed, "armed at the end of a pass");
	arms0 = fcq(&f, 0)->arms;
	events0 = fcq(&f, 0)->events;
	/* The application's own I/O between passes; an answer meanwhile. */
	sqe = io_uring_get_sqe(&f.ring);
	cr_assert(sqe);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, 44);
	fake_complete(fcq(&f, 0), 1, 2);
	cr_assert_geq(rr_bridge_run_once(f.b, 20), 0);
	/* SQPOLL: the kernel's thread may not have run the NOP yet. */
	if (!(f.ring.flags & IORING_SETUP_SQPOLL)) {
		cr_expect(logged_app(44), "the application's CQE was not handed out");
		cr_expect_eq(L.wcs[0], 2, "the answer waited for another pass");
		cr_expect_eq(fcq(&f, 0)->arms, arms0,
			     "armed although what was submitted completed at once");
	}
	cr_expect_eq(fcq(&f, 0)->events, events0);
	pass_until(&f, &L.wcs[0], 2);
	/* SQPOLL: a NOP's CQE that comes late would make the next pass one
	 * that hands out and so does not arm; let it come first. */
	for (int i = 0; i < 250 && !logged_app(44); i++)
		pass(&f, 1);
	cr_assert(logged_app(44));
	/* Nothing queued: armed before the wait; a completion after it wakes. */
	cr_assert_geq(rr_bridge_run_once(f.b, 20), 0);
	cr_assert(fcq(&f, 0)->armed, "blocked with the CQ unarmed");
	fake_complete(fcq(&f, 0), 1, 3);
	cr_assert_eq(fcq(&f, 0)->events, events0 + 1);
	pass_until(&f, &L.wcs[0], 3);
	cr_assert_eq(L.wcs[0], 3);
	teardown_fx(&f);
}

/* A fixture with RR_BRIDGE_LOOP_WAITS in @o whose CQ 0 has handed out
 * WC 1 and was left unarmed by that pass, as the flag leaves it. */
static void loop_waits_fx(struct fixture *f, const struct rr_bridge_opts *o)
{
	setup_fx(f, o, RR_WAIT_EVENT);
	pass(f, 1);
	fake_complete(fcq(f, 0), 1, 1);
	pass_until(f, &L.wcs[0], 1);
	cr_assert_eq(L.wcs[0], 1);
	cr_assert(!fcq(f, 0)->armed);
}

/* The io_uring_submit_and_wait*() calls one pass makes (a pass that
 * would sleep makes one). */
static unsigned int waits_in_a_pass(struct fixture *f, int timeout_ms)
{
	unsigned int waits0 = fake_waits;

	cr_assert_geq(rr_bridge_run_once(f->b, timeout_ms), 0);
	return fake_waits - waits0;
}

/*
 * A pass that starts by polling the CQs the last one left unarmed may
 * spend a CQ's budget there: that CQ stays unarmed with completions in
 * it, which raise no event, so the pass must not sleep. With
 * RR_BRIDGE_LOOP_WAITS every pass starts so (the bench's uring rate row
 * hung, both sides asleep in io_uring_enter).
 */
Test(wakeup, a_pass_that_spends_a_budget_first_does_not_sleep)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_LOOP_WAITS, .budget = 4};
	struct fixture f;

	loop_waits_fx(&f, &o);
	fake_complete(fcq(&f, 0), 10, 2);
	cr_expect_eq(waits_in_a_pass(&f, 60000), 0,
		     "the pass waited with completions left in a CQ whose budget it spent");
	pass_until(&f, &L.wcs[0], 11);
	cr_assert_eq(L.wcs[0], 11);
	teardown_fx(&f);
}

/*
 * With RR_BRIDGE_LOOP_WAITS a pass starts by polling the CQs the last one
 * left unarmed, so it may hand out there the completion the application
 * waits for: it must return with it, not sleep after it. It slept: in the
 * lab the bench's client thread that had finished its share set its done
 * flag in such a callback and slept for ever (bench-json, a uring conns
 * run with two client threads, about one run in three).
 */
Test(wakeup, a_pass_that_hands_out_first_does_not_sleep)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_LOOP_WAITS};
	unsigned int arms0;
	struct fixture f;

	loop_waits_fx(&f, &o);
	fake_complete(fcq(&f, 0), 1, 2);
	arms0 = fcq(&f, 0)->arms;
	cr_expect_eq(waits_in_a_pass(&f, 2000), 0, "the pass slept after handing out a completion");
	cr_assert_eq(L.wcs[0], 2);
	/* It does not wait, so it has no reason to arm (a syscall on rxe,
	 * a doorbell on mlx5, and an event the next completion raises). */
	cr_expect_eq(fcq(&f, 0)->arms, arms0, "armed by a pass that did not wait");
	teardown_fx(&f);
}

/* A channel whose reads fail (its device is gone) stays readable: it must
 * not be read on every pass for ever, and its CQs are polled instead of
 * going deaf. */
Test(dispatch, broken_channel_is_polled_around_not_spun_on)
{
	struct fixture f;
	struct fake_channel *ch;
	struct rr_bridge_stats st;
	unsigned int reads0;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	pass(&f, 1);
	ch = (struct fake_channel *)fcq(&f, 0)->cq.channel;
	ch->fail_errno = EIO;
	reads0 = fake_event_reads;
	fake_complete(fcq(&f, 0), 1, 1);
	pass_until(&f, &L.wcs[0], 1);
	cr_assert_eq(L.wcs[0], 1, "a CQ of a broken channel went deaf");
	pass(&f, 20);
	cr_assert_leq(fake_event_reads - reads0, 2, "%u reads of a broken channel",
		      fake_event_reads - reads0);
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_eq(st.poll_failures, 1);
	fake_complete(fcq(&f, 1), 1, 2);
	pass_until(&f, &L.wcs[1], 1);
	cr_assert_eq(L.wcs[1], 1);
	ch->fail_errno = 0;
	teardown_fx(&f);
}

/*
 * The provider may raise a CQ's event after its completion became
 * visible (rxe: from a tasklet). A poll can take that completion first,
 * a read in between can find no event yet; the event arriving after that
 * must still be read, or the CQ is never armed again.
 */
Test(dispatch, event_raised_after_its_completion_was_taken_is_read)
{
	struct fixture f;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	pass(&f, 1);
	fcq(&f, 0)->late_event = true;
	/* CQ 0 armed and on the active list, so a pass polls it. */
	cr_assert_eq(rr_cq_set_mode(f.cq[0], RR_WAIT_EVENT, 0), 0);
	fake_complete(fcq(&f, 0), 1, 1); /* visible, event not raised yet */
	/* CQ 1's event makes the channel readable: its drain polls CQ 0
	 * away and finds no event of CQ 0 yet. */
	fake_complete(fcq(&f, 1), 1, 2);
	pass_until(&f, &L.wcs[1], 1);
	pass_until(&f, &L.wcs[0], 1);
	pass(&f, 2);
	cr_assert_eq(L.wcs[0], 1);
	fake_raise_late(fcq(&f, 0));
	pass(&f, 3);
	cr_assert_eq(fcq(&f, 0)->delivered, 1, "the late event was never read");
	fcq(&f, 0)->late_event = false;
	fake_complete(fcq(&f, 0), 1, 3);
	pass_until(&f, &L.wcs[0], 2);
	cr_assert_eq(L.wcs[0], 2, "deaf after a late event was left unread");
	teardown_fx(&f);
}

/* A CQ polled while armed (here: on the active list after
 * rr_cq_set_mode()) may have taken the completions whose event is still
 * to be read: that event must be read, or the CQ is never armed again.
 * With other_first, CQ 1's event comes first and CQ 0's waits behind it,
 * with nothing in CQ 0 left to show it. */
static void armed_cq_polled_elsewhere(bool other_first)
{
	struct fixture f;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	pass(&f, 1);
	cr_assert(fcq(&f, 0)->armed && fcq(&f, 1)->armed);
	cr_assert_eq(rr_cq_set_mode(f.cq[0], RR_WAIT_EVENT, 0), 0); /* active, armed */
	if (other_first)
		fake_complete(fcq(&f, 1), 1, 100);
	fake_complete(fcq(&f, 0), 1, 1); /* armed: raises an event */
	pass_until(&f, &L.wcs[0], 1);
	pass_until(&f, &L.wcs[1], other_first ? 1 : 0);
	pass(&f, 2);
	cr_assert_eq(L.wcs[0], 1);
	cr_assert_eq(fcq(&f, 0)->delivered, 1, "the event was never read");
	fake_complete(fcq(&f, 0), 1, 2);
	pass_until(&f, &L.wcs[0], 2);
	cr_assert_eq(L.wcs[0], 2, "deaf after its event was left unread");
	teardown_fx(&f);
}

Test(dispatch, event_of_an_armed_cq_polled_elsewhere_is_read)
{
	armed_cq_polled_elsewhere(false);
}

Test(dispatch, waiting_event_of_a_cq_polled_while_armed_is_read)
{
	armed_cq_polled_elsewhere(true);
}

Test(dispatch, acks_batched_and_settled_before_destroy)
{
	struct rr_bridge_opts o = {.ack_batch = 16};
	struct fixture f;

	setup_fx(&f, &o, RR_WAIT_EVENT);
	for (unsigned int i = 0; i < 100; i++) {
		fake_complete(fcq(&f, 0), 1, (uint64_t)i);
		/* Not one pass: on a loaded host an SQPOLL ring's poll CQE
		 * may take longer than a pass waits. */
		pass_until(&f, &L.wcs[0], i + 1);
	}
	cr_assert_eq(fcq(&f, 0)->delivered, 100);
	cr_assert_leq(fcq(&f, 0)->ack_calls, 100 / 16, "%u ack calls", fcq(&f, 0)->ack_calls);
	cr_assert_lt(fcq(&f, 0)->acked, 100, "nothing left to settle at destroy");
	cr_assert_eq(L.wcs[0], 100);
	teardown_fx(&f); /* checks that destroy acknowledged the rest */
}

static int budget_case(bool embedded)
{
	struct rr_bridge_opts o = {.budget = 64, .cq_batch = 16};
	struct fixture f;
	struct io_uring_sqe *sqe;
	unsigned int first_b = 0, first_u = 0, last_a = 0;
	struct rr_bridge_stats st;

	setup_fx(&f, &o, RR_WAIT_EVENT);
	fake_complete(fcq(&f, 0), 1000, 0);
	fake_complete(fcq(&f, 1), 1, 5000);
	sqe = io_uring_get_sqe(&f.ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, 77);
	for (int i = 0; i < 200 && (L.wcs[0] < 1000 || L.wcs[1] < 1); i++) {
		if (!embedded) {
			pass(&f, 1);
			continue;
		}
		/* The application's own loop: the bridge only sees CQEs. */
		struct io_uring_cqe *cqe;

		io_uring_submit_and_wait(&f.ring, 1);
		while (io_uring_peek_cqe(&f.ring, &cqe) == 0) {
			if (!rr_bridge_handle_cqe(f.b, cqe))
				log_it('U', cqe->user_data, cqe->res);
			io_uring_cqe_seen(&f.ring, cqe);
		}
	}
	for (unsigned int i = 0; i < L.n && i < MAX_LOG; i++) {
		if (L.who[i] == 'B' && !first_b)
			first_b = i + 1;
		if (L.who[i] == 'U' && L.id[i] == 77 && !first_u)
			first_u = i + 1;
		if (L.who[i] == 'A')
			last_a = i + 1;
	}
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_eq(L.wcs[0], 1000, "busy CQ: %u of 1000", L.wcs[0]);
	cr_assert_eq(L.wcs[1], 1);
	cr_assert(first_b && first_b < last_a, "the quiet CQ waited for the busy one");
	cr_assert(first_u && first_u < last_a, "the application CQE waited for the busy CQ");
	cr_assert_geq(st.budget_yields, 1);
	if (embedded)
		cr_assert_geq(st.kicks, 1, "no kick brought the bridge back");
	teardown_fx(&f);
	return 0;
}

Test(dispatch, budget_keeps_busy_cq_from_starving_others)
{
	budget_case(false);
}

Test(dispatch, budget_yield_works_embedded_through_kicks)
{
	budget_case(true);
}

Test(modes, busy_never_arms)
{
	struct fixture f;

	setup_fx(&f, NULL, RR_WAIT_BUSY);
	for (int i = 0; i < 10; i++) {
		fake_complete(fcq(&f, 0), 2, (uint64_t)i * 2);
		pass(&f, 1);
	}
	cr_assert_eq(L.wcs[0], 20);
	cr_assert_eq(fcq(&f, 0)->arms, 0);
	cr_assert_eq(fcq(&f, 0)->events, 0);
	teardown_fx(&f);
}

Test(modes, hybrid_spins_then_arms)
{
	struct fixture f;
	unsigned int arms0;
	uint64_t t0;

	setup_fx(&f, NULL, RR_WAIT_HYBRID); /* spin window 300 ms */
	arms0 = fcq(&f, 0)->arms;
	cr_assert_eq(arms0, 1, "an idle hybrid CQ must be armed");
	fake_complete(fcq(&f, 0), 1, 1);
	pass(&f, 2);
	cr_assert_eq(L.wcs[0], 1);
	cr_assert_eq(fcq(&f, 0)->arms, arms0, "armed inside the spin window");
	/* Inside the window a completion is found by polling, no event. */
	fake_complete(fcq(&f, 0), 1, 2);
	pass(&f, 1);
	cr_assert_eq(L.wcs[0], 2);
	t0 = rr__now_ns();
	while (rr__now_ns() - t0 < 1000 * 1000000ull && fcq(&f, 0)->arms == arms0)
		pass(&f, 1);
	cr_assert_eq(fcq(&f, 0)->arms, arms0 + 1, "not armed once idle (%u arms)",
		     fcq(&f, 0)->arms);
	fake_complete(fcq(&f, 0), 1, 3);
	pass(&f, 2);
	cr_assert_eq(L.wcs[0], 3);
	teardown_fx(&f);
}

/* Ping-pong-like: a completion every other pass, 512 times. */
static void hybrid_clock_case(enum rr_wait_mode mode)
{
	struct fixture f;
	unsigned int reads, arms0;

	setup_fx(&f, NULL, mode);
	arms0 = fcq(&f, 0)->arms;
	reads = fake_clock_reads;
	for (unsigned int i = 0; i < 512; i++) {
		fake_complete(fcq(&f, 0), 1, i);
		pass(&f, 2);
	}
	reads = fake_clock_reads - reads;
	cr_assert_eq(L.wcs[0], 512);
	cr_assert_eq(fcq(&f, 0)->arms, arms0, "armed inside the spin window");
	/* One read per window would be 512. */
	cr_assert_leq(reads, 128, "%u clock reads for 512 windows", reads);
	teardown_fx(&f);
}

Test(modes, hybrid_windows_mostly_spare_the_clock)
{
	hybrid_clock_case(RR_WAIT_HYBRID);
}

Test(modes, fixed_hybrid_windows_mostly_spare_the_clock)
{
	hybrid_clock_case(RR_WAIT_HYBRID_FIXED);
}

/* Passes after the last completion until the CQ is armed (at most cap). */
static unsigned int passes_until_armed(struct fixture *f, unsigned int arms0, unsigned int cap)
{
	unsigned int n = 0;

	while (fcq(f, 0)->arms == arms0 && n < cap) {
		pass(f, 1);
		n++;
	}
	return n;
}

Test(modes, adaptive_window_follows_short_gaps)
{
	struct fixture f;
	unsigned int arms0, n;

	setup_fx(&f, NULL, RR_WAIT_HYBRID); /* at most 300 ms */
	arms0 = fcq(&f, 0)->arms;
	/* A completion, then three empty polls: gaps of about four passes. */
	for (unsigned int i = 0; i < 64; i++) {
		fake_complete(fcq(&f, 0), 1, i);
		pass(&f, 4);
	}
	cr_assert_eq(L.wcs[0], 64);
	cr_assert_eq(fcq(&f, 0)->arms, arms0, "a gap of four passes was not spun over");
	/* Silence: the window ends after a few gaps' worth, not 300 ms. */
	n = passes_until_armed(&f, arms0, 64);
	cr_assert_lt(n, 64, "still spinning after 64 empty passes");

	/* The fixed window (same 300 ms) keeps spinning. */
	cr_assert_eq(rr_cq_set_mode(f.cq[0], RR_WAIT_HYBRID_FIXED, 0), 0);
	pass(&f, 1);
	arms0 = fcq(&f, 0)->arms;
	fake_complete(fcq(&f, 0), 1, 100);
	pass_until(&f, &L.wcs[0], 65);
	n = passes_until_armed(&f, arms0, 64);
	cr_assert_eq(n, 64, "the fixed window ended after %u passes", n);
	teardown_fx(&f);
}

/* Rounds of one completion each, the next only once the CQ armed again:
 * every gap outlasts the window. Returns the rounds that spun. */
static unsigned int rounds_spun(struct fixture *f, unsigned int rounds)
{
	unsigned int spun = 0;

	for (unsigned int i = 0; i < rounds; i++) {
		unsigned int arms0 = fcq(f, 0)->arms, want = L.wcs[0] + 1;
		struct rr_bridge_stats a, b;

		fake_complete(fcq(f, 0), 1, 1000 + i);
		pass_until(f, &L.wcs[0], want);
		cr_assert_eq(L.wcs[0], want);
		rr_bridge_get_stats(f->b, &a, sizeof(a));
		passes_until_armed(f, arms0, 1u << 20);
		cr_assert_gt(fcq(f, 0)->arms, arms0, "never armed again");
		rr_bridge_get_stats(f->b, &b, sizeof(b));
		/* A skipped window is the empty poll that opens it and the
		 * one after the arm; a window spins at least one more, however
		 * slow the passes. */
		if (b.empty_polls - a.empty_polls >= 3)
			spun++;
	}
	return spun;
}

Test(modes, adaptive_backs_off_when_gaps_outlast_the_window)
{
	struct fixture f;
	unsigned int spun, arms0;

	setup_fx(&f, NULL, RR_WAIT_HYBRID_FIXED);
	cr_assert_eq(rr_cq_set_mode(f.cq[0], RR_WAIT_HYBRID_FIXED, 5000), 0);
	pass(&f, 1);
	spun = rounds_spun(&f, 100);
	/* Every fixed window spins, but for a pass stalled past its 5 ms (a
	 * loaded host, an SQPOLL thread waited for): CI saw 99 of 100 once. */
	cr_assert_geq(spun, 90, "fixed: %u of 100 rounds spun", spun);

	/* A first full window ends empty. The CQ is still armed from before,
	 * so wait for a pass that polls nothing rather than for an arm. */
	cr_assert_eq(rr_cq_set_mode(f.cq[0], RR_WAIT_HYBRID, 5000), 0);
	for (unsigned int i = 0; i < 1u << 20; i++) {
		struct rr_bridge_stats a, b;

		rr_bridge_get_stats(f.b, &a, sizeof(a));
		pass(&f, 1);
		rr_bridge_get_stats(f.b, &b, sizeof(b));
		if (a.empty_polls == b.empty_polls)
			break;
	}
	spun = rounds_spun(&f, 100);
	/* Once the share of windows that hit falls under 1/8 (after about
	 * 32 misses): skip 1, spin, skip 3, spin, skip 7 ... skip 63. */
	cr_assert_leq(spun, 45, "adaptive: %u of 100 rounds spun", spun);
	cr_assert_geq(spun, 1);

	/* Traffic returns: a probe window catches it and spinning resumes. */
	for (unsigned int i = 0; i < 200; i++) {
		if (i == 100)
			arms0 = fcq(&f, 0)->arms;
		fake_complete(fcq(&f, 0), 1, 5000 + i);
		pass(&f, 2);
	}
	cr_assert_eq(fcq(&f, 0)->arms, arms0, "armed in the last 100 of 200 close completions");
	teardown_fx(&f);
}

Test(modes, switch_at_run_time)
{
	struct fixture f;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	cr_assert_eq(rr_cq_set_mode(f.cq[0], RR_WAIT_BUSY, 0), 0);
	pass(&f, 1);
	/* The arm from event mode still fires once; busy mode copes. */
	fake_complete(fcq(&f, 0), 1, 1);
	pass(&f, 1);
	cr_assert_eq(L.wcs[0], 1);
	cr_assert_eq(rr_cq_set_mode(f.cq[0], RR_WAIT_EVENT, 0), 0);
	pass(&f, 2);
	cr_assert(fcq(&f, 0)->armed, "back in event mode but not armed");
	fake_complete(fcq(&f, 0), 1, 2);
	pass(&f, 2);
	cr_assert_eq(L.wcs[0], 2);
	cr_assert_eq(rr_cq_set_mode(f.cq[0], 7, 0), -EINVAL);
	teardown_fx(&f);
}

/* ---- destroying a CQ from its own callback ---- */

static rr_cq *victim_cq;

static void destroy_self(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	L.wcs[0]++;
	cr_assert_eq(rr_cq_destroy(cq), 0);
	victim_cq = NULL;
}

Test(dispatch, cq_destroyed_from_its_callback)
{
	struct fixture f;
	struct rr_cq_opts co = {.on_wc = destroy_self};

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	cr_assert_eq(rr_cq_create(f.b, f.ch, &fake_ctx, &co, sizeof(co), &victim_cq), 0);
	fake_complete(fake_cq_of(rr_cq_ibv(victim_cq)), 5, 0);
	pass(&f, 2);
	cr_assert_eq(L.wcs[0], 1, "work completions handed out after destroy");
	cr_assert_null(victim_cq);
	teardown_fx(&f);
}

/* ---- timers ---- */

static int timer_fired;

static void on_timer(void *ctx, int res)
{
	timer_fired++;
	cr_assert_eq(res, -ETIME);
}

Test(timer, fires_once_and_cancel_prevents_it)
{
	struct fixture f;
	uint32_t s1, s2;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	timer_fired = 0;
	cr_assert_eq(rr__timer_add(&f.b->ring, 10, on_timer, NULL, &s1), 0);
	cr_assert_eq(rr__timer_add(&f.b->ring, 10, on_timer, NULL, &s2), 0);
	rr__poll_close(&f.b->ring, s2);
	pass(&f, 10);
	cr_assert_eq(timer_fired, 1);
	teardown_fx(&f);
}

/* ---- loop and teardown ---- */

Test(loop, run_once_times_out_and_reports_orphans)
{
	struct io_uring ring;
	rr_bridge *b;
	struct io_uring_sqe *sqe;

	init_ring(&ring, 8);
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_assert_eq(rr_bridge_run_once(b, 10), 0);
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, 5);
	/* No on_app_cqe: the caller hears about it. */
	cr_assert_eq(rr_bridge_run_once(b, 100), -EPROTO);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* ---- min-wait (Linux 6.12): one wake-up for CQEs close together ---- */

#define FEAT_MIN_TIMEOUT (1u << 15) /* IORING_FEAT_MIN_TIMEOUT, 6.12 */

static struct fixture *min_fx;

static void complete_at_wait(void)
{
	fake_before_wait = NULL;
	fake_complete(fcq(min_fx, 0), 1, 7);
}

/* Passes of @timeout_ms until the one completion raised as the first of
 * them waits has been handed out. */
static void passes_with_a_completion_at_wait(struct fixture *f, int timeout_ms)
{
	min_fx = f;
	fake_before_wait = complete_at_wait;
	for (int i = 0; i < 50 && !L.wcs[0]; i++)
		cr_assert_geq(rr_bridge_run_once(f->b, timeout_ms), 0);
	cr_assert_eq(L.wcs[0], 1);
}

static uint64_t min_waits(struct fixture *f)
{
	struct rr_bridge_stats st;

	cr_assert_eq(rr_bridge_get_stats(f->b, &st, sizeof(st)), 0);
	return st.min_waits;
}

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A pass that asks for 8 CQEs and gets one returns with it after the
 * min-wait; the kernel's min-wait is used where it has it. */
Test(min_wait, a_pass_returns_the_one_completion_it_got)
{
	struct rr_bridge_opts o = {.min_wait_us = 20000, .wait_nr = 8};
	struct fixture f;

	setup_fx(&f, &o, RR_WAIT_EVENT);
	pass(&f, 1);
	passes_with_a_completion_at_wait(&f, 5000);
	if (f.ring.features & FEAT_MIN_TIMEOUT)
		cr_expect_gt(min_waits(&f), 0, "the kernel has min-wait and it went unused");
	else
		cr_expect_eq(min_waits(&f), 0);
	teardown_fx(&f);
}

/* As on 6.1: the feature bit masked, a pass wakes at its first CQE (a
 * min-wait of 10 s and 8 CQEs asked would hold it for 10 s). */
Test(min_wait, without_the_kernel_feature_a_pass_wakes_at_its_first_cqe)
{
	struct rr_bridge_opts o = {.min_wait_us = 10000000, .wait_nr = 8};
	struct fixture f;
	uint64_t t0;

	setup_fx(&f, &o, RR_WAIT_EVENT);
	f.ring.features &= ~FEAT_MIN_TIMEOUT;
	pass(&f, 1);
	t0 = ms_now();
	passes_with_a_completion_at_wait(&f, 20000);
	cr_expect_eq(min_waits(&f), 0, "min-wait used on a kernel said to lack it");
	cr_expect_lt(ms_now() - t0, 5000, "the pass waited for the min-wait");
	teardown_fx(&f);
}

/* A min-wait longer than the pass's timeout ends at the timeout, with a
 * CQE or without. */
Test(min_wait, a_pass_waits_no_longer_than_its_timeout)
{
	struct rr_bridge_opts o = {.min_wait_us = 10000000, .wait_nr = 8};
	struct fixture f;
	uint64_t t0;

	setup_fx(&f, &o, RR_WAIT_EVENT);
	pass(&f, 1);
	t0 = ms_now();
	cr_assert_eq(rr_bridge_run_once(f.b, 50), 0);
	cr_expect_lt(ms_now() - t0, 5000, "an idle pass of 50 ms waited for the min-wait");
	t0 = ms_now();
	passes_with_a_completion_at_wait(&f, 100);
	cr_expect_lt(ms_now() - t0, 5000, "a pass of 100 ms with a CQE waited for the min-wait");
	teardown_fx(&f);
}

static void *complete_later(void *arg)
{
	usleep(200000);
	fake_complete(fcq(arg, 0), 1, 9);
	return NULL;
}

/* Waiting without a timeout: the min-wait passing with no CQE does not
 * end the wait (a kernel wait without a timeout would end there). */
Test(min_wait, a_pass_without_timeout_sleeps_past_the_min_wait)
{
	struct rr_bridge_opts o = {.min_wait_us = 1000, .wait_nr = 8};
	struct fixture f;
	pthread_t t;
	int rc;

	setup_fx(&f, &o, RR_WAIT_EVENT);
	pass(&f, 1);
	cr_assert_eq(pthread_create(&t, NULL, complete_later, &f), 0);
	rc = rr_bridge_run_once(f.b, -1);
	pthread_join(t, NULL);
	cr_expect_gt(rc, 0, "the pass returned %d", rc);
	cr_expect_eq(L.wcs[0], 1, "the wait ended at the min-wait, with nothing");
	pass_until(&f, &L.wcs[0], 1);
	teardown_fx(&f);
}

Test(teardown, destroy_with_polls_and_app_io_in_flight)
{
	struct fixture f;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	int efd = eventfd(0, EFD_NONBLOCK);
	uint64_t buf;
	int napp = 0;

	setup_fx(&f, NULL, RR_WAIT_EVENT);
	/* Events pending and unread, WCs in the CQs, polls armed... */
	fake_complete(fcq(&f, 0), 3, 0);
	fake_complete(fcq(&f, 1), 3, 0);
	io_uring_submit(&f.ring);
	/* ...application NOPs about to complete and a read that never will. */
	for (int i = 0; i < 3; i++) {
		sqe = io_uring_get_sqe(&f.ring);
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, 100 + (uint64_t)i);
	}
	sqe = io_uring_get_sqe(&f.ring);
	io_uring_prep_read(sqe, efd, &buf, sizeof(buf), 0);
	io_uring_sqe_set_data64(sqe, 200);
	io_uring_submit(&f.ring);
	cr_assert_eq(rr_bridge_destroy(f.b), 0);
	cr_assert_eq(fake_cqs_live, 0);
	cr_assert_eq(fake_channels_live, 0);
	cr_assert_eq(fake_unacked_at_destroy, 0);
	for (unsigned int i = 0; i < L.n; i++)
		napp += L.who[i] == 'U' && L.id[i] >= 100 && L.id[i] < 103;
	/* Nothing of the bridge is left in the ring; the NOPs the destroy did
	 * not meet (SQPOLL completes them later) are still there, once each;
	 * the read is still ours. */
	for (int i = 0; i < 100 && napp < 3; i++) {
		struct __kernel_timespec ts = {.tv_nsec = 10000000};

		if (io_uring_wait_cqe_timeout(&f.ring, &cqe, &ts))
			continue;
		cr_assert(!rr_is_bridge_user_data(cqe->user_data), "late bridge CQE");
		cr_assert(cqe->user_data >= 100 && cqe->user_data < 103);
		napp++;
		io_uring_cqe_seen(&f.ring, cqe);
	}
	cr_assert_eq(napp, 3, "application CQEs delivered %d times", napp);
	buf = 1;
	cr_assert_eq(write(efd, &buf, sizeof(buf)), (ssize_t)sizeof(buf));
	cr_assert_eq(io_uring_wait_cqe(&f.ring, &cqe), 0);
	cr_assert_eq(cqe->user_data, 200);
	io_uring_cqe_seen(&f.ring, cqe);
	close(efd);
	io_uring_queue_exit(&f.ring);
}

Test(teardown, destroy_without_app_callback_does_not_eat_app_cqes)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	rr_channel *ch;
	rr_bridge *b;

	init_ring(&ring, 8);
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &ch), 0);
	io_uring_submit(&ring);
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, 9);
	io_uring_submit_and_wait(&ring, 1);
	cr_assert_eq(rr_bridge_destroy(b), -EBUSY);
	cr_assert_eq(io_uring_peek_cqe(&ring, &cqe), 0);
	cr_assert_eq(cqe->user_data, 9, "the application CQE was consumed");
	io_uring_cqe_seen(&ring, cqe);
	/* The application drains; destroy then completes. */
	while (rr_bridge_destroy(b) == -EBUSY) {
		cr_assert_eq(io_uring_peek_cqe(&ring, &cqe), 0);
		cr_assert_eq(rr_bridge_handle_cqe(b, cqe), 0);
		io_uring_cqe_seen(&ring, cqe);
	}
	cr_assert_eq(fake_channels_live, 0);
	io_uring_queue_exit(&ring);
}

/* With DEFER_TASKRUN a poll that fired keeps its task work until the next
 * io_uring_enter(); a cancel that meets it gets -EALREADY and the multishot
 * poll stays armed. The bridge must ask again, or destroy waits forever. */
Test(teardown, cancel_of_a_firing_poll_is_asked_again)
{
	struct rr_cq_opts co = {.mode = RR_WAIT_EVENT, .on_wc = on_wc};
	struct rr_bridge_stats st;
	struct io_uring ring;
	rr_channel *ch;
	rr_bridge *b;
	rr_cq *cq;
	int rc;

	rc = io_uring_queue_init(8, &ring, IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
	if (rc == -EINVAL)
		cr_skip_test("kernel without IORING_SETUP_DEFER_TASKRUN");
	cr_assert_eq(rc, 0);
	memset(&L, 0, sizeof(L));
	cr_assert_eq(rr_bridge_create(&b, &ring, NULL, 0), 0);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &ch), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, &co, sizeof(co), &cq), 0);
	cr_assert_geq(rr_bridge_run_once(b, 0), 0);	/* the poll is in the kernel */
	fake_complete(fake_cq_of(rr_cq_ibv(cq)), 1, 1); /* fires; task work waits */
	cr_assert_eq(rr_cq_destroy(cq), 0);
	cr_assert_eq(rr_channel_destroy(ch), 0);
	/* The ring's room timer stays (see ring.c), and so do the polls of
	 * the device the CQ was heard on (its async fd, and the bell other
	 * bridges forward its events with) until the bridge goes, as for a
	 * CQ on the shared channel. */
	for (int i = 0; i < 100 && b->ring.live_slots > 3; i++)
		cr_assert_geq(rr_bridge_run_once(b, 10), 0);
	rr_bridge_get_stats(b, &st, sizeof(st));
	cr_assert_neq(b->ring.room_slot, RR__NO_SLOT);
	cr_assert_eq(b->ring.live_slots, 3, "the channel's poll ended");
	cr_assert_geq(st.cancel_retries, 1, "the cancel met a firing poll and was asked again");
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* ---- channels read through the ring (fake_ctx_rr: no cq_event op) ---- */

static const struct rr_bridge_opts ring_read = {.flags = RR_BRIDGE_RING_READ};

static bool sqpoll(void)
{
	return ring_flags() & IORING_SETUP_SQPOLL;
}

Test(ring_read, events_arrive_in_cqes_without_a_read)
{
	struct rr_bridge_stats st;
	struct fixture f;
	unsigned int reads0;

	setup_on(&f, &ring_read, RR_WAIT_EVENT, &fake_ctx_rr);
	reads0 = fake_event_reads;
	for (unsigned int i = 0; i < 40; i++) {
		fake_complete(fcq(&f, (int)(i % 2)), 1, i);
		pass_until(&f, &L.n, i + 1);
	}
	cr_assert_eq(L.n, 40);
	for (unsigned int i = 0; i < 40; i++)
		cr_assert_eq(L.id[i], i, "completion %u out of order", i);
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_eq(st.cq_events, fcq(&f, 0)->events + fcq(&f, 1)->events);
	if (sqpoll())
		cr_assert_gt(fake_event_reads - reads0, 0, "SQPOLL rings read with read(2)");
	else
		cr_assert_eq(fake_event_reads - reads0, 0, "%u read(2)s of the channel",
			     fake_event_reads - reads0);
	teardown_fx(&f);
}

/*
 * RR_BRIDGE_RING_READ with RR_BRIDGE_LOOP_WAITS: the READ a pass re-armed
 * is the bridge's own SQE. A pass that waits with nothing of the
 * application's queued enters the kernel once, to wait; it entered twice,
 * the submit meant for the application's I/O firing on that READ.
 */
Test(ring_read, a_waiting_pass_enters_the_kernel_once)
{
	struct rr_bridge_opts o = {.flags = RR_BRIDGE_RING_READ | RR_BRIDGE_LOOP_WAITS};
	struct fixture f;
	unsigned int enters0;

	setup_on(&f, &o, RR_WAIT_EVENT, &fake_ctx_rr);
	pass(&f, 1);
	fake_complete(fcq(&f, 0), 1, 1);
	pass_until(&f, &L.wcs[0], 1);
	cr_assert_eq(L.wcs[0], 1);
	enters0 = fake_get_events;
	cr_assert_eq(waits_in_a_pass(&f, 20), 1);
	cr_expect_eq(fake_get_events - enters0, 0,
		     "a pass with only the bridge's own SQEs queued entered before its wait");
	teardown_fx(&f);
}

/* Until a CQE of the channel is in the CQ ring, unhandled. */
static void complete_unhandled(struct fixture *f)
{
	uint64_t ud = channel_ud(f);

	for (int i = 0; i < 2000; i++) {
		struct io_uring_cqe *cqe;
		unsigned int head;

		io_uring_submit_and_get_events(&f->ring);
		io_uring_for_each_cqe(&f->ring, head, cqe) if (cqe->user_data == ud) return;
		usleep(500);
	}
	cr_assert_fail("the channel's CQE never came");
}

Test(ring_read, destroy_counts_an_event_read_but_not_handed_out)
{
	struct fixture f;

	setup_on(&f, &ring_read, RR_WAIT_EVENT, &fake_ctx_rr);
	pass(&f, 2); /* the READ (or poll) is in the kernel */
	fake_complete(fcq(&f, 0), 1, 7);
	/* The kernel reads the event; its CQE waits in the ring. */
	complete_unhandled(&f);
	cr_assert_eq(rr_cq_destroy(f.cq[0]), 0);
	cr_assert_eq(fake_unacked_at_destroy, 0,
		     "the event the ring read was not acknowledged: ibv_destroy_cq() would wait");
	/* The CQE comes now, claimed: the other CQ is still heard. */
	pass(&f, 3);
	fake_complete(fcq(&f, 1), 1, 9);
	pass_until(&f, &L.wcs[1], 1);
	cr_assert_eq(L.wcs[1], 1);
	cr_assert_eq(L.wcs[0], 0);
	teardown_fx(&f);
}

/* Ten events on the channel of ctx: each read with ibv_get_cq_event(). */
static void read_with_syscalls(const struct rr_bridge_opts *o, struct ibv_context *ctx)
{
	struct fixture f;
	unsigned int reads0;

	setup_on(&f, o, RR_WAIT_EVENT, ctx);
	reads0 = fake_event_reads;
	for (unsigned int i = 0; i < 10; i++) {
		fake_complete(fcq(&f, 0), 1, i);
		pass_until(&f, &L.wcs[0], i + 1);
	}
	cr_assert_eq(L.wcs[0], 10);
	cr_assert_geq(fake_event_reads - reads0, 10);
	teardown_fx(&f);
}

Test(ring_read, read_syscalls_without_the_flag_or_where_the_provider_counts_events)
{
	read_with_syscalls(NULL, &fake_ctx_rr);
	read_with_syscalls(&ring_read, &fake_ctx); /* its cq_event op must see each event */
}

Test(ring_read, a_channel_that_ends_is_polled_around)
{
	struct rr_bridge_stats st;
	struct fake_channel *ch;
	struct fixture f;

	setup_on(&f, &ring_read, RR_WAIT_EVENT, &fake_ctx_rr);
	if (sqpoll()) {
		/* Its kernel thread could complete a READ during a destroy. */
		cr_assert(!f.ch->ring_reads, "an SQPOLL ring reads a channel through the ring");
		teardown_fx(&f);
		return;
	}
	cr_assert(f.ch->ring_reads);
	pass(&f, 2);
	/* The READ finds the end of the file: no event can come again. */
	ch = (struct fake_channel *)f.ch->ch;
	close(ch->wfd);
	ch->wfd = -1;
	pass(&f, 2);
	fake_complete(fcq(&f, 0), 1, 5);
	pass_until(&f, &L.wcs[0], 1);
	cr_assert_eq(L.wcs[0], 1, "a CQ of the ended channel went deaf");
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_geq(st.poll_failures, 1);
	teardown_fx(&f);
}

/* ---- a shared CQ: one QP's completions taken out as it leaves ---- */

static struct {
	rr_cq *cq;
	uint64_t taken[16], after[16];
	unsigned int ntaken, nafter;
	bool took;
} T;

#define QP_A (1ull << 32) /* qp_num 1 in the fake's wr_id */
#define QP_X (2ull << 32)

static void took_one(void *ctx, const struct ibv_wc *wc)
{
	if (T.ntaken < 16)
		T.taken[T.ntaken++] = wc->wr_id;
}

/* X's completion makes A leave, as an endpoint destroyed from a callback. */
static void on_wc_take(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	if (T.took && T.nafter < 16)
		T.after[T.nafter++] = wc->wr_id;
	if (wc->wr_id == (QP_X | 1)) {
		T.took = true;
		cr_assert_eq(rr__cq_take_qp(T.cq, 1, took_one, NULL), 0);
	}
}

Test(shared_cq, a_qp_leaving_mid_batch_takes_its_completions_in_order)
{
	/* Three completions per poll: the batch is X1 A1 A2, the CQ keeps A3
	 * and X2. */
	struct rr_bridge_opts o = {.cq_batch = 3, .on_app_cqe = on_app};
	struct rr_cq_opts co = {.mode = RR_WAIT_EVENT, .on_wc = on_wc_take};
	struct io_uring ring;
	rr_channel *ch;
	rr_bridge *b;

	memset(&T, 0, sizeof(T));
	init_ring(&ring, 64);
	cr_assert_eq(rr_bridge_create(&b, &ring, &o, sizeof(o)), 0);
	cr_assert_eq(rr_channel_create(b, &fake_ctx, &ch), 0);
	cr_assert_eq(rr_cq_create(b, ch, &fake_ctx, &co, sizeof(co), &T.cq), 0);
	cr_assert_geq(rr_bridge_run_once(b, 0), 0);
	fake_complete(fake_cq_of(rr_cq_ibv(T.cq)), 1, QP_X | 1);
	fake_complete(fake_cq_of(rr_cq_ibv(T.cq)), 3, QP_A | 1);
	fake_complete(fake_cq_of(rr_cq_ibv(T.cq)), 1, QP_X | 2);
	for (int i = 0; i < 250 && T.nafter < 1; i++) {
		cr_assert_geq(rr_bridge_run_once(b, 20), 0);
		for (int k = 0; k < 2000 && io_uring_sq_ready(&ring); k++)
			usleep(100);
	}
	cr_assert_eq(T.ntaken, 3, "A's completions taken: %u", T.ntaken);
	for (unsigned int i = 0; i < 3; i++)
		cr_assert_eq(T.taken[i], QP_A | (i + 1), "A's completion %u came as %#llx", i + 1,
			     (unsigned long long)T.taken[i]);
	cr_assert_eq(T.nafter, 1, "%u completions after A left", T.nafter);
	cr_assert_eq(T.after[0], QP_X | 2, "after A left: %#llx", (unsigned long long)T.after[0]);
	cr_assert_eq(rr_cq_destroy(T.cq), 0);
	cr_assert_eq(rr_channel_destroy(ch), 0);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* ---- on_wc_batch: a CQ's completions an array per poll ---- */

#define MAX_CALLS 256

/* What batch callbacks saw; the WCs themselves go to L, in order. */
static struct {
	unsigned int calls[3];
	unsigned int size[MAX_CALLS]; /* n of each call, all CQs */
	unsigned int ncalls;
} BL;

/* Called by on_batch after logging, where a test sets it. */
static void (*batch_hook)(rr_cq *cq, int which, const struct ibv_wc *wc, int n);

static void on_batch(rr_cq *cq, const struct ibv_wc *wc, int n, void *data)
{
	int which = (int)(uintptr_t)data;

	cr_assert_gt(n, 0, "a batch of %d", n);
	BL.calls[which]++;
	if (BL.ncalls < MAX_CALLS)
		BL.size[BL.ncalls] = (unsigned int)n;
	BL.ncalls++;
	for (int i = 0; i < n; i++) {
		L.wcs[which < 2 ? which : 0]++;
		log_it("ABC"[which], wc[i].wr_id, 0);
	}
	if (batch_hook)
		batch_hook(cq, which, wc, n);
}

/* @ncqs event CQs with on_wc_batch on one channel of ctx, cq_batch WCs a
 * poll (the others of f->cq NULL). */
static void setup_batch_n(struct fixture *f, unsigned int cq_batch, unsigned int budget,
			  struct ibv_context *ctx, int ncqs)
{
	struct rr_bridge_opts o = {.cq_batch = cq_batch, .budget = budget, .on_app_cqe = on_app};
	struct rr_cq_opts co = {.mode = RR_WAIT_EVENT, .on_wc_batch = on_batch};

	memset(&L, 0, sizeof(L));
	memset(&BL, 0, sizeof(BL));
	wc_hook = NULL;
	batch_hook = NULL;
	init_ring(&f->ring, 64);
	cr_assert_eq(rr_bridge_create(&f->b, &f->ring, &o, sizeof(o)), 0);
	cr_assert_eq(rr_channel_create(f->b, ctx, &f->ch), 0);
	f->cq[1] = NULL;
	for (int i = 0; i < ncqs; i++) {
		co.data = (void *)(uintptr_t)i;
		cr_assert_eq(rr_cq_create(f->b, f->ch, ctx, &co, sizeof(co), &f->cq[i]), 0);
	}
	pass(f, 1);
}

/* Two event CQs with on_wc_batch on one channel of ctx, cq_batch WCs a poll. */
static void setup_batch_on(struct fixture *f, unsigned int cq_batch, unsigned int budget,
			   struct ibv_context *ctx)
{
	setup_batch_n(f, cq_batch, budget, ctx, 2);
}

/* CQ `who`'s work completions were first .. first + n - 1, once each, in order. */
static void assert_ids(char who, uint64_t first, unsigned int n)
{
	unsigned int k = 0;

	for (unsigned int i = 0; i < L.n && i < MAX_LOG; i++) {
		if (L.who[i] != who)
			continue;
		cr_assert_lt(k, n, "CQ %c: more than %u work completions", who, n);
		cr_assert_eq(L.id[i], first + k, "CQ %c: completion %u is %llu, not %llu", who, k,
			     (unsigned long long)L.id[i], (unsigned long long)(first + k));
		k++;
	}
	cr_assert_eq(k, n, "CQ %c: %u work completions, not %u", who, k, n);
}

static void batches_case(struct ibv_context *ctx)
{
	static const unsigned int want[] = {8, 8, 4};
	struct fixture f;

	setup_batch_on(&f, 8, 0, ctx);
	fake_complete(fcq(&f, 0), 20, 1);
	pass_until(&f, &L.wcs[0], 20);
	pass(&f, 2);
	assert_ids('A', 1, 20);
	cr_assert_eq(BL.ncalls, 3, "%u calls for 20 completions in polls of 8", BL.ncalls);
	for (unsigned int i = 0; i < 3; i++)
		cr_assert_eq(BL.size[i], want[i], "call %u had %u", i, BL.size[i]);
	/* One more on the other CQ: a batch of one, for that CQ. */
	fake_complete(fcq(&f, 1), 1, 100);
	pass_until(&f, &L.wcs[1], 1);
	pass(&f, 2);
	assert_ids('B', 100, 1);
	cr_assert_eq(BL.calls[1], 1);
	cr_assert_eq(BL.size[3], 1);
	cr_assert_eq(BL.ncalls, 4, "%u calls", BL.ncalls);
	assert_ids('A', 1, 20);
	teardown_fx(&f);
}

Test(batch, each_poll_is_one_array_in_order)
{
	batches_case(&fake_ctx);
}

Test(batch, each_poll_is_one_array_in_order_rxe)
{
	batches_case(&fake_ctx_rr);
}

/* No batch above the budget; what it cut short comes on later passes. */
Test(batch, a_batch_never_exceeds_the_budget)
{
	struct rr_bridge_stats st;
	struct fixture f;
	unsigned int sum = 0;

	setup_batch_on(&f, 4, 5, &fake_ctx);
	fake_complete(fcq(&f, 0), 12, 1);
	pass_until(&f, &L.wcs[0], 12);
	pass(&f, 2);
	assert_ids('A', 1, 12);
	for (unsigned int i = 0; i < BL.ncalls; i++) {
		cr_assert_leq(BL.size[i], 4, "call %u had %u", i, BL.size[i]);
		sum += BL.size[i];
	}
	cr_assert_eq(sum, 12);
	rr_bridge_get_stats(f.b, &st, sizeof(st));
	cr_assert_geq(st.budget_yields, 1, "a poll of 12 under a budget of 5 never yielded");
	teardown_fx(&f);
}

static void no_batch(rr_cq *cq, const struct ibv_wc *wc, int n, void *data)
{
	cr_assert_fail("a CQ refused at creation handed out completions");
}

Test(batch, one_of_on_wc_and_on_wc_batch_is_required)
{
	struct rr_cq_opts both = {.on_wc = on_wc, .on_wc_batch = no_batch};
	struct rr_cq_opts neither = {.mode = RR_WAIT_EVENT};
	struct fixture f;
	rr_cq *cq = NULL;
	unsigned int live;

	setup_batch_on(&f, 0, 0, &fake_ctx);
	live = fake_cqs_live;
	cr_assert_eq(rr_cq_create(f.b, f.ch, &fake_ctx, &both, sizeof(both), &cq), -EINVAL);
	cr_assert_eq(rr_cq_create(f.b, f.ch, &fake_ctx, &neither, sizeof(neither), &cq), -EINVAL);
	cr_assert_eq(rr_cq_create(f.b, NULL, &fake_ctx, &both, sizeof(both), &cq), -EINVAL);
	cr_assert_null(cq);
	cr_assert_eq(fake_cqs_live, live, "a refused CQ was created");
	teardown_fx(&f);
}

/*
 * A caller built before on_wc_batch passes the old size: nothing past it
 * is read (the struct ends where an unreadable page begins, and in a
 * second buffer what follows it is not zero), and on_wc gets every WC.
 */
Test(batch, a_caller_without_on_wc_batch_gets_on_wc)
{
	const size_t old = offsetof(struct rr_cq_opts, on_wc_batch);
	struct rr_cq_opts co = {.mode = RR_WAIT_EVENT, .on_wc = on_wc, .data = (void *)0};
	long page = sysconf(_SC_PAGESIZE);
	char *map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char dirty[sizeof(co)];
	struct fixture f;
	rr_cq *cq[2];

	cr_assert_eq(old, RR__CQ_OPTS_SIZE_0_8);
	cr_assert_neq(map, MAP_FAILED);
	cr_assert_eq(mprotect(map + page, (size_t)page, PROT_NONE), 0);
	memcpy(map + page - old, &co, old);
	memset(dirty, 0xa5, sizeof(dirty));
	memcpy(dirty, &co, old);
	setup_batch_on(&f, 0, 0, &fake_ctx);
	cr_assert_eq(rr_cq_create(f.b, f.ch, &fake_ctx, (void *)(map + page - old), old, &cq[0]),
		     0);
	cr_assert_eq(rr_cq_create(f.b, f.ch, &fake_ctx, (void *)dirty, old, &cq[1]), 0);
	pass(&f, 1);
	fake_complete(fake_cq_of(rr_cq_ibv(cq[0])), 3, 1);
	fake_complete(fake_cq_of(rr_cq_ibv(cq[1])), 2, 4);
	pass_until(&f, &L.wcs[0], 5);
	pass(&f, 2);
	assert_ids('A', 1, 5);
	cr_assert_eq(BL.ncalls, 0, "the old-size CQs' completions went to a batch callback");
	teardown_fx(&f);
	munmap(map, 2 * (size_t)page);
}

/* A completion that lands between the last poll and the arm raises no
 * event: the poll after the arm hands it out, once. */
static void racing_arm_case(struct ibv_context *ctx)
{
	struct fixture f;

	setup_batch_on(&f, 0, 0, ctx);
	fcq(&f, 0)->inject_on_arm = 1;
	fake_complete(fcq(&f, 0), 1, 7);
	pass_until(&f, &L.wcs[0], 2);
	pass(&f, 2);
	cr_assert_eq(L.wcs[0], 2, "%u work completions", L.wcs[0]);
	cr_assert_eq(fcq(&f, 0)->events, 1);
	cr_assert_eq(L.id[0], 7);
	cr_assert_neq(L.id[1], 7, "handed out twice");
	teardown_fx(&f);
}

Test(batch, a_completion_racing_the_arm_is_handed_out_once)
{
	racing_arm_case(&fake_ctx);
}

Test(batch, a_completion_racing_the_arm_is_handed_out_once_rxe)
{
	racing_arm_case(&fake_ctx_rr);
}

/* Each batch of CQ 0 brings the next completion, as a peer's answers do. */
static void trickle_batch(rr_cq *cq, int which, const struct ibv_wc *wc, int n)
{
	if (which == 0 && wc[n - 1].wr_id < TRICKLE)
		fake_complete(fake_cq_of(rr_cq_ibv(cq)), 1, wc[n - 1].wr_id + 1);
}

/* The stream after the arm, batch by batch: taken until the CQ is empty,
 * every completion once and in order, and the CQ armed at the end. */
Test(batch, a_stream_after_the_arm_is_taken_once_each)
{
	struct fixture f;

	setup_batch_on(&f, 0, 0, &fake_ctx);
	batch_hook = trickle_batch;
	fake_complete(fcq(&f, 0), 1, 1);
	pass_until(&f, &L.wcs[0], TRICKLE);
	batch_hook = NULL;
	pass(&f, 2);
	assert_ids('A', 1, TRICKLE);
	cr_expect_leq(fcq(&f, 0)->events, 2, "%u events for one stream of %d completions",
		      fcq(&f, 0)->events, TRICKLE);
	cr_assert(fcq(&f, 0)->armed, "left unarmed at the end of the stream");
	teardown_fx(&f);
}

/* The late event of a completion a pass already handed out (woken by an
 * application CQE) hands nothing out twice. */
Test(batch, a_late_event_hands_nothing_out_twice)
{
	struct fixture f;

	setup_batch_on(&f, 0, 0, &fake_ctx);
	fcq(&f, 0)->late_event = true;
	fake_complete(fcq(&f, 0), 3, 1);
	nop_ring = &f.ring;
	queue_app_nop(42);
	cr_assert_geq(rr_bridge_run_once(f.b, 20), 0);
	cr_assert(logged_app(42));
	cr_assert_eq(L.wcs[0], 3, "a pass woken by an application CQE left WCs in the CQ");
	cr_assert_eq(BL.ncalls, 1);
	fcq(&f, 0)->late_event = false;
	fake_raise_late(fcq(&f, 0));
	pass_until(&f, &fcq(&f, 0)->delivered, 1);
	pass(&f, 2);
	cr_assert_eq(fcq(&f, 0)->delivered, 1, "the late event was not read");
	assert_ids('A', 1, 3);
	cr_assert_eq(BL.ncalls, 1, "%u calls: the late event handed something out", BL.ncalls);
	teardown_fx(&f);
}

static void batch_destroys_self(rr_cq *cq, int which, const struct ibv_wc *wc, int n)
{
	if (which == 2) {
		cr_assert_eq(rr_cq_destroy(cq), 0);
		victim_cq = NULL;
	}
}

/* A batch callback that destroys its CQ: as from on_wc, the call returns
 * and nothing more of that CQ is handed out; it is freed after. */
Test(batch, cq_destroyed_from_its_batch_callback)
{
	struct rr_cq_opts co = {.on_wc_batch = on_batch, .data = (void *)2};
	struct fixture f;

	setup_batch_on(&f, 4, 0, &fake_ctx);
	cr_assert_eq(rr_cq_create(f.b, f.ch, &fake_ctx, &co, sizeof(co), &victim_cq), 0);
	batch_hook = batch_destroys_self;
	fake_complete(fake_cq_of(rr_cq_ibv(victim_cq)), 10, 1);
	fake_complete(fcq(&f, 0), 2, 50);
	pass_until(&f, &L.wcs[0], 6);
	pass(&f, 2);
	cr_assert_null(victim_cq);
	cr_assert_eq(BL.calls[2], 1, "%u calls after the CQ was destroyed", BL.calls[2]);
	assert_ids('C', 1, 4);
	assert_ids('A', 50, 2);
	teardown_fx(&f);
}

static struct fixture *batch_fx;

static void batch_destroys_other(rr_cq *cq, int which, const struct ibv_wc *wc, int n)
{
	if (which == 0 && batch_fx->cq[1]) {
		cr_assert_eq(rr_cq_destroy(batch_fx->cq[1]), 0);
		batch_fx->cq[1] = NULL;
	}
}

/* Another CQ whose event the same wake-up read, destroyed from a batch
 * callback: its completions never reach the application. */
Test(batch, a_cq_destroyed_by_another_cqs_batch_hands_nothing_out)
{
	struct fixture f;

	setup_batch_on(&f, 0, 0, &fake_ctx);
	batch_fx = &f;
	batch_hook = batch_destroys_other;
	fake_complete(fcq(&f, 0), 2, 1);
	fake_complete(fcq(&f, 1), 2, 10);
	pass_until(&f, &L.wcs[0], 2);
	pass(&f, 2);
	cr_assert_null(f.cq[1]);
	assert_ids('A', 1, 2);
	cr_assert_eq(BL.calls[1], 0, "a destroyed CQ handed out %u batches", BL.calls[1]);
	teardown_fx(&f);
}

/* The bridge destroyed with completions in its CQs: no callback runs
 * during or after the destroy (the CQs go with what they hold, as with
 * on_wc). */
Test(batch, teardown_hands_nothing_out)
{
	struct fixture f;

	setup_batch_on(&f, 0, 0, &fake_ctx);
	fake_complete(fcq(&f, 0), 5, 1);
	fake_complete(fcq(&f, 1), 5, 10);
	teardown_fx(&f);
	cr_assert_eq(BL.ncalls, 0, "%u batches during the destroy", BL.ncalls);
}

/*
 * A QP leaving a shared CQ from a batch callback (an endpoint destroyed
 * there): what the callback was handed is the application's already; the
 * QP's completions still in the CQ go to the take, the others are kept
 * and come as the next batch, once each, in order.
 */
static void take_a(rr_cq *cq, int which, const struct ibv_wc *wc, int n)
{
	for (int i = 0; i < n; i++)
		if (wc[i].wr_id == (QP_X | 1))
			cr_assert_eq(rr__cq_take_qp(cq, 1, took_one, NULL), 0);
}

Test(batch, a_qp_leaving_mid_batch_takes_only_what_was_not_handed_out)
{
	struct fixture f;

	memset(&T, 0, sizeof(T));
	setup_batch_on(&f, 3, 0, &fake_ctx);
	batch_hook = take_a;
	/* The first poll takes X1 A1 A2; the CQ keeps A3 and X2. */
	fake_complete(fcq(&f, 0), 1, QP_X | 1);
	fake_complete(fcq(&f, 0), 3, QP_A | 1);
	fake_complete(fcq(&f, 0), 1, QP_X | 2);
	pass_until(&f, &L.wcs[0], 4);
	pass(&f, 2);
	cr_assert_eq(T.ntaken, 1, "%u taken", T.ntaken);
	cr_assert_eq(T.taken[0], QP_A | 3);
	cr_assert_eq(BL.ncalls, 2, "%u calls", BL.ncalls);
	cr_assert_eq(BL.size[0], 3);
	cr_assert_eq(BL.size[1], 1, "the kept completion came as a batch of %u", BL.size[1]);
	cr_assert_eq(L.n, 4);
	cr_assert_eq(L.id[0], QP_X | 1);
	cr_assert_eq(L.id[1], QP_A | 1);
	cr_assert_eq(L.id[2], QP_A | 2);
	cr_assert_eq(L.id[3], QP_X | 2);
	teardown_fx(&f);
}

/*
 * The same with the CQ alone on its channel, the common case: the drain
 * polls it before the event read (its own hand-out loop, see
 * poll_arrays() in src/cq.c), and what a QP's teardown in the callback
 * kept comes as the next batch, before anything newer.
 */
static void take_a_then_more(rr_cq *cq, int which, const struct ibv_wc *wc, int n)
{
	take_a(cq, which, wc, n);
	/* Newer than what the take kept: must come after it. */
	if (n && wc[0].wr_id == (QP_X | 1))
		fake_complete(fake_cq_of(rr_cq_ibv(cq)), 2, QP_X | 3);
}

Test(batch, a_lone_cqs_qp_leaving_mid_batch_takes_only_what_was_not_handed_out)
{
	struct fixture f;

	memset(&T, 0, sizeof(T));
	setup_batch_n(&f, 3, 0, &fake_ctx, 1);
	batch_hook = take_a_then_more;
	fake_complete(fcq(&f, 0), 1, QP_X | 1);
	fake_complete(fcq(&f, 0), 3, QP_A | 1);
	fake_complete(fcq(&f, 0), 1, QP_X | 2);
	pass_until(&f, &L.wcs[0], 6);
	pass(&f, 2);
	cr_assert_eq(T.ntaken, 1, "%u taken", T.ntaken);
	cr_assert_eq(T.taken[0], QP_A | 3);
	cr_assert_eq(BL.size[0], 3);
	cr_assert_eq(L.n, 6, "%u completions handed out", L.n);
	cr_assert_eq(L.id[0], QP_X | 1);
	cr_assert_eq(L.id[1], QP_A | 1);
	cr_assert_eq(L.id[2], QP_A | 2);
	cr_assert_eq(L.id[3], QP_X | 2, "the kept one came after %#llx",
		     (unsigned long long)L.id[3]);
	cr_assert_eq(L.id[4], QP_X | 3);
	cr_assert_eq(L.id[5], QP_X | 4);
	teardown_fx(&f);
}

static void lone_destroys_self(rr_cq *cq, int which, const struct ibv_wc *wc, int n)
{
	cr_assert_eq(rr_cq_destroy(cq), 0);
	batch_fx->cq[0] = NULL;
}

/* A lone CQ destroyed from its first batch: nothing more of it is handed
 * out, the rest of what it held goes with it. */
Test(batch, a_lone_cq_destroyed_from_its_batch_callback)
{
	struct fixture f;

	setup_batch_n(&f, 4, 0, &fake_ctx, 1);
	batch_fx = &f;
	batch_hook = lone_destroys_self;
	fake_complete(fcq(&f, 0), 10, 1);
	pass_until(&f, &L.wcs[0], 4);
	pass(&f, 2);
	cr_assert_null(f.cq[0]);
	cr_assert_eq(BL.ncalls, 1, "%u calls after the CQ was destroyed", BL.ncalls);
	assert_ids('A', 1, 4);
	teardown_fx(&f);
}

/* A lone CQ's batches in order, none above the budget; what the budget
 * cut comes on later passes, on either provider personality. */
static void lone_budget_case(struct ibv_context *ctx)
{
	static const unsigned int want[] = {4, 1, 4, 1, 4, 1, 4};
	struct fixture f;

	setup_batch_n(&f, 4, 5, ctx, 1);
	fake_complete(fcq(&f, 0), 19, 1);
	pass_until(&f, &L.wcs[0], 19);
	pass(&f, 2);
	assert_ids('A', 1, 19);
	cr_assert_eq(BL.ncalls, 7, "%u calls for 19 completions, polls of 4, budget 5", BL.ncalls);
	for (unsigned int i = 0; i < 7; i++)
		cr_assert_eq(BL.size[i], want[i], "call %u had %u", i, BL.size[i]);
	teardown_fx(&f);
}

Test(batch, a_lone_cqs_batches_keep_order_and_budget)
{
	lone_budget_case(&fake_ctx);
}

Test(batch, a_lone_cqs_batches_keep_order_and_budget_rxe)
{
	lone_budget_case(&fake_ctx_rr);
}

/* ---- a device's async events reach bridges on its own channels ---- */

static unsigned int fatals_heard, async_heard;

static void hear_async(rr_bridge *b, const struct ibv_async_event *ev, void *data)
{
	async_heard++;
	if (ev->event_type == IBV_EVENT_DEVICE_FATAL)
		fatals_heard++;
}

/*
 * Both CQs of the fixture are on a channel of rr_channel_create(), the
 * pattern of many CQs on one channel of the application's: a device that
 * dies must still be heard, once, as with a CQ on the shared channel, and
 * the dead device refuses new CQs (-ENODEV) as the shared channel does;
 * the CQs already there still work and go away cleanly.
 */
static void fatal_on_own_channel_case(struct ibv_context *ctx, unsigned int flags)
{
	struct rr_bridge_opts o = {.on_async_event = hear_async, .flags = flags};
	struct rr_cq_opts co = {.on_wc = on_wc};
	struct fixture f;
	rr_cq *late;

	fatals_heard = async_heard = 0;
	setup_on(&f, &o, RR_WAIT_EVENT, ctx);
	pass(&f, 2);
	cr_assert_eq(fake_pds_live, 0, "a CQ on the application's channel needs no PD");
	fake_async_event_on(ctx, IBV_EVENT_PORT_ERR);
	fake_async_event_on(ctx, IBV_EVENT_DEVICE_FATAL);
	pass_until(&f, &fatals_heard, 1);
	cr_assert_eq(fatals_heard, 1, "DEVICE_FATAL heard %u times", fatals_heard);
	cr_assert_eq(async_heard, 2, "%u async events heard", async_heard);
	cr_assert_eq(rr_cq_create(f.b, f.ch, ctx, &co, sizeof(co), &late), -ENODEV);
	cr_assert_eq(rr_cq_create(f.b, NULL, ctx, &co, sizeof(co), &late), -ENODEV);
	fake_complete(fcq(&f, 1), 1, 7);
	pass_until(&f, &L.wcs[1], 1);
	cr_assert_eq(L.wcs[1], 1);
	cr_assert_eq(rr_cq_destroy(f.cq[0]), 0);
	cr_assert_eq(rr_cq_destroy(f.cq[1]), 0);
	cr_assert_eq(rr_channel_destroy(f.ch), 0);
	teardown_fx(&f);
}

Test(device, fatal_reaches_a_bridge_whose_cqs_are_on_its_own_channel)
{
	fatal_on_own_channel_case(&fake_ctx, 0);
}

Test(device, fatal_reaches_a_bridge_whose_cqs_are_on_its_own_ring_read_channel)
{
	fatal_on_own_channel_case(&fake_ctx_rr, RR_BRIDGE_RING_READ);
}

/*
 * A device first only heard (CQs on the application's channel), then
 * equipped by a CQ on the shared channel: one device, one PD, and the
 * fatal event heard once; the PD goes with the bridge.
 */
Test(device, a_heard_device_equipped_later_is_heard_once)
{
	struct rr_bridge_opts o = {.on_async_event = hear_async};
	struct rr_cq_opts co = {.on_wc = on_wc};
	struct fixture f;
	rr_cq *shared;

	fatals_heard = async_heard = 0;
	setup_on(&f, &o, RR_WAIT_EVENT, &fake_ctx);
	cr_assert_eq(fake_pds_live, 0);
	cr_assert_eq(rr_cq_create(f.b, NULL, &fake_ctx, &co, sizeof(co), &shared), 0);
	cr_assert_eq(fake_pds_live, 1);
	pass(&f, 2);
	fake_async_event(IBV_EVENT_DEVICE_FATAL);
	pass_until(&f, &fatals_heard, 1);
	pass(&f, 2);
	cr_assert_eq(fatals_heard, 1, "DEVICE_FATAL heard %u times", fatals_heard);
	cr_assert_eq(rr_cq_destroy(shared), 0);
	teardown_fx(&f);
	cr_assert_eq(fake_pds_live, 0);
}
