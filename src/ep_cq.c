// SPDX-License-Identifier: MIT
/*
 * Completions: each request, an endpoint's or an SRQ receive, completes
 * once, by a work completion from the CQ, or, on teardown, by a flush done
 * by the library itself after the QP is gone and the CQ drained, so a
 * request can never complete twice. And the hooks of an endpoint's CQ: a
 * work completion, and after a batch, on_disconnect for a connection a
 * work completion error took down.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ep_internal.h"

int rr_wc_status_errno(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_WR_FLUSH_ERR:
		return -ECANCELED;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
		return -ETIMEDOUT;
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_ACCESS_ERR:
		return -EACCES;
	case IBV_WC_LOC_LEN_ERR:
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_INV_RD_REQ_ERR:
		return -EINVAL;
	default:
		return -EIO;
	}
}

static void ep_free(rr_ep *ep)
{
	free(ep->reqs);
	free(ep);
}

/* Inline where a work completion is handed out: once per request. */
static inline bool release_if_done(rr_ep *ep)
{
	if (!ep->destroy_pending || ep->in_callback || ep->lingering)
		return false;
	ep_free(ep);
	return true;
}

bool rr__ep_release_if_done(rr_ep *ep)
{
	return release_if_done(ep);
}

void rr__ep_call_cb(rr_ep *ep, rr_ep_cb cb, int status)
{
	if (!cb)
		return;
	ep->in_callback++;
	cb(ep, status, ep->data);
	ep->in_callback--;
}

/* The one completion of a request: its work completion, or none (@wc
 * NULL): refused in its chain (post_err), or flushed by the library. */
static inline void fill_completion(struct rr_completion *c, const struct ibv_wc *wc, int post_err)
{
	/* Most: a success without immediate data. */
	if (wc && wc->status == IBV_WC_SUCCESS && !(wc->wc_flags & IBV_WC_WITH_IMM)) {
		*c = (struct rr_completion){.opcode = wc->opcode, .byte_len = wc->byte_len};
		return;
	}
	memset(c, 0, sizeof(*c));
	if (wc) {
		c->wc_status = wc->status;
		c->status = rr_wc_status_errno(wc->status);
		c->opcode = wc->opcode;
		c->byte_len = wc->byte_len;
		if (wc->wc_flags & IBV_WC_WITH_IMM) {
			c->has_imm = 1;
			c->imm_data = be32toh(wc->imm_data);
		}
	} else if (post_err && post_err != -ECANCELED) {
		c->wc_status = IBV_WC_GENERAL_ERR;
		c->status = post_err;
	} else {
		c->wc_status = IBV_WC_WR_FLUSH_ERR;
		c->status = -ECANCELED;
	}
}

/* Inline where a work completion is handed out: once per request. */
static inline void complete(rr_ep *ep, struct rr__req *req, const struct ibv_wc *wc)
{
	struct rr_completion c;
	rr_req_cb cb = req->cb;
	void *data = req->data;

	fill_completion(&c, wc, req->post_err);
	/* The provider names a type 2 window by the key it holds now: the
	 * next bind must present the key this one gave it. Not once destroy
	 * began: the window may be freed already (rxe needs that first). */
	if (req->mw && !c.status && !ep->destroy_pending)
		req->mw->rkey = req->mw_rkey;
	rr__list_del(&req->link);
	if (req->is_recv)
		ep->nrecv--;
	else
		ep->nsend--;
	req->cb = NULL;
	req->data = NULL;
	rr__list_add_tail(&ep->free_reqs, &req->link);
	ep->in_callback++;
	cb(ep, &c, data);
	ep->in_callback--;
}

void rr__ep_complete(rr_ep *ep, struct rr__req *req, const struct ibv_wc *wc)
{
	complete(ep, req, wc);
}

static struct rr__req *req_of_wc(rr_ep *ep, const struct ibv_wc *wc)
{
	struct rr__req *req = (struct rr__req *)(uintptr_t)wc->wr_id;
	uint32_t n = ep->opts.max_send_wr + ep->opts.max_recv_wr;

