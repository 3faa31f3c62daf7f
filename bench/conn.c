// SPDX-License-Identifier: MIT
/*
 * The same rdma_cm connections for every strategy: one PD, one CQ shared by
 * every connection's RC QP, one registered buffer with each connection's
 * receive and send slots. Only the CQ differs: no channel (busy), a
 * blocking or an epoll-ed channel (thread, epoll), or a CQ of the ringrdma
 * bridge (uring, hybrid).
 *
 * The -ep strategies' client connects the library's endpoints instead
 * (rr_connect(), RR_EP_SHARED_CQ: still one CQ per side) and posts through
 * them, so what one pass of the bridge posts on a queue goes out as one
 * chain; their completions reach the same handlers as a struct ibv_wc. The
 * server side of those is groups.c's.
 *
 * The client's first connection request carries the run's configuration,
 * so a server on another host sets itself up the same way; every request
 * and reply carries the address and rkey of its side's receive slots.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "bench.h"
#include "cmsync.h"

#define CM_TIMEOUT_MS 10000
#define SPARE_SLOTS   64 /* server: places for half-made connections */
#define CONNECT_TRIES 6	 /* client: a connection after the first */

static int wait_cm(struct bside *s, enum rdma_cm_event_type want, struct cmsync_event *ev)
{
	char err[160];
	int rc = cmsync_wait(s->ec, want, -1, ev, err, sizeof(err));

	if (rc && rc != -ECONNREFUSED) /* refused: the server is not up yet */
		fprintf(stderr, "ringrdma-bench: %s\n", err);
	return rc;
}

/* The hello an event carried, or NULL. */
static const struct hello *hello_of(const struct cmsync_event *ev)
{
	return ev->priv_len >= sizeof(struct hello) ? (const struct hello *)ev->priv : NULL;
}

/* A single-thread side waits on its ring only in rr_bridge_run_once()
 * (side_step()), so its CQs may stay unarmed between passes. */
static unsigned int bridge_flags(const struct bside *s)
{
	return RR_BRIDGE_LOOP_WAITS | (s->cfg.ring_read ? RR_BRIDGE_RING_READ : 0);
}

/* A fresh side: an event channel and nothing else yet. */
static int side_init(struct bside *s, const struct bench_cfg *cfg)
{
	memset(s, 0, sizeof(*s));
	if (cfg)
		s->cfg = *cfg;
	s->epfd = -1;
	s->ec = rdma_create_event_channel();
	return s->ec ? 0 : (errno ? -errno : -ENODEV);
}

static void on_bridge_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	struct bside *s = data;

	side_counts.wcs++;
	s->on_wc(s, wc);
}

/* io_uring for the bridge: the cheapest task_work mode the kernel has,
 * with TASKRUN_FLAG so a spinning pass enters the kernel only when the
 * kernel has completions to run (RR_BENCH_RING_FLAGS: these flags only). */
int bench_ring_init(struct io_uring *ring, unsigned int *flags)
{
	static const unsigned int tries[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
		IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG, 0};
	const char *env = getenv("RR_BENCH_RING_FLAGS");
	int rc = -EINVAL;

	for (unsigned int i = 0; i < 3; i++) {
		unsigned int fl = env ? (unsigned int)strtoul(env, NULL, 0) : tries[i];

		rc = io_uring_queue_init(256, ring, fl);
		if (!rc) {
			if (flags)
				*flags = fl;
			return 0;
		}
		if (env)
			break;
	}
	return rc;
}

static int ring_init(struct bside *s)
{
	int rc = bench_ring_init(&s->ring, &s->ring_flags);

	s->ring_ready = !rc;
	return rc;
}

