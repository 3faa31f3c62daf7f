// SPDX-License-Identifier: MIT
/*
 * cp/loop.c's worker: a call with no io_uring op runs on a thread of its
 * own, its result comes back to the loop thread through the ring, and
 * the loop goes on while it is stuck.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "loop.h"

static struct cp_loop lp;
static pthread_t loop_thread;
static atomic_bool release;
static atomic_int ran_here; /* calls that ran on the loop's thread */

struct job {
	struct cp_work w;
	int in, out;
	int calls;
	bool on_loop;
};

static int job_fn(struct cp_work *w)
{
	struct job *j = (struct job *)w;

	if (pthread_equal(pthread_self(), loop_thread))
		atomic_fetch_add(&ran_here, 1);
	while (j->in < 0 && !atomic_load(&release))
		usleep(1000); /* stuck until the test lets it go */
	return -j->in;
}

static void job_done(struct cp_op *op, int res)
{
	struct job *j = (struct job *)op;

	j->calls++;
	j->out = res;
	j->on_loop = pthread_equal(pthread_self(), loop_thread);
}

struct nop {
	struct cp_op op;
	int n;
};

static void nop_done(struct cp_op *op, int res)
{
	((struct nop *)op)->n++;
	(void)res;
}

static void setup(void)
{
	loop_thread = pthread_self();
	atomic_store(&release, false);
	atomic_store(&ran_here, 0);
	cr_assert_eq(cp_loop_init(&lp, 64), 0);
}

static void teardown(void)
{
	cp_loop_fini(&lp);
}

TestSuite(work, .init = setup, .fini = teardown, .timeout = 60);

Test(work, results_come_back_on_the_loop_thread_in_order_of_completion)
{
	struct job j[3] = {0};

	for (int i = 0; i < 3; i++) {
		j[i].w.fn = job_fn;
		j[i].w.op.done = job_done;
		j[i].in = i + 1;
		cr_assert_eq(cp_loop_work(&lp, &j[i].w), 0);
	}
	for (int n = 0; n < 100 && (!j[0].calls || !j[1].calls || !j[2].calls); n++)
		cr_assert_geq(cp_loop_pass(&lp, 100), 0);
	for (int i = 0; i < 3; i++) {
		cr_expect_eq(j[i].calls, 1);
		cr_expect_eq(j[i].out, -(i + 1));
		cr_expect(j[i].on_loop);
	}
	cr_expect_eq(atomic_load(&ran_here), 0);
	cr_expect_eq(lp.inflight, 0);
}

/* A stuck call holds the worker only: a NOP's CQE still comes. */
Test(work, the_loop_goes_on_while_a_call_is_stuck)
{
	struct nop nop = {.op.done = nop_done};
	struct job stuck = {.w.fn = job_fn, .w.op.done = job_done, .in = -1};

	cr_assert_eq(cp_loop_work(&lp, &stuck.w), 0);
	for (int i = 0; i < 3; i++) {
		struct io_uring_sqe *sqe = cp_loop_sqe(&lp, &nop.op);

		cr_assert_not_null(sqe);
		for (int k = 0; k < 100 && nop.n == i; k++)
			cr_assert_geq(cp_loop_pass(&lp, 100), 0);
	}
	cr_expect_eq(nop.n, 3);
	cr_expect_eq(stuck.calls, 0, "a stuck call ended");
	atomic_store(&release, true);
	for (int k = 0; k < 100 && !stuck.calls; k++)
		cr_assert_geq(cp_loop_pass(&lp, 100), 0);
	cr_expect_eq(stuck.calls, 1);
	cr_expect_eq(stuck.out, 1);
}

/* A call stuck on one file system holds one thread of the pool: the
 * next call runs on another meanwhile. */
Test(work, a_stuck_call_does_not_hold_the_next_one)
{
	struct job stuck = {.w.fn = job_fn, .w.op.done = job_done, .in = -1};
	struct job next = {.w.fn = job_fn, .w.op.done = job_done, .in = 5};

	cr_assert_eq(cp_loop_work(&lp, &stuck.w), 0);
	cr_assert_eq(cp_loop_work(&lp, &next.w), 0);
	for (int k = 0; k < 100 && !next.calls; k++)
		cr_assert_geq(cp_loop_pass(&lp, 100), 0);
	cr_expect_eq(next.calls, 1, "the next call waited for the stuck one");
	cr_expect_eq(next.out, -5);
	cr_expect_eq(stuck.calls, 0);
	atomic_store(&release, true);
	for (int k = 0; k < 100 && !stuck.calls; k++)
		cr_assert_geq(cp_loop_pass(&lp, 100), 0);
	cr_expect_eq(stuck.calls, 1);
}

/* Teardown joins the worker: work still queued runs and is handed back. */
Test(work, fini_waits_for_the_worker)
{
	struct job j = {.w.fn = job_fn, .w.op.done = job_done, .in = 7};

	cr_assert_eq(cp_loop_work(&lp, &j.w), 0);
	cp_loop_fini(&lp);
	cr_expect_eq(j.calls, 1);
	cr_expect_eq(j.out, -7);
	cr_assert_eq(cp_loop_init(&lp, 64), 0); /* for teardown */
}

/*
 * Issue 49: four calls stuck on a hung file system took the whole pool,
 * and every later call of every connection of that loop waited behind
 * them. A call running for over a second no longer counts: a thread more
 * is started for the next one (up to a bound).
 */
Test(work, four_stuck_calls_do_not_hold_a_fifth)
{
	struct job stuck[4], next = {.w.fn = job_fn, .w.op.done = job_done, .in = 5};
	int k;

	for (int i = 0; i < 4; i++) {
		stuck[i] = (struct job){.w.fn = job_fn, .w.op.done = job_done, .in = -1};
		cr_assert_eq(cp_loop_work(&lp, &stuck[i].w), 0);
	}
	cr_assert_eq(cp_loop_work(&lp, &next.w), 0);
	for (k = 0; k < 100 && !next.calls; k++) /* a watchdog, not a timing */
		cr_assert_geq(cp_loop_pass(&lp, 100), 0);
	cr_expect_eq(next.calls, 1, "the fifth call waited for four stuck ones");
	cr_expect_eq(next.out, -5);
	atomic_store(&release, true);
	for (k = 0;
	     k < 100 && stuck[0].calls + stuck[1].calls + stuck[2].calls + stuck[3].calls < 4; k++)
		cr_assert_geq(cp_loop_pass(&lp, 100), 0);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(stuck[i].calls, 1);
}

/* Issue 49: teardown joined every thread of the worker, so a call that
 * never returns held the exit of serve for ever (SIGTERM included). Now
 * a call stuck past the drain is left to its thread: fini returns, and
 * its op.done never comes. The job is static: it outlives the test. */
static struct job left_job;

Test(work, fini_leaves_a_stuck_call_behind, .timeout = 30)
{
	left_job = (struct job){.w.fn = job_fn, .w.op.done = job_done, .in = -1};
	cr_assert_eq(cp_loop_work(&lp, &left_job.w), 0);
	cp_loop_fini(&lp);
	cr_expect_eq(left_job.calls, 0);
	atomic_store(&release, true);		/* the thread left behind may end now */
	cr_assert_eq(cp_loop_init(&lp, 64), 0); /* for teardown */
}
