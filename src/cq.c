// SPDX-License-Identifier: MIT
/*
 * Completion channels and CQs.
 *
 * When a channel's poll fires: read CQ events until EAGAIN (the fd is
 * non-blocking) or until no CQ of the channel is left armed, count them per CQ and acknowledge in batches; then for each
 * CQ that had an event, poll it in batches within the budget. Once a CQ is
 * empty it is armed with ibv_req_notify_cq() and polled once more: a
 * completion that arrived between the last poll and the arm raised no event
 * and would otherwise be stranded until the next one.
 *
 * CQs that must be polled without an event — busy mode, hybrid mode inside
 * its spin window, and CQs cut short by the budget — sit on b->active and
 * are polled once per loop pass.
 */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

#define SPIN_CLOCK_EVERY 16

static void set_active(rr_cq *cq, bool on)
{
	if (cq->evented)
		return; /* queued by the current channel drain: polled shortly */
	if (on && !cq->active) {
		rr__list_add_tail(&cq->b->active, &cq->active_link);
		cq->active = true;
	} else if (!on && cq->active) {
		rr__list_del(&cq->active_link);
		cq->active = false;
	}
}

static void ack(rr_cq *cq)
{
	if (cq->unacked) {
		ibv_ack_cq_events(cq->cq, cq->unacked);
		cq->unacked = 0;
		cq->b->stats.cq_acks++;
	}
}

static void cq_free(rr_cq *cq)
{
	free(cq);
}

/* Hand out up to `budget` work completions; *more when the budget ran out. */
static unsigned int cq_poll(rr_cq *cq, unsigned int budget, bool *more)
{
	rr_bridge *b = cq->b;
	struct ibv_wc wc[256];
	unsigned int total = 0;
	int n, want;

	*more = false;
	cq->dispatch_depth++;
	while (total < budget) {
		want = (int)(budget - total < b->opts.cq_batch ? budget - total : b->opts.cq_batch);
		n = ibv_poll_cq(cq->cq, want, wc);
		if (n <= 0) {
			if (n == 0)
				b->stats.empty_polls++;
			break;
		}
		for (int i = 0; i < n; i++) {
			b->stats.wcs++;
			cq->on_wc(cq, &wc[i], cq->data);
			/* Destroyed from its own callback: the rest of the
			 * batch belonged to requests the destroy flushed. */
			if (cq->destroy_deferred)
				goto out;
		}
		total += (unsigned int)n;
		if (n < want)
			break;
	}
	*more = total >= budget;
out:
	cq->dispatch_depth--;
	return total;
}

static int arm(rr_cq *cq)
{
	int rc;

	if (cq->armed)
		return 0;
	rc = ibv_req_notify_cq(cq->cq, 0); /* returns the errno value */
	if (rc)
		return rc > 0 ? -rc : -EIO;
	cq->armed = true;
	cq->ch->narmed++;
	cq->b->stats.notify_arms++;
	return 0;
}

/*
 * Hybrid: keep polling for spin_us after the last completion. Where the
 * clock is a syscall (VMs without a usable TSC, such as the lab), reading
 * it on every empty poll would cost more than the arm it saves, so the
 * window opens at the first empty poll and the clock is read again only
 * every SPIN_CLOCK_EVERY empty polls.
 */
static bool keep_spinning(rr_cq *cq, unsigned int n)
{
	if (n) {
		cq->spin = RR__SPIN_BUSY;
		return true;
	}
	switch (cq->spin) {
	case RR__SPIN_BUSY:
		cq->spin_until_ns = rr__now_ns() + (uint64_t)cq->spin_us * 1000u;
		cq->spin_empty = 0;
		cq->spin = RR__SPIN_WINDOW;
		return true;
	case RR__SPIN_WINDOW:
		if (++cq->spin_empty % SPIN_CLOCK_EVERY)
			return true;
		if (rr__now_ns() < cq->spin_until_ns)
			return true;
		cq->spin = RR__SPIN_IDLE;
		return false;
	default:
		return false;
	}
}

