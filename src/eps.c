// SPDX-License-Identifier: MIT
/*
 * A bridge's endpoints as a whole: set up, torn down, and told of device
 * async events. The top of the layer: it reaches every part below.
 */
#include <errno.h>
#include <stdlib.h>

#include "ep_internal.h"

void rr__eps_init(struct rr__eps *set, struct rr__ring *ring, struct rr__cqs *cqs,
		  struct rr__devices *devs)
{
	set->ring = ring;
	set->cqs = cqs;
	set->devs = devs;
	rr__list_init(&set->eps);
	rr__list_init(&set->shcqs);
	rr__list_init(&set->srqs);
	rr__list_init(&set->lingering);
	set->linger_end = rr__ep_linger_end;
	set->qps = (struct rr__qpmap){0};
	set->closing = false;
}

void rr__eps_fini(struct rr__eps *set)
{
	set->closing = true;
	while (!rr__list_empty(&set->eps))
		rr_ep_destroy(rr__container_of(set->eps.next, rr_ep, link));
	while (!rr__list_empty(&set->lingering))
		rr__ep_linger_end(rr__container_of(set->lingering.next, rr_ep, link));
	rr__srqs_fini(set);
	free(set->qps.slots);
	set->qps = (struct rr__qpmap){0};
}

/* Every endpoint on a fatal device (@cq NULL), or on a CQ in error (a
 * shared one has many), goes to error. */
static void all_to_error(struct rr__eps *set, struct rr__device *dev, struct ibv_cq *cq)
{
	struct rr__list *l;

	/* A callback may destroy any endpoint: start over after each one.
	 * Endpoints already in error are skipped, so this ends. */
again:
	for (l = set->eps.next; l != &set->eps; l = l->next) {
		rr_ep *ep = rr__container_of(l, rr_ep, link);

		bool hit = cq ? ep->cq && rr_cq_ibv(ep->cq) == cq : ep->dev == dev;

		if (hit && ep->state != RR__EP_ERROR && ep->state != RR__EP_DISCONNECTED) {
			rr__ep_to_error(ep, -EIO);
			goto again;
		}
	}
}

/*
 * Events reach the bridge that claimed what they name, on its thread,
 * while it lives (see rr__claim): the claim is the object, never a
 * pointer compared after the fact, which a new QP may have taken.
 */
void rr__eps_async(struct rr__eps *set, struct rr__device *dev, const struct ibv_async_event *ev,
		   struct rr__claim *c, void (*tell)(void *ctx, const struct ibv_async_event *ev),
		   void *ctx)
{
	unsigned int kind = c ? c->kind : 0;
	rr_ep *ep = kind == RR__CLAIM_QP || kind == RR__CLAIM_CQ ? c->owner : NULL;
	struct rr__shcq *sh = kind == RR__CLAIM_SHCQ ? c->owner : NULL;
	struct rr_srq *srq = kind == RR__CLAIM_SRQ ? c->owner : NULL;
	void *obj = c ? c->obj : NULL;

	/* The application first, while what the event names is held: it
	 * may destroy it there. A lingering QP's events are ours alone. */
	if (tell && !(ep && ep->destroy_pending)) {
		if (ep)
			ep->in_callback++;
		if (sh)
			sh->busy++;
		if (srq)
			srq->in_callback++;
		tell(ctx, ev);
		if (ep && !--ep->in_callback && ep->destroy_pending) {
			/* Destroyed there: its linger waits for its QP's last
			 * receive, which may be this very event. */
			if (ev->event_type == IBV_EVENT_QP_LAST_WQE_REACHED &&
			    kind == RR__CLAIM_QP && ep->lingering)
				rr__ep_linger_end(ep);
			else
				rr__ep_release_if_done(ep);
			return;
		}
		if (sh) {
			sh->busy--;
			if (rr__shcq_release_if_done(sh))
				return;
		}
		if (srq) {
			srq->in_callback--;
			if (rr__srq_release_if_done(srq))
				return;
		}
	}
	switch (ev->event_type) {
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		if (!ep || kind != RR__CLAIM_QP)
			break;
		if (ep->lingering)
			rr__ep_linger_end(ep);
		else
			ep->last_wqe = true;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_PATH_MIG_ERR:
		if (ep && kind == RR__CLAIM_QP && !ep->destroy_pending)
			rr__ep_to_error(ep, -EIO);
		break;
	case IBV_EVENT_CQ_ERR:
		if (ep || sh)
			all_to_error(set, dev, obj);
		break;
	case IBV_EVENT_DEVICE_FATAL:
		all_to_error(set, dev, NULL);
		break;
	default:
		break;
	}
}