	/* Only our own, still outstanding requests. */
	if (!ep->reqs || req < ep->reqs || req >= ep->reqs + n || !req->cb)
		return NULL;
	return req;
}

/*
 * Sends complete in order on an RC QP: a send's work completion means
 * every send posted before it is done too, including those that asked for
 * none. They complete here, in order, each once: successfully if this one
 * did or failed on its own, with -ECANCELED if this one was flushed (no
 * outcome of theirs was seen).
 */
static void complete_unsignalled_before(rr_ep *ep, struct rr__req *req, enum ibv_wc_status status)
{
	struct rr__list *l = ep->outstanding.next;

	while (l != &req->link && l != &ep->outstanding) {
		struct rr__req *r = rr__container_of(l, struct rr__req, link);
		struct ibv_wc wc = {.status = status == IBV_WC_WR_FLUSH_ERR ? IBV_WC_WR_FLUSH_ERR
									    : IBV_WC_SUCCESS};

		l = l->next;
		if (r->is_recv || r->signalled || r->post_err)
			continue; /* a refused one never reached the SQ */
		wc.opcode = r->opcode;
		rr__ep_complete(ep, r, &wc);
		/* Destroyed from that callback: the destroy completed the rest. */
		if (ep->destroy_pending)
			return;
	}
}

/* One work completion taken out of the CQ outside its dispatch. */
static void drained_wc(void *ctx, const struct ibv_wc *wc)
{
	rr_ep *ep = ctx;
	struct rr__req *req = req_of_wc(ep, wc);

	if (!req) {
		req = rr__srq_req_of_wc(ep->srq, wc);
		if (req)
			rr__srq_complete(ep->srq, req, ep->lingering ? NULL : ep, wc);
		return;
	}
	if (!req->is_recv)
		complete_unsignalled_before(ep, req, wc->status);
	if (req->cb) /* not completed by a destroy in there */
		rr__ep_complete(ep, req, wc);
}

/*
 * Hand out the work completions of the endpoint's QP not handed out yet,
 * in order: those left in a batch a dispatch of the CQ is handing out (a
 * callback in it destroyed this endpoint), then those still in the CQ; on
 * a shared CQ, only this QP's. A callback may destroy the endpoint, or
 * another one on the same CQ (its take then finds a consistent CQ): the
 * destroy completes the rest, and completions it handled are no longer
 * outstanding here.
 */
void rr__ep_drain_cq(rr_ep *ep)
{
	if (ep->cq)
		rr__cq_take_qp(ep->cq, ep->qp_num, drained_wc, ep);
}

void rr__ep_fail_qp(rr_ep *ep)
{
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};

	/* Work still queued is flushed back through the CQ. */
	if (ep->qp)
		ibv_modify_qp(ep->qp, &attr, IBV_QP_STATE);
}

