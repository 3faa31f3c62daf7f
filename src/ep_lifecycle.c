// SPDX-License-Identifier: MIT
/*
 * Endpoints: an RC QP on a private CQ, or on the CQ the bridge shares among
 * its endpoints on a device. Their lifecycle: allocated for the connection
 * manager, their QP set up, connected, taken down and destroyed, a QP on
 * an SRQ lingering past its endpoint; and what they tell of themselves.
 * Posting is in ep_post.c, completions in ep_cq.c, the shared CQ in
 * ep_shared_cq.c, SRQs in srq.c, MRs and MWs in mr.c, and what concerns
 * all endpoints of a bridge at once in eps.c (see ep_internal.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ep_internal.h"

#define DEFAULT_DEPTH 64
/* How long a destroyed SRQ QP waits for IBV_EVENT_QP_LAST_WQE_REACHED. */
#define LAST_WQE_WAIT_MS 2000

/* Call on_qp_ready; non-zero if the application destroyed the endpoint
 * from it (it is then gone). The receives it posted go now, before the
 * connection is requested or accepted, so the peer's first SEND finds
 * them. */
int rr__ep_qp_ready(rr_ep *ep)
{
	rr__ep_call_cb(ep, ep->opts.on_qp_ready, 0);
	if (!ep->destroy_pending)
		rr__ep_post_held(ep);
	if (ep->destroy_pending) {
		rr__ep_release_if_done(ep);
		return 1;
	}
	return 0;
}

/* Count an SRQ's depth once in the shared CQ its receives complete on. */
static int srq_cq_need(rr_ep *ep)
{
	if (!ep->srq || ep->srq->counted)
		return 0;
	return (int)ep->srq->max_wr;
}

int rr__ep_alloc(struct rr__eps *set, struct rdma_cm_id *id, const struct rr_ep_opts *opts,
		 size_t size, rr_ep **out)
{
	rr_ep *ep = calloc(1, size);

	if (!ep)
		return -ENOMEM;
	ep->type = RR__OBJ_EP;
	ep->set = set;
	ep->id = id;
	if (opts)
		ep->opts = *opts;
	if (ep->opts.private_data_len > sizeof(ep->pdata) ||
	    (ep->opts.private_data_len && !ep->opts.private_data)) {
		free(ep);
		return -EINVAL;
	}
	/* Ours to keep: the caller's bytes need not outlive the call. */
	if (ep->opts.private_data_len)
		memcpy(ep->pdata, ep->opts.private_data, ep->opts.private_data_len);
	ep->pdata_len = (uint8_t)ep->opts.private_data_len;
	ep->opts.private_data = NULL;
	if (!ep->opts.max_send_wr)
		ep->opts.max_send_wr = DEFAULT_DEPTH;
	if (!ep->opts.max_recv_wr)
		ep->opts.max_recv_wr = DEFAULT_DEPTH;
	ep->on_disconnect = ep->opts.on_disconnect;
	ep->data = ep->opts.data;
	ep->timer_slot = RR__NO_SLOT;
	rr__list_init(&ep->free_reqs);
	rr__list_init(&ep->outstanding);
	rr__list_init(&ep->pending_link);
	rr__list_init(&ep->down_link);
	rr__list_init(&ep->held_link);
	id->context = ep;
	rr__list_add_tail(&set->eps, &ep->link);
	*out = ep;
	return 0;
}

