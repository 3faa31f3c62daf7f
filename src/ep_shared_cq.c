// SPDX-License-Identifier: MIT
/*
 * The CQ the bridge shares among its endpoints on one device
 * (RR_EP_SHARED_CQ): created on first use, grown to hold every completion
 * its QPs can have outstanding, and gone with its last endpoint. Its work
 * completions find their endpoint by QP number.
 */
#include <errno.h>
#include <stdlib.h>

#include "ep_internal.h"

#define SHARED_CQ_MIN_SIZE 1024

static uint32_t qp_hash(uint32_t qp_num, uint32_t cap)
{
	return (qp_num * 2654435761u) & (cap - 1);
}

/* QP numbers are unique per device only: the CQ tells devices apart. */
static rr_ep *qpmap_find(const struct rr__qpmap *m, uint32_t qp_num, const struct rr__shcq *sh)
{
	if (!m->cap)
		return NULL;
	for (uint32_t i = qp_hash(qp_num, m->cap); m->slots[i]; i = (i + 1) & (m->cap - 1))
		if (m->slots[i]->qp_num == qp_num && m->slots[i]->shared == sh)
			return m->slots[i];
	return NULL;
}

static void qpmap_put(struct rr__qpmap *m, rr_ep *ep)
{
	uint32_t i = qp_hash(ep->qp_num, m->cap);

	while (m->slots[i])
		i = (i + 1) & (m->cap - 1);
	m->slots[i] = ep;
	m->n++;
}

int rr__qpmap_add(struct rr__qpmap *m, rr_ep *ep)
{
	if ((m->n + 1) * 2 > m->cap) {
		struct rr__qpmap bigger = {.cap = m->cap ? m->cap * 2 : 64};

		bigger.slots = calloc(bigger.cap, sizeof(*bigger.slots));
		if (!bigger.slots)
			return -ENOMEM;
		for (uint32_t i = 0; i < m->cap; i++)
			if (m->slots[i])
				qpmap_put(&bigger, m->slots[i]);
		free(m->slots);
		*m = bigger;
	}
	qpmap_put(m, ep);
	return 0;
}

void rr__qpmap_del(struct rr__qpmap *m, rr_ep *ep)
{
	uint32_t mask = m->cap - 1, i, j;

	if (!m->cap)
		return;
	for (i = qp_hash(ep->qp_num, m->cap); m->slots[i] != ep; i = (i + 1) & mask)
		if (!m->slots[i])
			return;
	m->slots[i] = NULL;
	m->n--;
	/* Close the gap: move back each later entry whose home is not
	 * between the gap and itself. */
	for (j = (i + 1) & mask; m->slots[j]; j = (j + 1) & mask) {
		uint32_t home = qp_hash(m->slots[j]->qp_num, m->cap);

		if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
			m->slots[i] = m->slots[j];
			m->slots[j] = NULL;
			i = j;
		}
	}
}

/* A shared CQ's completion: for the endpoint whose QP it names. None is
 * left of a QP that is gone (see rr__cq_take_qp()); what a callback's
 * destroy flushed earlier in the same batch finds no endpoint. */
static void shared_on_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	struct rr__shcq *sh = data;
	rr_ep *ep = qpmap_find(&sh->set->qps, wc->qp_num, sh);
	struct rr_srq *srq;
	struct rr__req *req;

	if (ep) {
		rr__ep_on_wc(cq, wc, ep);
		return;
	}
	/* Its endpoint is gone, flushed (a callback destroyed it after this
	 * batch was polled). An SRQ receive was never its own: it still has
	 * its one completion to get, with no endpoint. */
	srq = rr__srq_find(sh->set, sh->dev);
	req = rr__srq_req_of_wc(srq, wc);
	if (req)
		rr__srq_complete(srq, req, NULL, wc);
}

/* Free a shared CQ its last member left once no hook of it is running. */
bool rr__shcq_release_if_done(struct rr__shcq *sh)
{
	if (!sh->orphan || sh->busy)
		return false;
	free(sh);
	return true;
}