static int make_cq(struct bside *s, struct ibv_context *ctx)
{
	int n = (int)(s->cfg.conns * (4 * s->cfg.qd + 4)), fl;
	struct epoll_event ev = {.events = EPOLLIN};
	struct ibv_device_attr da;

	/* Many connections: as large as the device allows (the run has at
	 * most conns * qd messages in flight besides their completions). */
	if (!ibv_query_device(ctx, &da) && da.max_cqe > 0 && n > da.max_cqe)
		n = da.max_cqe;

	switch (s->cfg.strat) {
	case S_BUSY:
		s->cq = ibv_create_cq(ctx, n, NULL, NULL, 0);
		break;
	case S_THREAD:
	case S_EPOLL:
	case S_EPOLL_AIO:
	case S_HYBRID_PLAIN:
		s->ch = ibv_create_comp_channel(ctx);
		if (!s->ch)
			return -errno;
		s->cq = ibv_create_cq(ctx, n, NULL, s->ch, 0);
		if (!s->cq)
			return -EIO;
		/* hybrid-plain arms only before it blocks */
		if (s->cfg.strat != S_HYBRID_PLAIN && ibv_req_notify_cq(s->cq, 0))
			return -EIO;
		if (s->cfg.strat == S_EPOLL || s->cfg.strat == S_EPOLL_AIO) {
			fl = fcntl(s->ch->fd, F_GETFL);
			if (fcntl(s->ch->fd, F_SETFL, fl | O_NONBLOCK))
				return -errno;
			s->epfd = epoll_create1(0);
			if (s->epfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->ch->fd, &ev))
				return -errno;
		}
		break;
	case S_URING:
	case S_HYBRID: {
		struct rr_cq_opts co = {.cqe = n,
					.on_wc = on_bridge_wc,
					.data = s,
					.mode = strategy_mode(&s->cfg),
					.spin_us = s->cfg.spin_us};
		struct rr_bridge_opts bo = {
			.on_app_cqe = filer_on_cqe, .data = s, .flags = bridge_flags(s)};
		int rc = ring_init(s);

		if (!rc)
			rc = rr_bridge_create(&s->b, &s->ring, &bo, sizeof(bo));
		if (!rc)
			rc = rr_cq_create(s->b, NULL, ctx, &co, sizeof(co), &s->rcq);
		if (rc)
			return rc;
		s->cq = rr_cq_ibv(s->rcq);
		break;
	}
	default:
		return -EINVAL;
	}
	return s->cq ? 0 : -EIO;
}

/* @nslots places of @per slots each in one zeroed buffer, and their
 * QP records. */
static int alloc_slots(struct bside *s, uint32_t nslots, uint32_t per)
{
	s->slot_sz = s->cfg.msg_size < BENCH_MIN_SLOT ? BENCH_MIN_SLOT : s->cfg.msg_size;
	s->nslots = nslots;
	s->buf_len = (size_t)s->nslots * per * s->slot_sz;
	s->buf = aligned_alloc(4096, (s->buf_len + 4095) & ~(size_t)4095);
	s->qps = calloc(s->nslots, sizeof(*s->qps));
	if (!s->buf || !s->qps)
		return -ENOMEM;
	memset(s->buf, 0, s->buf_len);
	return 0;
}

/* PD, CQ and buffer, once, on the first connection's device. */
static int make_shared(struct bside *s, struct ibv_context *ctx)
{
	uint32_t per = (2 * s->cfg.qd + 1) + (s->cfg.qd + 1);
	int rc;

	s->pd = ibv_alloc_pd(ctx);
	if (!s->pd)
		return -errno;
	rc = make_cq(s, ctx);
	if (rc)
		return rc;
	/* A server keeps spare places for connections a client gave up on
	 * half-way (a storm's timeouts) and made again. */
	rc = alloc_slots(s, s->cfg.conns + (s->listen_id ? SPARE_SLOTS : 0), per);
	if (rc)
		return rc;
	s->mr = ibv_reg_mr(s->pd, s->buf, s->buf_len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	return s->mr ? 0 : -errno;
}

/* The QP of a new connection in the first free place (from s->nqp on, or
 * one a half-made connection left), with every receive posted before the
 * connection is requested or accepted: the peer's first message finds one.
 * Its place in *at. */
static int make_qp(struct bside *s, struct rdma_cm_id *id, uint32_t *at)
{
	struct ibv_qp_init_attr attr = {0};
	uint32_t per = (2 * s->cfg.qd + 1) + (s->cfg.qd + 1), k;
	struct bqp *q;
	int rc = 0;

	if (!s->pd) {
		rc = make_shared(s, id->verbs);
		if (rc)
			return rc;
	}
	if (id->verbs != s->pd->context)
		return -EXDEV; /* every connection must be on one device */
	for (k = 0; k < s->nqp && s->qps[k].id; k++)
		;
	if (k == s->nslots)
		return -ENOSPC;
	attr.send_cq = attr.recv_cq = s->cq;
	attr.qp_type = IBV_QPT_RC;
	/* Unsignalled sends keep their SQ slot until a later signalled one
	 * completes: room for up to two runs of them besides the window. */
	attr.sq_sig_all = s->cfg.signal_every <= 1;
	attr.cap.max_send_wr = 2 * s->cfg.qd + 2 + 2 * s->cfg.signal_every;
	attr.cap.max_recv_wr = 2 * s->cfg.qd + 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, s->pd, &attr))
		return -errno;
	q = &s->qps[k];
	memset(q, 0, sizeof(*q));
	q->id = id;
	q->recv = s->buf + (size_t)k * per * s->slot_sz;
	q->send = q->recv + (size_t)(2 * s->cfg.qd + 1) * s->slot_sz;
	if (k == s->nqp)
		s->nqp++;
	*at = k;
	for (uint32_t i = 0; !rc && i < 2 * s->cfg.qd + 1; i++)
		rc = side_post_recv(s, k, i);
	return rc;
}

