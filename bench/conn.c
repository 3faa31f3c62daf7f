// SPDX-License-Identifier: MIT
/*
 * The same rdma_cm connection for every strategy: PD, CQ, RC QP, a buffer
 * of 2 * BENCH_MAX_QD message slots (receives first). Only the CQ differs:
 * no channel (busy), a blocking or an epoll-ed channel (thread, epoll), or
 * a CQ of the ringrdma bridge (uring, hybrid).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "bench.h"

#define CM_TIMEOUT_MS 10000

static int wait_cm(struct bconn *c, enum rdma_cm_event_type want, struct rdma_cm_id **id)
{
	struct rdma_cm_event *ev;
	enum rdma_cm_event_type got;

	if (rdma_get_cm_event(c->ec, &ev))
		return -errno;
	got = ev->event;
	if (id)
		*id = ev->id;
	rdma_ack_cm_event(ev);
	if (got != want) {
		fprintf(stderr, "ringrdma-bench: expected %s, got %s\n", rdma_event_str(want),
			rdma_event_str(got));
		return got == RDMA_CM_EVENT_REJECTED ? -ECONNREFUSED : -EPROTO;
	}
	return 0;
}

static void on_bridge_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	struct bconn *c = data;

	if (c->fifo_n < sizeof(c->fifo) / sizeof(c->fifo[0]))
		c->fifo[c->fifo_n++] = *wc;
}

static int make_cq(struct bconn *c, struct ibv_context *ctx)
{
	int n = BENCH_MAX_QD * 2, fl;
	struct epoll_event ev = {.events = EPOLLIN};

	switch (c->cfg.strat) {
	case S_BUSY:
		c->cq = ibv_create_cq(ctx, n, NULL, NULL, 0);
		break;
	case S_THREAD:
	case S_EPOLL:
		c->ch = ibv_create_comp_channel(ctx);
		if (!c->ch)
			return -errno;
		c->cq = ibv_create_cq(ctx, n, NULL, c->ch, 0);
		if (!c->cq || ibv_req_notify_cq(c->cq, 0))
			return -EIO;
		if (c->cfg.strat == S_EPOLL) {
			fl = fcntl(c->ch->fd, F_GETFL);
			if (fcntl(c->ch->fd, F_SETFL, fl | O_NONBLOCK))
				return -errno;
			c->epfd = epoll_create1(0);
			if (c->epfd < 0 || epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->ch->fd, &ev))
				return -errno;
		}
		break;
	case S_URING:
	case S_HYBRID: {
		struct rr_cq_opts co = {.cqe = n, .on_wc = on_bridge_wc, .data = c,
					.mode = c->cfg.strat == S_URING ? RR_WAIT_EVENT : RR_WAIT_HYBRID,
					.spin_us = c->cfg.spin_us};
		int rc = io_uring_queue_init(64, &c->ring, 0);

		if (rc)
			return rc;
		rc = rr_bridge_create(&c->b, &c->ring, NULL);
		if (!rc)
			rc = rr_cq_create(c->b, NULL, ctx, &co, &c->rcq);
		if (rc)
			return rc;
		c->cq = rr_cq_ibv(c->rcq);
		break;
	}
	default:
		return -EINVAL;
	}
	return c->cq ? 0 : -EIO;
}

static int make_qp(struct bconn *c, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr = {0};
	size_t len = (size_t)2 * BENCH_MAX_QD * c->cfg.msg_size;
	int rc;

	c->pd = ibv_alloc_pd(id->verbs);
	if (!c->pd)
		return -errno;
	rc = make_cq(c, id->verbs);
	if (rc)
		return rc;
	attr.send_cq = attr.recv_cq = c->cq;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	attr.cap.max_send_wr = attr.cap.max_recv_wr = BENCH_MAX_QD;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, c->pd, &attr))
		return -errno;
	c->buf = calloc(1, len);
	if (!c->buf)
		return -ENOMEM;
	c->mr = ibv_reg_mr(c->pd, c->buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		return -errno;
	/* Every receive is posted before the connection is requested or
	 * accepted, so the peer's first SEND always finds one. */
	for (uint32_t i = 0; !rc && i < BENCH_MAX_QD; i++)
		rc = bconn_post_recv(c, i);
	return rc;
}

static int lookup(const char *addr, uint16_t port, int passive, struct rdma_addrinfo **ai)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP};
	char ps[8];

	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	snprintf(ps, sizeof(ps), "%u", port);
	return rdma_getaddrinfo(addr, ps, &hints, ai) ? -EINVAL : 0;
}

