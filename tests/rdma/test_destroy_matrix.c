// SPDX-License-Identifier: MIT
/*
 * Destroying objects from inside callbacks, on real rxe: from every kind of
 * callback (the column) one object is destroyed (the row): the endpoint the
 * callback belongs to, its listener, its peer endpoint, or a raw CQ. After
 * each case the bridge must go on working (a fresh connection on it carries
 * a message), every accepted request must have had exactly one completion
 * callback, no callback may have run after its object was destroyed, and
 * rr_bridge_destroy() must return 0 (the suite's timeout is the watchdog).
 *
 * Each object's callbacks get a tracker as their data; destroying the object
 * poisons the tracker, and every callback checks its tracker first.
 *
 * RR_TEST_EP_FLAGS (enum rr_ep_flags, e.g. 1 = RR_EP_SHARED_CQ) applies to
 * every endpoint: with a shared CQ, client and server share one, and a
 * callback destroys its peer or itself in the middle of that CQ's dispatch.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "bridge_pair.h"
#include "require.h"

#define NREQ   4     /* receives posted on each side in on_qp_ready */
#define NSEND  2     /* SENDs of the server (W_REQ_OK), WRs of the raw QP */
#define APP_UD 0xa99 /* the application's own NOP */

/* Where the destroy happens: the callback. */
enum where {
	W_CONNECT_OK,	/* client on_connect, status 0 */
	W_CONNECT_FAIL, /* client on_connect, nobody listening */
	W_QP_READY_CLI, /* client on_qp_ready */
	W_QP_READY_SRV, /* server on_qp_ready */
	W_ACCEPT,	/* on_accept */
	W_DOWN_PEER,	/* client on_disconnect: the server disconnected */
	W_DOWN_LOCAL,	/* client on_disconnect: rr_ep_disconnect(client) */
	W_REQ_OK,	/* a client receive completing with status 0 */
	W_REQ_FLUSH,	/* a client receive flushed after a peer disconnect */
	W_WC,		/* the raw CQ's on_wc */
	W_APP,		/* on_app_cqe of the built-in loop */
};

/* What is destroyed there. */
enum what { K_CLI, K_SRV, K_LIS, K_CQ };

struct tracker {
	const char *name;
	bool destroying; /* inside its destroy function */
	bool dead;	 /* destroyed: no callback of it may run */
};

struct req {
	struct tracker *owner;
	bool posted;
	int calls, status;
};

static struct {
	const char *addr;
	enum where where;
	enum what what;
	struct io_uring ring;
	rr_bridge *b;
	rr_listener *l;
	rr_ep *cli, *srv; /* srv: once accepted */
	rr_cq *cq;	  /* raw CQ (W_WC, W_APP) and its own QP */
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t buf[2 * NREQ + NSEND][64];
	struct tracker t_cli, t_srv, t_lis, t_cq, t_bridge;
	struct req cli_recv[NREQ], srv_recv[NREQ], srv_send[NSEND];
	bool fired, fired_in_teardown, teardown;
	int connect_calls, connect_status, accepts, cli_down, srv_down, srv_ready, wcs;
	int violations;
	char first_violation[256];
} D;

static unsigned int ep_flags(void)
{
	const char *f = getenv("RR_TEST_EP_FLAGS");

	return f ? (unsigned int)strtoul(f, NULL, 0) : 0;
}

static void violation(const char *fmt, ...)
{
	va_list ap;

	if (D.violations++)
		return;
	va_start(ap, fmt);
	vsnprintf(D.first_violation, sizeof(D.first_violation), fmt, ap);
	va_end(ap);
}

/* An endpoint, listener or CQ callback: its object must be alive and not
 * in the middle of its own destroy. */
static void check_obj(struct tracker *t, void *data, const char *cb)
{
	if (data != t)
		violation("%s got data %p, not its %s tracker", cb, data, t->name);
	else if (t->dead)
		violation("%s ran after its %s was destroyed", cb, t->name);
	else if (t->destroying)
		violation("%s ran from inside the destroy of its %s", cb, t->name);
}

static void kill_ep(rr_ep **ep, struct tracker *t)
{
	rr_ep *e = *ep;

	if (!e || t->dead)
		return;
	*ep = NULL;
	t->destroying = true;
	rr_ep_destroy(e);
	t->destroying = false;
	t->dead = true;
}