/* Poll a CQ and decide whether it stays on the active list or is armed. */
static unsigned int service(rr_cq *cq)
{
	rr_bridge *b = cq->b;
	unsigned int n, n2;
	bool more;

	n = cq_poll(cq, b->opts.budget, &more);
	if (cq->destroy_deferred) {
		if (!cq->dispatch_depth)
			cq_free(cq);
		return n;
	}
	if (more) {
		b->stats.budget_yields++;
		set_active(cq, true);
		return n;
	}
	if (cq->mode == RR_WAIT_BUSY) {
		set_active(cq, true);
		return n;
	}
	if (cq->mode == RR_WAIT_HYBRID && keep_spinning(cq, n)) {
		set_active(cq, true);
		return n;
	}
	set_active(cq, false);
	if (arm(cq)) {
		set_active(cq, true); /* cannot sleep on it: keep polling */
		return n;
	}
	/* Poll again: see the comment at the top of the file. */
	n2 = cq_poll(cq, b->opts.budget, &more);
	if (cq->destroy_deferred) {
		if (!cq->dispatch_depth)
			cq_free(cq);
		return n + n2;
	}
	if (more || (n2 && cq->mode == RR_WAIT_HYBRID)) {
		if (cq->mode == RR_WAIT_HYBRID)
			cq->spin = RR__SPIN_BUSY;
		set_active(cq, true);
	}
	return n + n2;
}

bool rr__cq_any_active(rr_bridge *b)
{
	return !rr__list_empty(&b->active);
}

unsigned int rr__cq_poll_active(rr_bridge *b)
{
	struct rr__list pass;
	unsigned int n = 0;

	/* Take the list: service() re-adds what must stay, and a CQ
	 * destroyed meanwhile unlinks itself from `pass`. */
	rr__list_init(&pass);
	if (rr__list_empty(&b->active))
		return 0;
	pass.next = b->active.next;
	pass.prev = b->active.prev;
	pass.next->prev = &pass;
	pass.prev->next = &pass;
	rr__list_init(&b->active);
	while (!rr__list_empty(&pass)) {
		rr_cq *cq = rr__container_of(pass.next, rr_cq, active_link);

		rr__list_del(&cq->active_link);
		cq->active = false;
		n += service(cq);
	}
	return n;
}

/* ---- channels ---- */

static void channel_ready(rr_bridge *b, void *ctx, int revents)
{
	rr_channel *ch = ctx;
	struct rr__list pending;
	struct ibv_cq *icq;
	void *cctx;

	if (revents < 0)
		return; /* the poll kept failing and was dropped */
	rr__list_init(&pending);
	while (ibv_get_cq_event(ch->ch, &icq, &cctx) == 0) {
		rr_cq *cq = cctx;

		b->stats.cq_events++;
		cq->unacked++;
		if (cq->armed) {
			cq->armed = false;
			ch->narmed--;
		}
		if (cq->unacked >= b->opts.ack_batch)
			ack(cq);
		/* Queue it once; a CQ already on the active list is polled there. */
		if (!cq->evented && !cq->active) {
			cq->evented = true;
			rr__list_add_tail(&pending, &cq->active_link);
		}
		/* Each armed CQ raises one event at most: when none is left
		 * armed the channel is empty, and the read that would say
		 * EAGAIN is a syscall saved on every wake-up. */
		if (!ch->narmed)
			break;
	}
	/* EAGAIN: drained. Anything else (device gone) ends in the same way:
	 * the poll fires again only if more arrives. */
	while (!rr__list_empty(&pending)) {
		rr_cq *cq = rr__container_of(pending.next, rr_cq, active_link);

		rr__list_del(&cq->active_link);
		cq->evented = false;
		service(cq);
	}
}

