// SPDX-License-Identifier: MIT
/*
 * The finer points of the contract, on real rxe:
 *  - on a peer disconnect, completions already in the CQ come before
 *    on_disconnect, only flushes after it, every request exactly once;
 *  - a work completion error moves the endpoint to error;
 *  - an application's linked SQE chain stays intact around rr_ calls that
 *    queue bridge SQEs, with its own loop and with the built-in one;
 *  - the built-in loop reaps CQEs on a DEFER_TASKRUN ring, where they are
 *    posted only inside io_uring_enter(IORING_ENTER_GETEVENTS).
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "bridge_pair.h"
#include "rdma_sync.h"
#include "require.h"

TestSuite(contract, .timeout = 120);

/* ---- order on a peer disconnect ---- */

#define NRECV 16
#define NMSG  4 /* messages that arrive before the server leaves */

struct rec {
	int calls, status, order;
};

static struct {
	struct bridge_pair p;
	struct ibv_mr *mr;
	uint8_t cbuf[NRECV][64], sbuf[NRECV + NMSG][64];
	struct rec cli[NRECV], srv[NRECV];
	int seq, sent;
	int down_calls[2], down_status[2], down_order[2];
} P;

static void rec_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct rec *r = data;

	r->calls++;
	r->status = c->status;
	r->order = ++P.seq;
}

static void rec_down(rr_ep *ep, int status, void *data)
{
	int i = ep == P.p.cli.ep ? 0 : 1;

	P.down_calls[i]++;
	P.down_status[i] = status;
	P.down_order[i] = ++P.seq;
}

static void sent_then_leave(rr_ep *ep, const struct rr_completion *c, void *data)
{
	/* The last SEND is acknowledged, so it sits in the client's CQ:
	 * leave now. */
	if (c->status == 0 && ++P.sent == NMSG)
		cr_assert_eq(rr_ep_disconnect(ep), 0);
}

static bool client_down(void *arg)
{
	return P.down_calls[0] > 0;
}

/* Every request exactly once, 0 or -ECANCELED, nothing but -ECANCELED
 * after on_disconnect; returns the number completed with status 0. */
static int check_order(const char *side, struct rec *r, int n, int down_order)
{
	int ok = 0;

	for (int i = 0; i < n; i++) {
		cr_expect_eq(r[i].calls, 1, "%s receive %d: %d callbacks", side, i, r[i].calls);
		cr_expect(r[i].status == 0 || r[i].status == -ECANCELED,
			  "%s receive %d: status %d (%s)", side, i, r[i].status,
			  strerror(-r[i].status));
		cr_expect(r[i].order < down_order || r[i].status == -ECANCELED,
			  "%s receive %d: status %d handed out after on_disconnect", side, i,
			  r[i].status);
		ok += r[i].status == 0;
	}
	return ok;
}

Test(contract, peer_disconnect_order)
{
	const char *addr = rr_test_require_rdma();
	struct rr_ep_opts o = {.max_recv_wr = NRECV};

	memset(&P, 0, sizeof(P));
	cr_assert_eq(bp_open(&P.p, addr, &o), 0);
	rr_ep_set_on_disconnect(P.p.cli.ep, rec_down);
	rr_ep_set_on_disconnect(P.p.srv.ep, rec_down);
	cr_assert_eq(rr_ep_reg_mr(P.p.cli.ep, &P, sizeof(P), 0, &P.mr), 0);
	for (int i = 0; i < NRECV; i++) {
		cr_assert_eq(rr_ep_post_recv(P.p.cli.ep, P.cbuf[i], 64, P.mr, rec_done, &P.cli[i]),
			     0);
		cr_assert_eq(rr_ep_post_recv(P.p.srv.ep, P.sbuf[i], 64, P.mr, rec_done, &P.srv[i]),
			     0);
	}
	for (int i = 0; i < NMSG; i++)
		cr_assert_eq(rr_ep_post_send(P.p.srv.ep, P.sbuf[NRECV + i], 64, P.mr,
					     sent_then_leave, NULL),
			     0);
	cr_assert_eq(bp_run_pred(P.p.b, client_down, NULL, 20000), 0, "no on_disconnect");
	/* Flushes still to come arrive through the CQ or in rr_ep_destroy(). */
	for (int i = 0; i < 20; i++)
		rr_bridge_run_once(P.p.b, 10);
	rr_ep_destroy(P.p.cli.ep);
	rr_ep_destroy(P.p.srv.ep);
	cr_assert_eq(P.down_calls[0], 1, "client on_disconnect called %d times", P.down_calls[0]);
	cr_assert_eq(P.down_status[0], -ECONNRESET, "client on_disconnect status %d",
		     P.down_status[0]);
	cr_assert_eq(P.down_calls[1], 1, "server on_disconnect called %d times", P.down_calls[1]);
	cr_assert_eq(P.down_status[1], 0, "server on_disconnect status %d", P.down_status[1]);
	cr_expect_eq(check_order("client", P.cli, NRECV, P.down_order[0]), NMSG,
		     "the client's receives before the server left did not all complete");
	cr_expect_eq(check_order("server", P.srv, NRECV, P.down_order[1]), 0);
	rr_mr_dereg(P.mr);
	bp_close(&P.p);
}

