// SPDX-License-Identifier: MIT
/*
 * Posting on an endpoint: SEND, RDMA WRITE (with immediate), RDMA READ,
 * RECV, and binding or invalidating memory windows.
 *
 * Each posted work request takes a slot from the endpoint's request pool
 * (sized to the queue depths, so posting never allocates) and sits on the
 * outstanding list until its one completion.
 *
 * Coalescing: while a pass of the bridge is on (its callbacks run), a
 * post is checked, counted and accepted at once, but its work request
 * waits in its slot, chained behind the others of its queue; when the
 * pass ends, or before the loop waits, each chain goes with one
 * ibv_post_*() call, in posting order. On mlx5 (post_send_db() runs
 * once per call) a send chain costs one barrier, one doorbell record
 * update and one 8-byte doorbell write instead of one each per request
 * (BlueFlame, which copies a lone inline WQE into the device's page,
 * serves only chains of one); receives cost one doorbell record update
 * per chain. On rxe a chain is one system call instead of one per
 * request.
 */
#include <errno.h>

#include "ep_internal.h"

static void give_back(rr_ep *ep, struct rr__req *req)
{
	req->cb = NULL;
	req->data = NULL;
	rr__list_add_tail(&ep->free_reqs, &req->link);
}

/* The errno of a failed ibv_post_*(): providers return a positive one. */
static int post_errno(int rc)
{
	return rc > 0 ? -rc : -EIO;
}

static void count_chain(struct rr__eps *set, unsigned int n)
{
	set->stats->chains++;
	set->stats->wrs += n;
}

/* After ibv_post_*() (rc), or for a request held (rc 0): the request is
 * outstanding, or its slot goes back. */
static int settle(rr_ep *ep, struct rr__req *req, int rc)
{
	if (rc) {
		give_back(ep, req);
		return post_errno(rc);
	}
	rr__list_add_tail(&ep->outstanding, &req->link);
	if (req->is_recv)
		ep->nrecv++;
	else
		ep->nsend++;
	ep->set->stats->posts++;
	return 0;
}

static struct rr__req *take_req(rr_ep *ep, rr_req_cb cb, void *data, bool is_recv)
{
	struct rr__req *req = rr__container_of(ep->free_reqs.next, struct rr__req, link);

	rr__list_del(&req->link);
	req->cb = cb;
	req->data = data;
	req->is_recv = is_recv;
	req->mw = NULL;
	req->post_err = 0;
	return req;
}

/* Are @ep's posts held for the pass's chains? */
static bool holds(const rr_ep *ep)
{
	return ep->set->holding && !(ep->opts.flags & RR_EP_POST_NOW);
}

static void hold(rr_ep *ep, struct rr__chain *c, struct rr__req *req)
{
	rr__chain_add(c, req);
	if (rr__list_empty(&ep->held_link)) {
		rr__list_add_tail(&ep->set->held_eps, &ep->held_link);
		ep->set->any_held = true;
	}
}

static int can_post_send(rr_ep *ep)
{
	if (ep->destroy_pending || ep->state != RR__EP_CONNECTED)
		return -ENOTCONN;
	if (ep->nsend >= ep->opts.max_send_wr)
		return -ENOBUFS;
	return 0;
}

/* Post @wr on the send queue as one request whose completion is @wc_op:
 * at once, or held for the pass's chain. */
static int post_send_req(rr_ep *ep, const struct ibv_send_wr *wr, enum ibv_wc_opcode wc_op,
			 rr_req_cb cb, void *data)
{
	struct rr__req *req = take_req(ep, cb, data, false);
	struct ibv_send_wr *w = &req->wr.send, *bad;
	bool held = holds(ep);
	int rc;

	*w = *wr;
	if (wr->num_sge) {
		req->sge = *wr->sg_list;
		w->sg_list = &req->sge;
	}
	w->next = NULL;
	w->wr_id = (uintptr_t)req;
	req->opcode = wc_op;
	if (wr->opcode == IBV_WR_BIND_MW) {
		req->mw = wr->bind_mw.mw;
		req->mw_rkey = wr->bind_mw.rkey;
	}
	/* A completion for the last request of every chain (one posted at
	 * once is a chain of one: see post_sq_chain()), every signal_every
	 * sends in between, for the last free slot of the SQ (unsignalled
	 * sends hold theirs until a signalled one completes) and for READs
	 * (their byte_len is real). */
	req->signalled = !held || ep->opts.signal_every <= 1 || wr->opcode == IBV_WR_RDMA_READ ||
			 ++ep->unsignalled >= ep->opts.signal_every ||
			 ep->nsend + 1 >= ep->opts.max_send_wr;
	if (req->signalled) {
		w->send_flags |= IBV_SEND_SIGNALED;
		ep->unsignalled = 0;
	}
	if (held) {
		hold(ep, &ep->held_sq, req);
		return settle(ep, req, 0);
	}
	rc = ibv_post_send(ep->qp, w, &bad);
	if (!rc) /* refused: no request taken, nothing to count */
		count_chain(ep->set, 1);
	return settle(ep, req, rc);
}

