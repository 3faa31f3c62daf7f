// SPDX-License-Identifier: MIT
/*
 * Poll slots: each fd the bridge watches (completion channels, the rdma_cm
 * event channel, device async fds) is one slot with a POLL_ADD in the ring.
 *
 * Multishot polls stay armed across CQEs; a CQE without IORING_CQE_F_MORE
 * means the kernel ended the poll (CQ overflow, cancellation, error) and the
 * slot is armed again unless we are closing it. Single-shot polls (old
 * kernels, or RR_BRIDGE_SINGLESHOT) are simply that case every time.
 *
 * A slot is freed only when its terminal CQE arrived, so a late CQE never
 * reaches a reused slot; the generation in user_data catches the rest.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>

#include "internal.h"

#define RR__MAX_ARM_ERRORS 8

int rr__set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

int rr__poll_init(rr_bridge *b)
{
	b->nslots = 0;
	b->slots = NULL;
	b->free_slot = RR__NO_SLOT;
	return 0;
}

void rr__poll_fini(rr_bridge *b)
{
	free(b->slots);
	b->slots = NULL;
	b->nslots = 0;
}

static int grow(rr_bridge *b)
{
	uint32_t n = b->nslots ? b->nslots * 2 : 16;
	struct rr__poll *s = realloc(b->slots, n * sizeof(*s));

	if (!s)
		return -ENOMEM;
	for (uint32_t i = b->nslots; i < n; i++) {
		s[i] = (struct rr__poll){.fd = -1, .next_free = i + 1 < n ? i + 1 : b->free_slot};
	}
	b->free_slot = b->nslots;
	b->slots = s;
	b->nslots = n;
	return 0;
}

static int arm(rr_bridge *b, uint32_t idx)
{
	struct rr__poll *p = &b->slots[idx];
	struct io_uring_sqe *sqe = rr__get_sqe(b);

	if (!sqe)
		return -EBUSY;
	if (b->multishot)
		io_uring_prep_poll_multishot(sqe, p->fd, POLLIN);
	else
		io_uring_prep_poll_add(sqe, p->fd, POLLIN);
	io_uring_sqe_set_data64(sqe, rr__ud(RR__UD_POLL, p->gen, idx));
	p->armed = true;
	return 0;
}

int rr__poll_add(rr_bridge *b, int fd, rr__poll_fn fn, void *ctx, uint32_t *slot_out)
{
	uint32_t idx;
	int rc;

	if (b->free_slot == RR__NO_SLOT && (rc = grow(b)))
		return rc;
	idx = b->free_slot;
	struct rr__poll *p = &b->slots[idx];

	p->fd = fd;
	p->fn = fn;
	p->ctx = ctx;
	p->closing = false;
	p->errors = 0;
	rc = arm(b, idx);
	if (rc) {
		p->fd = -1;
		return rc;
	}
	b->free_slot = p->next_free;
	p->in_use = true;
	b->live_slots++;
	*slot_out = idx;
	return 0;
}

static void release(rr_bridge *b, uint32_t idx)
{
	struct rr__poll *p = &b->slots[idx];

	free(p->ts);
	p->ts = NULL;
	p->is_timer = false;
	p->in_use = false;
	p->armed = false;
	p->fd = -1;
	p->fn = NULL;
	p->ctx = NULL;
	p->gen++; /* late CQEs of this use no longer match */
	p->next_free = b->free_slot;
	b->free_slot = idx;
	b->live_slots--;
}

int rr__timer_add(rr_bridge *b, unsigned int ms, rr__poll_fn fn, void *ctx, uint32_t *slot_out)
{
	struct io_uring_sqe *sqe;
	struct rr__poll *p;
	uint32_t idx;
	int rc;

	if (b->free_slot == RR__NO_SLOT && (rc = grow(b)))
		return rc;
	idx = b->free_slot;
	p = &b->slots[idx];
	/* Heap, not the slot: the slot table may move before submission. */
	p->ts = malloc(sizeof(*p->ts));
	if (!p->ts)
		return -ENOMEM;
	sqe = rr__get_sqe(b);
	if (!sqe) {
		free(p->ts);
		p->ts = NULL;
		return -EBUSY;
	}
	p->ts->tv_sec = ms / 1000;
	p->ts->tv_nsec = (long long)(ms % 1000) * 1000000;
	io_uring_prep_timeout(sqe, p->ts, 0, 0);
	io_uring_sqe_set_data64(sqe, rr__ud(RR__UD_POLL, p->gen, idx));
	p->fd = -1;
	p->fn = fn;
	p->ctx = ctx;
	p->closing = false;
	p->errors = 0;
	p->is_timer = true;
	p->armed = true;
	b->free_slot = p->next_free;
	p->in_use = true;
	b->live_slots++;
	*slot_out = idx;
	return 0;
}