/* Undo connection k, made or half-made: its place is free again. */
static void drop_qp(struct bside *s, uint32_t k)
{
	struct rdma_cm_id *id = s->qps[k].id;

	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
	s->qps[k].id = NULL;
	s->qps[k].up = false;
	while (s->nqp && !s->qps[s->nqp - 1].id)
		s->nqp--;
}

static int slot_of(const struct bside *s, const struct rdma_cm_id *id)
{
	for (uint32_t k = 0; k < s->nqp; k++)
		if (s->qps[k].id == id)
			return (int)k;
	return -1;
}

static void hello_fill(struct hello *h, const struct bside *s, uint32_t conn)
{
	memset(h, 0, sizeof(*h));
	h->magic = HELLO_MAGIC;
	h->strat = (uint8_t)s->cfg.strat;
	h->wl = (uint8_t)s->cfg.wl;
	h->op = (uint8_t)s->cfg.op;
	h->qd = (uint16_t)s->cfg.qd;
	h->conns = (uint16_t)(s->cfg.all_conns ? s->cfg.all_conns : s->cfg.conns);
	h->msg_size = s->cfg.msg_size;
	h->iters = (uint32_t)(s->cfg.all_iters ? s->cfg.all_iters : s->cfg.iters);
	h->idle_ms = s->cfg.idle_ms;
	h->spin_us = s->cfg.spin_us;
	h->spin_fixed = s->cfg.spin_fixed;
	h->ring_read = s->cfg.ring_read;
	h->signal_every = (uint8_t)s->cfg.signal_every;
	h->timeout_s = s->cfg.timeout_s;
	h->flags = (s->cfg.count_pass ? HELLO_COUNT : 0) | (s->cfg.post_now ? HELLO_POST_NOW : 0);
	h->conn = conn;
	h->rkey = s->mr ? s->mr->rkey : 0;
	h->addr = conn < s->nqp ? (uintptr_t)s->qps[conn].recv : 0;
}

/* A hello from the network: refuse what this side cannot set up. */
static int hello_cfg(const struct hello *h, struct bench_cfg *cfg)
{
	if (!h || h->magic != HELLO_MAGIC || h->strat >= S_COUNT || h->wl >= W_COUNT ||
	    h->op >= OP_COUNT || !h->qd || h->qd > BENCH_MAX_QD || !h->conns ||
	    h->conns > BENCH_MAX_CONNS || h->msg_size < sizeof(struct msg_hdr) ||
	    h->msg_size > BENCH_MAX_MSG)
		return -EPROTO;
	cfg->strat = (enum strategy)h->strat;
	cfg->wl = (enum workload)h->wl;
	cfg->op = (enum op)h->op;
	cfg->qd = h->qd;
	cfg->conns = h->conns;
	cfg->msg_size = h->msg_size;
	cfg->iters = h->iters;
	cfg->idle_ms = h->idle_ms;
	cfg->spin_us = h->spin_us ? h->spin_us : 200;
	cfg->spin_fixed = h->spin_fixed != 0;
	cfg->ring_read = h->ring_read != 0;
	cfg->signal_every = h->signal_every ? h->signal_every : 1;
	cfg->timeout_s = h->timeout_s;
	cfg->count_pass = h->flags & HELLO_COUNT;
	cfg->post_now = h->flags & HELLO_POST_NOW;
	return 0;
}