/* ---- a work completion error moves the endpoint to error ---- */

static struct {
	struct rec write, recv[4], late;
} W;

static bool write_done(void *arg)
{
	return W.write.calls > 0;
}

static bool down_seen(void *arg)
{
	return ((struct bridge_pair *)arg)->cli.down_calls > 0;
}

Test(contract, wc_error_moves_endpoint_to_error)
{
	const char *addr = rr_test_require_rdma();
	struct bridge_pair p;
	static uint8_t lbuf[8][64], rbuf[64];
	struct ibv_mr *lmr, *rmr;
	int rc;

	memset(&W, 0, sizeof(W));
	cr_assert_eq(bp_open(&p, addr, NULL), 0);
	cr_assert_eq(rr_ep_reg_mr(p.cli.ep, lbuf, sizeof(lbuf), 0, &lmr), 0);
	cr_assert_eq(rr_ep_reg_mr(p.srv.ep, rbuf, sizeof(rbuf), IBV_ACCESS_REMOTE_WRITE, &rmr), 0);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(rr_ep_post_recv(p.cli.ep, lbuf[i], 64, lmr, rec_done, &W.recv[i]), 0);
	/* A key no MR has: the responder answers with a remote access error. */
	cr_assert_eq(rr_ep_post_write(p.cli.ep, lbuf[7], 64, lmr, (uintptr_t)rbuf,
				      rmr->rkey ^ 0x00ffff00u, rec_done, &W.write),
		     0);
	cr_assert_eq(bp_run_pred(p.b, write_done, NULL, 20000), 0, "the WRITE never completed");
	cr_assert_eq(W.write.status, -EACCES, "the WRITE completed with %d (%s)", W.write.status,
		     strerror(-W.write.status));
	/* The QP is in error now; the endpoint must say so. */
	bp_run_pred(p.b, down_seen, &p, 10000);
	rc = rr_ep_post_send(p.cli.ep, lbuf[6], 64, lmr, rec_done, &W.late);
	cr_expect(p.cli.down_calls == 1 && p.cli.down_status < 0 && rc == -ENOTCONN,
		  "after a remote access error: on_disconnect called %d times (status %d), "
		  "rr_ep_post_send() returned %d; want once with a negative status and -ENOTCONN",
		  p.cli.down_calls, p.cli.down_status, rc);
	rr_ep_destroy(p.cli.ep);
	rr_ep_destroy(p.srv.ep);
	for (int i = 0; i < 4; i++)
		cr_expect(W.recv[i].calls == 1 && W.recv[i].status == -ECANCELED,
			  "receive %d: %d callbacks, status %d", i, W.recv[i].calls,
			  W.recv[i].status);
	cr_expect_eq(W.late.calls, rc == 0 ? 1 : 0, "the late SEND had %d callbacks", W.late.calls);
	rr_mr_dereg(lmr);
	rr_mr_dereg(rmr);
	bp_close(&p);
}

/* ---- an application's SQE chain around rr_ calls ---- */

enum { UD_A = 1, UD_B = 2, UD_FILL = 4 };

static struct {
	struct io_uring ring;
	rr_bridge *b;
	rr_listener *l;
	rr_ep *first, *second, *accepted[4];
	int naccepted, connects[2], status[2];
	int a_seen, b_seen, a_res, b_res, order;
} L;

static void chain_app_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	if (cqe->user_data == UD_A) {
		L.a_seen = ++L.order;
		L.a_res = cqe->res;
	} else if (cqe->user_data == UD_B) {
		L.b_seen = ++L.order;
		L.b_res = cqe->res;
	}
}

static void chain_accept(rr_listener *l, rr_ep *ep, void *data)
{
	if (L.naccepted < 4)
		L.accepted[L.naccepted++] = ep;
	else
		rr_ep_destroy(ep);
}

static void chain_connect(rr_ep *ep, int status, void *data)
{
	int i = data != NULL;

	L.connects[i]++;
	L.status[i] = status;
}

static bool first_up(void *arg)
{
	return L.connects[0] && L.naccepted;
}

static bool chain_done(void *arg)
{
	return L.b_seen && L.a_seen && L.connects[1];
}