int rr_channel_create(rr_bridge *b, struct ibv_context *ctx, rr_channel **out)
{
	rr_channel *ch;
	int rc;

	if (!b || !ctx || !out || b->closing)
		return -EINVAL;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	ch->b = b;
	ch->ch = ibv_create_comp_channel(ctx);
	if (!ch->ch) {
		rc = errno ? -errno : -ENOMEM;
		goto err_free;
	}
	rc = rr__set_nonblock(ch->ch->fd);
	if (rc)
		goto err_channel;
	rc = rr__poll_add(b, ch->ch->fd, channel_ready, ch, &ch->slot);
	if (rc)
		goto err_channel;
	rr__list_add_tail(&b->channels, &ch->link);
	*out = ch;
	return 0;

err_channel:
	ibv_destroy_comp_channel(ch->ch);
err_free:
	free(ch);
	return rc;
}

int rr_channel_destroy(rr_channel *ch)
{
	if (!ch)
		return 0;
	if (ch->ncqs)
		return -EBUSY;
	rr__poll_close(ch->b, ch->slot);
	rr__list_del(&ch->link);
	ibv_destroy_comp_channel(ch->ch);
	free(ch);
	return 0;
}

/* ---- CQs ---- */

int rr_cq_create(rr_bridge *b, rr_channel *ch, struct ibv_context *ctx,
		 const struct rr_cq_opts *opts, rr_cq **out)
{
	struct rr__device *dev;
	rr_cq *cq;
	int rc;

	if (!b || !ctx || !opts || !opts->on_wc || !out || b->closing || opts->mode > RR_WAIT_HYBRID)
		return -EINVAL;
	if (ch && ch->ch->context != ctx)
		return -EINVAL;
	if (!ch) {
		rc = rr__device_get(b, ctx, &dev);
		if (rc)
			return rc;
		ch = dev->channel;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->b = b;
	cq->ch = ch;
	cq->mode = opts->mode;
	cq->spin_us = opts->spin_us ? opts->spin_us : 50;
	cq->on_wc = opts->on_wc;
	cq->data = opts->data;
	rr__list_init(&cq->active_link);
	cq->cq = ibv_create_cq(ctx, opts->cqe > 0 ? opts->cqe : 256, cq, ch->ch, 0);
	if (!cq->cq) {
		rc = errno ? -errno : -ENOMEM;
		free(cq);
		return rc;
	}
	if (cq->mode == RR_WAIT_BUSY) {
		set_active(cq, true);
		rr__want_kick(b);
	} else {
		rc = arm(cq);
		if (rc) {
			ibv_destroy_cq(cq->cq);
			free(cq);
			return rc;
		}
	}
	ch->ncqs++;
	rr__list_add_tail(&b->cqs, &cq->link);
	*out = cq;
	return 0;
}

int rr_cq_set_mode(rr_cq *cq, enum rr_wait_mode mode, unsigned int spin_us)
{
	if (!cq || mode > RR_WAIT_HYBRID)
		return -EINVAL;
	cq->mode = mode;
	if (spin_us)
		cq->spin_us = spin_us;
	cq->spin = RR__SPIN_BUSY; /* hybrid: a full window, then arm */
	/* Let the next pass poll it and arm it if the new mode wants that. */
	set_active(cq, true);
	rr__want_kick(cq->b);
	return 0;
}

struct ibv_cq *rr_cq_ibv(rr_cq *cq)
{
	return cq->cq;
}

int rr_cq_destroy(rr_cq *cq)
{
	if (!cq || cq->destroy_deferred)
		return 0;
	int rc;

	/* Unacknowledged events would make ibv_destroy_cq() wait forever. */
	ack(cq);
	rc = ibv_destroy_cq(cq->cq); /* returns the errno value */
	if (rc)
		return rc > 0 ? -rc : -EBUSY;
	set_active(cq, false);
	if (cq->armed) {
		cq->armed = false;
		cq->ch->narmed--;
	}
	if (cq->evented) {
		rr__list_del(&cq->active_link);
		cq->evented = false;
	}
	rr__list_del(&cq->link);
	cq->ch->ncqs--;
	if (cq->dispatch_depth) {
		cq->destroy_deferred = true; /* freed when its dispatch unwinds */
		return 0;
	}
	cq_free(cq);
	return 0;
}