void rr__ep_on_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	rr_ep *ep = data;
	struct rr__req *req = req_of_wc(ep, wc);

	if (!req)
		req = rr__srq_req_of_wc(ep->srq, wc);
	if (!req)
		return;
	/* A receive before ESTABLISHED: the peer is connected and sending,
	 * so the connection manager establishes the endpoint first (its
	 * on_accept), and the receive's callback may answer. */
	if (ep->on_early_recv && req->is_recv && wc->status == IBV_WC_SUCCESS &&
	    ep->state == RR__EP_ACCEPTING) {
		void (*hook)(rr_ep *) = ep->on_early_recv;
		struct rr_srq *srq = ep->srq;

		ep->on_early_recv = NULL;
		ep->in_callback++;
		/* on_accept may destroy the endpoint and then its SRQ, as any
		 * callback may: the SRQ and the receive stay until we are out. */
		if (srq)
			srq->in_callback++;
		hook(ep);
		ep->in_callback--;
		if (srq)
			srq->in_callback--;
		if (ep->destroy_pending && !ep->lingering) {
			/* Destroyed in on_accept: its own receive was
			 * completed by the destroy; an SRQ's is the SRQ's
			 * (cancelled already if the SRQ went too). */
			if (req->cb)
				rr__srq_complete(srq, req, NULL, wc);
			else if (srq)
				rr__srq_release_if_done(srq);
			rr__ep_release_if_done(ep);
			return;
		}
	}
	if (ep->lingering) {
		/* Its application is gone: the receive is the SRQ's alone. */
		rr__srq_complete(ep->srq, req, NULL, wc);
		return;
	}
	/* The first outstanding request has none before it. */
	if (!req->is_recv && ep->outstanding.next != &req->link)
		complete_unsignalled_before(ep, req, wc->status);
	if (ep->destroy_pending) {
		/* Destroyed from one of those callbacks: req completed there. */
		rr__ep_release_if_done(ep);
		return;
	}
	/* A transport error (retries exhausted, remote access...) leaves the
	 * QP in error: the endpoint is no longer connected. on_disconnect
	 * follows once this batch is handed out (see rr__ep_after_dispatch). */
	if (wc->status != IBV_WC_SUCCESS && wc->status != IBV_WC_WR_FLUSH_ERR &&
	    (ep->state == RR__EP_CONNECTED || ep->state == RR__EP_DISCONNECTING)) {
		ep->state = RR__EP_ERROR;
		ep->down_pending = rr_wc_status_errno(wc->status);
		if (ep->shared)
			rr__list_add_tail(&ep->shared->downs, &ep->down_link);
		rr__ep_fail_qp(ep);
	}
	if (req->ep)
		complete(ep, req, wc);
	else
		rr__srq_complete(ep->srq, req, ep, wc);
	release_if_done(ep);
}

/* The CQ's hook: runs after a dispatch of the endpoint's completions. */
void rr__ep_after_dispatch(void *ctx)
{
	rr_ep *ep = ctx;
	int status = ep->down_pending;

	if (!status || ep->destroy_pending)
		return;
	ep->down_pending = 0;
	rr__ep_notify_down(ep, status);
	rr__ep_release_if_done(ep);
}

/* on_disconnect, once; what completed before the end is reported first. */
void rr__ep_notify_down(rr_ep *ep, int status)
{
	if (ep->notified_down)
		return;
	ep->notified_down = true;
	ep->in_callback++;
	rr__ep_drain_cq(ep);
	ep->in_callback--;
	if (ep->destroy_pending)
		return; /* destroyed by a request callback: no more callbacks */
	rr__ep_call_cb(ep, ep->on_disconnect, status);
}

struct rr_srq *rr__srq_find(struct rr__eps *set, struct rr__device *dev)
{
	for (struct rr__list *l = set->srqs.next; l != &set->srqs; l = l->next) {
		struct rr_srq *srq = rr__container_of(l, struct rr_srq, link);

		if (srq->dev == dev && !srq->destroy_pending)
			return srq;
	}
	return NULL;
}

struct rr__req *rr__srq_req_of_wc(struct rr_srq *srq, const struct ibv_wc *wc)
{
	struct rr__req *req = (struct rr__req *)(uintptr_t)wc->wr_id;

	if (!srq || req < srq->reqs || req >= srq->reqs + srq->max_wr || !req->cb)
		return NULL;
	return req;
}

static void srq_free(struct rr_srq *srq)
{
	free(srq->reqs);
	free(srq);
}

/* Free a destroyed SRQ once its flush is over and no callback of it runs. */
bool rr__srq_release_if_done(struct rr_srq *srq)
{
	if (!srq->destroy_pending || srq->in_callback || srq->srq)
		return false;
	srq_free(srq);
	return true;
}

void rr__srq_complete(struct rr_srq *srq, struct rr__req *req, rr_ep *ep, const struct ibv_wc *wc)
{
	struct rr_completion c;
	rr_req_cb cb = req->cb;
	void *data = req->data;

	fill_completion(&c, wc, req->post_err);
	rr__list_del(&req->link);
	req->cb = NULL;
	req->data = NULL;
	rr__list_add_tail(&srq->free_reqs, &req->link);
	srq->in_callback++;
	if (ep)
		ep->in_callback++;
	cb(ep, &c, data);
	if (ep)
		ep->in_callback--;
	srq->in_callback--;
	rr__srq_release_if_done(srq); /* destroyed from that callback */
}
