// SPDX-License-Identifier: MIT
/*
 * Posting on an endpoint: SEND, RDMA WRITE (with immediate), RDMA READ,
 * RECV, and binding or invalidating memory windows.
 *
 * Each posted work request takes a slot from the endpoint's request pool
 * (sized to the queue depths, so posting never allocates) and sits on the
 * outstanding list until its one completion.
 */
#include <errno.h>

#include "ep_internal.h"

static void give_back(rr_ep *ep, struct rr__req *req)
{
	req->cb = NULL;
	req->data = NULL;
	rr__list_add_tail(&ep->free_reqs, &req->link);
}

/* After ibv_post_*(): the request is outstanding, or its slot goes back. */
static int settle(rr_ep *ep, struct rr__req *req, int rc)
{
	if (rc) {
		give_back(ep, req);
		return -rc;
	}
	rr__list_add_tail(&ep->outstanding, &req->link);
	if (req->is_recv)
		ep->nrecv++;
	else
		ep->nsend++;
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
	return req;
}

static int can_post_send(rr_ep *ep)
{
	if (ep->destroy_pending || ep->state != RR__EP_CONNECTED)
		return -ENOTCONN;
	if (ep->nsend >= ep->opts.max_send_wr)
		return -ENOBUFS;
	return 0;
}

/* Post @wr on the send queue as one request whose completion is @wc_op. */
static int post_send_req(rr_ep *ep, struct ibv_send_wr *wr, enum ibv_wc_opcode wc_op, rr_req_cb cb,
			 void *data)
{
	struct rr__req *req = take_req(ep, cb, data, false);
	struct ibv_send_wr *bad;

	req->opcode = wc_op;
	if (wr->opcode == IBV_WR_BIND_MW) {
		req->mw = wr->bind_mw.mw;
		req->mw_rkey = wr->bind_mw.rkey;
	}
	/* A completion every signal_every sends; always for the last free
	 * slot of the SQ (unsignalled sends hold theirs until a signalled
	 * one completes) and for READs (their byte_len is real). */
	req->signalled = ep->opts.signal_every <= 1 || wr->opcode == IBV_WR_RDMA_READ ||
			 ++ep->unsignalled >= ep->opts.signal_every ||
			 ep->nsend + 1 >= ep->opts.max_send_wr;
	if (req->signalled) {
		wr->send_flags |= IBV_SEND_SIGNALED;
		ep->unsignalled = 0;
	}
	wr->wr_id = (uintptr_t)req;
	return settle(ep, req, ibv_post_send(ep->qp, wr, &bad));
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
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = mr ? mr->lkey : 0};
	struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
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
	wr.wr_id = (uintptr_t)req;
	return settle(ep, req, ibv_post_recv(ep->qp, &wr, &bad));
}