int rr__ep_setup_qp(rr_ep *ep)
{
	struct ibv_qp_init_attr attr;
	struct rr_cq_opts co = {0};
	uint32_t n = ep->opts.max_send_wr + ep->opts.max_recv_wr;
	int rc;

	rc = rr__device_get(ep->set->devs, ep->id->verbs, &ep->dev);
	if (rc)
		return rc;
	if (ep->opts.flags & RR_EP_SRQ) {
		ep->srq = rr__srq_find(ep->set, ep->dev);
		if (!ep->srq)
			return -ENOENT;
		ep->srq->users++;
		ep->opts.max_recv_wr = 0; /* the SRQ's */
		n = ep->opts.max_send_wr;
	}
	ep->reqs = calloc(n, sizeof(*ep->reqs));
	if (!ep->reqs)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		ep->reqs[i].ep = ep;
		rr__list_add_tail(&ep->free_reqs, &ep->reqs[i].link);
	}
	if (ep->opts.flags & RR_EP_SHARED_CQ) {
		int extra = srq_cq_need(ep);

		rc = rr__shcq_join(ep, (int)n + extra);
		if (rc)
			return rc;
		if (extra)
			ep->srq->counted = ep->shared;
	} else {
		co.cqe = (int)n + (ep->srq ? (int)ep->srq->max_wr : 0);
		co.mode = ep->opts.mode;
		co.spin_us = ep->opts.spin_us;
		co.on_wc = rr__ep_on_wc;
		co.data = ep;
		rc = rr__cq_create(ep->set->cqs, ep->dev->channel, ep->id->verbs, &co, &ep->cq);
		if (rc)
			return rc;
		ep->cq->hooks =
			(struct rr__cq_hooks){.after_dispatch = rr__ep_after_dispatch, .ctx = ep};
		rr__device_claim(ep->dev, &ep->cq_claim, rr_cq_ibv(ep->cq), ep, RR__CLAIM_CQ);
	}
	if (ep->opts.flags & RR_EP_OWN_PD) {
		ep->own_pd = ibv_alloc_pd(ep->id->verbs);
		if (!ep->own_pd)
			return errno ? -errno : -ENOMEM;
	}
	memset(&attr, 0, sizeof(attr));
	attr.qp_context = ep;
	attr.send_cq = rr_cq_ibv(ep->cq);
	attr.recv_cq = rr_cq_ibv(ep->cq);
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = ep->opts.signal_every <= 1;
	attr.cap.max_send_wr = ep->opts.max_send_wr;
	attr.cap.max_recv_wr = ep->opts.max_recv_wr;
	attr.srq = ep->srq ? ep->srq->srq : NULL;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = ep->opts.max_inline;
	if (rdma_create_qp(ep->id, ep->own_pd ? ep->own_pd : ep->dev->pd, &attr))
		return errno ? -errno : -ENOMEM;
	ep->qp = ep->id->qp;
	ep->qp_num = ep->qp->qp_num; /* rr__ep_drain_cq() takes this QP's */
	rr__device_claim(ep->dev, &ep->qp_claim, ep->qp, ep, RR__CLAIM_QP);
	if (ep->shared)
		return rr__qpmap_add(&ep->set->qps, ep); /* else rr_ep_destroy() frees it */
	return 0;
}

void rr__ep_to_error(rr_ep *ep, int status)
{
	enum rr__ep_state prev = ep->state;

	if (ep->destroy_pending)
		return;
	if (prev == RR__EP_ERROR && ep->down_pending) {
		/* A WC error got here first: report now, with its status. */
		status = ep->down_pending;
		ep->down_pending = 0;
		prev = RR__EP_CONNECTED;
	} else if (prev == RR__EP_ERROR || prev == RR__EP_DISCONNECTED) {
		return;
	}
	if (ep->on_drop) {
		/* Not yet handed to the application: nobody to tell. */
		ep->on_drop(ep);
		rr_ep_destroy(ep);
		return;
	}
	ep->state = RR__EP_ERROR;
	rr__ep_stop_timer(ep);
	rr__ep_fail_qp(ep);
	if (prev < RR__EP_CONNECTED) {
		rr_ep_cb cb = ep->on_connect;

		ep->on_connect = NULL;
		rr__ep_call_cb(ep, cb, status);
	} else {
		rr__ep_notify_down(ep, status);
	}
	rr__ep_release_if_done(ep);
}

void rr__ep_stop_timer(rr_ep *ep)
{
	rr__poll_close(ep->set->ring, ep->timer_slot);
	ep->timer_slot = RR__NO_SLOT;
}

void rr__ep_down(rr_ep *ep, int status)
{
	if (ep->down_pending) {
		status = ep->down_pending; /* the WC error came first */
		ep->down_pending = 0;
	}
	ep->state = RR__EP_DISCONNECTED;
	rr__ep_notify_down(ep, status);
	rr__ep_release_if_done(ep);
}

