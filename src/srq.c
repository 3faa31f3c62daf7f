// SPDX-License-Identifier: MIT
/*
 * Shared receive queues: receives posted once
 * for every endpoint of the bridge on one device that joins (RR_EP_SRQ).
 * A receive completes on the CQ of the QP that took it and is handed to
 * that endpoint; receives still posted when the SRQ goes complete with
 * -ECANCELED and no endpoint.
 *
 * Above the endpoint lifecycle: destroying an SRQ first ends the QPs of
 * destroyed endpoints still waiting on it.
 */
#include <errno.h>
#include <stdlib.h>

#include "ep_internal.h"

int rr__srq_create(struct rr__eps *set, struct ibv_context *ctx, uint32_t max_wr, rr_srq **out)
{
	struct ibv_srq_init_attr attr = {.attr = {.max_wr = max_wr, .max_sge = 1}};
	struct rr_srq *srq;
	int rc;

	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return -ENOMEM;
	srq->set = set;
	rr__list_init(&srq->free_reqs);
	rr__list_init(&srq->outstanding);
	rr__list_init(&srq->held_link);
	rc = rr__device_get(set->devs, ctx, &srq->dev);
	if (rc)
		goto err_free;
	if (rr__srq_find(set, srq->dev)) {
		rc = -EEXIST;
		goto err_put;
	}
	srq->srq = ibv_create_srq(srq->dev->pd, &attr);
	if (!srq->srq) {
		rc = errno ? -errno : -ENOMEM;
		goto err_put;
	}
	/* The provider may round the depth up: every slot gets a request. */
	srq->max_wr = attr.attr.max_wr > max_wr ? attr.attr.max_wr : max_wr;
	srq->reqs = calloc(srq->max_wr, sizeof(*srq->reqs));
	if (!srq->reqs) {
		rc = -ENOMEM;
		goto err_srq;
	}
	for (uint32_t i = 0; i < srq->max_wr; i++) {
		srq->reqs[i].is_recv = true;
		rr__list_add_tail(&srq->free_reqs, &srq->reqs[i].link);
	}
	rr__device_claim(srq->dev, &srq->claim, srq->srq, srq, RR__CLAIM_SRQ);
	rr__list_add_tail(&set->srqs, &srq->link);
	*out = srq;
	return 0;

err_srq:
	ibv_destroy_srq(srq->srq);
err_put:
	rr__device_put(srq->dev);
err_free:
	free(srq);
	return rc;
}

int rr_srq_post_recv(rr_srq *srq, void *buf, uint32_t len, struct ibv_mr *mr, rr_req_cb cb,
		     void *data)
{
	struct ibv_recv_wr *bad;
	struct rr__req *req;
	int rc;

	if (!srq || !cb || srq->destroy_pending)
		return -EINVAL;
	rc = rr__mr_check_buf(mr, buf, len);
	if (rc)
		return rc;
	if (srq->dev->dead)
		return -ENODEV;
	if (rr__list_empty(&srq->free_reqs))
		return -ENOBUFS;
	req = rr__container_of(srq->free_reqs.next, struct rr__req, link);
	req->post_err = 0;
	req->sge =
		(struct ibv_sge){.addr = (uintptr_t)buf, .length = len, .lkey = mr ? mr->lkey : 0};
	req->wr.recv =
		(struct ibv_recv_wr){.wr_id = (uintptr_t)req, .sg_list = &req->sge, .num_sge = 1};
	if (srq->set->holding) {
		/* A pass is on: the receive goes with the SRQ's chain. */
		rr__chain_add(&srq->held, req);
		if (rr__list_empty(&srq->held_link)) {
			rr__list_add_tail(&srq->set->held_srqs, &srq->held_link);
			srq->set->any_held = true;
		}
	} else {
		rc = ibv_post_srq_recv(srq->srq, &req->wr.recv, &bad);
		if (rc)
			return rc > 0 ? -rc : -EIO; /* a failed post never calls back */
		srq->set->stats->chains++;
		srq->set->stats->wrs++;
	}
	rr__list_del(&req->link);
	req->cb = cb;
	req->data = data;
	rr__list_add_tail(&srq->outstanding, &req->link);
	srq->set->stats->posts++;
	return 0;
}

/* The receives a pass held, as one chain; those the provider refused
 * complete now with its errno, once each, in posting order (with no
 * endpoint: none took them). */
void rr__srq_post_held(struct rr_srq *srq)
{
	struct rr__chain c = srq->held;
	struct ibv_recv_wr *bad;
	struct rr__req *r;
	int rc, err;

	srq->held = (struct rr__chain){0};
	rr__list_del(&srq->held_link);
	if (!c.first)
		return;
	bad = &c.first->wr.recv;
	rc = ibv_post_srq_recv(srq->srq, bad, &bad);
	srq->set->stats->chains++;
	srq->set->stats->wrs += c.n;
	if (!rc)
		return;
	err = rc > 0 ? -rc : -EIO;
	for (struct ibv_recv_wr *w = bad ? bad : &c.first->wr.recv; w; w = w->next)
		rr__container_of(w, struct rr__req, wr.recv)->post_err = err;
	srq->in_callback++;
	while (!srq->destroy_pending && (r = rr__first_refused(&srq->outstanding)))
		rr__srq_complete(srq, r, NULL, NULL);
	srq->in_callback--;
	rr__srq_release_if_done(srq);
}

int rr_srq_destroy(rr_srq *srq)
{
	if (!srq || srq->destroy_pending)
		return 0;
	if (srq->users)
		return -EBUSY;
	/* QPs of destroyed endpoints still waiting on it go first; their
	 * receives' callbacks may destroy it themselves. */
	srq->in_callback++;
	for (struct rr__list *l = srq->set->lingering.next; l != &srq->set->lingering;) {
		rr_ep *ep = rr__container_of(l, rr_ep, link);

		l = l->next;
		if (ep->srq == srq) {
			srq->set->linger_end(ep);
			l = srq->set->lingering.next; /* a callback may have ended others */
		}
	}
	srq->in_callback--;
	if (srq->destroy_pending) {
		rr__srq_release_if_done(srq);
		return 0;
	}
	srq->destroy_pending = true;
	rr__list_del(&srq->link);
	/* What a pass held was never posted: it completes below. */
	srq->held = (struct rr__chain){0};
	rr__list_del(&srq->held_link);
	ibv_destroy_srq(srq->srq);
	rr__device_unclaim(&srq->claim);
	srq->srq = NULL;
	srq->in_callback++;
	while (!rr__list_empty(&srq->outstanding))
		rr__srq_complete(srq, rr__container_of(srq->outstanding.next, struct rr__req, link),
				 NULL, NULL);
	srq->in_callback--;
	rr__device_put(srq->dev);
	srq->dev = NULL;
	rr__srq_release_if_done(srq);
	return 0;
}

rr_srq *rr_ep_srq(rr_ep *ep)
{
	return ep ? ep->srq : NULL;
}

void rr__srqs_fini(struct rr__eps *set)
{
	while (!rr__list_empty(&set->srqs)) {
		struct rr_srq *srq = rr__container_of(set->srqs.next, struct rr_srq, link);

		srq->users = 0; /* its endpoints are gone */
		rr_srq_destroy(srq);
	}
}
