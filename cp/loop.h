/* SPDX-License-Identifier: MIT */
/*
 * One io_uring, one thread: the ringrdma bridge's CQEs and ours (file and
 * socket I/O, timers, signals) reaped by the same loop. Our user_data is
 * always a struct cp_op pointer, which never carries the bridge's tag.
 */
#ifndef CP_LOOP_H
#define CP_LOOP_H

#include <stdbool.h>

#include <ringrdma.h>

struct cp_op;
typedef void (*cp_op_fn)(struct cp_op *op, int res);

struct cp_op {
	cp_op_fn done;
};

/*
 * A call with no io_uring op that may block on its file system (chmod,
 * utimes, ftruncate on 6.1): run on a thread of the loop's worker, never
 * on the loop's. @fn runs there and returns its result (0 or -errno); then
 * op.done(&op, result) runs on the loop thread, told through the ring.
 * The caller keeps @w, and what @fn reads, until op.done ran.
 */
struct cp_work {
	struct cp_op op;
	int (*fn)(struct cp_work *w);
	/* private */
	struct cp_work *next;
	int res;
};
struct cp_worker;

struct cp_loop {
	struct io_uring ring;
	rr_bridge *b;
	unsigned int inflight; /* our SQEs without their CQE */
	bool stop;
	int signo; /* SIGINT/SIGTERM received, 0 if none */
	/* called every tick (100 ms) and after every batch of CQEs */
	void (*poll)(struct cp_loop *lp);
	void (*on_signal)(struct cp_loop *lp, int signo);
	/* private */
	struct cp_op tick, sig, ignore;
	struct cp_worker *wk; /* started by the first cp_loop_work() */
	bool tick_on, sig_on;
	int sigfd;
	struct __kernel_timespec tick_ts;
	unsigned char siginfo[128];
};

int cp_loop_init(struct cp_loop *lp, unsigned int entries);
/* A poll group's loop (RR_BRIDGE_GROUP bridge), on the thread that will
 * run it; no signals: those go to the listener's loop. */
int cp_loop_init_group(struct cp_loop *lp, unsigned int entries);
/* Another thread's loop (send --threads), on the thread that will run
 * it: a plain bridge, no signals (the first thread's loop reads them). */
int cp_loop_init_thread(struct cp_loop *lp, unsigned int entries);
/* An SQE whose CQE goes to @op; NULL (and an error printed) if the ring is full. */
struct io_uring_sqe *cp_loop_sqe(struct cp_loop *lp, struct cp_op *op);
/* Ask the kernel to cancel @op; its own CQE still comes. */
void cp_loop_cancel(struct cp_loop *lp, struct cp_op *op);
/* Queue @w on the loop's worker, a pool of up to 4 threads (one started
 * here whenever @w would otherwise wait): 0 or -errno, and then op.done
 * comes once, later. Counts in lp->inflight. */
int cp_loop_work(struct cp_loop *lp, struct cp_work *w);
/* Run until lp->stop; returns 0 or a negative errno from io_uring. */
int cp_loop_run(struct cp_loop *lp);
/* One pass: submit, wait up to @wait_ms, dispatch; CQEs handled or -errno. */
int cp_loop_pass(struct cp_loop *lp, unsigned int wait_ms);
/* After run: stop timers, reap until none of our SQEs (nor work) is in
 * flight, then join the worker. */
void cp_loop_fini(struct cp_loop *lp);

#endif
