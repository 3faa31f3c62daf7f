// SPDX-License-Identifier: MIT
/*
 * The bridge: the public facade over the layers (see bridge.h). Routes
 * CQEs by the user_data contract, decides when the ring layer may write
 * its SQEs, runs the built-in loop, and tears everything down in an order
 * verbs accepts.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "bridge.h"

#define DEFAULT_CQ_BATCH    32
#define MAX_CQ_BATCH	    256
#define DEFAULT_BUDGET	    256
#define DEFAULT_ACK_BATCH   32
#define DEFAULT_WAIT_NR	    16
#define DESTROY_WATCHDOG_MS 10000

static void tell_app(void *ctx, const struct ibv_async_event *ev)
{
	rr_bridge *b = ctx;

	b->opts.on_async_event(b, ev, b->opts.data);
}

/* The devices' hook, on the thread of the bridge that owns what the
 * event names: the application hears of it first, then the endpoints it
 * names go to error. */
static void on_async(void *ctx, struct rr__device *dev, const struct ibv_async_event *ev,
		     struct rr__claim *c)
{
	rr_bridge *b = ctx;

	rr__eps_async(&b->eps, dev, ev, c, b->opts.on_async_event ? tell_app : NULL, b);
}

/* The CQ layer's hook: what a pass holds goes before its reads and arms. */
static void post_held(void *ctx)
{
	rr__eps_post_held(ctx);
}

int rr_bridge_create(rr_bridge **out, struct io_uring *ring, const struct rr_bridge_opts *opts,
		     size_t opts_size)
{
	struct rr_bridge_opts o;
	rr_bridge *b;
	bool multishot;
	int rc;

	if (!out || !ring)
		return -EINVAL;
	rc = rr__opts_in(&o, sizeof(o), opts, opts_size, RR__BRIDGE_OPTS_SIZE_0_8);
	if (rc)
		return rc;
	if (o.flags & ~RR__BRIDGE_FLAGS_KNOWN)
		return -EINVAL;
	/* An IOPOLL ring completes only polled block I/O: POLL_ADD is
	 * refused there, so the bridge could never hear a channel. */
	if (ring->flags & IORING_SETUP_IOPOLL)
		return -EINVAL;
	/* A ring of a liburing older than 2.2, whose SQ array the library
	 * would publish SQEs through wrongly. */
	if (!rr__ring_drivable(ring))
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->io = ring;
	b->opts = o;
	if (!b->opts.cq_batch)
		b->opts.cq_batch = DEFAULT_CQ_BATCH;
	if (b->opts.cq_batch > MAX_CQ_BATCH)
		b->opts.cq_batch = MAX_CQ_BATCH;
	if (!b->opts.budget)
		b->opts.budget = DEFAULT_BUDGET;
	if (!b->opts.ack_batch)
		b->opts.ack_batch = DEFAULT_ACK_BATCH;
	if (!b->opts.wait_nr)
		b->opts.wait_nr = DEFAULT_WAIT_NR;
	/* Multishot poll came with 5.13, as did IORING_FEAT_RSRC_TAGS; a
	 * kernel that still refuses it gets single-shot polls (see ring.c). */
	multishot =
		!(b->opts.flags & RR_BRIDGE_SINGLESHOT) && (ring->features & IORING_FEAT_RSRC_TAGS);
	/* How a pass of the built-in loop settles its CQs: with
	 * RR_BRIDGE_LOOP_WAITS the next pass arms them, if it waits. */
	b->at_end = (b->opts.flags & RR_BRIDGE_LOOP_WAITS) ? RR__ARM_LATER : RR__ARM_IF_IDLE;
	rr__ring_init(&b->ring, ring, multishot, &b->stats);
	rr__cqs_init(&b->cqs, &b->ring, &b->stats, b->opts.cq_batch, b->opts.budget,
		     b->opts.ack_batch);
	/* SQPOLL's thread completes READs while ours destroys a CQ: the
	 * settle in cq.c could not tell what they read. */
	b->cqs.ring_reads =
		(b->opts.flags & RR_BRIDGE_RING_READ) && !(ring->flags & IORING_SETUP_SQPOLL);
	rr__devices_init(&b->devs, &b->ring, &b->cqs, &b->stats, on_async, b);
	rr__eps_init(&b->eps, &b->ring, &b->cqs, &b->devs);
	rr__eps_posts_init(&b->eps, &b->stats);
	b->cqs.posts_due = post_held;
	b->cqs.posts_ctx = &b->eps;
	b->cqs.posts_held = &b->eps.any_held;
	rr__cm_init(&b->cm, &b->ring, &b->devs, &b->eps, &b->stats);
	if (b->opts.flags & RR_BRIDGE_NO_MSG_RING)
		rr__ring_no_msg_ring(&b->ring);
	if (b->opts.flags & RR_BRIDGE_GROUP) {
		static atomic_uint groups;

		rc = rr__cm_group_open(&b->cm);
		if (!rc)
			rc = rr__devices_hear_others(&b->devs);
		if (rc) {
			rr__ring_fini(&b->ring);
			free(b);
			return rc;
		}
		/* Group k takes completion vector k (modulo the device's). */
		b->cqs.comp_vector = atomic_fetch_add(&groups, 1);
	}
	*out = b;
	return 0;
}