static void kill_listener(void)
{
	rr_listener *l = D.l;

	if (!l)
		return;
	D.l = NULL;
	D.t_lis.destroying = true;
	rr_listener_destroy(l);
	D.t_lis.destroying = false;
	D.t_lis.dead = true;
}

static void kill_cq(void)
{
	rr_cq *cq = D.cq;
	int rc;

	if (!cq)
		return;
	D.cq = NULL;
	if (D.qp && ibv_destroy_qp(D.qp))
		violation("ibv_destroy_qp() of the raw CQ's QP failed");
	D.qp = NULL;
	D.t_cq.destroying = true;
	rc = rr_cq_destroy(cq);
	D.t_cq.destroying = false;
	D.t_cq.dead = true;
	if (rc)
		violation("rr_cq_destroy() returned %d", rc);
}

/* The case's destroy, once, from the callback `w` (self: its endpoint). */
static void fire(enum where w, rr_ep *self)
{
	if (D.where != w || D.fired)
		return;
	D.fired = true;
	D.fired_in_teardown = D.teardown;
	switch (D.what) {
	case K_CLI:
		kill_ep(&D.cli, &D.t_cli);
		break;
	case K_SRV:
		/* In the server's on_qp_ready it is not accepted yet. */
		if (!D.srv && w == W_QP_READY_SRV)
			kill_ep(&self, &D.t_srv);
		else
			kill_ep(&D.srv, &D.t_srv);
		break;
	case K_LIS:
		kill_listener();
		break;
	case K_CQ:
		kill_cq();
		break;
	}
}

static void req_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct req *r = data;

	if (r->owner->dead)
		violation("a request callback ran after its %s was destroyed", r->owner->name);
	if (++r->calls > 1)
		violation("a request of the %s completed %d times", r->owner->name, r->calls);
	r->status = c->status;
	if (r >= D.cli_recv && r < D.cli_recv + NREQ) {
		if (c->status == 0)
			fire(W_REQ_OK, ep);
		else if (c->status == -ECANCELED)
			fire(W_REQ_FLUSH, ep);
	}
}

static void post_recvs(rr_ep *ep, struct req *reqs, uint8_t (*bufs)[64], struct tracker *t)
{
	for (int i = 0; i < NREQ; i++) {
		reqs[i].owner = t;
		if (rr_ep_post_recv(ep, bufs[i], 64, D.mr, req_done, &reqs[i]) == 0)
			reqs[i].posted = true;
		else
			violation("rr_ep_post_recv() failed in the %s's on_qp_ready", t->name);
	}
}

static void cli_qp_ready(rr_ep *ep, int status, void *data)
{
	check_obj(&D.t_cli, data, "client on_qp_ready");
	post_recvs(ep, D.cli_recv, D.buf, &D.t_cli);
	fire(W_QP_READY_CLI, ep);
}

static void srv_qp_ready(rr_ep *ep, int status, void *data)
{
	check_obj(&D.t_srv, data, "server on_qp_ready");
	if (D.srv_ready++) {
		violation("a second server endpoint appeared");
		return;
	}
	post_recvs(ep, D.srv_recv, D.buf + NREQ, &D.t_srv);
	fire(W_QP_READY_SRV, ep);
}

static void cli_connect(rr_ep *ep, int status, void *data)
{
	check_obj(&D.t_cli, data, "client on_connect");
	D.connect_calls++;
	D.connect_status = status;
	fire(status ? W_CONNECT_FAIL : W_CONNECT_OK, ep);
}

static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	check_obj(&D.t_lis, data, "on_accept");
	if (D.t_srv.dead)
		violation("on_accept ran for a server endpoint destroyed in on_qp_ready");
	D.accepts++;
	D.srv = ep;
	fire(W_ACCEPT, ep);
}

static void cli_down(rr_ep *ep, int status, void *data)
{
	check_obj(&D.t_cli, data, "client on_disconnect");
	D.cli_down++;
	if (D.where == W_DOWN_PEER || D.where == W_DOWN_LOCAL)
		fire(D.where, ep);
}

