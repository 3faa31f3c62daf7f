// SPDX-License-Identifier: MIT
/*
 * The bridge: routes CQEs by the user_data contract, runs the built-in loop,
 * and tears everything down in an order verbs accepts.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define DEFAULT_CQ_BATCH 32
#define MAX_CQ_BATCH 256
#define DEFAULT_BUDGET 256
#define DEFAULT_ACK_BATCH 32
#define DESTROY_WATCHDOG_MS 10000

uint64_t rr__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* An SQE for the bridge; when the SQ is full, submit to make room. */
struct io_uring_sqe *rr__get_sqe(rr_bridge *b)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(b->ring);

	if (!sqe && io_uring_submit(b->ring) >= 0)
		sqe = io_uring_get_sqe(b->ring);
	return sqe;
}

/* Embedded in an application loop, the bridge gets the CPU back only
 * through a CQE: a NOP brings it back for CQs that must be polled. */
void rr__want_kick(rr_bridge *b)
{
	struct io_uring_sqe *sqe;

	if (b->kick_pending || b->loop_owned)
		return;
	sqe = rr__get_sqe(b);
	if (!sqe)
		return; /* the next bridge CQE comes back here anyway */
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, rr__ud(RR__UD_KICK, 0, 0));
	b->kick_pending = true;
	b->stats.kicks++;
}

int rr_bridge_create(rr_bridge **out, struct io_uring *ring, const struct rr_bridge_opts *opts)
{
	rr_bridge *b;

	if (!out || !ring)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ring = ring;
	if (opts)
		b->opts = *opts;
	if (!b->opts.cq_batch)
		b->opts.cq_batch = DEFAULT_CQ_BATCH;
	if (b->opts.cq_batch > MAX_CQ_BATCH)
		b->opts.cq_batch = MAX_CQ_BATCH;
	if (!b->opts.budget)
		b->opts.budget = DEFAULT_BUDGET;
	if (!b->opts.ack_batch)
		b->opts.ack_batch = DEFAULT_ACK_BATCH;
	/* Multishot poll came with 5.13, as did IORING_FEAT_RSRC_TAGS; a
	 * kernel that still refuses it gets single-shot polls (see poll.c). */
	b->multishot = !(b->opts.flags & RR_BRIDGE_SINGLESHOT) &&
		       (ring->features & IORING_FEAT_RSRC_TAGS);
	b->cm_slot = RR__NO_SLOT;
	rr__list_init(&b->devices);
	rr__list_init(&b->channels);
	rr__list_init(&b->cqs);
	rr__list_init(&b->active);
	rr__list_init(&b->eps);
	rr__list_init(&b->listeners);
	rr__poll_init(b);
	*out = b;
	return 0;
}

struct io_uring *rr_bridge_ring(rr_bridge *b)
{
	return b->ring;
}

void rr_bridge_get_stats(const rr_bridge *b, struct rr_bridge_stats *out)
{
	*out = b->stats;
}

int rr_bridge_handle_cqe(rr_bridge *b, const struct io_uring_cqe *cqe)
{
	if (!rr_is_bridge_user_data(cqe->user_data))
		return 0;
	b->stats.cqes++;
	switch (rr__ud_kind(cqe->user_data)) {
	case RR__UD_POLL:
		rr__poll_cqe(b, cqe);
		break;
	case RR__UD_KICK:
		b->kick_pending = false;
		if (!b->closing)
			rr__cq_poll_active(b);
		break;
	case RR__UD_CANCEL:
		rr__poll_cancel_cqe(b, cqe); /* the poll's own CQE does the rest */
		break;
	default:
		break;
	}
	if (!b->closing && rr__cq_any_active(b))
		rr__want_kick(b);
	return 1;
}

static int dispatch(rr_bridge *b, const struct io_uring_cqe *cqe)
{
	if (rr_bridge_handle_cqe(b, cqe))
		return 0;
	if (b->opts.on_app_cqe) {
		b->opts.on_app_cqe(b, cqe, b->opts.data);
		return 0;
	}
	return -EPROTO;
}

int rr_bridge_run_once(rr_bridge *b, int timeout_ms)
{
	struct io_uring_cqe *cqe;
	int handled = 0, rc = 0, err = 0;
	unsigned int n = 0;

	b->loop_owned = true;
	if (rr__cq_any_active(b)) {
		handled += (int)rr__cq_poll_active(b);
		timeout_ms = 0; /* busy or spinning CQs: never sleep */
	}
	if (timeout_ms == 0) {
		rc = io_uring_submit(b->ring);
	} else if (timeout_ms < 0) {
		rc = io_uring_submit_and_wait(b->ring, 1);
	} else {
		struct __kernel_timespec ts = {.tv_sec = timeout_ms / 1000,
					       .tv_nsec = (timeout_ms % 1000) * 1000000LL};

		rc = io_uring_submit_and_wait_timeout(b->ring, &cqe, 1, &ts, NULL);
		if (rc == -ETIME)
			rc = 0;
	}
	if (rc < 0 && rc != -EINTR && rc != -EBUSY) {
		b->loop_owned = false;
		return rc;
	}
	/* Handle what is there now, but no more than one ring's worth, so
	 * a flood of CQEs cannot keep the pass from ending. */
	while (n < *b->ring->cq.kring_entries && io_uring_peek_cqe(b->ring, &cqe) == 0) {
		rc = dispatch(b, cqe);
		io_uring_cqe_seen(b->ring, cqe);
		if (rc)
			err = rc;
		n++;
	}
	handled += (int)n;
	/* Back to embedded rules: a CQE handled outside the loop may kick. */
	b->loop_owned = false;
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

/* Destroy every object on the bridge; their polls get cancelled. */
static void close_all(rr_bridge *b)
{
	while (!rr__list_empty(&b->eps))
		rr_ep_destroy(rr__container_of(b->eps.next, rr_ep, link));
	while (!rr__list_empty(&b->listeners))
		rr_listener_destroy(rr__container_of(b->listeners.next, rr_listener, link));
	while (!rr__list_empty(&b->cqs)) {
		rr_cq *cq = rr__container_of(b->cqs.next, rr_cq, link);

		if (rr_cq_destroy(cq)) {
			/* A QP the application still holds: forget the CQ
			 * rather than hang; verbs frees it with the context. */
			rr__list_del(&cq->link);
		}
	}
	rr__device_destroy_all(b);
	while (!rr__list_empty(&b->channels)) {
		rr_channel *ch = rr__container_of(b->channels.next, rr_channel, link);

		ch->ncqs = 0;
		rr_channel_destroy(ch);
	}
	rr__cm_fini(b);
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
	while (b->live_slots || b->kick_pending) {
		rc = io_uring_peek_cqe(b->ring, &cqe);
		if (rc) {
			struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000000};

			if (rr__now_ns() > deadline)
				break; /* late CQEs stay recognizable by their tag */
			io_uring_submit_and_wait_timeout(b->ring, &cqe, 1, &ts, NULL);
			continue;
		}
		if (!rr_is_bridge_user_data(cqe->user_data) && !b->opts.on_app_cqe)
			return -EBUSY;
		dispatch(b, cqe);
		io_uring_cqe_seen(b->ring, cqe);
	}
	rr__poll_fini(b);
	free(b);
	return 0;
}
