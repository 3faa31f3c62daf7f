// SPDX-License-Identifier: MIT
/* ringrdma-cp's event loop: our CQEs and the bridge's from one ring. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cp.h"
#include "loop.h"

#define TICK_MS	 100
#define DRAIN_MS 10000

static void dispatch(struct cp_loop *lp, const struct io_uring_cqe *cqe)
{
	struct cp_op *op;

	if (rr_bridge_handle_cqe(lp->b, cqe))
		return;
	op = (struct cp_op *)(uintptr_t)cqe->user_data;
	lp->inflight--;
	op->done(op, cqe->res);
}

static void app_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	struct cp_loop *lp = data;
	struct cp_op *op = (struct cp_op *)(uintptr_t)cqe->user_data;

	lp->inflight--;
	op->done(op, cqe->res);
}

struct io_uring_sqe *cp_loop_sqe(struct cp_loop *lp, struct cp_op *op)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&lp->ring);

	if (!sqe && io_uring_submit(&lp->ring) >= 0)
		sqe = io_uring_get_sqe(&lp->ring);
	if (!sqe) {
		cp_log("io_uring submission queue full");
		return NULL;
	}
	/* The bridge judges open link chains by the last prepared SQE: never
	 * leave one half set. */
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, op);
	lp->inflight++;
	return sqe;
}

static void ignore_done(struct cp_op *op, int res)
{
}

void cp_loop_cancel(struct cp_loop *lp, struct cp_op *op)
{
	struct io_uring_sqe *sqe = cp_loop_sqe(lp, &lp->ignore);

	if (sqe) {
		io_uring_prep_cancel(sqe, op, 0);
		io_uring_sqe_set_data(sqe, &lp->ignore);
	}
}

static void arm_tick(struct cp_loop *lp)
{
	struct io_uring_sqe *sqe;

	if (lp->tick_on || lp->stop)
		return;
	sqe = cp_loop_sqe(lp, &lp->tick);
	if (!sqe)
		return;
	lp->tick_ts.tv_sec = 0;
	lp->tick_ts.tv_nsec = TICK_MS * 1000000LL;
	io_uring_prep_timeout(sqe, &lp->tick_ts, 0, 0);
	io_uring_sqe_set_data(sqe, &lp->tick);
	lp->tick_on = true;
}

static void tick_done(struct cp_op *op, int res)
{
	struct cp_loop *lp = (struct cp_loop *)((char *)op - offsetof(struct cp_loop, tick));

	lp->tick_on = false;
	arm_tick(lp);
}

static void arm_sig(struct cp_loop *lp)
{
	struct io_uring_sqe *sqe;

	if (lp->sig_on || lp->sigfd < 0 || lp->stop)
		return;
	sqe = cp_loop_sqe(lp, &lp->sig);
	if (!sqe)
		return;
	io_uring_prep_read(sqe, lp->sigfd, lp->siginfo, sizeof(struct signalfd_siginfo), 0);
	io_uring_sqe_set_data(sqe, &lp->sig);
	lp->sig_on = true;
}

static void sig_done(struct cp_op *op, int res)
{
	struct cp_loop *lp = (struct cp_loop *)((char *)op - offsetof(struct cp_loop, sig));
	struct signalfd_siginfo si;

	lp->sig_on = false;
	if (res == (int)sizeof(si)) {
		memcpy(&si, lp->siginfo, sizeof(si));
		lp->signo = (int)si.ssi_signo;
		if (lp->on_signal)
			lp->on_signal(lp, lp->signo);
	}
	arm_sig(lp);
}