/* The application's own loop: submit, offer every CQE, mark it seen. */
static int app_loop(bool (*pred)(void *), int timeout_ms)
{
	uint64_t deadline = bp_now_ms() + (uint64_t)timeout_ms;

	while (!pred(NULL)) {
		struct __kernel_timespec ts = {.tv_nsec = 50 * 1000000};
		struct io_uring_cqe *cqe;
		int rc;

		if (bp_now_ms() > deadline)
			return -ETIMEDOUT;
		rc = io_uring_submit_and_wait_timeout(&L.ring, &cqe, 1, &ts, NULL);
		if (rc < 0 && rc != -ETIME && rc != -EINTR)
			return rc;
		while (io_uring_peek_cqe(&L.ring, &cqe) == 0) {
			if (!rr_bridge_handle_cqe(L.b, cqe))
				chain_app_cqe(L.b, cqe, NULL);
			io_uring_cqe_seen(&L.ring, cqe);
		}
	}
	return 0;
}

static int run_loop(bool builtin, bool (*pred)(void *), int timeout_ms)
{
	return builtin ? bp_run_pred(L.b, pred, NULL, timeout_ms) : app_loop(pred, timeout_ms);
}

/* full_sq: A and B take the last two free SQEs, so the bridge's SQEs find
 * the SQ full and must wait (never submitting A alone to make room). */
static void chain_around_rr_calls(bool builtin, bool full_sq)
{
	const char *addr = rr_test_require_rdma();
	struct rr_bridge_opts bo = {.on_app_cqe = chain_app_cqe};
	/* The connect timeout makes rr_connect() queue a TIMEOUT SQE. */
	struct rr_ep_opts o = {.connect_timeout_ms = 20000};
	struct __kernel_timespec ts = {.tv_nsec = 20 * 1000000};
	struct io_uring_sqe *sqe;

	memset(&L, 0, sizeof(L));
	cr_assert_eq(full_sq ? io_uring_queue_init(8, &L.ring, 0) : rr_test_ring_init(&L.ring, 64),
		     0);
	cr_assert_eq(rr_bridge_create(&L.b, &L.ring, &bo, sizeof(bo)), 0);
	cr_assert_eq(rr_listen(L.b, addr, 0, NULL, 0, chain_accept, NULL, &L.l), 0);
	cr_assert_eq(rr_connect(L.b, addr, rr_listener_port(L.l), NULL, 0, chain_connect, &L.first),
		     0);
	cr_assert_eq(run_loop(builtin, first_up, 20000), 0, "first connection");
	cr_assert_eq(L.status[0], 0);

	/* A, linked to B; a timeout that counts as success, so B runs after
	 * it; in between, rr_ calls that queue bridge SQEs (a timer and a
	 * kick). With full_sq, A and B take the last two free entries. */
	while (full_sq && io_uring_sq_space_left(&L.ring) > 2) {
		sqe = io_uring_get_sqe(&L.ring);
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, UD_FILL);
	}
	sqe = io_uring_get_sqe(&L.ring);
	cr_assert_not_null(sqe);
	io_uring_prep_timeout(sqe, &ts, 0, IORING_TIMEOUT_ETIME_SUCCESS);
	io_uring_sqe_set_data64(sqe, UD_A);
	sqe->flags |= IOSQE_IO_LINK;
	o.data = &L; /* marks the second connection */
	cr_assert_eq(rr_connect(L.b, addr, rr_listener_port(L.l), &o, sizeof(o), chain_connect,
				&L.second),
		     0);
	cr_assert_eq(rr_cq_set_mode(rr_ep_cq(L.first), RR_WAIT_BUSY, 0), 0);
	sqe = io_uring_get_sqe(&L.ring);
	cr_assert_not_null(sqe);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, UD_B);

	run_loop(builtin, chain_done, 20000);
	cr_expect(L.a_seen && L.b_seen, "A completed: %d, B completed: %d", !!L.a_seen, !!L.b_seen);
	cr_expect_eq(L.a_res, -ETIME, "A: res %d", L.a_res);
	cr_expect_eq(L.b_res, 0, "B: res %d (%s)", L.b_res, strerror(-L.b_res));
	cr_expect_gt(L.b_seen, L.a_seen,
		     "B completed before A: the bridge broke the application's chain A -> B "
		     "(%s)",
		     full_sq ? "submitted A alone to make room" : "queued its SQE between them");
	if (full_sq && builtin) { /* an own loop submits first, making room */
		struct rr_bridge_stats st;

		rr_bridge_get_stats(L.b, &st, sizeof(st));
		cr_expect_gt(st.sq_full, 0, "the bridge never found the SQ full: not tested");
	}
	cr_expect(L.connects[1] == 1 && L.status[1] == 0,
		  "the connection made inside the chain: %d callbacks, status %d", L.connects[1],
		  L.status[1]);
	rr_cq_set_mode(rr_ep_cq(L.first), RR_WAIT_EVENT, 0);
	rr_ep_destroy(L.first);
	rr_ep_destroy(L.second);
	for (int i = 0; i < L.naccepted; i++)
		rr_ep_destroy(L.accepted[i]);
	rr_listener_destroy(L.l);
	cr_assert_eq(rr_bridge_destroy(L.b), 0);
	io_uring_queue_exit(&L.ring);
}