/* A shared CQ's hook: each endpoint a WC error took down is told. */
static void shared_after_dispatch(void *ctx)
{
	struct rr__shcq *sh = ctx;

	/* The callbacks may destroy every member, and with the last the CQ. */
	sh->busy++;
	while (!rr__list_empty(&sh->downs)) {
		rr_ep *ep = rr__container_of(sh->downs.next, rr_ep, down_link);

		rr__list_del(&ep->down_link);
		rr__ep_after_dispatch(ep);
	}
	sh->busy--;
	rr__shcq_release_if_done(sh);
}

/* Join the bridge's CQ on ep's device, created on first use and grown to
 * hold every completion its QPs can have outstanding at once. */
int rr__shcq_join(rr_ep *ep, int need)
{
	struct rr__eps *set = ep->set;
	struct rr__shcq *sh = NULL;
	struct rr__list *l;
	int rc;

	for (l = set->shcqs.next; l != &set->shcqs; l = l->next) {
		struct rr__shcq *s = rr__container_of(l, struct rr__shcq, link);

		if (s->dev == ep->dev) {
			sh = s;
			break;
		}
	}
	if (!sh) {
		struct rr_cq_opts co = {
			.mode = ep->opts.mode, .spin_us = ep->opts.spin_us, .on_wc = shared_on_wc};

		sh = calloc(1, sizeof(*sh));
		if (!sh)
			return -ENOMEM;
		sh->set = set;
		rr__list_init(&sh->downs);
		sh->cqe = need > SHARED_CQ_MIN_SIZE ? need : SHARED_CQ_MIN_SIZE;
		if (sh->cqe > rr__device_max_cqe(ep->dev))
			sh->cqe = need; /* fails below if even that is too many */
		co.cqe = sh->cqe;
		co.data = sh;
		rc = rr__cq_create(set->cqs, ep->dev->channel, ep->dev->ctx, &co, &sh->cq);
		if (rc) {
			free(sh);
			return rc;
		}
		sh->cq->hooks =
			(struct rr__cq_hooks){.after_dispatch = shared_after_dispatch, .ctx = sh};
		sh->dev = ep->dev;
		sh->dev->refs++;
		rr__device_claim(sh->dev, &sh->claim, rr_cq_ibv(sh->cq), sh, RR__CLAIM_SHCQ);
		rr__list_add_tail(&set->shcqs, &sh->link);
	}
	if (sh->need + need > sh->cqe) {
		int want = sh->need + need, cap = rr__device_max_cqe(ep->dev);

		/* Doubling saves resizes, but never past what the device has. */
		if (want > cap)
			return -ENOSPC;
		want = want > 2 * sh->cqe ? want : 2 * sh->cqe < cap ? 2 * sh->cqe : cap;
		rc = ibv_resize_cq(rr_cq_ibv(sh->cq), want);
		if (rc && sh->users)
			return rc > 0 ? -rc : -ENOSPC;
		if (!rc)
			sh->cqe = want;
	}
	sh->need += need;
	sh->users++;
	ep->shared = sh;
	ep->cq = sh->cq;
	return 0;
}

void rr__shcq_leave(rr_ep *ep)
{
	struct rr__shcq *sh = ep->shared;

	ep->shared = NULL;
	ep->cq = NULL;
	rr__list_del(&ep->down_link);
	sh->need -= (int)(ep->opts.max_send_wr + ep->opts.max_recv_wr);
	if (--sh->users)
		return;
	/* An SRQ whose depth was counted here counts it again in the next. */
	for (struct rr__list *l = sh->set->srqs.next; l != &sh->set->srqs; l = l->next) {
		struct rr_srq *srq = rr__container_of(l, struct rr_srq, link);

		if (srq->counted == sh)
			srq->counted = NULL;
	}
	rr__list_del(&sh->link);
	rr_cq_destroy(sh->cq);
	rr__device_unclaim(&sh->claim);
	rr__device_put(sh->dev);
	if (sh->busy)
		sh->orphan = true;
	else
		free(sh);
}
