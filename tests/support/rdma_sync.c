// SPDX-License-Identifier: MIT
/* Blocking rdma_cm + verbs helpers; see rdma_sync.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmsync.h"
#include "rdma_sync.h"

static int fail(struct rs_conn *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return err < 0 ? err : -EIO;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

const char *rs_test_addr(void)
{
	const char *a = getenv("RR_TEST_ADDR");

	if (!a || !*a)
		a = getenv("RDMA_LAB_ADDR");
	return a && *a ? a : NULL;
}

void rs_init(struct rs_conn *c, uint32_t qp_depth, int use_events)
{
	memset(c, 0, sizeof(*c));
	c->qp_depth = qp_depth ? qp_depth : 16;
	c->use_events = use_events;
}

/* Wait for the next CM event of the expected type. */
static int wait_cm(struct rs_conn *c, enum rdma_cm_event_type want, int timeout_ms,
		   struct rdma_cm_id **id_out)
{
	struct cmsync_event ev;
	int rc = cmsync_wait(c->ec, want, timeout_ms, &ev, c->err, sizeof(c->err));

	if (id_out)
		*id_out = ev.id;
	return rc;
}

static int build_cq(struct rs_conn *c, struct ibv_context *verbs)
{
	c->pd = ibv_alloc_pd(verbs);
	if (!c->pd)
		return fail(c, -errno, "ibv_alloc_pd: %s", strerror(errno));
	if (c->use_events) {
		c->ch = ibv_create_comp_channel(verbs);
		if (!c->ch)
			return fail(c, -errno, "ibv_create_comp_channel: %s", strerror(errno));
		if (set_nonblock(c->ch->fd))
			return fail(c, -errno, "O_NONBLOCK on the completion channel");
	}
	c->cq = ibv_create_cq(verbs, (int)c->qp_depth * 2, c, c->ch, 0);
	if (!c->cq)
		return fail(c, -errno, "ibv_create_cq: %s", strerror(errno));
	if (c->use_events && ibv_req_notify_cq(c->cq, 0))
		return fail(c, -errno, "ibv_req_notify_cq: %s", strerror(errno));
	return 0;
}

static int build_qp(struct rs_conn *c, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr;
	int rc;

	if (!c->pd) {
		rc = build_cq(c, id->verbs);
		if (rc)
			return rc;
	}
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = c->cq;
	attr.recv_cq = c->cq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = c->qp_depth;
	attr.cap.max_recv_wr = c->qp_depth;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.sq_sig_all = 1;
	if (rdma_create_qp(id, c->pd, &attr))
		return fail(c, -errno, "rdma_create_qp: %s", strerror(errno));
	return 0;
}

static int parse_addr(struct rs_conn *c, const char *addr, uint16_t port,
		      struct rdma_addrinfo **res, int passive)
{
	return cmsync_lookup(addr, port, passive, res, c->err, sizeof(c->err));
}

int rs_listen(struct rs_conn *c, const char *addr, uint16_t *port)
{
	struct rdma_addrinfo *ai;
	int rc;

	c->ec = rdma_create_event_channel();
	if (!c->ec)
		return fail(c, -errno, "rdma_create_event_channel: %s", strerror(errno));
	if (rdma_create_id(c->ec, &c->listen_id, c, RDMA_PS_TCP))
		return fail(c, -errno, "rdma_create_id: %s", strerror(errno));
	rc = parse_addr(c, addr, *port, &ai, 1);
	if (rc)
		return rc;
	rc = rdma_bind_addr(c->listen_id, ai->ai_src_addr);
	rdma_freeaddrinfo(ai);
	if (rc)
		return fail(c, -errno, "rdma_bind_addr(%s): %s", addr, strerror(errno));
	if (rdma_listen(c->listen_id, 8))
		return fail(c, -errno, "rdma_listen: %s", strerror(errno));
	*port = be16toh(rdma_get_src_port(c->listen_id));
	return 0;
}

int rs_get_request(struct rs_conn *c, int timeout_ms)
{
	int rc = wait_cm(c, RDMA_CM_EVENT_CONNECT_REQUEST, timeout_ms, &c->id);

	return rc ? rc : build_qp(c, c->id);
}