Test(contract, linked_chain_around_rr_calls_own_loop)
{
	chain_around_rr_calls(false, false);
}

Test(contract, linked_chain_around_rr_calls_builtin_loop)
{
	chain_around_rr_calls(true, false);
}

Test(contract, linked_chain_around_rr_calls_full_sq_own_loop)
{
	chain_around_rr_calls(false, true);
}

Test(contract, linked_chain_around_rr_calls_full_sq_builtin_loop)
{
	chain_around_rr_calls(true, true);
}

/* ---- the built-in loop on a DEFER_TASKRUN ring ---- */

enum { UD_TICK = 3 };

static int tick_seen;

static void tick_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	if (cqe->user_data == UD_TICK)
		tick_seen = 1;
}

static void noop_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
}

/*
 * An application timeout of 10 ms on a SINGLE_ISSUER|DEFER_TASKRUN ring:
 * its CQE is posted by task work that runs only when the loop enters the
 * kernel to wait. A busy CQ, a hybrid CQ inside its spin window and a
 * zero timeout all make the loop skip the wait; it must still get there.
 */
static void defer_taskrun_loop(enum rr_wait_mode mode, int timeout_ms)
{
	struct rr_bridge_opts bo = {.on_app_cqe = tick_cqe};
	/* The spin window outlasts the watchdog: the CQ stays active. */
	struct rr_cq_opts co = {.mode = mode, .spin_us = 60u * 1000 * 1000, .on_wc = noop_wc};
	struct __kernel_timespec ts = {.tv_nsec = 10 * 1000000};
	struct ibv_device **devs;
	struct ibv_context *ctx;
	struct io_uring ring;
	struct io_uring_sqe *sqe;
	rr_bridge *b;
	rr_cq *cq = NULL;
	uint64_t deadline;
	int n = 0, rc;

	rr_test_require_rdma();
	devs = ibv_get_device_list(&n);
	cr_assert(devs && n > 0);
	ctx = ibv_open_device(devs[0]);
	ibv_free_device_list(devs);
	cr_assert_not_null(ctx);
	rc = io_uring_queue_init(64, &ring,
				 IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
	cr_assert_eq(rc, 0, "DEFER_TASKRUN ring: %s", strerror(-rc));
	cr_assert_eq(rr_bridge_create(&b, &ring, &bo, sizeof(bo)), 0);
	if (mode != RR_WAIT_EVENT)
		cr_assert_eq(rr_cq_create(b, NULL, ctx, &co, sizeof(co), &cq), 0);
	/* A switch to hybrid starts a spin window at once. */
	if (mode == RR_WAIT_HYBRID)
		cr_assert_eq(rr_cq_set_mode(cq, RR_WAIT_HYBRID, 0), 0);
	/* Let the CQ settle into its mode (a hybrid one opens its window). */
	for (int i = 0; i < 4; i++)
		rr_bridge_run_once(b, 0);
	tick_seen = 0;
	sqe = io_uring_get_sqe(&ring);
	cr_assert_not_null(sqe);
	io_uring_prep_timeout(sqe, &ts, 0, 0);
	io_uring_sqe_set_data64(sqe, UD_TICK);
	deadline = bp_now_ms() + 10000;
	while (!tick_seen && bp_now_ms() < deadline)
		rr_bridge_run_once(b, timeout_ms);
	cr_expect(tick_seen,
		  "rr_bridge_run_once(b, %d) with %s never reaped a 10 ms timeout's CQE on a "
		  "DEFER_TASKRUN ring in 10 s",
		  timeout_ms,
		  mode == RR_WAIT_BUSY	   ? "a busy CQ"
		  : mode == RR_WAIT_HYBRID ? "a hybrid CQ in its spin window"
					   : "no CQ");
	rr_cq_destroy(cq);
	rc = rr_bridge_destroy(b);
	io_uring_queue_exit(&ring);
	ibv_close_device(ctx);
	cr_assert_eq(rc, 0);
}

Test(contract, defer_taskrun_builtin_loop_busy_cq)
{
	defer_taskrun_loop(RR_WAIT_BUSY, 50);
}

Test(contract, defer_taskrun_builtin_loop_hybrid_cq)
{
	defer_taskrun_loop(RR_WAIT_HYBRID, 50);
}

Test(contract, defer_taskrun_builtin_loop_timeout_0)
{
	defer_taskrun_loop(RR_WAIT_EVENT, 0);
}