int rr_bridge_set_comp_vector(rr_bridge *b, unsigned int vector)
{
	if (!b || b->closing)
		return -EINVAL;
	b->cqs.comp_vector = vector;
	return 0;
}

struct io_uring *rr_bridge_ring(rr_bridge *b)
{
	return b->io;
}

int rr_bridge_get_stats(const rr_bridge *b, struct rr_bridge_stats *out, size_t size)
{
	if (!b)
		return -EINVAL;
	return rr__stats_out(out, size, &b->stats, sizeof(b->stats));
}

/*
 * Event CQs the built-in loop left unarmed (it ended with a CQE waiting):
 * an application's loop is about to take over, arm them now.
 */
static void settle_embedded(rr_bridge *b)
{
	if (!b->ring.loop_owned && !b->closing && rr__cq_any_lazy(&b->cqs))
		rr__cqs_settle(&b->cqs, RR__ARM_NOW, false);
}

/* Inside the built-in loop no CQ waits for the application's loop and no
 * kick is needed: only what the ring owes goes. */
static inline unsigned int flush(rr_bridge *b)
{
	if (!b->ring.loop_owned) {
		settle_embedded(b);
		if (!b->closing && rr__cq_any_active(&b->cqs))
			rr__ring_want_kick(&b->ring);
	}
	return rr__ring_flush(&b->ring);
}

/* flush() where a CQ may wait for the application's loop. */
static __attribute__((noinline)) unsigned int flush_embedded(rr_bridge *b)
{
	return flush(b);
}

int rr_bridge_flush(rr_bridge *b)
{
	if (!b)
		return -EINVAL;
	/* Mostly no CQ is lazy or active: what the ring owes, no frame. */
	if (!b->ring.loop_owned && !b->closing &&
	    (rr__cq_any_lazy(&b->cqs) || rr__cq_any_active(&b->cqs)))
		return (int)flush_embedded(b);
	return (int)rr__ring_flush(&b->ring);
}

/* rr_bridge_handle_cqe(), and the built-in loop's own (@loop: inside it,
 * where no CQ waits for the application's loop and no kick is needed). */
static inline __attribute__((always_inline)) int
handle_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, bool loop)
{
	if (!rr_is_bridge_user_data(cqe->user_data)) {
		if (!loop)
			settle_embedded(b);
		/* Owed while a chain was open: that chain's CQEs are the
		 * application's, and may be all the loop ever sees. */
		if (rr__ring_owes(&b->ring))
			rr__ring_flush(&b->ring);
		return 0;
	}
	b->stats.cqes++;
	rr__cqs_new_gen(&b->cqs);
	/* A pass: what its callbacks post goes as one chain per queue, and
	 * before the CQs it drained are armed (in rr_bridge_flush()), so a
	 * completion back at once is polled there, not an event. The
	 * built-in loop arms later still, when it could block. */
	if (!loop) { /* the loop holds them through its pass already */
		rr__eps_hold(&b->eps);
		b->ring.arm_at_end = true;
	}
	if (rr__ring_cqe(&b->ring, cqe) == RR__UD_KICK && !b->closing)
		rr__cq_poll_active(&b->cqs);
	if (!loop) {
		b->ring.arm_at_end = false;
		rr__eps_release(&b->eps);
		flush(b);
	} else {
		rr__ring_flush(&b->ring);
	}
	return 1;
}

int rr_bridge_handle_cqe(rr_bridge *b, const struct io_uring_cqe *cqe)
{
	if (b->ring.loop_owned)
		return handle_cqe(b, cqe, true);
	return handle_cqe(b, cqe, false);
}

/*
 * May deferred task work be waiting for us? With COOP_TASKRUN or
 * DEFER_TASKRUN the kernel runs a fired poll's completion only when the
 * task enters it (DEFER_TASKRUN: only with IORING_ENTER_GETEVENTS), which
 * a pass that does not wait and has nothing to submit would never do.
 * With IORING_SETUP_TASKRUN_FLAG the kernel says so in the SQ flags, so a
 * spinning pass costs no syscall; without it, enter every
 * ENTER_EVERY-th such pass (a syscall per pass would be most of a busy or
 * hybrid CQ's cost where syscalls are slow).
 */