int hello_parse(const void *pdata, size_t len, struct bench_cfg *cfg, uint64_t *raddr,
		uint32_t *rkey)
{
	struct hello h;

	if (!pdata || len < sizeof(h))
		return -EPROTO;
	memcpy(&h, pdata, sizeof(h));
	if (hello_cfg(&h, cfg))
		return -EPROTO;
	*raddr = h.addr;
	*rkey = h.rkey;
	return 0;
}

size_t hello_answer(void *out, size_t max, const struct bench_cfg *cfg, uint32_t conn,
		    uint64_t addr, uint32_t rkey)
{
	struct bside s;
	struct hello h;

	if (max < sizeof(h))
		return 0;
	memset(&s, 0, sizeof(s));
	s.cfg = *cfg;
	hello_fill(&h, &s, conn);
	h.addr = addr;
	h.rkey = rkey;
	memcpy(out, &h, sizeof(h));
	return sizeof(h);
}

static int lookup(const char *addr, uint16_t port, int passive, struct rdma_addrinfo **ai)
{
	char err[160];
	int rc = cmsync_lookup(addr, port, passive, ai, err, sizeof(err));

	if (rc)
		fprintf(stderr, "ringrdma-bench: %s\n", err);
	return rc;
}

int side_listen(struct bside *s, const char *addr, uint16_t port, uint16_t *bound)
{
	struct rdma_addrinfo *ai;
	int rc = side_init(s, NULL);

	if (rc)
		return rc;
	if (rdma_create_id(s->ec, &s->listen_id, NULL, RDMA_PS_TCP))
		return -errno;
	rc = lookup(addr, port, 1, &ai);
	if (rc)
		return rc;
	rc = rdma_bind_addr(s->listen_id, ai->ai_src_addr) ? -errno : 0;
	rdma_freeaddrinfo(ai);
	if (rc || rdma_listen(s->listen_id, BENCH_MAX_CONNS))
		return rc ? rc : -errno;
	*bound = be16toh(rdma_get_src_port(s->listen_id));
	s->listening = true;
	return 0;
}

/* Accept the client's connections; the first one says what to run. A
 * connection the client gives up on half-way (it timed out waiting for our
 * answer in a storm and will ask again) is dropped and its place reused:
 * the run goes on once cfg->conns are established. */
int side_accept(struct bside *s, struct bench_cfg *cfg, unsigned int timeout_s)
{
	struct rdma_conn_param p = {
		.responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7};
	struct cmsync_event ev;
	uint32_t up = 0, k;
	struct hello h;
	char err[160];
	int rc, at;

	while (!s->nqp || up < s->cfg.conns) {
		memset(&ev, 0, sizeof(ev));
		rc = cmsync_wait(s->ec, RDMA_CM_EVENT_CONNECT_REQUEST, -1, &ev, err, sizeof(err));
		if (rc && !ev.id) {
			fprintf(stderr, "ringrdma-bench: %s\n", err);
			return rc;
		}
		if (rc) {
			at = slot_of(s, ev.id);
			if (ev.type == RDMA_CM_EVENT_ESTABLISHED && at >= 0 && !s->qps[at].up) {
				s->qps[at].up = true;
				up++;
				continue;
			}
			/* A half-made connection that failed: the client
			 * asks again. One established that goes: the run
			 * is over. */
			if (at >= 0 && !s->qps[at].up &&
			    (ev.type == RDMA_CM_EVENT_REJECTED ||
			     ev.type == RDMA_CM_EVENT_CONNECT_ERROR ||
			     ev.type == RDMA_CM_EVENT_UNREACHABLE ||
			     ev.type == RDMA_CM_EVENT_DISCONNECTED)) {
				fprintf(stderr,
					"ringrdma-bench: connection %d given up half-way (%s, "
					"status "
					"%d): dropped\n",
					at, rdma_event_str(ev.type), ev.status);
				drop_qp(s, (uint32_t)at);
				s->half_made++;
				continue;
			}
			fprintf(stderr, "ringrdma-bench: %s\n", err);
			return rc;
		}
		if (s->nqp == 0 && !s->pd) {
			rc = hello_cfg(hello_of(&ev), cfg);
			/* Endpoints are set up before the first request, from
			 * the run the caller knows: not here. */
			if (!rc && strategy_ep(cfg->strat)) {
				fprintf(stderr,
					"ringrdma-bench: %s runs only locally, "
					"not against --server\n",
					strategy_name(cfg->strat));
				rc = -EPROTO;
			}
			if (rc) {
				rdma_reject(ev.id, NULL, 0);
				rdma_destroy_id(ev.id);
				return rc;
			}
			cfg->addr = s->cfg.addr;
			s->cfg = *cfg;
			/* Counting: the syscall key flips now, while the
			 * client waits for the answer, not mid-traffic. */
			count_syscalls = cfg->count_pass;
			if (cfg->count_pass)
				syscalls_hold(true);
			/* A server whose client vanished must not wait forever. */
			if (timeout_s && cfg->timeout_s)
				alarm(cfg->timeout_s + cfg->idle_ms / 1000);
		} else if (!hello_of(&ev)) {
			rdma_reject(ev.id, NULL, 0);
			rdma_destroy_id(ev.id);
			return -EPROTO;
		}
		memcpy(&h, hello_of(&ev), sizeof(h));
		rc = make_qp(s, ev.id, &k);
		if (rc) {
			at = slot_of(s, ev.id);
			if (at >= 0) {
				drop_qp(s, (uint32_t)at);
			} else {
				rdma_reject(ev.id, NULL, 0);
				rdma_destroy_id(ev.id);
			}
			return rc;
		}
		s->qps[k].raddr = h.addr;
		s->qps[k].rkey = h.rkey;
		hello_fill(&h, s, k);
		p.private_data = &h;
		p.private_data_len = sizeof(h);
		if (rdma_accept(ev.id, &p)) {
			/* The request went stale while we set up (the client
			 * gave up on it): it asks again. */
			fprintf(stderr, "ringrdma-bench: rdma_accept: %s: dropped\n",
				strerror(errno));
			drop_qp(s, k);
			s->half_made++;
		}
	}
	return 0;
}