static int loop_init(struct cp_loop *lp, unsigned int entries, unsigned int bridge_flags,
		     bool signals)
{
	struct rr_bridge_opts bo = {.on_app_cqe = app_cqe, .data = lp, .flags = bridge_flags};
	sigset_t set;
	int rc;

	lp->tick.done = tick_done;
	lp->sig.done = sig_done;
	lp->ignore.done = ignore_done;
	lp->sigfd = -1;
	lp->wk = NULL;
	lp->inflight = 0;
	rc = io_uring_queue_init(entries, &lp->ring, 0);
	if (rc < 0) {
		cp_log("io_uring_queue_init: %s", strerror(-rc));
		return rc;
	}
	rc = rr_bridge_create(&lp->b, &lp->ring, &bo, sizeof(bo));
	if (rc) {
		cp_log("rr_bridge_create: %s", strerror(-rc));
		goto err_ring;
	}
	if (!signals)
		return 0;
	/* SIGINT/SIGTERM come through the ring, so teardown removes temp files. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	signal(SIGPIPE, SIG_IGN);
	if (sigprocmask(SIG_BLOCK, &set, NULL) == 0)
		lp->sigfd = signalfd(-1, &set, SFD_CLOEXEC);
	return 0;
err_ring:
	io_uring_queue_exit(&lp->ring);
	return rc;
}

int cp_loop_init(struct cp_loop *lp, unsigned int entries)
{
	return loop_init(lp, entries, 0, true);
}

int cp_loop_init_group(struct cp_loop *lp, unsigned int entries)
{
	return loop_init(lp, entries, RR_BRIDGE_GROUP, false);
}

int cp_loop_init_thread(struct cp_loop *lp, unsigned int entries)
{
	return loop_init(lp, entries, 0, false);
}

/*
 * The loop's worker: calls with no io_uring op run here, so that a stuck
 * file system holds a thread of it and the connections that wait on it,
 * never the loop. A small pool (libuv's is 4 threads too), a thread
 * started whenever work would otherwise wait: a call hung on one file
 * system does not hold up one on another until all are hung. A call
 * running for over WORK_STUCK_MS no longer counts toward the 4: a hung
 * file system holds its threads, the next call gets a thread more, up to
 * CP_WORKERS_MAX. Done work is handed back on a list; an eventfd read on
 * the ring tells the loop (libuv does the same with its async handle).
 * At the end, a call still stuck is left to its thread (never joined):
 * the worker, its eventfd and the call's memory are then never freed.
 */
#define CP_WORKERS     4
#define CP_WORKERS_MAX 32
#define WORK_STUCK_MS  1000
#define WORK_LEAVE_MS  1000 /* at the end: how long a running call is waited for */

struct cp_worker {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t th[CP_WORKERS_MAX];
	uint64_t since[CP_WORKERS_MAX];	   /* under mu: its call's start, 0: idle */
	unsigned int nth, running, queued; /* under mu */
	unsigned int ids;		   /* under mu: threads that took their slot */
	struct cp_work *todo, **todo_end;  /* under mu */
	struct cp_work *done, **done_end;  /* under mu */
	bool quit;			   /* under mu */
	int efd;
	/* the loop thread's */
	unsigned int jobs; /* queued, running, or done and not yet handed back */
	bool rd_on;
	uint64_t val;
	struct cp_op rd;
	struct cp_loop *lp;
};

static void *worker_main(void *arg)
{
	struct cp_worker *wk = arg;
	const uint64_t one = 1;
	struct cp_work *w;
	unsigned int me;

	pthread_mutex_lock(&wk->mu);
	me = wk->ids++;
	for (;;) {
		while (!wk->todo && !wk->quit)
			pthread_cond_wait(&wk->cv, &wk->mu);
		w = wk->todo;
		if (!w)
			break; /* quit, and nothing left to run */
		wk->todo = w->next;
		if (!wk->todo)
			wk->todo_end = &wk->todo;
		wk->queued--;
		wk->running++;
		wk->since[me] = cp_now_ns();
		pthread_mutex_unlock(&wk->mu);
		w->res = w->fn(w);
		pthread_mutex_lock(&wk->mu);
		wk->since[me] = 0;
		wk->running--;
		w->next = NULL;
		*wk->done_end = w;
		wk->done_end = &w->next;
		/* Cannot fail short of a counter at 2^64 - 2. */
		if (write(wk->efd, &one, sizeof(one)) < 0)
			w->res = w->res ? w->res : -errno;
	}
	pthread_mutex_unlock(&wk->mu);
	return NULL;
}

/* Threads whose call has run for over WORK_STUCK_MS. Under mu. */
static unsigned int stuck_locked(const struct cp_worker *wk, uint64_t now)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < wk->ids; i++)
		n += wk->since[i] && now - wk->since[i] > WORK_STUCK_MS * 1000000ull;
	return n;
}