/* Both sides start alike: a clean bconn, an event channel, one cm_id. */
static int start(struct bconn *c, const struct bench_cfg *cfg, struct rdma_cm_id **id)
{
	memset(c, 0, sizeof(*c));
	c->cfg = *cfg;
	c->epfd = -1;
	c->ec = rdma_create_event_channel();
	if (!c->ec || rdma_create_id(c->ec, id, NULL, RDMA_PS_TCP))
		return errno ? -errno : -ENODEV;
	return 0;
}

int bconn_listen(struct bconn *c, const struct bench_cfg *cfg, uint16_t *port)
{
	struct rdma_addrinfo *ai;
	int rc = start(c, cfg, &c->listen_id);

	if (rc)
		return rc;
	rc = lookup(cfg->addr, cfg->port, 1, &ai);
	if (rc)
		return rc;
	rc = rdma_bind_addr(c->listen_id, ai->ai_src_addr) ? -errno : 0;
	rdma_freeaddrinfo(ai);
	if (rc || rdma_listen(c->listen_id, 4))
		return rc ? rc : -errno;
	*port = be16toh(rdma_get_src_port(c->listen_id));
	return 0;
}

int bconn_accept(struct bconn *c)
{
	struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1,
				    .rnr_retry_count = 7};
	int rc = wait_cm(c, RDMA_CM_EVENT_CONNECT_REQUEST, &c->id);

	if (!rc)
		rc = make_qp(c, c->id);
	if (!rc && rdma_accept(c->id, &p))
		rc = -errno;
	return rc ? rc : wait_cm(c, RDMA_CM_EVENT_ESTABLISHED, NULL);
}

int bconn_connect(struct bconn *c, const struct bench_cfg *cfg)
{
	struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1,
				    .retry_count = 7, .rnr_retry_count = 7};
	struct rdma_addrinfo *ai;
	int rc = start(c, cfg, &c->id);

	if (rc)
		return rc;
	rc = lookup(cfg->addr, cfg->port, 0, &ai);
	if (rc)
		return rc;
	rc = rdma_resolve_addr(c->id, NULL, ai->ai_dst_addr, CM_TIMEOUT_MS) ? -errno : 0;
	rdma_freeaddrinfo(ai);
	if (!rc)
		rc = wait_cm(c, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	if (!rc && rdma_resolve_route(c->id, CM_TIMEOUT_MS))
		rc = -errno;
	if (!rc)
		rc = wait_cm(c, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
	if (!rc)
		rc = make_qp(c, c->id);
	if (!rc && rdma_connect(c->id, &p))
		rc = -errno;
	return rc ? rc : wait_cm(c, RDMA_CM_EVENT_ESTABLISHED, NULL);
}

int bconn_post_recv(struct bconn *c, uint32_t slot)
{
	struct ibv_sge sge = {.addr = (uintptr_t)c->buf + (uintptr_t)slot * c->cfg.msg_size,
			      .length = c->cfg.msg_size, .lkey = c->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;

	return -ibv_post_recv(c->id->qp, &wr, &bad);
}

int bconn_post_send(struct bconn *c, uint32_t slot, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)c->buf +
				      (uintptr_t)(BENCH_MAX_QD + slot) * c->cfg.msg_size,
			      .length = len, .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = BENCH_MAX_QD + slot, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND}, *bad;

	return -ibv_post_send(c->id->qp, &wr, &bad);
}

void bconn_close(struct bconn *c)
{
	if (c->id && c->id->qp) {
		rdma_disconnect(c->id);
		rdma_destroy_qp(c->id);
	}
	if (c->mr)
		ibv_dereg_mr(c->mr);
	free(c->buf);
	if (c->b) {
		rr_cq_destroy(c->rcq);
		rr_bridge_destroy(c->b);
		io_uring_queue_exit(&c->ring);
	} else if (c->cq) {
		if (c->unacked)
			ibv_ack_cq_events(c->cq, c->unacked);
		ibv_destroy_cq(c->cq);
	}
	if (c->epfd >= 0)
		close(c->epfd);
	if (c->ch)
		ibv_destroy_comp_channel(c->ch);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->listen_id)
		rdma_destroy_id(c->listen_id);
	if (c->ec)
		rdma_destroy_event_channel(c->ec);
}