int rr_ep_disconnect(rr_ep *ep)
{
	if (!ep || ep->destroy_pending)
		return -EINVAL;
	if (ep->state != RR__EP_CONNECTED)
		return -ENOTCONN;
	/* What this pass holds goes first, as it would have without
	 * coalescing; a refused request's callback may destroy @ep. */
	if (rr__ep_post_held(ep)) {
		rr__ep_release_if_done(ep);
		return -ENOTCONN;
	}
	if (ep->state != RR__EP_CONNECTED)
		return -ENOTCONN;
	if (rdma_disconnect(ep->id))
		return errno ? -errno : -EIO;
	ep->state = RR__EP_DISCONNECTING;
	return 0;
}

void rr__ep_established(rr_ep *ep, void (*accept)(void *ctx, rr_ep *ep), void *ctx)
{
	ep->state = RR__EP_CONNECTED;
	rr__ep_stop_timer(ep);
	ep->in_callback++;
	if (accept)
		accept(ctx, ep);
	else if (ep->on_connect)
		ep->on_connect(ep, 0, ep->data);
	ep->in_callback--;
	rr__ep_release_if_done(ep);
}

/* Complete what is still outstanding; the QP is in error (or gone). */
static void flush_all(rr_ep *ep)
{
	/* Completions already in the CQ are real outcomes: hand them out. */
	rr__ep_drain_cq(ep);
	while (!rr__list_empty(&ep->outstanding))
		rr__ep_complete(ep, rr__container_of(ep->outstanding.next, struct rr__req, link),
				NULL);
}

static void destroy_qp(rr_ep *ep)
{
	if (!ep->qp)
		return;
	ibv_destroy_qp(ep->qp);
	ep->qp = NULL;
	rr__device_unclaim(&ep->qp_claim); /* after: see rr__device_unclaim() */
}

static void ep_finish(rr_ep *ep);

static void linger_timeout(void *ctx, int res)
{
	rr_ep *ep = ctx;

	(void)res;
	ep->timer_slot = RR__NO_SLOT;
	rr__ep_linger_end(ep);
}

/*
 * A QP on an SRQ may have taken receives whose completions are not in the
 * CQ yet; mlx5 and mlx4 would drop them with the QP (and give the SRQ back
 * their slots, unknown to us). It stays in error until the device says it
 * took its last receive (IBV_EVENT_QP_LAST_WQE_REACHED) or LAST_WQE_WAIT_MS
 * passed, its receives completing meanwhile with no endpoint.
 */
static bool linger_start(rr_ep *ep)
{
	if (!ep->qp || !ep->srq || ep->last_wqe || ep->set->closing ||
	    rr__timer_add(ep->set->ring, LAST_WQE_WAIT_MS, linger_timeout, ep, &ep->timer_slot))
		return false;
	ep->lingering = true;
	rr__list_add_tail(&ep->set->lingering, &ep->link);
	return true;
}

void rr__ep_linger_end(rr_ep *ep)
{
	rr__ep_stop_timer(ep);
	rr__list_del(&ep->link);
	ep->in_callback++;
	rr__ep_drain_cq(ep); /* still lingering: with no endpoint */
	ep->lingering = false;
	destroy_qp(ep);
	ep->in_callback--;
	ep_finish(ep);
}