/* One thread more if @waiting calls wait for one and fewer than
 * CP_WORKERS threads are not stuck. Under mu; false if it could not. */
static bool grow_locked(struct cp_worker *wk, unsigned int waiting)
{
	if (wk->nth - wk->running >= waiting || wk->nth >= CP_WORKERS_MAX ||
	    wk->nth - stuck_locked(wk, cp_now_ns()) >= CP_WORKERS)
		return true;
	/* It inherits the loop thread's blocked SIGINT, SIGTERM. */
	if (pthread_create(&wk->th[wk->nth], NULL, worker_main, wk))
		return false;
	wk->nth++;
	return true;
}

/* Calls queued behind stuck ones: a thread more (each pass). */
static void work_grow(struct cp_worker *wk)
{
	pthread_mutex_lock(&wk->mu);
	if (wk->queued)
		grow_locked(wk, wk->queued);
	pthread_mutex_unlock(&wk->mu);
}

static unsigned int work_stuck(struct cp_loop *lp)
{
	unsigned int n;

	if (!lp->wk)
		return 0;
	pthread_mutex_lock(&lp->wk->mu);
	n = stuck_locked(lp->wk, cp_now_ns());
	pthread_mutex_unlock(&lp->wk->mu);
	return n;
}

static void work_arm(struct cp_loop *lp)
{
	struct cp_worker *wk = lp->wk;
	struct io_uring_sqe *sqe;

	if (wk->rd_on || !wk->jobs)
		return;
	sqe = cp_loop_sqe(lp, &wk->rd);
	if (!sqe)
		return; /* armed by the next cp_loop_pass() */
	io_uring_prep_read(sqe, wk->efd, &wk->val, sizeof(wk->val), 0);
	wk->rd_on = true;
}

/* Hand back what the worker finished: each op.done once, here. */
static void work_deliver(struct cp_worker *wk)
{
	struct cp_work *w, *next;

	pthread_mutex_lock(&wk->mu);
	w = wk->done;
	wk->done = NULL;
	wk->done_end = &wk->done;
	pthread_mutex_unlock(&wk->mu);
	for (; w; w = next) {
		next = w->next; /* op.done may reuse @w */
		wk->jobs--;
		wk->lp->inflight--;
		w->op.done(&w->op, w->res);
	}
}

static void work_told(struct cp_op *op, int res)
{
	struct cp_worker *wk = (struct cp_worker *)((char *)op - offsetof(struct cp_worker, rd));

	(void)res; /* the list says what is done */
	wk->rd_on = false;
	work_deliver(wk);
	work_arm(wk->lp);
}

static int worker_start(struct cp_loop *lp)
{
	struct cp_worker *wk = calloc(1, sizeof(*wk));
	int rc;

	if (!wk)
		return -ENOMEM;
	wk->todo_end = &wk->todo;
	wk->done_end = &wk->done;
	wk->rd.done = work_told;
	wk->lp = lp;
	wk->efd = eventfd(0, EFD_CLOEXEC);
	if (wk->efd < 0) {
		rc = -errno;
		goto err_free;
	}
	pthread_mutex_init(&wk->mu, NULL);
	pthread_cond_init(&wk->cv, NULL);
	lp->wk = wk;
	return 0;
err_free:
	free(wk);
	return rc;
}

int cp_loop_work(struct cp_loop *lp, struct cp_work *w)
{
	struct cp_worker *wk;
	int rc;

	if (!lp->wk) {
		rc = worker_start(lp);
		if (rc) {
			cp_log("cannot start the file system worker: %s", strerror(-rc));
			return rc;
		}
	}
	wk = lp->wk;
	w->next = NULL;
	pthread_mutex_lock(&wk->mu);
	/* Every thread not running a call takes one: more work than those,
	 * one more thread. */
	if (!grow_locked(wk, wk->queued + 1) && !wk->nth) {
		pthread_mutex_unlock(&wk->mu);
		cp_log("cannot start the file system worker: %s", strerror(EAGAIN));
		return -EAGAIN;
	}
	*wk->todo_end = w;
	wk->todo_end = &w->next;
	wk->queued++;
	pthread_cond_signal(&wk->cv);
	pthread_mutex_unlock(&wk->mu);
	wk->jobs++;
	lp->inflight++;
	work_arm(lp);
	return 0;
}