#define ENTER_EVERY 16

static bool events_need_enter(rr_bridge *b)
{
	const struct io_uring *io = b->io;
	unsigned int kflags = IO_URING_READ_ONCE(*io->sq.kflags);

	if (kflags & IORING_SQ_CQ_OVERFLOW)
		return true;
	if (!(io->flags & (IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN)))
		return false;
	if (io->flags & IORING_SETUP_TASKRUN_FLAG)
		return kflags & IORING_SQ_TASKRUN;
	return ++b->quiet_passes % ENTER_EVERY == 0;
}

/*
 * Event CQs drained by a pass are armed only when the loop could block
 * next: not while a CQE waits in the ring, which the next wait returns at
 * once, and whoever reaps it settles them first (see cq.c). Each settle
 * polls them, so a pass that woke for any CQE serves them without an
 * event; @armed_too polls armed ones too (the pass woke for something).
 */
static int settle(rr_bridge *b, enum rr__arm when, bool armed_too)
{
	if (b->closing)
		return 0;
	return (int)rr__cqs_settle(&b->cqs, when, armed_too);
}

/* The next CQE. liburing's peek calls into the library when it finds
 * none, which only a CQ overflow needs: the last peek of every pass. With
 * IORING_FEAT_EXT_ARG no CQE is liburing's own (its timeouts ride on the
 * enter), so one found is taken as it is, without the peek's second read
 * of the ring's head and tail. */
static inline int next_cqe(struct io_uring *io, struct io_uring_cqe **cqe)
{
	unsigned int head = *io->cq.khead;

	if (head == io_uring_smp_load_acquire(io->cq.ktail)) {
		if (!(IO_URING_READ_ONCE(*io->sq.kflags) & IORING_SQ_CQ_OVERFLOW))
			return -EAGAIN;
	} else if (io->features & IORING_FEAT_EXT_ARG) {
		unsigned int shift = io->flags & IORING_SETUP_CQE32 ? 1 : 0;

		*cqe = &io->cq.cqes[(head & io->cq.ring_mask) << shift];
		return 0;
	}
	return io_uring_peek_cqe(io, cqe);
}