static int connect_one(struct bside *s, struct rdma_addrinfo *ai)
{
	struct rdma_conn_param p = {.responder_resources = 1,
				    .initiator_depth = 1,
				    .retry_count = 7,
				    .rnr_retry_count = 7};
	struct cmsync_event ev;
	struct rdma_cm_id *id;
	struct hello h;
	uint32_t k = UINT32_MAX;
	int rc;

	if (rdma_create_id(s->ec, &id, NULL, RDMA_PS_TCP))
		return -errno;
	rc = rdma_resolve_addr(id, NULL, ai->ai_dst_addr, CM_TIMEOUT_MS) ? -errno : 0;
	if (!rc)
		rc = wait_cm(s, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	if (!rc && rdma_resolve_route(id, CM_TIMEOUT_MS))
		rc = -errno;
	if (!rc)
		rc = wait_cm(s, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
	if (!rc)
		rc = make_qp(s, id, &k);
	if (!rc) {
		hello_fill(&h, s, k);
		p.private_data = &h;
		p.private_data_len = sizeof(h);
		if (rdma_connect(id, &p))
			rc = -errno;
	}
	if (!rc)
		rc = wait_cm(s, RDMA_CM_EVENT_ESTABLISHED, &ev);
	if (!rc && !hello_of(&ev))
		rc = -EPROTO;
	if (!rc) {
		memcpy(&h, hello_of(&ev), sizeof(h));
		s->qps[k].raddr = h.addr;
		s->qps[k].rkey = h.rkey;
		s->qps[k].up = true;
		return 0;
	}
	/* Undone, so that it can be asked again. */
	if (k != UINT32_MAX) {
		drop_qp(s, k);
	} else {
		if (id->qp)
			rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}
	return rc;
}

/* -ep strategies: a request's completion, handed to the side as the raw
 * strategies' work completion (wr_id rides in the request's data). A
 * connection not up (failed half-way, or being closed) has no say. */
static void ep_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct bside *s = rr_ep_data(ep);
	struct ibv_wc wc = {.wr_id = (uintptr_t)data,
			    .status = !c->status		       ? IBV_WC_SUCCESS
				      : c->wc_status != IBV_WC_SUCCESS ? c->wc_status
								       : IBV_WC_GENERAL_ERR,
			    .opcode = c->opcode,
			    .byte_len = c->byte_len};
	uint32_t conn = wr_conn(wc.wr_id);

	if (conn >= s->nqp || !s->qps[conn].up)
		return;
	if (c->has_imm) {
		wc.wc_flags = IBV_WC_WITH_IMM;
		wc.imm_data = htobe32(c->imm_data);
	}
	s->on_wc(s, &wc);
}

static uint32_t ep_index(const struct bside *s, const rr_ep *ep)
{
	uint32_t k = 0;

	while (k < s->nqp && s->qps[k].ep != ep)
		k++;
	return k;
}

/* Its receives, before the connection is requested. */
static void ep_ready(rr_ep *ep, int status, void *data)
{
	struct bside *s = data;
	uint32_t k = ep_index(s, ep);
	int rc = status;

	for (uint32_t i = 0; !rc && i < 2 * s->cfg.qd + 1; i++)
		rc = side_post_recv(s, k, i);
	if (rc)
		s->conn_err = rc;
}

static void ep_connected(rr_ep *ep, int status, void *data)
{
	struct bside *s = data;
	struct bqp *q = &s->qps[ep_index(s, ep)];
	const void *pd = NULL;
	struct hello h;

	s->connecting--;
	if (!status && s->conn_err)
		status = s->conn_err;
	if (!status && rr_ep_peer_private_data(ep, &pd) < (int)sizeof(h))
		status = -EPROTO;
	if (status) {
		s->conn_err = status;
		return;
	}
	memcpy(&h, pd, sizeof(h));
	q->raddr = h.addr;
	q->rkey = h.rkey;
	q->up = true;
}

static void ep_down(rr_ep *ep, int status, void *data)
{
	struct bside *s = data;

	(void)ep;
	if (!s->done && !s->err)
		s->err = status ? status : -ECONNRESET;
}

/* The MR must be in the PD of the device the route leads to, which the
 * library knows once an endpoint's route is resolved; and each connection
 * request carries the rkey. So a first endpoint goes as far as its QP,
 * registers the buffer and is destroyed before it asks anything of the
 * server. (The bridge keeps the device, and so the PD, while it lives.) */
struct probe {
	struct bside *s;
	bool gone; /* destroyed in its on_qp_ready */
};

static void ep_probe_ready(rr_ep *ep, int status, void *data)
{
	struct probe *p = data;
	struct bside *s = p->s;
	int rc = status;

	if (!rc)
		rc = rr_ep_reg_mr(ep, s->buf, s->buf_len, IBV_ACCESS_REMOTE_WRITE, &s->mr);
	s->conn_err = rc;
	s->connecting--;
	p->gone = true;
	rr_ep_destroy(ep);
}

static void ep_probe_failed(rr_ep *ep, int status, void *data)
{
	struct probe *p = data;

	(void)ep;
	p->s->conn_err = status ? status : -EPROTO;
	p->s->connecting--;
}

/* Run the bridge until every rr_connect() made is answered. */
static int ep_settle(struct bside *s)
{
	while (s->connecting) {
		int rc = rr_bridge_run_once(s->b, 100);

		if (rc < 0 && rc != -EINTR)
			return rc;
	}
	return 0;
}

static int ep_probe(struct bside *s)
{
	struct probe p = {.s = s};
	struct rr_ep_opts o = {
		.on_qp_ready = ep_probe_ready, .data = &p, .connect_timeout_ms = CM_TIMEOUT_MS};
	rr_ep *ep;
	int rc;

	s->conn_err = 0;
	rc = rr_connect(s->b, s->cfg.addr, s->cfg.port, &o, sizeof(o), ep_probe_failed, &ep);
	if (rc)
		return rc;
	s->connecting = 1;
	rc = ep_settle(s);
	if (!p.gone)
		rr_ep_destroy(ep); /* failed before its QP, or the loop did */
	return rc ? rc : s->conn_err;
}

/* The next connection through an endpoint, its hello in the request. */
static int ep_connect_one(struct bside *s)
{
	uint32_t k = s->nqp;
	const struct bench_cfg *c = &s->cfg;
	struct hello h;
	struct rr_ep_opts o = {.max_send_wr = 2 * c->qd + 2 + c->signal_every,
			       .max_recv_wr = 2 * c->qd + 2,
			       .mode = strategy_mode(c),
			       .spin_us = c->spin_us,
			       .signal_every = c->signal_every,
			       .connect_timeout_ms = CM_TIMEOUT_MS,
			       .on_qp_ready = ep_ready,
			       .on_disconnect = ep_down,
			       .data = s,
			       .private_data = &h,
			       .private_data_len = sizeof(h),
			       .flags = RR_EP_SHARED_CQ | (c->post_now ? RR_EP_POST_NOW : 0)};
	struct bqp *q = &s->qps[k];
	int rc;

	s->nqp = k + 1;
	hello_fill(&h, s, k);
	s->conn_err = 0;
	rc = rr_connect(s->b, c->addr, c->port, &o, sizeof(o), ep_connected, &q->ep);
	if (rc) {
		q->ep = NULL;
		s->nqp = k;
		return rc;
	}
	s->connecting = 1;
	rc = ep_settle(s);
	if (!rc)
		rc = s->conn_err;
	if (rc) {
		rr_ep_destroy(q->ep); /* its receives go unheard: not up */
		q->ep = NULL;
		s->nqp = k;
	}
	return rc;
}

/* The -ep strategies' side: a bridge, the buffer, then the connections. */
static int ep_side_init(struct bside *s)
{
	struct rr_bridge_opts bo = {
		.on_app_cqe = filer_on_cqe, .data = s, .flags = bridge_flags(s)};
	uint32_t per = (2 * s->cfg.qd + 1) + (s->cfg.qd + 1);
	int rc = ring_init(s);

	if (!rc)
		rc = rr_bridge_create(&s->b, &s->ring, &bo, sizeof(bo));
	if (rc)
		return rc;
	rc = alloc_slots(s, s->cfg.conns, per);
	if (rc)
		return rc;
	for (uint32_t k = 0; k < s->nslots; k++) {
		s->qps[k].recv = s->buf + (size_t)k * per * s->slot_sz;
		s->qps[k].send = s->qps[k].recv + (size_t)(2 * s->cfg.qd + 1) * s->slot_sz;
	}
	return 0;
}

/* Failures a client meets when the server or the fabric is busy, not
 * when it refuses: the request timed out (UNREACHABLE), the server's
 * backlog was full or it was still starting (REJECTED), the answer came
 * too late (CONNECT_ERROR). Real clients try again after a while. */
static bool worth_retrying(int rc)
{
	return rc == -EHOSTUNREACH || rc == -ETIMEDOUT || rc == -ECONNREFUSED ||
	       rc == -ECONNABORTED || rc == -ECONNRESET;
}

/* Connect cfg->conns times. A server starting up refuses (or, on a host
 * still booting, cannot be reached) for a moment, so the first connection
 * is tried for up to retry_s seconds; every later one CONNECT_TRIES times,
 * with a doubling, jittered backoff, so a connection storm (many clients
 * at once) costs retries, not the run. */
int side_connect(struct bside *s, const struct bench_cfg *cfg, unsigned int retry_s)
{
	struct rdma_addrinfo *ai = NULL;
	double until = now_us() + retry_s * 1e6;
	unsigned int seed = (unsigned int)getpid() ^ (unsigned int)now_us();
	int rc = side_init(s, cfg);

	if (rc)
		return rc;
	if (strategy_ep(cfg->strat)) {
		rc = ep_side_init(s);
		if (!rc)
			rc = ep_probe(s);
	} else {
		rc = lookup(cfg->addr, cfg->port, 0, &ai);
	}
	if (rc)
		return rc;
	while (!rc && s->nqp < cfg->conns) {
		bool first = s->nqp == 0;

		for (unsigned int tries = 0;; tries++) {
			rc = ai ? connect_one(s, ai) : ep_connect_one(s);
			if (!rc || rc == -ENOMEM)
				break;
			if (first && now_us() < until) {
				usleep(100000);
				continue;
			}
			if (first || !worth_retrying(rc) || tries + 1 >= CONNECT_TRIES)
				break;
			/* 50 ms, 100, 200...: up to 1.6 s, +-50% */
			usleep((50000u << tries) / 2 +
			       (unsigned int)rand_r(&seed) % (50000u << tries));
			s->retries++;
		}
	}
	if (ai)
		rdma_freeaddrinfo(ai);
	return rc;
}

uint8_t *side_recv_slot(struct bside *s, uint32_t conn, uint32_t idx)
{
	return s->qps[conn].recv + (size_t)idx * s->slot_sz;
}

uint8_t *side_send_slot(struct bside *s, uint32_t conn, uint32_t idx)
{
	return s->qps[conn].send + (size_t)idx * s->slot_sz;
}

/* A raw post: one request, one ibv_post_send()/_recv(). */
static int raw_posted(int rc)
{
	if (!rc) {
		side_counts.posts++;
		side_counts.chains++;
		side_counts.wrs++;
	}
	return rc;
}

int side_post_recv(struct bside *s, uint32_t conn, uint32_t idx)
{
	struct ibv_sge sge = {.addr = (uintptr_t)side_recv_slot(s, conn, idx),
			      .length = (uint32_t)s->slot_sz,
			      .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id_of(conn, WR_RECV, idx),
				 .sg_list = &sge,
				 .num_sge = 1},
			   *bad;

	if (side_trace)
		side_trace->recvs++;
	if (s->qps[conn].ep)
		return rr_ep_post_recv(s->qps[conn].ep, side_recv_slot(s, conn, idx),
				       (uint32_t)s->slot_sz, s->mr, ep_done,
				       (void *)(uintptr_t)wr.wr_id);
	return raw_posted(-ibv_post_recv(s->qps[conn].id->qp, &wr, &bad));
}

int side_post(struct bside *s, uint32_t conn, uint64_t wr_id, const uint8_t *buf, uint32_t len,
	      int write_slot)
{
	struct bqp *q = &s->qps[conn];
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND},
			   *bad;

	/* Nothing waits for a message's own completion (the echo says it
	 * arrived), so only one send in signal_every asks for one; control
	 * messages always do. */
	if (wr_kind(wr_id) != WR_MSG || ++q->unsignalled >= s->cfg.signal_every) {
		wr.send_flags = IBV_SEND_SIGNALED;
		q->unsignalled = 0;
	}
	if (write_slot >= 0) {
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.imm_data = htobe32((uint32_t)write_slot);
		wr.wr.rdma.remote_addr = q->raddr + (uint64_t)write_slot * s->slot_sz;
		wr.wr.rdma.rkey = q->rkey;
	}
	if (side_trace)
		side_trace->sends++;
	if (q->ep) {
		/* Signalling is the endpoint's (signal_every, and the last
		 * request of every chain). */
		if (write_slot >= 0)
			return rr_ep_post_write_imm(q->ep, buf, len, s->mr, wr.wr.rdma.remote_addr,
						    q->rkey, (uint32_t)write_slot, ep_done,
						    (void *)(uintptr_t)wr_id);
		return rr_ep_post_send(q->ep, buf, len, s->mr, ep_done, (void *)(uintptr_t)wr_id);
	}
	return raw_posted(-ibv_post_send(q->id->qp, &wr, &bad));
}