static void srv_down(rr_ep *ep, int status, void *data)
{
	check_obj(&D.t_srv, data, "server on_disconnect");
	D.srv_down++;
}

static void on_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	check_obj(&D.t_cq, data, "on_wc");
	D.wcs++;
	fire(W_WC, NULL);
}

static void on_app_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	check_obj(&D.t_bridge, data, "on_app_cqe");
	if (cqe->user_data == APP_UD)
		fire(W_APP, NULL);
}

/*
 * A raw CQ with work completions to hand out: an RC QP of our own on it,
 * moved to the error state, flushes the SENDs posted on it.
 */
static void make_raw_cq(void)
{
	struct rr_cq_opts co = {.cqe = 16, .on_wc = on_wc, .data = &D.t_cq};
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
				      .sq_sig_all = 1,
				      .cap = {.max_send_wr = NSEND,
					      .max_recv_wr = 1,
					      .max_send_sge = 1,
					      .max_recv_sge = 1}};
	struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};

	cr_assert_eq(rr_cq_create(D.b, NULL, rr_ep_cm_id(D.cli)->verbs, &co, sizeof(co), &D.cq), 0);
	qa.send_cq = qa.recv_cq = rr_cq_ibv(D.cq);
	D.qp = ibv_create_qp(rr_ep_pd(D.cli), &qa);
	cr_assert_not_null(D.qp, "ibv_create_qp: %s", strerror(errno));
	cr_assert_eq(
		ibv_modify_qp(D.qp, &init,
			      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
		0);
	cr_assert_eq(ibv_modify_qp(D.qp, &err, IBV_QP_STATE), 0);
	for (int i = 0; i < NSEND; i++) {
		struct ibv_sge sge = {
			.addr = (uintptr_t)D.buf[2 * NREQ + i], .length = 64, .lkey = D.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = (uint64_t)i,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_SEND},
				   *bad;

		cr_assert_eq(ibv_post_send(D.qp, &wr, &bad), 0);
	}
}

/* ---- after the case: does the bridge still carry a connection? ---- */

struct fresh {
	rr_ep *srv;
	int connected, status, recv_status, send_status, done;
};

static void fresh_connect(rr_ep *ep, int status, void *data)
{
	struct fresh *f = data;

	f->connected = 1;
	f->status = status;
}

static void fresh_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct fresh *f = data;

	if (f->srv)
		rr_ep_destroy(ep);
	else
		f->srv = ep;
}

static void fresh_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct fresh *f = rr_ep_data(ep);

	*(int *)data = c->status;
	f->done++;
}

static bool fresh_up(void *arg)
{
	struct fresh *f = arg;

	return f->connected && (f->srv || f->status);
}

static bool fresh_exchanged(void *arg)
{
	return ((struct fresh *)arg)->done >= 2;
}

static void fresh_connection(void)
{
	struct fresh f = {.recv_status = 1, .send_status = 1};
	struct rr_ep_opts o = {.data = &f, .connect_timeout_ms = 10000, .flags = ep_flags()};
	rr_listener *l;
	rr_ep *c;
	int rc;

	cr_assert_eq(rr_listen(D.b, D.addr, 0, &o, sizeof(o), fresh_accept, &f, &l), 0);
	cr_assert_eq(rr_connect(D.b, D.addr, rr_listener_port(l), &o, sizeof(o), fresh_connect, &c),
		     0);
	rc = bp_run_pred(D.b, fresh_up, &f, 20000);
	cr_assert(rc == 0 && f.status == 0 && f.srv,
		  "after the case a fresh connection on the bridge failed: connect %s (status %d), "
		  "accepted %d",
		  f.connected ? "called" : "never called", f.status, f.srv != NULL);
	cr_assert_eq(rr_ep_post_recv(f.srv, D.buf[0], 64, D.mr, fresh_done, &f.recv_status), 0);
	cr_assert_eq(rr_ep_post_send(c, D.buf[1], 64, D.mr, fresh_done, &f.send_status), 0);
	rc = bp_run_pred(D.b, fresh_exchanged, &f, 20000);
	cr_assert(rc == 0 && f.recv_status == 0 && f.send_status == 0,
		  "after the case a SEND on a fresh connection: send %d, recv %d", f.send_status,
		  f.recv_status);
	rr_ep_destroy(c);
	rr_ep_destroy(f.srv);
	rr_listener_destroy(l);
}