int rr_bridge_run_once(rr_bridge *b, int timeout_ms)
{
	enum rr__arm at_end;
	struct io_uring_cqe *cqe;
	int handled = 0, rc = 0, err = 0;
	unsigned int n = 0;

	/* From a callback of a pass: it would refill the batch being
	 * handed out under the caller. Outside the contract; say so. */
	if (rr__eps_holding(&b->eps))
		return -EDEADLK;
	b->ring.loop_owned = true;
	rr__cqs_new_gen(&b->cqs);
	/* One pass: posts are held until it ends or, first, until it waits. */
	rr__eps_hold(&b->eps);
	if (rr__cq_any_active(&b->cqs)) {
		handled += (int)rr__cq_poll_active(&b->cqs);
		timeout_ms = 0; /* busy or spinning CQs: never sleep */
	}
	/* RR_BRIDGE_LOOP_WAITS: the CQs the last pass left unarmed stay so
	 * through what the application queued since, if it completes at
	 * once (a buffered file read); an answer that came meanwhile is
	 * then polled below, not an event. Submitted first, without a wait. */
	if (timeout_ms && (b->opts.flags & RR_BRIDGE_LOOP_WAITS) && rr__cq_any_lazy(&b->cqs) &&
	    rr__ring_app_sqes(&b->ring)) {
		flush(b);
		if (io_uring_submit_and_get_events(b->io) >= 0 && io_uring_cq_ready(b->io))
			timeout_ms = 0;
	}
	if (rr__cq_any_lazy(&b->cqs)) {
		/* With RR_BRIDGE_LOOP_WAITS most passes start here: poll
		 * first, and arm only when the pass is going to wait. */
		bool arm_first = timeout_ms && !(b->opts.flags & RR_BRIDGE_LOOP_WAITS);
		int got = settle(b, arm_first ? RR__ARM_IF_IDLE : RR__ARM_LATER, false);

		if (!got && timeout_ms && !arm_first && !rr__cq_any_active(&b->cqs))
			got = settle(b, RR__ARM_IF_IDLE, false);
		/* What it handed out may be what the application waits for:
		 * the pass returns with it, it does not sleep after it. And a
		 * CQ that spent its budget there is left with completions in
		 * it that raise no event. */
		handled += got;
		if (got || rr__cq_any_active(&b->cqs))
			timeout_ms = 0;
	}
	/* After the settle: its callbacks' posts go out before the wait. */
	rr__eps_post_held(&b->eps);
	/* Inside the loop (loop_owned: see flush()), what the ring owes
	 * goes; it makes room in a full SQ itself. */
	rr__ring_flush(&b->ring);
	if (timeout_ms == 0) {
		rc = events_need_enter(b) ? io_uring_submit_and_get_events(b->io)
					  : io_uring_submit(b->io);
	} else {
		rc = rr__ring_wait(&b->ring, b->opts.wait_nr, b->opts.min_wait_us, timeout_ms);
	}
	rr__cqs_new_gen(&b->cqs);
	if (rc < 0 && rc != -EINTR && rc != -EBUSY) {
		/* The application may wait by itself next. */
		settle(b, RR__ARM_NOW, false);
		rr__eps_release(&b->eps);
		b->ring.loop_owned = false;
		return rc;
	}
	/* Handle what is there now, but no more than one ring's worth, so
	 * a flood of CQEs cannot keep the pass from ending. */
	b->cqs.chan_cqes = 0;
	while (n < b->io->cq.ring_entries && next_cqe(b->io, &cqe) == 0) {
		if (!handle_cqe(b, cqe, true)) {
			if (!b->opts.on_app_cqe) {
				/* Never consumed: the application reaps it. */
				err = -EPROTO;
				break;
			}
			b->opts.on_app_cqe(b, cqe, b->opts.data);
		}
		io_uring_cq_advance(b->io, 1); /* io_uring_cqe_seen(), cqe known */
		n++;
	}
	handled += (int)n;
	/* What the callbacks held goes before the CQs are polled and armed:
	 * a completion that is back at once (an echo's send on rxe over
	 * loopback) is then taken by this poll instead of raising an event
	 * that wakes the loop again. The settle's own callbacks' posts go
	 * at the release. */
	rr__eps_post_held(&b->eps);
	/* After -EPROTO the CQE left in the ring is the application's to
	 * reap, maybe without the bridge: arm now. */
	at_end = err ? RR__ARM_NOW : b->at_end; /* see rr_bridge_create() */
	/* Woken by a channel alone: the armed CQs raise their own events,
	 * and polling them would cost every wake-up a poll more. */
	handled += settle(b, at_end, n > b->cqs.chan_cqes);
	rr__eps_release(&b->eps);
	rr__ring_flush(&b->ring); /* flush() inside the loop */
	/* Back to embedded rules: a CQE handled outside the loop may kick. */
	b->ring.loop_owned = false;
	return err ? err : handled;
}

int rr_bridge_run(rr_bridge *b)
{
	int rc = 0;

	b->stop = false;
	while (!b->stop) {
		rc = rr_bridge_run_once(b, -1);
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
	return 0;
}

void rr_bridge_stop(rr_bridge *b)
{
	b->stop = true;
}

/* Destroy every object on the bridge, top layer first; their polls get
 * cancelled. */
static void close_all(rr_bridge *b)
{
	b->cm.closing = true;
	rr__eps_fini(&b->eps);
	rr__cm_fini(&b->cm);
	rr__devices_stop_hearing(&b->devs);
	rr__cqs_destroy_cqs(&b->cqs);
	rr__devices_fini(&b->devs);
	rr__cqs_fini(&b->cqs);
	rr__ring_room_timer_close(&b->ring);
}

int rr_bridge_destroy(rr_bridge *b)
{
	struct io_uring_cqe *cqe;
	uint64_t deadline;
	int rc;

	if (!b)
		return 0;
	if (!b->closing) {
		b->closing = true;
		close_all(b);
	}
	deadline = rr__now_ns() + DESTROY_WATCHDOG_MS * 1000000ull;
	while (!rr__ring_idle(&b->ring)) {
		rc = io_uring_peek_cqe(b->io, &cqe);
		if (rc) {
			struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000000};

			if (rr__now_ns() > deadline)
				break; /* late CQEs stay recognizable by their tag */
			flush(b);
			io_uring_submit_and_wait_timeout(b->io, &cqe, 1, &ts, NULL);
			continue;
		}
		if (!rr_bridge_handle_cqe(b, cqe)) {
			if (!b->opts.on_app_cqe)
				return -EBUSY;
			b->opts.on_app_cqe(b, cqe, b->opts.data);
		}
		io_uring_cqe_seen(b->io, cqe);
	}
	rr__ring_fini(&b->ring);
	free(b);
	return 0;
}

/* ---- the calls that need a bridge ---- */