/* Join the worker's threads once they ran all they were given, hand
 * back what they did; a thread whose call does not return within
 * WORK_LEAVE_MS is left to it: true if one was. */
static bool worker_stop(struct cp_loop *lp)
{
	struct cp_worker *wk = lp->wk;
	unsigned int left = 0;
	struct timespec end;

	if (!wk)
		return false;
	if (wk->jobs)
		cp_log("waiting for %u file system calls to return", wk->jobs);
	pthread_mutex_lock(&wk->mu);
	wk->quit = true;
	pthread_cond_broadcast(&wk->cv);
	pthread_mutex_unlock(&wk->mu);
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += WORK_LEAVE_MS / 1000;
	for (unsigned int i = 0; i < wk->nth; i++)
		if (pthread_timedjoin_np(wk->th[i], NULL, &end)) {
			pthread_detach(wk->th[i]);
			left++;
		}
	work_deliver(wk);
	if (left)
		cp_log("%u file system calls never returned: left to their threads (is a file "
		       "system hung?)",
		       left);
	return left;
}

int cp_loop_pass(struct cp_loop *lp, unsigned int wait_ms)
{
	struct __kernel_timespec ts = {.tv_sec = wait_ms / 1000,
				       .tv_nsec = (long long)(wait_ms % 1000) * 1000000};
	struct io_uring_cqe *cqe;
	unsigned int n = 0;
	int rc;

	if (lp->wk) {
		work_grow(lp->wk);
		work_arm(lp); /* if the SQ was full when it was due */
	}
	rr_bridge_flush(lp->b); /* SQEs the bridge still owes (a full SQ) */
	rc = io_uring_submit_and_wait_timeout(&lp->ring, &cqe, 1, &ts, NULL);
	if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY)
		return rc;
	while (io_uring_peek_cqe(&lp->ring, &cqe) == 0) {
		dispatch(lp, cqe);
		io_uring_cqe_seen(&lp->ring, cqe);
		n++;
	}
	return (int)n;
}

int cp_loop_run(struct cp_loop *lp)
{
	int rc;

	arm_sig(lp);
	while (!lp->stop) {
		arm_tick(lp);
		rc = cp_loop_pass(lp, 1000);
		if (rc < 0) {
			cp_log("io_uring: %s", strerror(-rc));
			return rc;
		}
		if (lp->poll)
			lp->poll(lp);
	}
	return 0;
}

void cp_loop_fini(struct cp_loop *lp)
{
	uint64_t end = cp_now_ns() + DRAIN_MS * 1000000ull;
	int rc;

	lp->stop = true;
	if (lp->tick_on) {
		struct io_uring_sqe *sqe = cp_loop_sqe(lp, &lp->ignore);

		if (sqe) {
			io_uring_prep_timeout_remove(sqe, (uintptr_t)&lp->tick, 0);
			io_uring_sqe_set_data(sqe, &lp->ignore);
		}
	}
	if (lp->sig_on)
		cp_loop_cancel(lp, &lp->sig);
	/* Not for calls stuck on a file system: those may never return. */
	while (lp->inflight > work_stuck(lp) && cp_now_ns() < end)
		if (cp_loop_pass(lp, 100) < 0)
			break;
	if (worker_stop(lp))
		lp->wk = NULL; /* its threads still use it, and its eventfd */
	if (lp->inflight)
		cp_log("%u I/O requests still in flight at exit", lp->inflight);
	rc = rr_bridge_destroy(lp->b);
	if (rc)
		cp_log("rr_bridge_destroy: %s", strerror(-rc));
	io_uring_queue_exit(&lp->ring);
	if (lp->sigfd >= 0)
		close(lp->sigfd);
	if (lp->wk) {
		/* After the ring: its eventfd read is gone with it. */
		close(lp->wk->efd);
		pthread_cond_destroy(&lp->wk->cv);
		pthread_mutex_destroy(&lp->wk->mu);
		free(lp->wk);
		lp->wk = NULL;
	}
}