/* ---- the runner ---- */

static bool phase_done(void *arg)
{
	switch (D.where) {
	case W_CONNECT_OK:
	case W_CONNECT_FAIL:
	case W_QP_READY_CLI:
	case W_QP_READY_SRV:
	case W_ACCEPT:
		/* The destroy happened and the client heard the outcome. */
		return D.fired && (D.connect_calls || D.t_cli.dead);
	default:
		return *(bool *)arg;
	}
}

static bool both_up(void *arg)
{
	return D.connect_calls && (D.accepts || D.connect_status);
}

static bool never(void *arg)
{
	return false;
}

static void check_reqs(struct req *r, int n)
{
	for (int i = 0; i < n; i++)
		if (r[i].posted)
			cr_expect_eq(r[i].calls, 1,
				     "a request of the %s had %d completion callbacks",
				     r[i].owner->name, r[i].calls);
}

static void run_case(enum where where, enum what what)
{
	struct rr_bridge_opts bo = {
		.on_app_cqe = on_app_cqe, .data = &D.t_bridge, .flags = rr_test_bridge_flags()};
	struct rr_ep_opts so = {.max_recv_wr = NREQ,
				.on_qp_ready = srv_qp_ready,
				.on_disconnect = srv_down,
				.data = &D.t_srv};
	struct rr_ep_opts co = {.max_recv_wr = NREQ,
				.on_qp_ready = cli_qp_ready,
				.on_disconnect = cli_down,
				.data = &D.t_cli,
				.connect_timeout_ms = 10000};
	uint16_t port;
	int rc;

	so.flags = co.flags = ep_flags();
	memset(&D, 0, sizeof(D));
	D.addr = rr_test_require_rdma();
	D.where = where;
	D.what = what;
	D.t_cli.name = "client endpoint";
	D.t_srv.name = "server endpoint";
	D.t_lis.name = "listener";
	D.t_cq.name = "raw CQ";
	D.t_bridge.name = "bridge";
	cr_assert_eq(rr_test_ring_init(&D.ring, 64), 0);
	cr_assert_eq(rr_bridge_create(&D.b, &D.ring, &bo, sizeof(bo)), 0);
	cr_assert_eq(rr_listen(D.b, D.addr, 0, &so, sizeof(so), on_accept, &D.t_lis, &D.l), 0);
	cr_assert_eq(rr_listener_reg_mr(D.l, D.buf, sizeof(D.buf), 0, &D.mr), 0);
	/* Port 9: nobody listens there, the connect is refused. */
	port = where == W_CONNECT_FAIL ? 9 : rr_listener_port(D.l);
	cr_assert_eq(rr_connect(D.b, D.addr, port, &co, sizeof(co), cli_connect, &D.cli), 0);

	if (where > W_ACCEPT) {
		/* The trigger comes later: first an established pair. */
		cr_assert_eq(bp_run_pred(D.b, both_up, NULL, 20000), 0, "no connection");
		cr_assert_eq(D.connect_status, 0, "connect: %s", strerror(-D.connect_status));
		switch (where) {
		case W_DOWN_PEER:
		case W_REQ_FLUSH:
			cr_assert_eq(rr_ep_disconnect(D.srv), 0);
			break;
		case W_DOWN_LOCAL:
			cr_assert_eq(rr_ep_disconnect(D.cli), 0);
			break;
		case W_REQ_OK:
			for (int i = 0; i < NSEND; i++) {
				D.srv_send[i].owner = &D.t_srv;
				cr_assert_eq(rr_ep_post_send(D.srv, D.buf[2 * NREQ + i], 64, D.mr,
							     req_done, &D.srv_send[i]),
					     0);
				D.srv_send[i].posted = true;
			}
			break;
		case W_WC:
			make_raw_cq();
			break;
		case W_APP: {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&D.ring);

			make_raw_cq();
			cr_assert_not_null(sqe);
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data64(sqe, APP_UD);
			break;
		}
		default:
			break;
		}
	}
	rc = bp_run_pred(D.b, phase_done, &D.fired, 30000);
	cr_assert_eq(rc, 0,
		     "the callback never came or the case never settled: fired %d, on_connect %d "
		     "(status %d), accepts %d, on_wc %d",
		     D.fired, D.connect_calls, D.connect_status, D.accepts, D.wcs);
	/* Let the consequences (disconnects, flushes, drops) play out. */
	bp_run_pred(D.b, never, NULL, 500);

	fresh_connection();

	D.teardown = true;
	kill_ep(&D.cli, &D.t_cli);
	kill_ep(&D.srv, &D.t_srv);
	kill_listener();
	kill_cq();
	cr_assert_eq(rr_mr_dereg(D.mr), 0);
	D.t_bridge.destroying = true;
	rc = rr_bridge_destroy(D.b);
	D.t_bridge.dead = true;
	io_uring_queue_exit(&D.ring);
	cr_assert_eq(rc, 0, "rr_bridge_destroy: %d", rc);
	cr_expect_eq(D.violations, 0, "%d contract violations, the first: %s", D.violations,
		     D.first_violation);
	cr_expect(!D.fired_in_teardown, "the destroy ran only at teardown");
	cr_expect_leq(D.connect_calls, 1, "on_connect called %d times", D.connect_calls);
	cr_expect_leq(D.cli_down, 1, "client on_disconnect called %d times", D.cli_down);
	cr_expect_leq(D.srv_down, 1, "server on_disconnect called %d times", D.srv_down);
	check_reqs(D.cli_recv, NREQ);
	check_reqs(D.srv_recv, NREQ);
	check_reqs(D.srv_send, NSEND);
}