int rs_accept(struct rs_conn *c, int timeout_ms)
{
	struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1};

	int rc;

	if (rdma_accept(c->id, &p))
		return fail(c, -errno, "rdma_accept: %s", strerror(errno));
	rc = wait_cm(c, RDMA_CM_EVENT_ESTABLISHED, timeout_ms, NULL);
	c->connected = rc == 0;
	return rc;
}

static int resolve(struct rs_conn *c, const char *addr, uint16_t port, int timeout_ms)
{
	struct rdma_addrinfo *ai;
	int rc;

	if (rdma_create_id(c->ec, &c->id, c, RDMA_PS_TCP))
		return fail(c, -errno, "rdma_create_id: %s", strerror(errno));
	rc = parse_addr(c, addr, port, &ai, 0);
	if (rc)
		return rc;
	rc = rdma_resolve_addr(c->id, NULL, ai->ai_dst_addr, timeout_ms);
	rdma_freeaddrinfo(ai);
	if (rc)
		return fail(c, -errno, "rdma_resolve_addr: %s", strerror(errno));
	rc = wait_cm(c, RDMA_CM_EVENT_ADDR_RESOLVED, timeout_ms, NULL);
	if (rc)
		return rc;
	if (rdma_resolve_route(c->id, timeout_ms))
		return fail(c, -errno, "rdma_resolve_route: %s", strerror(errno));
	rc = wait_cm(c, RDMA_CM_EVENT_ROUTE_RESOLVED, timeout_ms, NULL);
	return rc ? rc : build_qp(c, c->id);
}

int rs_resolve(struct rs_conn *c, const char *addr, uint16_t port, int timeout_ms)
{
	c->ec = rdma_create_event_channel();
	if (!c->ec)
		return fail(c, -errno, "rdma_create_event_channel: %s", strerror(errno));
	return resolve(c, addr, port, timeout_ms);
}

/* The server is not listening yet: a rejected QP cannot connect again, so
 * start over on a new id and QP. PD, CQ and MRs stay; the receives posted
 * before connecting are posted again on the new QP. */
static int reopen(struct rs_conn *c, const char *addr, uint16_t port, int timeout_ms)
{
	struct ibv_wc wc;
	int rc;

	rdma_destroy_qp(c->id);
	rdma_destroy_id(c->id);
	c->id = NULL;
	while (ibv_poll_cq(c->cq, 1, &wc) > 0)
		; /* flushed receives of the old QP */
	usleep(200 * 1000);
	rc = resolve(c, addr, port, timeout_ms);
	for (int i = 0; !rc && i < c->npre; i++) {
		struct rs_recv *r = &c->pre[i];
		struct ibv_sge sge = {
			.addr = (uintptr_t)r->buf, .length = r->len, .lkey = r->mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = r->wr_id, .sg_list = &sge, .num_sge = 1}, *bad;

		rc = ibv_post_recv(c->id->qp, &wr, &bad);
		if (rc)
			rc = fail(c, -rc, "ibv_post_recv: %s", strerror(rc));
	}
	return rc;
}

int rs_connect(struct rs_conn *c, const char *addr, uint16_t port, int timeout_ms)
{
	struct rdma_conn_param p = {
		.responder_resources = 1, .initiator_depth = 1, .retry_count = 7};
	long long deadline = now_ms() + timeout_ms;
	int rc;

	for (;;) {
		if (rdma_connect(c->id, &p))
			return fail(c, -errno, "rdma_connect: %s", strerror(errno));
		rc = wait_cm(c, RDMA_CM_EVENT_ESTABLISHED, timeout_ms, NULL);
		if (rc == 0) {
			c->connected = 1;
			c->npre = 0;
			return 0;
		}
		if ((rc != -ECONNREFUSED && rc != -EHOSTUNREACH) || now_ms() > deadline)
			return rc;
		rc = reopen(c, addr, port, timeout_ms);
		if (rc)
			return rc;
	}
}

struct ibv_mr *rs_reg(struct rs_conn *c, void *buf, size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(c->pd, buf, len, access | IBV_ACCESS_LOCAL_WRITE);

	if (!mr)
		fail(c, -errno, "ibv_reg_mr(%zu bytes): %s", len, strerror(errno));
	return mr;
}

