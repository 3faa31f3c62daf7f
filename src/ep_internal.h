/* SPDX-License-Identifier: MIT */
/*
 * The endpoint layer's own: what its files share among themselves; the
 * layers above include ep.h alone. From the top down, each file calls
 * only those below it:
 *
 *   eps.c           the bridge's endpoints as a whole: teardown, async events
 *   srq.c           shared receive queues
 *   ep_lifecycle.c  the endpoint lifecycle
 *   ep_shared_cq.c  the shared CQ and its QP map
 *   ep_cq.c         completions: each request's one, a CQ's hooks
 *
 * and beside them ep_post.c (posting, and the chains a pass holds) over
 * mr.c (MRs, MWs, the buffer check srq.c uses too).
 */
#ifndef RR_EP_INTERNAL_H
#define RR_EP_INTERNAL_H

#include "ep.h"

/* What an rr__claim of this layer names (claim.kind). */
enum rr__claim_kind { RR__CLAIM_QP = 1, RR__CLAIM_CQ, RR__CLAIM_SHCQ, RR__CLAIM_SRQ };

/* A CQ shared by the bridge's endpoints on one device. */
struct rr__shcq {
	struct rr__list link; /* set->shcqs */
	struct rr__eps *set;
	struct rr__device *dev; /* holds a reference */
	rr_cq *cq;
	unsigned int users;
	int cqe;	       /* its size */
	int need;	       /* the queue depths of its QPs */
	struct rr__list downs; /* endpoints with down_pending */
	struct rr__claim claim;
	unsigned int busy; /* its hook is running: freed after it */
	bool orphan;	   /* no users left: free when not busy */
};

struct rr__req {
	struct rr__list link; /* ep->outstanding or ep->free_reqs (srq's: the srq's) */
	rr_ep *ep;	      /* NULL: a receive of an SRQ */
	rr_req_cb cb;
	void *data;
	bool is_recv;
	bool signalled;		   /* asked for a work completion */
	enum ibv_wc_opcode opcode; /* sends: what its completion reports */
	struct ibv_mw *mw;	   /* a bind: its window takes @mw_rkey once done */
	uint32_t mw_rkey;
	/* Held for its queue's chain: refused there (the provider's errno),
	 * or -ECANCELED for a QP already in error; its one callback says so. */
	int post_err;
	union {
		struct ibv_send_wr send;
		struct ibv_recv_wr recv;
	} wr; /* as posted: chained in a pass until it goes */
	struct ibv_sge sge;
};

/* Append @req to a chain (its slot's work request already built). Inline
 * here: endpoints (ep_post.c) and SRQs (srq.c) chain alike, and neither
 * calls the other for it. */
static inline void rr__chain_add(struct rr__chain *c, struct rr__req *req)
{
	if (!c->last)
		c->first = req;
	else if (req->is_recv)
		c->last->wr.recv.next = &req->wr.recv;
	else
		c->last->wr.send.next = &req->wr.send;
	c->last = req;
	c->n++;
}

/* The first request on outstanding list @l that its chain refused. */
static inline struct rr__req *rr__first_refused(struct rr__list *l)
{
	for (struct rr__list *n = l->next; n != l; n = n->next) {
		struct rr__req *r = rr__container_of(n, struct rr__req, link);

		if (r->post_err)
			return r;
	}
	return NULL;
}

/* A shared receive queue: receives posted once, taken by whichever
 * QP of the bridge on its device receives first. */
struct rr_srq {
	struct rr__eps *set;
	struct rr__device *dev; /* holds a reference */
	struct ibv_srq *srq;
	uint32_t max_wr;
	struct rr__req *reqs;
	struct rr__list free_reqs, outstanding;
	unsigned int users;	  /* endpoints on it */
	struct rr__shcq *counted; /* the shared CQ its depth is counted in */
	unsigned int in_callback;
	bool destroy_pending;
	struct rr__claim claim;
	struct rr__list link;	   /* set->srqs */
	struct rr__chain held;	   /* receives a pass holds */
	struct rr__list held_link; /* set->held_srqs while it holds some */
};

/* ---- ep_cq.c ---- */

/* Free an endpoint once it is destroyed and no callback of it is running. */
bool rr__ep_release_if_done(rr_ep *ep);
void rr__ep_call_cb(rr_ep *ep, rr_ep_cb cb, int status);
/* The one completion of a request: @wc NULL, flushed by the library. */
void rr__ep_complete(rr_ep *ep, struct rr__req *req, const struct ibv_wc *wc);
/* Hand out the work completions of ep's QP not handed out yet. */
void rr__ep_drain_cq(rr_ep *ep);
/* Move the QP to error: work still queued is flushed through the CQ. */
void rr__ep_fail_qp(rr_ep *ep);
/* The hooks of an endpoint's CQ: a work completion, and after a batch. */
void rr__ep_on_wc(rr_cq *cq, const struct ibv_wc *wc, void *data);
void rr__ep_after_dispatch(void *ctx);
/* on_disconnect, once; what completed before the end is reported first. */
void rr__ep_notify_down(rr_ep *ep, int status);
/* The SRQ of @dev not being destroyed, or NULL. */
struct rr_srq *rr__srq_find(struct rr__eps *set, struct rr__device *dev);
/* The outstanding receive of @srq (may be NULL) that @wc names, or NULL. */
struct rr__req *rr__srq_req_of_wc(struct rr_srq *srq, const struct ibv_wc *wc);
bool rr__srq_release_if_done(struct rr_srq *srq);
/* A receive's one completion, for @ep (NULL: none is left to tell). */
void rr__srq_complete(struct rr_srq *srq, struct rr__req *req, rr_ep *ep, const struct ibv_wc *wc);

/* ---- ep_shared_cq.c ---- */

int rr__qpmap_add(struct rr__qpmap *m, rr_ep *ep);
void rr__qpmap_del(struct rr__qpmap *m, rr_ep *ep);
bool rr__shcq_release_if_done(struct rr__shcq *sh);
/* Join the bridge's CQ on ep's device, with @need more entries. */
int rr__shcq_join(rr_ep *ep, int need);
void rr__shcq_leave(rr_ep *ep);

/* ---- ep_lifecycle.c ---- */

/* A destroyed endpoint's QP on an SRQ is done waiting: it goes. */
void rr__ep_linger_end(rr_ep *ep);

/* ---- srq.c ---- */

/* Teardown: destroy every SRQ left (their endpoints are gone). */
void rr__srqs_fini(struct rr__eps *set);
/* Post the receives @srq holds as one chain; those refused complete. */
void rr__srq_post_held(struct rr_srq *srq);

/* ---- ep_post.c ---- */

/* Post what @ep holds; true if a callback of a refused request destroyed
 * it (the caller then ends with rr__ep_release_if_done()). */
bool rr__ep_post_held(rr_ep *ep);
/* Forget what @ep holds (a destroy): the requests stay outstanding and
 * the destroy completes them, never posted. */
void rr__ep_drop_held(rr_ep *ep);

/* ---- mr.c ---- */

/* 0 if [buf, buf + len) lies in @mr, else -EINVAL. */
int rr__mr_check_buf(struct ibv_mr *mr, const void *buf, size_t len);

#endif