TestSuite(destroy, .timeout = 90);

/* The table: callback x object destroyed from it. */
#define CASE(name, where, what)                                                                    \
	Test(destroy, name)                                                                        \
	{                                                                                          \
		run_case(where, what);                                                             \
	}

CASE(on_connect_ok_self, W_CONNECT_OK, K_CLI)
CASE(on_connect_ok_listener, W_CONNECT_OK, K_LIS)
CASE(on_connect_fail_self, W_CONNECT_FAIL, K_CLI)
CASE(on_connect_fail_listener, W_CONNECT_FAIL, K_LIS)
CASE(on_qp_ready_client_self, W_QP_READY_CLI, K_CLI)
CASE(on_qp_ready_client_listener, W_QP_READY_CLI, K_LIS)
CASE(on_qp_ready_server_self, W_QP_READY_SRV, K_SRV)
CASE(on_qp_ready_server_listener, W_QP_READY_SRV, K_LIS)
CASE(on_qp_ready_server_peer, W_QP_READY_SRV, K_CLI)
CASE(on_accept_self, W_ACCEPT, K_SRV)
CASE(on_accept_listener, W_ACCEPT, K_LIS)
CASE(on_accept_peer, W_ACCEPT, K_CLI)
CASE(on_disconnect_peer_left_self, W_DOWN_PEER, K_CLI)
CASE(on_disconnect_peer_left_listener, W_DOWN_PEER, K_LIS)
CASE(on_disconnect_peer_left_peer, W_DOWN_PEER, K_SRV)
CASE(on_disconnect_local_self, W_DOWN_LOCAL, K_CLI)
CASE(on_disconnect_local_listener, W_DOWN_LOCAL, K_LIS)
CASE(on_disconnect_local_peer, W_DOWN_LOCAL, K_SRV)
CASE(request_ok_self, W_REQ_OK, K_CLI)
CASE(request_ok_listener, W_REQ_OK, K_LIS)
CASE(request_ok_peer, W_REQ_OK, K_SRV)
CASE(request_flush_self, W_REQ_FLUSH, K_CLI)
CASE(request_flush_listener, W_REQ_FLUSH, K_LIS)
CASE(request_flush_peer, W_REQ_FLUSH, K_SRV)
CASE(on_wc_own_cq, W_WC, K_CQ)
CASE(on_wc_endpoint, W_WC, K_CLI)
CASE(on_app_cqe_client, W_APP, K_CLI)
CASE(on_app_cqe_server, W_APP, K_SRV)
CASE(on_app_cqe_listener, W_APP, K_LIS)
CASE(on_app_cqe_cq, W_APP, K_CQ)