int rs_post_recv(struct rs_conn *c, struct ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
	int rc = ibv_post_recv(c->id->qp, &wr, &bad);

	if (rc)
		return fail(c, -rc, "ibv_post_recv: %s", strerror(rc));
	if (!c->connected && c->npre < RS_MAX_PRE)
		c->pre[c->npre++] = (struct rs_recv){mr, buf, len, wr_id};
	return 0;
}

static int post_send(struct rs_conn *c, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int rc = ibv_post_send(c->id->qp, wr, &bad);

	return rc ? fail(c, -rc, "ibv_post_send: %s", strerror(rc)) : 0;
}

int rs_post_send(struct rs_conn *c, struct ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};

	return post_send(c, &wr);
}

int rs_post_write(struct rs_conn *c, struct ibv_mr *mr, void *buf, uint32_t len, uint64_t raddr,
		  uint32_t rkey, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE};

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return post_send(c, &wr);
}

/* Event mode: block on the channel, ack in batches, re-arm, then poll. */
static int wait_event(struct rs_conn *c, int timeout_ms)
{
	struct pollfd pfd = {.fd = c->ch->fd, .events = POLLIN};
	struct ibv_cq *cq;
	void *ctx;
	int n = poll(&pfd, 1, timeout_ms);

	if (n < 0)
		return fail(c, -errno, "poll on the completion channel: %s", strerror(errno));
	if (n == 0)
		return fail(c, -ETIMEDOUT, "timed out waiting for a completion");
	while (ibv_get_cq_event(c->ch, &cq, &ctx) == 0)
		c->unacked++;
	if (errno != EAGAIN)
		return fail(c, -errno, "ibv_get_cq_event: %s", strerror(errno));
	if (c->unacked >= 16) {
		ibv_ack_cq_events(c->cq, c->unacked);
		c->unacked = 0;
	}
	if (ibv_req_notify_cq(c->cq, 0))
		return fail(c, -errno, "ibv_req_notify_cq: %s", strerror(errno));
	return 0;
}

int rs_wait_wc(struct rs_conn *c, struct ibv_wc *wc, int timeout_ms)
{
	long long deadline = now_ms() + timeout_ms;
	int n, rc;

	for (;;) {
		n = ibv_poll_cq(c->cq, 1, wc);
		if (n < 0)
			return fail(c, -EIO, "ibv_poll_cq failed");
		if (n == 1)
			break;
		if (now_ms() > deadline)
			return fail(c, -ETIMEDOUT, "timed out waiting for a completion");
		if (c->use_events) {
			/* Re-armed inside; the loop polls again before sleeping,
			 * so a completion that raced the arm is not missed. */
			rc = wait_event(c, (int)(deadline - now_ms()) + 1);
			if (rc)
				return rc;
		}
	}
	if (wc->status != IBV_WC_SUCCESS)
		return fail(c, -EIO, "work completion %llu failed: %s (%d)",
			    (unsigned long long)wc->wr_id, ibv_wc_status_str(wc->status),
			    wc->status);
	return 0;
}

void rs_close(struct rs_conn *c)
{
	if (c->connected && rdma_disconnect(c->id) == 0)
		wait_cm(c, RDMA_CM_EVENT_DISCONNECTED, 2000, NULL);
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->cq) {
		if (c->unacked)
			ibv_ack_cq_events(c->cq, c->unacked);
		ibv_destroy_cq(c->cq);
	}
	if (c->ch)
		ibv_destroy_comp_channel(c->ch);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->listen_id)
		rdma_destroy_id(c->listen_id);
	if (c->ec && !c->ec_borrowed)
		rdma_destroy_event_channel(c->ec);
	memset(c, 0, offsetof(struct rs_conn, err));
}

void rs_fill(void *buf, size_t len, uint32_t seed)
{
	uint8_t *p = buf;
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

long rs_check(const void *buf, size_t len, uint32_t seed)
{
	const uint8_t *p = buf;
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		if (p[i] != (uint8_t)x)
			return (long)i;
	}
	return -1;
}