/* Ask the kernel to end the poll or timer of a closing slot. Without an
 * SQE (a ring full of work even after a submit) the poll lives on:
 * rr_bridge_destroy() then gives up waiting after its watchdog, and the
 * late CQE stays recognizable. */
static void issue_cancel(rr_bridge *b, uint32_t idx)
{
	struct rr__poll *p = &b->slots[idx];
	struct io_uring_sqe *sqe = rr__get_sqe(b);

	if (sqe && p->is_timer) {
		io_uring_prep_timeout_remove(sqe, rr__ud(RR__UD_POLL, p->gen, idx), 0);
		io_uring_sqe_set_data64(sqe, rr__ud(RR__UD_CANCEL, p->gen, idx));
	} else if (sqe) {
		io_uring_prep_poll_remove(sqe, rr__ud(RR__UD_POLL, p->gen, idx));
		io_uring_sqe_set_data64(sqe, rr__ud(RR__UD_CANCEL, p->gen, idx));
	}
}

void rr__poll_close(rr_bridge *b, uint32_t idx)
{
	struct rr__poll *p;

	if (idx == RR__NO_SLOT || idx >= b->nslots || !b->slots[idx].in_use)
		return;
	p = &b->slots[idx];
	if (p->closing)
		return;
	p->closing = true;
	p->fn = NULL;
	if (!p->armed) {
		release(b, idx);
		return;
	}
	/* The io_uring poll holds its own reference to the file, so the fd
	 * may be closed right after this; the slot waits for the terminal
	 * CQE. */
	issue_cancel(b, idx);
}

/*
 * -EALREADY: the poll was firing when the cancel came (with
 * IORING_SETUP_DEFER_TASKRUN its task work waits for the next
 * io_uring_enter()), and a multishot poll stays armed after that. Ask
 * again, or the slot would never see its terminal CQE.
 */
void rr__poll_cancel_cqe(rr_bridge *b, const struct io_uring_cqe *cqe)
{
	uint32_t idx = rr__ud_slot(cqe->user_data);
	struct rr__poll *p;

	if (cqe->res != -EALREADY || idx >= b->nslots)
		return;
	p = &b->slots[idx];
	if (!p->in_use || !p->closing || !p->armed ||
	    (p->gen & 0xff) != rr__ud_gen(cqe->user_data))
		return;
	b->stats.cancel_retries++;
	issue_cancel(b, idx);
}

void rr__poll_cqe(rr_bridge *b, const struct io_uring_cqe *cqe)
{
	uint32_t idx = rr__ud_slot(cqe->user_data);
	struct rr__poll *p;
	bool more = cqe->flags & IORING_CQE_F_MORE;

	if (idx >= b->nslots)
		return;
	p = &b->slots[idx];
	if (!p->in_use || (p->gen & 0xff) != rr__ud_gen(cqe->user_data))
		return; /* stale: from an earlier use of the slot */
	if (!more)
		p->armed = false;
	if (p->closing) {
		if (!more)
			release(b, idx);
		return;
	}
	if (p->is_timer) {
		rr__poll_fn fn = p->fn;
		void *ctx = p->ctx;

		release(b, idx);
		fn(b, ctx, cqe->res == -ETIME ? -ETIME : cqe->res);
		return;
	}
	if (cqe->res >= 0) {
		p->errors = 0;
		p->fn(b, p->ctx, cqe->res);
		/* The handler may have grown (moved) the slot table. */
		p = &b->slots[idx];
	} else if (cqe->res == -EINVAL && b->multishot) {
		/* A kernel without multishot poll: single-shot from now on. */
		b->multishot = false;
	} else if (cqe->res != -ECANCELED && cqe->res != -EAGAIN && cqe->res != -EINTR) {
		p->errors++;
	}
	/* The handler may have closed the slot. */
	if (!p->in_use || p->closing || p->armed) {
		if (p->in_use && p->closing && !p->armed)
			release(b, idx);
		return;
	}
	if (p->errors >= RR__MAX_ARM_ERRORS) {
		rr__poll_fn fn = p->fn;
		void *ctx = p->ctx;

		/* The fd keeps failing: report once and stop polling it. */
		p->closing = true;
		release(b, idx);
		fn(b, ctx, cqe->res);
		return;
	}
	b->stats.rearms++;
	if (arm(b, idx))
		p->errors++;
}