int rr_ep_destroy(rr_ep *ep)
{
	if (!ep || ep->destroy_pending)
		return 0;
	ep->destroy_pending = true;
	/* A receive its lingering QP took completes later: the SRQ's, with
	 * no endpoint, never the accept that this destroy ends. */
	ep->on_early_recv = NULL;
	rr__ep_stop_timer(ep);
	ep->in_callback++; /* keep it alive through the flush callbacks */
	rr__list_del(&ep->link);
	rr__list_del(&ep->pending_link);
	ep->on_drop = NULL;
	rr__ep_drop_held(ep); /* never posted: the flush completes them */
	/* Error first, drain, destroy last: mlx5 and mlx4 purge a QP's
	 * CQEs when it is destroyed, so a SEND that succeeded would be
	 * reported flushed (SPDK's nvmf transport does the same). */
	rr__ep_fail_qp(ep);
	flush_all(ep);
	if (ep->srq && !--ep->srq->users && ep->srq->counted) {
		ep->srq->counted->need -= (int)ep->srq->max_wr;
		ep->srq->counted = NULL;
	}
	if (ep->id) {
		/* Its rdma_cm events end here; a lingering QP needs none. */
		ep->id->qp = NULL;
		rdma_destroy_id(ep->id);
		ep->id = NULL;
	}
	if (ep->counter)
		atomic_fetch_sub(ep->counter, 1);
	ep->counter = NULL;
	ep->in_callback--;
	if (linger_start(ep))
		return 0;
	destroy_qp(ep);
	ep_finish(ep);
	return 0;
}

/* The rest of a destroy, once the QP is gone. */
static void ep_finish(rr_ep *ep)
{
	ep->in_callback++;
	ep->srq = NULL;
	if (ep->shared) {
		rr__qpmap_del(&ep->set->qps, ep);
		rr__shcq_leave(ep);
	} else if (ep->cq) {
		rr_cq_destroy(ep->cq);
		rr__device_unclaim(&ep->cq_claim);
	}
	ep->cq = NULL;
	if (ep->own_pd)
		ibv_dealloc_pd(ep->own_pd); /* EBUSY while MRs of it are left */
	ep->own_pd = NULL;
	if (ep->dev) {
		struct rr__device *dev = ep->dev;

		ep->dev = NULL;
		rr__device_put(dev);
	}
	ep->in_callback--;
	rr__ep_release_if_done(ep);
}

void *rr_ep_data(const rr_ep *ep)
{
	return ep->data;
}

void rr_ep_set_data(rr_ep *ep, void *data)
{
	ep->data = data;
	ep->data_set = true;
}

void rr_ep_set_on_disconnect(rr_ep *ep, rr_ep_cb on_disconnect)
{
	ep->on_disconnect = on_disconnect;
}

void rr__ep_set_peer_pdata(rr_ep *ep, const void *data, size_t len)
{
	if (len > sizeof(ep->peer_pdata))
		len = sizeof(ep->peer_pdata);
	if (len)
		memcpy(ep->peer_pdata, data, len);
	ep->peer_pdata_len = (uint8_t)len;
}

int rr__ep_request(rr_ep *ep, rr_request_cb hook, rr_listener *l, void *data)
{
	int rc;

	ep->in_callback++;
	rc = hook(l, ep, ep->peer_pdata_len ? ep->peer_pdata : NULL, ep->peer_pdata_len, data);
	ep->in_callback--;
	if (ep->destroy_pending) {
		rr__ep_release_if_done(ep);
		return -1;
	}
	return rc ? 1 : 0;
}

int rr_ep_peer_private_data(rr_ep *ep, const void **data)
{
	if (!ep || !data)
		return -EINVAL;
	*data = ep->peer_pdata_len ? ep->peer_pdata : NULL;
	return ep->peer_pdata_len;
}

int rr_ep_set_private_data(rr_ep *ep, const void *data, size_t len)
{
	if (!ep || (len && !data) || len > RR_PRIVATE_DATA_REJECT_MAX ||
	    ep->state != RR__EP_ACCEPTING || ep->pdata_sent)
		return -EINVAL;
	if (len)
		memcpy(ep->pdata, data, len);
	ep->pdata_len = (uint8_t)len;
	ep->pdata_set = true;
	return 0;
}

struct rdma_cm_id *rr_ep_cm_id(rr_ep *ep)
{
	return ep->id;
}

struct ibv_qp *rr_ep_qp(rr_ep *ep)
{
	return ep->destroy_pending ? NULL : ep->qp;
}

rr_cq *rr_ep_cq(rr_ep *ep)
{
	return ep->cq;
}

unsigned int rr_ep_outstanding(const rr_ep *ep)
{
	return ep->nsend + ep->nrecv;
}

/* ---- shared receive queues: their receives ---- */