int rr_channel_create(rr_bridge *b, struct ibv_context *ctx, rr_channel **out)
{
	if (!b || !ctx || !out || b->closing)
		return -EINVAL;
	return rr__channel_create(&b->cqs, ctx, out);
}

/* What a CQ holds: its device, so the device's events reach this bridge
 * whichever channel the CQ is on, and the claim that routes those naming
 * the CQ (CQ_ERR) to this bridge alone, on its thread. */
struct cq_hold {
	struct rr__device *dev;
	struct rr__claim claim;
};

static void cq_gone(void *ctx)
{
	struct cq_hold *h = ctx;

	rr__device_unclaim(&h->claim); /* after the destroy, as claims end */
	rr__device_put(h->dev);
	free(h);
}

int rr_cq_create(rr_bridge *b, rr_channel *ch, struct ibv_context *ctx,
		 const struct rr_cq_opts *opts, size_t opts_size, rr_cq **out)
{
	struct cq_hold *hold = NULL;
	struct rr_cq_opts o;
	int rc;

	if (!b || !ctx || !opts || !out || b->closing)
		return -EINVAL;
	rc = rr__opts_in(&o, sizeof(o), opts, opts_size, RR__CQ_OPTS_SIZE_0_8);
	if (rc)
		return rc;
	/* One way to hand completions out: per WC or per batch. */
	if (!o.on_wc == !o.on_wc_batch || o.mode > RR_WAIT_HYBRID_FIXED)
		return -EINVAL;
	if (ch && ch->ch->context != ctx)
		return -EINVAL;
	hold = calloc(1, sizeof(*hold));
	if (!hold)
		return -ENOMEM;
	/* On the application's channel the device is only heard: no PD or
	 * shared channel for it. */
	rc = ch ? rr__device_hear(&b->devs, ctx, &hold->dev)
		: rr__device_get(&b->devs, ctx, &hold->dev);
	if (rc) {
		free(hold);
		return rc;
	}
	if (!ch)
		ch = hold->dev->channel;
	rc = rr__cq_create(&b->cqs, ch, ctx, &o, out);
	if (rc) {
		rr__device_put(hold->dev);
		free(hold);
		return rc;
	}
	rr__device_claim(hold->dev, &hold->claim, (*out)->cq, b, 0);
	(*out)->hooks = (struct rr__cq_hooks){.destroyed = cq_gone, .ctx = hold};
	return 0;
}

/* An endpoint's options, as rr_connect() and rr_listen() take them. */
static int ep_opts_in(struct rr_ep_opts *o, const struct rr_ep_opts *opts, size_t opts_size)
{
	int rc = rr__opts_in(o, sizeof(*o), opts, opts_size, RR__EP_OPTS_SIZE_0_8);

	if (!rc && (o->flags & ~RR__EP_FLAGS_KNOWN))
		rc = -EINVAL;
	return rc;
}

int rr_connect(rr_bridge *b, const char *host, uint16_t port, const struct rr_ep_opts *opts,
	       size_t opts_size, rr_ep_cb on_connect, rr_ep **out)
{
	struct rr_ep_opts o;
	int rc;

	if (!b || b->closing)
		return -EINVAL;
	rc = ep_opts_in(&o, opts, opts_size);
	if (rc)
		return rc;
	return rr__cm_connect(&b->cm, host, port, &o, on_connect, out);
}

int rr_listen(rr_bridge *b, const char *host, uint16_t port, const struct rr_ep_opts *ep_opts,
	      size_t opts_size, rr_accept_cb on_accept, void *data, rr_listener **out)
{
	struct rr_ep_opts o;
	int rc;

	if (!b || b->closing)
		return -EINVAL;
	rc = ep_opts_in(&o, ep_opts, opts_size);
	if (rc)
		return rc;
	return rr__cm_listen(&b->cm, host, port, &o, on_accept, data, out);
}

int rr_listener_add_group(rr_listener *l, rr_bridge *group, rr_accept_cb on_accept, void *data)
{
	if (!l || !group || group->closing)
		return -EINVAL;
	return rr__cm_add_group(l, &group->cm, on_accept, data);
}

int rr_listener_remove_group(rr_listener *l, rr_bridge *group)
{
	if (!l || !group)
		return -EINVAL;
	return rr__cm_remove_group(l, &group->cm);
}

int rr_srq_create(rr_bridge *b, struct ibv_context *ctx, uint32_t max_wr, rr_srq **out)
{
	if (!b || !ctx || !max_wr || !out || b->closing)
		return -EINVAL;
	return rr__srq_create(&b->eps, ctx, max_wr, out);
}