/* SEND, RDMA WRITE (with immediate), RDMA READ. */
static int post_send_wr(rr_ep *ep, enum ibv_wr_opcode opcode, const void *buf, uint32_t len,
			struct ibv_mr *mr, uint64_t raddr, uint32_t rkey, uint32_t imm,
			rr_req_cb cb, void *data)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = mr ? mr->lkey : 0};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = opcode};
	int rc;

	if (!ep || !cb)
		return -EINVAL;
	rc = rr__mr_check_buf(mr, buf, len);
	if (!rc)
		rc = can_post_send(ep);
	if (rc)
		return rc;
	if (opcode != IBV_WR_SEND) {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr.imm_data = htobe32(imm);
	if (ep->opts.max_inline && len <= ep->opts.max_inline && opcode != IBV_WR_RDMA_READ)
		wr.send_flags |= IBV_SEND_INLINE;
	return post_send_req(ep, &wr,
			     opcode == IBV_WR_SEND	  ? IBV_WC_SEND
			     : opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ
							  : IBV_WC_RDMA_WRITE,
			     cb, data);
}

int rr_ep_post_bind_mw(rr_ep *ep, struct ibv_mw *mw, uint32_t rkey, struct ibv_mr *mr, void *addr,
		       size_t len, int access, rr_req_cb cb, void *data)
{
	struct ibv_send_wr wr = {.opcode = IBV_WR_BIND_MW};
	int rc;

	if (!ep || !mw || !cb || !len ||
	    (access &
	     ~(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)))
		return -EINVAL;
	/* The key's index part names the window; only its low byte may change. */
	if ((rkey ^ mw->rkey) & ~0xffu)
		return -EINVAL;
	rc = rr__mr_check_buf(mr, addr, len);
	if (!rc)
		rc = can_post_send(ep);
	if (rc)
		return rc;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = (unsigned int)access;
	return post_send_req(ep, &wr, IBV_WC_BIND_MW, cb, data);
}

int rr_ep_post_local_inv(rr_ep *ep, uint32_t rkey, rr_req_cb cb, void *data)
{
	struct ibv_send_wr wr = {.opcode = IBV_WR_LOCAL_INV, .invalidate_rkey = rkey};
	int rc;

	if (!ep || !cb)
		return -EINVAL;
	rc = can_post_send(ep);
	if (rc)
		return rc;
	return post_send_req(ep, &wr, IBV_WC_LOCAL_INV, cb, data);
}

int rr_ep_post_send(rr_ep *ep, const void *buf, uint32_t len, struct ibv_mr *mr, rr_req_cb cb,
		    void *data)
{
	return post_send_wr(ep, IBV_WR_SEND, buf, len, mr, 0, 0, 0, cb, data);
}

int rr_ep_post_write(rr_ep *ep, const void *buf, uint32_t len, struct ibv_mr *mr, uint64_t raddr,
		     uint32_t rkey, rr_req_cb cb, void *data)
{
	return post_send_wr(ep, IBV_WR_RDMA_WRITE, buf, len, mr, raddr, rkey, 0, cb, data);
}

int rr_ep_post_write_imm(rr_ep *ep, const void *buf, uint32_t len, struct ibv_mr *mr,
			 uint64_t raddr, uint32_t rkey, uint32_t imm, rr_req_cb cb, void *data)
{
	return post_send_wr(ep, IBV_WR_RDMA_WRITE_WITH_IMM, buf, len, mr, raddr, rkey, imm, cb,
			    data);
}

int rr_ep_post_read(rr_ep *ep, void *buf, uint32_t len, struct ibv_mr *mr, uint64_t raddr,
		    uint32_t rkey, rr_req_cb cb, void *data)
{
	return post_send_wr(ep, IBV_WR_RDMA_READ, buf, len, mr, raddr, rkey, 0, cb, data);
}

int rr_ep_post_recv(rr_ep *ep, void *buf, uint32_t len, struct ibv_mr *mr, rr_req_cb cb, void *data)
{
	struct ibv_recv_wr *bad;
	struct rr__req *req;
	int rc;

	if (!ep || !cb || ep->srq)
		return -EINVAL;
	rc = rr__mr_check_buf(mr, buf, len);
	if (rc)
		return rc;
	if (ep->destroy_pending || !ep->qp || ep->state == RR__EP_ERROR ||
	    ep->state == RR__EP_DISCONNECTED)
		return -ENOTCONN;
	if (ep->nrecv >= ep->opts.max_recv_wr)
		return -ENOBUFS;
	req = take_req(ep, cb, data, true);
	req->sge =
		(struct ibv_sge){.addr = (uintptr_t)buf, .length = len, .lkey = mr ? mr->lkey : 0};
	req->wr.recv =
		(struct ibv_recv_wr){.wr_id = (uintptr_t)req, .sg_list = &req->sge, .num_sge = 1};
	if (holds(ep)) {
		hold(ep, &ep->held_rq, req);
		return settle(ep, req, 0);
	}
	rc = ibv_post_recv(ep->qp, &req->wr.recv, &bad);
	if (!rc)
		count_chain(ep->set, 1);
	return settle(ep, req, rc);
}