void side_close(struct bside *s)
{
	for (uint32_t i = 0; i < s->nqp; i++) {
		if (s->qps[i].ep) {
			/* Its requests' cancellations are nobody's concern now. */
			s->qps[i].up = false;
			rr_ep_destroy(s->qps[i].ep);
			s->qps[i].ep = NULL;
		}
		if (!s->qps[i].id)
			continue;
		rdma_disconnect(s->qps[i].id);
		rdma_destroy_qp(s->qps[i].id);
	}
	if (s->mr)
		ibv_dereg_mr(s->mr);
	free(s->buf);
	if (s->b) {
		if (s->rcq)
			rr_cq_destroy(s->rcq);
		rr_bridge_destroy(s->b);
	} else if (s->cq) {
		if (s->unacked)
			ibv_ack_cq_events(s->cq, s->unacked);
		ibv_destroy_cq(s->cq);
	}
	if (s->ring_ready)
		io_uring_queue_exit(&s->ring);
	if (s->epfd >= 0)
		close(s->epfd);
	if (s->ch)
		ibv_destroy_comp_channel(s->ch);
	if (s->pd)
		ibv_dealloc_pd(s->pd);
	for (uint32_t i = 0; i < s->nqp; i++)
		if (s->qps[i].id)
			rdma_destroy_id(s->qps[i].id);
	free(s->qps);
	if (s->listen_id)
		rdma_destroy_id(s->listen_id);
	if (s->ec)
		rdma_destroy_event_channel(s->ec);
	memset(s, 0, sizeof(*s));
	s->epfd = -1;
}