/* ---- the chains a pass holds ---- */

static struct rr__req *req_of_send(struct ibv_send_wr *wr)
{
	return rr__container_of(wr, struct rr__req, wr.send);
}

static struct rr__req *req_of_recv(struct ibv_recv_wr *wr)
{
	return rr__container_of(wr, struct rr__req, wr.recv);
}

/*
 * Post a send chain. Its last request asks for a completion, so no send
 * of it waits for a later post to learn its outcome (a clean hang-up
 * then cancels nothing the peer acknowledged). Returns whether some were
 * refused: those from the one the provider names on get its errno (all,
 * with -ECANCELED, for a QP already in error: they were never posted).
 */
static bool post_sq_chain(rr_ep *ep, struct rr__chain *c, bool dead)
{
	struct ibv_send_wr *first = &c->first->wr.send, *bad = first, *prev = NULL;
	int err = -ECANCELED;

	if (!dead) {
		int rc;

		if (!c->last->signalled) {
			c->last->signalled = true;
			c->last->wr.send.send_flags |= IBV_SEND_SIGNALED;
		}
		ep->unsignalled = 0;
		rc = ibv_post_send(ep->qp, first, &bad);
		count_chain(ep->set, c->n);
		if (!rc)
			return false;
		err = post_errno(rc);
		if (!bad)
			bad = first;
	}
	for (struct ibv_send_wr *w = first; w != bad; w = w->next)
		prev = w;
	/* What went ends unsignalled: the next send asks for a completion. */
	if (prev && !req_of_send(prev)->signalled)
		ep->unsignalled = ep->opts.signal_every;
	for (struct ibv_send_wr *w = bad; w; w = w->next)
		req_of_send(w)->post_err = err;
	return true;
}

static bool post_rq_chain(rr_ep *ep, struct rr__chain *c, bool dead)
{
	struct ibv_recv_wr *bad = &c->first->wr.recv;
	int err = -ECANCELED;

	if (!dead) {
		int rc = ibv_post_recv(ep->qp, bad, &bad);

		count_chain(ep->set, c->n);
		if (!rc)
			return false;
		err = post_errno(rc);
		if (!bad)
			bad = &c->first->wr.recv;
	}
	for (struct ibv_recv_wr *w = bad; w; w = w->next)
		req_of_recv(w)->post_err = err;
	return true;
}

/* The first outstanding request of @l marked refused, or NULL. */
/*
 * Post what @ep holds: receives first (the answer to a send must find
 * them), then sends. Requests refused complete now, each once with its
 * errno, in posting order; a callback that destroys @ep leaves the rest
 * to the destroy, which gives them the same. Returns whether @ep was
 * destroyed (it is then freed by rr__ep_release_if_done()).
 */
bool rr__ep_post_held(rr_ep *ep)
{
	struct rr__chain rq = ep->held_rq, sq = ep->held_sq;
	bool dead = !ep->qp || ep->state == RR__EP_ERROR || ep->state == RR__EP_DISCONNECTED;
	bool refused = false;
	struct rr__req *r;

	rr__ep_drop_held(ep);
	if (rq.first)
		refused |= post_rq_chain(ep, &rq, dead);
	if (sq.first)
		refused |= post_sq_chain(ep, &sq, dead);
	if (!refused)
		return false;
	ep->in_callback++;
	while (!ep->destroy_pending && (r = rr__first_refused(&ep->outstanding)))
		rr__ep_complete(ep, r, NULL);
	ep->in_callback--;
	return ep->destroy_pending;
}

void rr__ep_drop_held(rr_ep *ep)
{
	ep->held_rq = ep->held_sq = (struct rr__chain){0};
	rr__list_del(&ep->held_link);
}

void rr__eps_posts_init(struct rr__eps *set, struct rr_bridge_stats *stats)
{
	set->stats = stats;
	set->holding = 0;
	rr__list_init(&set->held_eps);
	rr__list_init(&set->held_srqs);
	set->any_held = false;
}

/* SRQs first: their receives serve every endpoint. A callback of a
 * refused request may post again (held anew while a pass is on) or
 * destroy anything: take the first of each list every time. */
void rr__eps_post_all_held(struct rr__eps *set)
{
	for (;;) {
		if (!rr__list_empty(&set->held_srqs)) {
			rr__srq_post_held(
				rr__container_of(set->held_srqs.next, struct rr_srq, held_link));
		} else if (!rr__list_empty(&set->held_eps)) {
			rr_ep *ep = rr__container_of(set->held_eps.next, rr_ep, held_link);

			if (rr__ep_post_held(ep))
				rr__ep_release_if_done(ep);
		} else {
			set->any_held = false;
			break;
		}
	}
}
