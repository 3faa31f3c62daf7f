// SPDX-License-Identifier: MIT
/*
 * Endpoints and the connection manager on the host: the public API over
 * the in-process rdma_cm and verbs of fake_cm.c and fake_verbs.c, under
 * the provider personality RR_FAKE_PROVIDER names (rxe or mlx5). Two
 * bridges on two rings in one thread (groups: one thread per group),
 * driven with rr_bridge_run_once() until what a test waits for happened;
 * a generous watchdog fails a test that hangs. Nothing asserts on time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <ringrdma.h>

#include "fake_cm.h"

#define WATCHDOG_S 20
#define SLOT	   4096
#define NSLOTS	   256
#define MAX_EPS	   64
#define MAX_REQS   512

/* ---- what the callbacks saw ---- */

struct ep_state {
	rr_ep *ep;
	int connects, connect_status;
	int downs, down_status;
	int qp_ready;
	int prepost; /* receives to post in on_qp_ready */
	const void *pdata;
	int pdata_len;
};

struct req {
	int calls;
	int status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len;
	int has_imm;
	uint32_t imm;
	int seq; /* order of its callback among all */
	rr_ep *ep;
	bool after_destroy; /* called once its endpoint's destroy returned */
};

static struct io_uring rings[2];
static rr_bridge *srv, *cli;
static rr_listener *L;
static struct ibv_mr *MR;
static uint8_t *BUF;
static uint16_t PORT;
static struct ep_state srv_st[MAX_EPS], cli_st[MAX_EPS];
static int nsrv, ncli;
static struct req reqs[MAX_REQS];
static int nreqs, seq;
static bool destroyed_flag;
static struct ep_state srv_proto; /* the listener's data: what new ones get */
static rr_srq *SRQ;		  /* the server's, in the SRQ tests */
static int accepts;
static rr_async_event_cb async_hook; /* both bridges' on_async_event */

/* Group bridges: each driven by a thread of its own, or (manual) by the
 * test's thread in pump_once(), unless held. */
#define NGROUPS 2
#define NCONNS	8

struct group {
	struct io_uring ring;
	rr_bridge *b;
	pthread_t thread;
	bool manual, held;
	atomic_int ready, stop;
	atomic_int accepts, recvs, downs, wrong_thread;
	rr_ep *last; /* the last endpoint accepted (written before accepts) */
};

static struct group G[NGROUPS];
static void group_close(struct group *g);

static uint8_t *slot(int i)
{
	return BUF + (size_t)i * SLOT;
}

static struct req *new_req(void)
{
	cr_assert_lt(nreqs, MAX_REQS);
	return &reqs[nreqs++];
}

static void req_cb(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct req *r = data;

	r->calls++;
	r->status = c->status;
	r->opcode = c->opcode;
	r->byte_len = c->byte_len;
	r->has_imm = c->has_imm;
	r->imm = c->imm_data;
	r->seq = ++seq;
	r->ep = ep;
	r->after_destroy = destroyed_flag;
}

/* A receive into slot @i, with its own record. */
static struct req *post_recv(rr_ep *ep, int i)
{
	struct req *r = new_req();

	cr_assert_eq(rr_ep_post_recv(ep, slot(i), SLOT, MR, req_cb, r), 0);
	return r;
}

static void on_qp_ready(rr_ep *ep, int status, void *data)
{
	struct ep_state *st = data;

	if (st == &srv_proto) {
		/* A passive endpoint: its listener's data until now. */
		cr_assert_lt(nsrv, MAX_EPS);
		st = &srv_st[nsrv++];
		rr_ep_set_data(ep, st);
		st->prepost = srv_proto.prepost;
	}
	st->ep = ep;
	st->qp_ready++;
	/* Server endpoint k receives into slots 128 + 8k..., client k into
	 * 192 + 4k... */
	for (int i = 0; i < st->prepost; i++)
		if (rr_ep_srq(ep) == NULL)
			post_recv(ep, st >= srv_st && st < srv_st + MAX_EPS
					      ? 128 + (int)(st - srv_st) * 8 + i
					      : 192 + (int)(st - cli_st) * 4 + i);
}

static void on_connect(rr_ep *ep, int status, void *data)
{
	struct ep_state *st = data;

	st->connects++;
	st->connect_status = status;
}

static void on_disconnect(rr_ep *ep, int status, void *data)
{
	struct ep_state *st = data;

	st->downs++;
	st->down_status = status;
}

static bool destroy_in_accept;
static bool destroy_srq_in_accept; /* after the endpoint */

static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct ep_state *st = rr_ep_data(ep);

	accepts++;
	st->connects++;
	rr_ep_set_on_disconnect(ep, on_disconnect);
	if (destroy_in_accept)
		cr_assert_eq(rr_ep_destroy(ep), 0);
	if (destroy_srq_in_accept) {
		cr_assert_eq(rr_srq_destroy(SRQ), 0);
		SRQ = NULL;
	}
}

/* ---- driving the two bridges ---- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static rr_bridge *running; /* the bridge whose pass is on the stack */
static bool cli_held;	   /* pump_once() leaves cli alone */
static bool srv_embedded;  /* srv runs in an application-owned loop */

/* An application-owned loop's turn: flush, submit, hand each CQE over. */
static int pump_embedded(rr_bridge *b, struct io_uring *ring)
{
	struct io_uring_cqe *cqe;
	int n = 0;

	cr_assert_geq(rr_bridge_flush(b), 0);
	cr_assert_geq(io_uring_submit(ring), 0);
	while (io_uring_peek_cqe(ring, &cqe) == 0) {
		n += rr_bridge_handle_cqe(b, cqe);
		io_uring_cqe_seen(ring, cqe);
	}
	return n;
}

static int pump_bridge(rr_bridge *b, bool held)
{
	int rc;

	if (!b || held)
		return 0;
	running = b;
	if (b == srv && srv_embedded)
		rc = pump_embedded(b, &rings[0]);
	else
		rc = rr_bridge_run_once(b, 0);
	running = NULL;
	cr_assert_geq(rc, 0, "run_once: %s", strerror(-rc));
	return rc;
}

static int pump_once(void)
{
	int n = pump_bridge(srv, false) + pump_bridge(cli, cli_held);

	for (int i = 0; i < NGROUPS; i++)
		if (G[i].manual)
			n += pump_bridge(G[i].b, G[i].held);
	if (!n)
		usleep(100);
	return n;
}

#define PUMP_UNTIL(cond)                                                                           \
	do {                                                                                       \
		double t0_ = now_s();                                                              \
		while (!(cond)) {                                                                  \
			pump_once();                                                               \
			if (now_s() - t0_ > WATCHDOG_S)                                            \
				cr_assert_fail("watchdog: still waiting for %s (%s)", #cond,       \
					       fake_provider_name());                              \
		}                                                                                  \
	} while (0)

/* A few more passes: whatever is still due arrives. */
static void settle(void)
{
	for (int i = 0; i < 50; i++)
		pump_once();
}

static void open_bridges(unsigned int bflags)
{
	struct rr_bridge_opts o = {.flags = bflags, .on_async_event = async_hook};

	for (int i = 0; i < 2; i++)
		cr_assert_eq(io_uring_queue_init(64, &rings[i], 0), 0);
	cr_assert_eq(rr_bridge_create(&srv, &rings[0], &o, sizeof(o)), 0);
	cr_assert_eq(rr_bridge_create(&cli, &rings[1], &o, sizeof(o)), 0);
}

/* Listen on 127.0.0.1 (a device address: memory can be registered at
 * once) with @opts; one MR for both sides, which share the PD. */
static void listen_on(const struct rr_ep_opts *opts, void *data)
{
	cr_assert_eq(rr_listen(srv, "127.0.0.1", 0, opts, sizeof(struct rr_ep_opts), on_accept,
			       data, &L),
		     0);
	PORT = rr_listener_port(L);
	cr_assert_neq(PORT, 0);
	BUF = aligned_alloc(4096, (size_t)NSLOTS * SLOT);
	cr_assert_not_null(BUF);
	memset(BUF, 0, (size_t)NSLOTS * SLOT);
	cr_assert_eq(rr_listener_reg_mr(L, BUF, (size_t)NSLOTS * SLOT,
					IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &MR),
		     0);
}

static void setup_with(unsigned int bflags, unsigned int epflags, int srv_prepost)
{
	struct rr_ep_opts o = {.on_qp_ready = on_qp_ready,
			       .on_disconnect = on_disconnect,
			       .flags = epflags,
			       .private_data = "server-hello",
			       .private_data_len = 13};

	open_bridges(bflags);
	srv_proto.prepost = srv_prepost;
	listen_on(&o, &srv_proto);
}

/* Connections established on the listener and on its groups. */
static int all_accepts(void)
{
	int n = accepts;

	for (int i = 0; i < NGROUPS; i++)
		n += atomic_load(&G[i].accepts);
	return n;
}

static struct ep_state *connect_with(struct rr_ep_opts *o, int prepost)
{
	struct ep_state *st = &cli_st[ncli++];
	int before = all_accepts();

	st->prepost = prepost;
	o->on_qp_ready = on_qp_ready;
	o->on_disconnect = on_disconnect;
	o->data = st;
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT, o, sizeof(struct rr_ep_opts), on_connect,
				&st->ep),
		     0);
	PUMP_UNTIL(st->connects);
	cr_assert_eq(st->connect_status, 0, "connect: %s", strerror(-st->connect_status));
	PUMP_UNTIL(all_accepts() > before);
	return st;
}

static struct ep_state *connect_one(unsigned int flags, int prepost)
{
	struct rr_ep_opts o = {.flags = flags};

	return connect_with(&o, prepost);
}

static struct ep_state *server_of(struct ep_state *c)
{
	/* The last passive endpoint established. */
	(void)c;
	return &srv_st[nsrv - 1];
}

static void teardown_all(void)
{
	struct fake_stats s;

	if (L)
		cr_assert_eq(rr_listener_destroy(L), 0);
	L = NULL;
	if (MR)
		cr_assert_eq(rr_mr_dereg(MR), 0);
	MR = NULL;
	if (srv)
		cr_assert_eq(rr_bridge_destroy(srv), 0);
	if (cli)
		cr_assert_eq(rr_bridge_destroy(cli), 0);
	srv = cli = NULL;
	for (int i = 0; i < 2; i++)
		io_uring_queue_exit(&rings[i]);
	for (int i = 0; i < NGROUPS; i++)
		if (G[i].manual)
			group_close(&G[i]);
	free(BUF);
	s = fake_stats_get();
	cr_expect_eq(s.qps_live, 0, "QPs left: %u", s.qps_live);
	cr_expect_eq(s.ids_live, 0, "rdma_cm ids left: %u", s.ids_live);
	cr_expect_eq(s.cm_channels_live, 0, "event channels left: %u", s.cm_channels_live);
	cr_expect_eq(s.cm_events_unacked, 0);
	cr_expect_eq(s.mrs_live, 0);
	cr_expect_eq(s.srqs_live, 0);
	cr_expect_eq(s.cq_overruns, 0);
	cr_expect_eq(s.ids_with_qp_destroyed, 0);
	cr_expect_eq(s.ids_orphaned, 0, "ids left on a destroyed event channel: %u",
		     s.ids_orphaned);
	cr_expect_eq(s.pd_busy, 0);
	cr_expect_eq(fake_cqs_live, 0);
	cr_expect_eq(fake_channels_live, 0);
	cr_expect_eq(fake_pds_live, 0);
	/* mlx5: every event went through the cq_event op, so no arm was
	 * lost; rxe has no op. */
	cr_expect_eq(s.ignored_arms, 0, "arms mlx5 would ignore: %u", s.ignored_arms);
	if (fake_provider() == FAKE_RXE)
		cr_expect_eq(s.cq_event_calls, 0);
}

TestSuite(endpoint, .timeout = 60);

/* ---- connections ---- */

static int hook_calls;
static char hook_pdata[64];
static int hook_pdata_len;

static int refuse(rr_listener *l, rr_ep *ep, const void *pdata, size_t len, void *data)
{
	hook_calls++;
	hook_pdata_len = (int)len;
	if (len)
		memcpy(hook_pdata, pdata, len < sizeof(hook_pdata) ? len : sizeof(hook_pdata));
	cr_assert_eq(rr_ep_set_private_data(ep, "go away", 8), 0);
	return 1;
}

static int admit(rr_listener *l, rr_ep *ep, const void *pdata, size_t len, void *data)
{
	hook_calls++;
	hook_pdata_len = (int)len;
	if (len)
		memcpy(hook_pdata, pdata, len < sizeof(hook_pdata) ? len : sizeof(hook_pdata));
	return 0;
}

Test(endpoint, connect_accept_private_data_both_ways)
{
	struct rr_ep_opts o = {.private_data = "client-hello", .private_data_len = 13};
	struct ep_state *c, *s;
	const void *pd;
	int n;

	setup_with(0, 0, 0);
	rr_listener_set_on_request(L, admit);
	c = connect_with(&o, 0);
	s = server_of(c);
	cr_assert_eq(hook_calls, 1);
	/* RoCE pads a request's private data to 56 bytes. */
	cr_expect_eq(hook_pdata_len, RR_PRIVATE_DATA_CONNECT_MAX);
	cr_expect_str_eq(hook_pdata, "client-hello");
	n = rr_ep_peer_private_data(s->ep, &pd);
	cr_assert_geq(n, 13);
	cr_expect_str_eq((const char *)pd, "client-hello");
	n = rr_ep_peer_private_data(c->ep, &pd);
	cr_expect_eq(n, RR_PRIVATE_DATA_ACCEPT_MAX);
	cr_expect_str_eq((const char *)pd, "server-hello");
	cr_expect_eq(s->qp_ready, 1);
	cr_expect_eq(c->qp_ready, 1);
	cr_expect_eq(c->connects, 1);
	cr_expect_eq(s->connects, 1);
	cr_expect_eq(fake_qp_state(rr_ep_qp(c->ep)), IBV_QPS_RTS);
	teardown_all();
}

Test(endpoint, reject_with_private_data)
{
	struct ep_state *c = &cli_st[ncli++];
	struct rr_listener_stats st;
	const void *pd;
	int n;

	setup_with(0, 0, 0);
	rr_listener_set_on_request(L, refuse);
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT,
				&(struct rr_ep_opts){.data = c, .on_disconnect = on_disconnect},
				sizeof(struct rr_ep_opts), on_connect, &c->ep),
		     0);
	PUMP_UNTIL(c->connects);
	cr_expect_eq(c->connect_status, -ECONNREFUSED);
	n = rr_ep_peer_private_data(c->ep, &pd);
	cr_expect_eq(n, RR_PRIVATE_DATA_REJECT_MAX);
	cr_expect_str_eq((const char *)pd, "go away");
	cr_expect_eq(hook_calls, 1);
	cr_expect_eq(accepts, 0);
	cr_expect_eq(nsrv, 0, "a refused request set up a QP");
	/* A refusal, not a drop. */
	cr_assert_eq(rr_listener_get_stats(L, &st, sizeof(st)), 0);
	cr_expect_eq(st.requests, 1);
	cr_expect_eq(st.refused, 1);
	cr_expect_eq(st.placed, 0);
	cr_expect_eq(st.dropped, 0);
	settle();
	cr_expect_eq(c->connects, 1);
	cr_expect_eq(c->downs, 0);
	cr_assert_eq(rr_ep_destroy(c->ep), 0);
	teardown_all();
}

Test(endpoint, connect_to_a_port_nobody_listens_on_is_refused)
{
	struct ep_state *c = &cli_st[ncli++];
	uint16_t port;

	setup_with(0, 0, 0);
	port = PORT;
	cr_assert_eq(rr_listener_destroy(L), 0);
	L = NULL;
	cr_assert_eq(rr_connect(cli, "127.0.0.1", port, &(struct rr_ep_opts){.data = c},
				sizeof(struct rr_ep_opts), on_connect, &c->ep),
		     0);
	PUMP_UNTIL(c->connects);
	cr_expect_eq(c->connect_status, -ECONNREFUSED);
	cr_assert_eq(rr_ep_destroy(c->ep), 0);
	teardown_all();
}

/* ---- traffic ---- */

Test(endpoint, send_recv_moves_the_bytes)
{
	struct ep_state *c, *s;
	struct req *sends[3];
	int base;

	setup_with(0, 0, 3);
	base = nreqs;
	c = connect_one(0, 0);
	s = server_of(c);
	for (int i = 0; i < 3; i++) {
		memset(slot(i), 'a' + i, 100 + i);
		sends[i] = new_req();
		cr_assert_eq(
			rr_ep_post_send(c->ep, slot(i), 100 + (uint32_t)i, MR, req_cb, sends[i]),
			0);
	}
	PUMP_UNTIL(sends[2]->calls && reqs[base + 2].calls);
	for (int i = 0; i < 3; i++) {
		struct req *r = &reqs[base + i]; /* the server's preposted receives */

		cr_expect_eq(sends[i]->calls, 1);
		cr_expect_eq(sends[i]->status, 0);
		cr_expect_eq(sends[i]->opcode, IBV_WC_SEND);
		cr_expect_eq(r->calls, 1);
		cr_expect_eq(r->status, 0);
		cr_expect_eq(r->opcode, IBV_WC_RECV);
		cr_expect_eq(r->byte_len, 100 + (uint32_t)i);
		cr_expect_eq(r->ep, s->ep);
		cr_expect_eq(slot(128 + i)[0], 'a' + i);
		cr_expect_eq(slot(128 + i)[99 + i], 'a' + i);
	}
	teardown_all();
}

/*
 * Data may beat the CM's RTU to the passive side, on any fabric: the
 * server's receive posted in on_qp_ready completes while its endpoint
 * waits for ESTABLISHED, and its callback answers at once. The endpoint
 * is handed over (on_accept) before that receive, so the answer is
 * posted, and the ESTABLISHED that comes later changes nothing.
 */
static struct req *early_rcv, *early_reply;
static int early_reply_rc = 1, early_accepts_then = -1;

static void answer_cb(rr_ep *ep, const struct rr_completion *c, void *data)
{
	req_cb(ep, c, data);
	early_accepts_then = accepts;
	if (c->status || !ep) /* no endpoint: an SRQ's, taken by one destroyed */
		return;
	early_reply = new_req();
	strcpy((char *)slot(20), "pong");
	early_reply_rc = rr_ep_post_send(ep, slot(20), 5, MR, req_cb, early_reply);
}

static void early_qp_ready(rr_ep *ep, int status, void *data)
{
	early_rcv = new_req();
	cr_assert_eq(rr_ep_post_recv(ep, slot(21), SLOT, MR, answer_cb, early_rcv), 0);
}

static void setup_srq(uint32_t depth);

/* The server listens with early_qp_ready (or on an SRQ, @on_srq, with the
 * receive posted to it) and holds its RTU back; a client with @prepost
 * receives connects and sends "ping", which the server's receive takes.
 * The client's last receive in *pong (if any); the ping. */
static struct req *ping_before_rtu(int prepost, struct req **pong, bool on_srq)
{
	struct rr_ep_opts so = {.on_qp_ready = early_qp_ready, .on_disconnect = on_disconnect};
	struct ep_state *c = &cli_st[ncli++];
	struct rr_ep_opts co = {
		.on_qp_ready = on_qp_ready, .on_disconnect = on_disconnect, .data = c};
	struct req *ping;

	if (on_srq) {
		setup_srq(8);
		early_rcv = new_req();
		cr_assert_eq(rr_srq_post_recv(SRQ, slot(21), SLOT, MR, answer_cb, early_rcv), 0);
	} else {
		open_bridges(0);
		listen_on(&so, &srv_proto);
	}
	fake_cm_rtu_late(true);
	c->prepost = prepost;
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT, &co, sizeof(co), on_connect, &c->ep), 0);
	PUMP_UNTIL(c->connects);
	cr_assert_eq(c->connect_status, 0);
	if (pong)
		*pong = &reqs[nreqs - 1]; /* from the client's on_qp_ready */
	cr_assert_eq(accepts, 0, "the server's ESTABLISHED came before its RTU");
	strcpy((char *)slot(0), "ping");
	ping = new_req();
	cr_assert_eq(rr_ep_post_send(c->ep, slot(0), 5, MR, req_cb, ping), 0);
	PUMP_UNTIL(early_rcv->calls);
	return ping;
}

static void early_receive_answers(bool on_srq)
{
	struct req *pong, *ping = ping_before_rtu(1, &pong, on_srq);

	cr_expect_eq(early_rcv->status, 0);
	cr_expect_str_eq((char *)slot(21), "ping");
	cr_expect_eq(early_accepts_then, 1, "the receive was handed out before on_accept");
	cr_assert_eq(early_reply_rc, 0, "the answer from its callback: %s",
		     strerror(-early_reply_rc));
	PUMP_UNTIL(early_reply->calls && pong->calls && ping->calls);
	cr_expect_eq(early_reply->status, 0);
	cr_expect_eq(pong->status, 0);
	cr_expect_str_eq((char *)slot(192), "pong");
	cr_expect_eq(fake_notifies, 1, "the CM was not told (rdma_notify)");
	/* Any RTU still held arrives now: nothing more happens. */
	fake_cm_rtu_late(false);
	settle();
	cr_expect_eq(accepts, 1, "on_accept ran %d times", accepts);
	cr_expect_eq(early_rcv->calls, 1);
	teardown_all();
}

Test(endpoint, a_receive_before_established_hands_the_endpoint_over_first)
{
	early_receive_answers(false);
}

Test(endpoint, an_srq_receive_before_established_hands_the_endpoint_over_first)
{
	early_receive_answers(true);
}

/*
 * An SRQ receive the accepting endpoint's QP took, whose completion comes
 * only after the endpoint was dropped (its listener destroyed) and its QP
 * lingers: the receive is the SRQ's, and completes once with no endpoint.
 * The early-receive hook ran on the destroyed endpoint instead:
 * rdma_notify() on its destroyed id, on_accept through the freed listener.
 */
Test(endpoint, an_srq_receive_completing_after_its_accepting_endpoint_went)
{
	struct ep_state *c = &cli_st[ncli++];
	struct rr_ep_opts co = {
		.on_qp_ready = on_qp_ready, .on_disconnect = on_disconnect, .data = c};
	struct req *ping;

	setup_srq(8);
	early_rcv = new_req();
	cr_assert_eq(rr_srq_post_recv(SRQ, slot(21), SLOT, MR, answer_cb, early_rcv), 0);
	fake_cm_rtu_late(true);
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT, &co, sizeof(co), on_connect, &c->ep), 0);
	PUMP_UNTIL(c->connects);
	cr_assert_eq(c->connect_status, 0);
	fake_hold_recvs(true);
	strcpy((char *)slot(0), "ping");
	ping = new_req();
	cr_assert_eq(rr_ep_post_send(c->ep, slot(0), 5, MR, req_cb, ping), 0);
	PUMP_UNTIL(ping->calls);
	cr_assert_eq(early_rcv->calls, 0);
	cr_assert_eq(accepts, 0);
	/* The accepting endpoint goes with its listener; its QP lingers. */
	cr_assert_eq(rr_listener_destroy(L), 0);
	L = NULL;
	fake_notifies = 0;
	fake_release_recvs();
	PUMP_UNTIL(early_rcv->calls);
	settle();
	cr_expect_eq(early_rcv->calls, 1);
	cr_expect_eq(early_rcv->status, 0, "%s", strerror(-early_rcv->status));
	cr_expect_null(early_rcv->ep, "handed out with the destroyed endpoint");
	cr_expect_eq(accepts, 0, "on_accept ran for an endpoint its listener dropped");
	cr_expect_eq(fake_notifies, 0, "rdma_notify() on a destroyed endpoint's id");
	fake_cm_rtu_late(false);
	teardown_all();
}

/* Destroyed in that on_accept: the receive completes once, cancelled. */
Test(endpoint, a_receive_before_established_whose_endpoint_on_accept_destroys)
{
	destroy_in_accept = true;
	ping_before_rtu(0, NULL, false);
	cr_expect_eq(early_rcv->status, -ECANCELED);
	cr_expect_eq(accepts, 1);
	fake_cm_rtu_late(false);
	settle();
	cr_expect_eq(early_rcv->calls, 1);
	cr_expect_eq(accepts, 1);
	cr_expect_null(early_reply, "a cancelled receive answered");
	teardown_all();
}

/* On an SRQ the receive is the SRQ's: it took the ping, so it completes
 * once, with success and no endpoint, after its taker was destroyed. */
Test(endpoint, an_srq_receive_before_established_whose_endpoint_on_accept_destroys)
{
	destroy_in_accept = true;
	ping_before_rtu(0, NULL, true);
	cr_expect_eq(early_rcv->status, 0, "%s", strerror(-early_rcv->status));
	cr_expect_null(early_rcv->ep, "handed out with the destroyed endpoint");
	cr_expect_str_eq((char *)slot(21), "ping");
	cr_expect_eq(accepts, 1);
	fake_cm_rtu_late(false);
	settle();
	cr_expect_eq(early_rcv->calls, 1);
	cr_expect_eq(accepts, 1);
	cr_expect_null(early_reply);
	teardown_all();
}

/* And then the SRQ, which a callback may destroy: the receive completes
 * once, cancelled with the SRQ, which goes only once that unwound (the
 * completion path read the receive after the SRQ was freed). */
Test(endpoint, an_srq_receive_before_established_whose_on_accept_destroys_the_srq)
{
	destroy_in_accept = true;
	destroy_srq_in_accept = true;
	ping_before_rtu(0, NULL, true);
	cr_expect_eq(early_rcv->calls, 1);
	cr_expect_eq(early_rcv->status, -ECANCELED, "%s", strerror(-early_rcv->status));
	cr_expect_null(early_rcv->ep);
	cr_expect_eq(accepts, 1);
	fake_cm_rtu_late(false);
	settle();
	cr_expect_eq(early_rcv->calls, 1);
	cr_expect_eq(accepts, 1);
	cr_expect_eq(fake_stats_get().srqs_live, 0, "the SRQ was not destroyed");
	teardown_all();
}

Test(endpoint, send_waits_for_a_receive)
{
	struct ep_state *c, *s;
	struct req *snd, *rcv;

	setup_with(0, 0, 0);
	c = connect_one(0, 0);
	s = server_of(c);
	strcpy((char *)slot(0), "late receive");
	snd = new_req();
	cr_assert_eq(rr_ep_post_send(c->ep, slot(0), 13, MR, req_cb, snd), 0);
	settle();
	cr_expect_eq(snd->calls, 0,
		     "a SEND with no receive posted completed (RNR retries "
		     "are infinite)");
	rcv = post_recv(s->ep, 10);
	PUMP_UNTIL(snd->calls && rcv->calls);
	cr_expect_eq(snd->status, 0);
	cr_expect_eq(rcv->byte_len, 13);
	cr_expect_str_eq((char *)slot(10), "late receive");
	teardown_all();
}

Test(endpoint, write_read_and_write_with_immediate)
{
	struct ep_state *c, *s;
	struct req *w, *rd, *wi, *rcv;
	uint64_t remote;

	setup_with(0, 0, 0);
	remote = (uintptr_t)slot(40);
	c = connect_one(0, 0);
	s = server_of(c);
	rcv = post_recv(s->ep, 50);
	/* WRITE */
	memset(slot(1), 0x5c, 300);
	w = new_req();
	cr_assert_eq(rr_ep_post_write(c->ep, slot(1), 300, MR, remote, MR->rkey, req_cb, w), 0);
	PUMP_UNTIL(w->calls);
	cr_expect_eq(w->status, 0, "WRITE: %s (wc %d)", strerror(-w->status), w->opcode);
	cr_expect_eq(w->opcode, IBV_WC_RDMA_WRITE);
	cr_expect_eq(slot(40)[0], 0x5c);
	cr_expect_eq(slot(40)[299], 0x5c);
	cr_expect_eq(slot(40)[300], 0);
	cr_expect_eq(rcv->calls, 0, "a plain WRITE consumed a receive");
	/* READ back what the peer has elsewhere */
	for (int i = 0; i < 512; i++)
		slot(41)[i] = (uint8_t)i;
	rd = new_req();
	cr_assert_eq(
		rr_ep_post_read(c->ep, slot(2), 512, MR, (uintptr_t)slot(41), MR->rkey, req_cb, rd),
		0);
	PUMP_UNTIL(rd->calls);
	cr_expect_eq(rd->status, 0);
	cr_expect_eq(rd->opcode, IBV_WC_RDMA_READ);
	cr_expect_eq(rd->byte_len, 512);
	cr_expect_eq(memcmp(slot(2), slot(41), 512), 0);
	/* WRITE with immediate: consumes the receive */
	memset(slot(3), 0x77, 64);
	wi = new_req();
	cr_assert_eq(rr_ep_post_write_imm(c->ep, slot(3), 64, MR, (uintptr_t)slot(42), MR->rkey,
					  0xdeadbeef, req_cb, wi),
		     0);
	PUMP_UNTIL(wi->calls && rcv->calls);
	cr_expect_eq(wi->status, 0);
	cr_expect_eq(rcv->status, 0);
	cr_expect_eq(rcv->opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	cr_expect(rcv->has_imm);
	cr_expect_eq(rcv->imm, 0xdeadbeef);
	cr_expect_eq(rcv->byte_len, 64);
	cr_expect_eq(slot(42)[63], 0x77);
	teardown_all();
}

Test(endpoint, remote_access_error_takes_the_connection_down)
{
	struct ep_state *c, *s;
	struct req *w;

	setup_with(0, 0, 2);
	c = connect_one(0, 0);
	s = server_of(c);
	cr_assert_eq(reqs[0].ep, NULL); /* the server's receives, not yet completed */
	w = new_req();
	cr_assert_eq(rr_ep_post_write(c->ep, slot(1), 64, MR, (uintptr_t)slot(40), MR->rkey ^ 0x100,
				      req_cb, w),
		     0);
	PUMP_UNTIL(w->calls && c->downs);
	cr_expect_eq(w->status, -EACCES);
	cr_expect_eq(c->down_status, -EACCES);
	cr_expect_eq(w->calls, 1);
	cr_expect_eq(c->downs, 1);
	/* The responder's QP is in error too: its receives are flushed. */
	PUMP_UNTIL(reqs[0].calls && reqs[1].calls);
	cr_expect_eq(reqs[0].status, -ECANCELED);
	cr_expect_eq(reqs[0].ep, s->ep);
	teardown_all();
}

/* ---- coalesced posting ---- */

/* Work a test wants posted inside a pass: the callback of a WRITE posted
 * from the test (outside any pass: a chain of its own) runs it. */
static void (*in_pass_fn)(rr_ep *ep);

static void trigger_cb(rr_ep *ep, const struct rr_completion *c, void *data)
{
	req_cb(ep, c, data);
	cr_assert_eq(c->status, 0);
	in_pass_fn(ep);
}

static void run_in_pass(rr_ep *ep, void (*fn)(rr_ep *ep))
{
	struct req *t = new_req();

	in_pass_fn = fn;
	cr_assert_eq(
		rr_ep_post_write(ep, slot(20), 8, MR, (uintptr_t)slot(21), MR->rkey, trigger_cb, t),
		0);
	PUMP_UNTIL(t->calls);
}

#define CHAIN 10
static struct req *chain[CHAIN], *chain_rcv[CHAIN];
static int chain_n, chain_rcv_n;
static bool chain_sends; /* SENDs, not WRITEs */

static void post_chain(rr_ep *ep)
{
	for (int i = 0; i < chain_rcv_n; i++) {
		chain_rcv[i] = new_req();
		cr_assert_eq(rr_ep_post_recv(ep, slot(24 + i), 64, MR, req_cb, chain_rcv[i]), 0);
	}
	for (int i = 0; i < chain_n; i++) {
		chain[i] = new_req();
		if (chain_sends)
			cr_assert_eq(rr_ep_post_send(ep, slot(i), 8, MR, req_cb, chain[i]), 0);
		else
			cr_assert_eq(rr_ep_post_write(ep, slot(22), 8, MR, (uintptr_t)slot(23),
						      MR->rkey, req_cb, chain[i]),
				     0);
	}
}

static bool chain_done(int from, int to)
{
	for (int i = from; i < to; i++)
		if (!chain[i]->calls)
			return false;
	return true;
}

Test(endpoint, posts_in_a_pass_go_as_one_chain_per_queue)
{
	struct rr_bridge_stats b0, b1;
	struct fake_posts s0, s1, r0, r1;
	struct ep_state *c;
	struct ibv_qp *qp;

	setup_with(0, 0, 0);
	c = connect_one(0, 0);
	qp = rr_ep_qp(c->ep);
	chain_n = CHAIN;
	chain_rcv_n = 4;
	s0 = fake_qp_send_posts(qp);
	r0 = fake_qp_recv_posts(qp);
	cr_assert_eq(rr_bridge_get_stats(cli, &b0, sizeof(b0)), 0);
	run_in_pass(c->ep, post_chain);
	s1 = fake_qp_send_posts(qp);
	r1 = fake_qp_recv_posts(qp);
	cr_assert_eq(rr_bridge_get_stats(cli, &b1, sizeof(b1)), 0);
	/* The trigger, then the pass's ten WRITEs in one call; four
	 * receives in another. */
	cr_expect_eq(s1.calls - s0.calls, 2, "%u ibv_post_send() calls", s1.calls - s0.calls);
	cr_expect_eq(s1.wrs - s0.wrs, 1 + CHAIN);
	cr_expect_eq(s1.max_chain, CHAIN);
	cr_expect_eq(r1.calls - r0.calls, 1, "%u ibv_post_recv() calls", r1.calls - r0.calls);
	cr_expect_eq(r1.wrs - r0.wrs, 4);
	cr_expect_eq(b1.posts - b0.posts, 1 + CHAIN + 4);
	cr_expect_eq(b1.chains - b0.chains, 3);
	cr_expect_eq(b1.wrs - b0.wrs, 1 + CHAIN + 4);
	PUMP_UNTIL(chain_done(0, CHAIN));
	settle();
	for (int i = 0; i < CHAIN; i++) {
		cr_expect_eq(chain[i]->calls, 1, "write %d: %d callbacks", i, chain[i]->calls);
		cr_expect_eq(chain[i]->status, 0);
		if (i)
			cr_expect_gt(chain[i]->seq, chain[i - 1]->seq, "write %d out of order", i);
	}
	cr_expect_eq(slot(23)[0], slot(22)[0]);
	teardown_all();
}

/*
 * Selective signalling in a chain: every 4th send and the chain's last
 * ask for a completion, and every send completes once, in order, with no
 * later post needed.
 */
Test(endpoint, selective_signalling_signals_the_last_of_each_chain)
{
	struct rr_ep_opts o = {.signal_every = 4, .max_send_wr = 16};
	struct fake_posts s0, s1;
	struct ep_state *c;

	setup_with(0, 0, 12);
	c = connect_with(&o, 0);
	chain_n = CHAIN;
	chain_rcv_n = 0;
	chain_sends = true;
	s0 = fake_qp_send_posts(rr_ep_qp(c->ep));
	run_in_pass(c->ep, post_chain);
	s1 = fake_qp_send_posts(rr_ep_qp(c->ep));
	cr_expect_eq(s1.calls - s0.calls, 2);
	/* The trigger (alone, so signalled), the 4th, the 8th, the 10th. */
	cr_expect_eq(s1.signalled - s0.signalled, 4, "%u signalled", s1.signalled - s0.signalled);
	cr_expect_eq(s1.last_unsignalled, 0, "a chain ended unsignalled");
	PUMP_UNTIL(chain_done(0, CHAIN));
	settle();
	for (int i = 0; i < CHAIN; i++) {
		cr_expect_eq(chain[i]->calls, 1, "send %d: %d callbacks", i, chain[i]->calls);
		cr_expect_eq(chain[i]->status, 0);
		if (i)
			cr_expect_gt(chain[i]->seq, chain[i - 1]->seq, "send %d out of order", i);
	}
	chain_sends = false;
	teardown_all();
}

/* Outside any pass a post goes at once, and alone: it asks for a
 * completion whatever signal_every says, so it never waits for a later
 * post to learn its outcome. */
Test(endpoint, post_outside_a_pass_goes_at_once_signalled)
{
	struct rr_ep_opts o = {.signal_every = 8};
	struct fake_posts s0, s1;
	struct req *w[3];
	struct ep_state *c;

	setup_with(0, 0, 0);
	c = connect_with(&o, 0);
	s0 = fake_qp_send_posts(rr_ep_qp(c->ep));
	for (int i = 0; i < 3; i++) {
		w[i] = new_req();
		cr_assert_eq(rr_ep_post_write(c->ep, slot(22), 8, MR, (uintptr_t)slot(23), MR->rkey,
					      req_cb, w[i]),
			     0);
		s1 = fake_qp_send_posts(rr_ep_qp(c->ep));
		cr_expect_eq(s1.calls - s0.calls, (unsigned int)i + 1,
			     "write %d not posted at once", i);
	}
	cr_expect_eq(s1.signalled - s0.signalled, 3);
	PUMP_UNTIL(w[0]->calls && w[1]->calls && w[2]->calls);
	for (int i = 0; i < 3; i++)
		cr_expect(w[i]->calls == 1 && w[i]->status == 0);
	teardown_all();
}

Test(endpoint, post_now_endpoint_posts_each_request_at_once)
{
	struct fake_posts s0, s1;
	struct ep_state *c;

	setup_with(0, 0, 0);
	c = connect_one(RR_EP_POST_NOW, 0);
	chain_n = CHAIN;
	chain_rcv_n = 0;
	s0 = fake_qp_send_posts(rr_ep_qp(c->ep));
	run_in_pass(c->ep, post_chain);
	s1 = fake_qp_send_posts(rr_ep_qp(c->ep));
	cr_expect_eq(s1.calls - s0.calls, 1 + CHAIN, "%u calls", s1.calls - s0.calls);
	cr_expect_eq(s1.max_chain, 1);
	cr_expect_eq(s1.signalled - s0.signalled, 1 + CHAIN);
	PUMP_UNTIL(chain_done(0, CHAIN));
	teardown_all();
}

/*
 * A pass posts what its callbacks held before it polls and arms its CQs:
 * a send whose completion is there at once (rxe over loopback, and the
 * fake, which completes on post) is taken by that poll instead of raising
 * an event that wakes the loop once more. The server echoes each message
 * from its receive callback in event mode, alone (the client held until
 * the echo is out): one CQ event a round, its receive's. Before, the
 * echo went out after the arm, and its completion woke the server again.
 * The echo leaves before the read of that event, too, as it would had it
 * been posted at once: held behind the read, the answer came late by a
 * syscall, after the other side had gone back to sleep.
 */
#define PP_ROUNDS 20

struct pp {
	int got, sent, left;
	uint8_t *rx, *tx;
};

static void pp_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct pp *p = data;

	cr_assert_eq(c->status, 0);
	p->sent++;
}

static void pp_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct pp *p = data;

	if (c->status)
		return; /* flushed at teardown */
	p->got++;
	cr_assert_eq(rr_ep_post_recv(ep, p->rx, SLOT, MR, pp_recv, p), 0);
	if (p->left && p->left--)
		cr_assert_eq(rr_ep_post_send(ep, p->tx, 8, MR, pp_sent, p), 0);
}

static void echo_wakes_once(bool embedded)
{
	struct rr_bridge_stats s0, s1;
	struct pp a = {0}, b = {.left = PP_ROUNDS};
	struct ep_state *c, *sv;
	struct ibv_qp *qp;

	srv_embedded = embedded;
	setup_with(0, 0, 0);
	a.rx = slot(30);
	a.tx = slot(31);
	b.rx = slot(32);
	b.tx = slot(33);
	c = connect_one(0, 0);
	sv = server_of(c);
	qp = rr_ep_qp(sv->ep);
	cr_assert_eq(rr_ep_post_recv(c->ep, a.rx, SLOT, MR, pp_recv, &a), 0);
	cr_assert_eq(rr_ep_post_recv(sv->ep, b.rx, SLOT, MR, pp_recv, &b), 0);
	settle();
	for (int i = 1; i <= PP_ROUNDS; i++) {
		cr_assert_eq(rr_bridge_get_stats(srv, &s0, sizeof(s0)), 0);
		cli_held = true;
		cr_assert_eq(rr_ep_post_send(c->ep, a.tx, 8, MR, pp_sent, &a), 0);
		PUMP_UNTIL(b.got == i && b.sent == i);
		settle();
		cr_assert_eq(rr_bridge_get_stats(srv, &s1, sizeof(s1)), 0);
		cr_expect_eq(s1.cq_events - s0.cq_events, 1,
			     "round %d: %llu CQ events for one message and its echo (%s, %s loop)",
			     i, (unsigned long long)(s1.cq_events - s0.cq_events),
			     fake_provider_name(), embedded ? "application's" : "built-in");
		cr_expect_lt(fake_qp_send_posts(qp).last_step,
			     fake_cq_of(qp->recv_cq)->delivered_step,
			     "round %d: the echo waited for the read of its message's event "
			     "(%s, %s loop)",
			     i, fake_provider_name(), embedded ? "application's" : "built-in");
		cli_held = false;
		PUMP_UNTIL(a.got == i && a.sent == i);
	}
	teardown_all();
	srv_embedded = false;
}

Test(endpoint, a_pass_posts_before_it_arms_so_a_quick_send_completion_wakes_nothing)
{
	echo_wakes_once(false);
}

Test(endpoint, an_embedded_pass_posts_before_it_arms_too)
{
	echo_wakes_once(true);
}

/*
 * The provider refuses a chain at its 3rd request: the first two go, the
 * rest fail, each with one callback and the provider's errno; the send
 * queue's accounting is exact afterwards (its whole depth can be posted,
 * and no more). Receives likewise.
 */
#define REFUSE_AT 2

static void arm_and_post_chain(rr_ep *ep)
{
	fake_refuse_send(rr_ep_qp(ep), REFUSE_AT, ENOMEM);
	fake_refuse_recv(rr_ep_qp(ep), 1, EINVAL);
	post_chain(ep);
}

Test(endpoint, refused_chain_fails_from_the_refused_request_on)
{
	struct rr_ep_opts o = {.signal_every = 4, .max_send_wr = 16};
	struct req *more[16];
	struct fake_posts s0, s1;
	struct ep_state *c;
	int n;

	setup_with(0, 0, 0);
	c = connect_with(&o, 0);
	chain_n = 6;
	chain_rcv_n = 3;
	s0 = fake_qp_send_posts(rr_ep_qp(c->ep));
	run_in_pass(c->ep, arm_and_post_chain);
	s1 = fake_qp_send_posts(rr_ep_qp(c->ep));
	cr_expect_eq(s1.calls - s0.calls, 2);
	cr_expect_eq(s1.wrs - s0.wrs, 1 + REFUSE_AT);
	/* Refused at the end of that pass: failed already, once each. */
	for (int i = REFUSE_AT; i < 6; i++) {
		cr_expect_eq(chain[i]->calls, 1, "write %d: %d callbacks", i, chain[i]->calls);
		cr_expect_eq(chain[i]->status, -ENOMEM, "write %d: %d", i, chain[i]->status);
		if (i > REFUSE_AT)
			cr_expect_gt(chain[i]->seq, chain[i - 1]->seq);
	}
	cr_expect_eq(chain_rcv[0]->calls, 0, "a receive the provider took completed");
	for (int i = 1; i < 3; i++) {
		cr_expect_eq(chain_rcv[i]->calls, 1);
		cr_expect_eq(chain_rcv[i]->status, -EINVAL);
	}
	/* The two taken asked for no completion (the 4th would have): they
	 * complete with the next send, which asks for one. */
	cr_expect_eq(rr_ep_outstanding(c->ep), REFUSE_AT + 1);
	for (n = 0; n < 16; n++) {
		int rc;

		more[n] = new_req();
		rc = rr_ep_post_write(c->ep, slot(22), 8, MR, (uintptr_t)slot(23), MR->rkey, req_cb,
				      more[n]);
		if (rc) {
			cr_expect_eq(rc, -ENOBUFS, "write %d: %s", n, strerror(-rc));
			nreqs--;
			break;
		}
	}
	/* Exactly the depth: 16 less the two in flight. */
	cr_expect_eq(n, 16 - REFUSE_AT, "%d more writes accepted", n);
	PUMP_UNTIL(chain_done(0, REFUSE_AT) && more[n - 1]->calls);
	settle();
	for (int i = 0; i < REFUSE_AT; i++)
		cr_expect(chain[i]->calls == 1 && chain[i]->status == 0, "write %d: %d calls, %d",
			  i, chain[i]->calls, chain[i]->status);
	for (int i = 0; i < n; i++)
		cr_expect(more[i]->calls == 1 && more[i]->status == 0);
	for (int i = REFUSE_AT; i < 6; i++)
		cr_expect_eq(chain[i]->calls, 1);
	cr_expect_eq(rr_ep_outstanding(c->ep), 1); /* the receive */
	teardown_all();
}

/* SRQ receives posted in a pass go as one chain; one refused fails
 * alone, with no endpoint. */
static struct req *srq_rcv[5];

static void post_srq_chain(rr_ep *ep)
{
	fake_refuse_srq_recv(rr_ep_qp(ep)->srq, 4, ENOMEM);
	for (int i = 0; i < 5; i++) {
		srq_rcv[i] = new_req();
		cr_assert_eq(rr_srq_post_recv(SRQ, slot(100 + i), 64, MR, req_cb, srq_rcv[i]), 0);
	}
}

Test(endpoint, srq_receives_in_a_pass_go_as_one_chain)
{
	struct fake_posts p0, p1;
	struct ep_state *c, *s;

	setup_srq(16);
	c = connect_one(0, 0);
	s = server_of(c);
	p0 = fake_srq_posts(rr_ep_qp(s->ep)->srq);
	run_in_pass(s->ep, post_srq_chain);
	p1 = fake_srq_posts(rr_ep_qp(s->ep)->srq);
	cr_expect_eq(p1.calls - p0.calls, 1);
	cr_expect_eq(p1.wrs - p0.wrs, 4);
	cr_expect_eq(p1.max_chain, 5);
	cr_expect_eq(fake_srq_posted(rr_ep_qp(s->ep)->srq), 4);
	cr_expect_eq(srq_rcv[4]->calls, 1);
	cr_expect_eq(srq_rcv[4]->status, -ENOMEM);
	cr_expect_null(srq_rcv[4]->ep);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(srq_rcv[i]->calls, 0);
	teardown_all();
}

/* A post the provider refuses outside a pass is no request taken: it
 * calls back never, and the stats count no chain and no work request for
 * it (they counted both, so wrs could exceed posts). */
Test(endpoint, a_refused_post_outside_a_pass_is_not_counted)
{
	struct rr_bridge_stats s0, s1, c0, c1;
	struct ep_state *c, *s;
	struct req *r[2];

	setup_srq(16);
	c = connect_one(0, 0);
	s = server_of(c);
	cr_assert_eq(rr_bridge_get_stats(srv, &s0, sizeof(s0)), 0);
	cr_assert_eq(rr_bridge_get_stats(cli, &c0, sizeof(c0)), 0);
	r[0] = new_req();
	r[1] = new_req();
	fake_refuse_srq_recv(rr_ep_qp(s->ep)->srq, 0, ENOMEM);
	cr_expect_eq(rr_srq_post_recv(SRQ, slot(100), 64, MR, req_cb, r[0]), -ENOMEM);
	fake_refuse_send(rr_ep_qp(c->ep), 0, ENOMEM);
	cr_expect_eq(rr_ep_post_send(c->ep, slot(101), 64, MR, req_cb, r[1]), -ENOMEM);
	cr_assert_eq(rr_bridge_get_stats(srv, &s1, sizeof(s1)), 0);
	cr_assert_eq(rr_bridge_get_stats(cli, &c1, sizeof(c1)), 0);
	cr_expect_eq(s1.posts - s0.posts, 0);
	cr_expect_eq(s1.chains - s0.chains, 0, "a refused SRQ receive counted as a chain");
	cr_expect_eq(s1.wrs - s0.wrs, 0);
	cr_expect_eq(c1.posts - c0.posts, 0);
	cr_expect_eq(c1.chains - c0.chains, 0, "a refused send counted as a chain");
	cr_expect_eq(c1.wrs - c0.wrs, 0);
	settle();
	cr_expect_eq(r[0]->calls + r[1]->calls, 0);
	teardown_all();
}

/*
 * The docs' server: a burst of 500 sends with signal_every 8 (so 500
 * mod 8 = 4 would trail a signalled one), posted from its callbacks,
 * then the peer hangs up cleanly once it has them all. Every send
 * completes with status 0, none with -ECANCELED.
 */
#define BURST 500

static struct {
	int posted, calls, ok, cancelled, other, recvd;
} B;

static void burst_fill(rr_ep *ep);

static void burst_cb(rr_ep *ep, const struct rr_completion *c, void *data)
{
	(void)data;
	B.calls++;
	if (!c->status)
		B.ok++;
	else if (c->status == -ECANCELED)
		B.cancelled++;
	else
		B.other++;
	if (!c->status)
		burst_fill(ep);
}

static void burst_fill(rr_ep *ep)
{
	while (B.posted < BURST) {
		int rc = rr_ep_post_send(ep, slot(0), 8, MR, burst_cb, NULL);

		if (rc == -ENOBUFS)
			break;
		cr_assert_eq(rc, 0, "send %d: %s", B.posted, strerror(-rc));
		B.posted++;
	}
}

static void burst_recv_cb(rr_ep *ep, const struct rr_completion *c, void *data)
{
	(void)ep;
	(void)data;
	if (!c->status)
		B.recvd++;
}

static void burst_srv_ready(rr_ep *ep, int status, void *data)
{
	struct ep_state *st = &srv_st[nsrv++];

	(void)status;
	(void)data;
	rr_ep_set_data(ep, st);
	st->ep = ep;
	st->qp_ready++;
	for (int i = 0; i < BURST; i++)
		cr_assert_eq(rr_ep_post_recv(ep, BUF + NSLOTS / 2 * SLOT + i * 64, 64, MR,
					     burst_recv_cb, NULL),
			     0);
}

Test(endpoint, burst_then_clean_hangup_every_send_succeeds)
{
	struct rr_ep_opts so = {
		.on_qp_ready = burst_srv_ready, .on_disconnect = on_disconnect, .max_recv_wr = 512};
	struct rr_ep_opts co = {.signal_every = 8, .max_send_wr = 64};
	struct fake_posts r;
	struct ep_state *c, *s;

	memset(&B, 0, sizeof(B));
	open_bridges(0);
	listen_on(&so, &srv_proto);
	c = connect_with(&co, 0);
	s = server_of(c);
	/* on_qp_ready's receives went as one chain, before the accept. */
	r = fake_qp_recv_posts(rr_ep_qp(s->ep));
	cr_expect_eq(r.calls, 1);
	cr_expect_eq(r.wrs, BURST);
	run_in_pass(c->ep, burst_fill);
	PUMP_UNTIL(B.recvd == BURST);
	cr_assert_eq(rr_ep_disconnect(s->ep), 0);
	PUMP_UNTIL(c->downs && s->downs);
	settle();
	cr_expect_eq(c->down_status, -ECONNRESET);
	cr_expect_eq(B.posted, BURST);
	cr_expect_eq(B.calls, BURST, "%d callbacks for %d sends", B.calls, BURST);
	cr_expect_eq(B.ok, BURST, "%d of %d sends the peer received succeeded (%d cancelled)", B.ok,
		     BURST, B.cancelled);
	cr_expect_eq(B.cancelled, 0);
	cr_expect_eq(B.other, 0);
	cr_expect_eq(rr_ep_outstanding(c->ep), 0);
	teardown_all();
}

Test(endpoint, shared_cq_serves_several_endpoints)
{
	struct ep_state *c[3], *s[3];
	struct req *snd[3];

	setup_with(0, RR_EP_SHARED_CQ, 1);
	for (int i = 0; i < 3; i++) {
		c[i] = connect_one(RR_EP_SHARED_CQ, 0);
		s[i] = server_of(c[i]);
	}
	for (int i = 1; i < 3; i++) {
		cr_expect_eq(rr_ep_cq(c[i]->ep), rr_ep_cq(c[0]->ep));
		cr_expect_eq(rr_ep_cq(s[i]->ep), rr_ep_cq(s[0]->ep));
	}
	for (int i = 0; i < 3; i++) {
		snprintf((char *)slot(i), 32, "to server %d", i);
		snd[i] = new_req();
		cr_assert_eq(rr_ep_post_send(c[i]->ep, slot(i), 32, MR, req_cb, snd[i]), 0);
	}
	PUMP_UNTIL(snd[0]->calls && snd[1]->calls && snd[2]->calls && reqs[0].calls &&
		   reqs[1].calls && reqs[2].calls);
	for (int i = 0; i < 3; i++) {
		char want[32];

		/* Receive i was posted by server endpoint i. */
		cr_expect_eq(reqs[i].ep, s[i]->ep);
		cr_expect_eq(reqs[i].status, 0);
		snprintf(want, sizeof(want), "to server %d", i);
		cr_expect_str_eq((char *)slot(128 + i * 8), want);
		cr_expect_eq(snd[i]->ep, c[i]->ep);
	}
	teardown_all();
}

/*
 * A callback may destroy another endpoint of its bridge (a server dropping
 * an older connection for a newer one does): the victim's requests each
 * complete once, inside the destroy, those whose success was already in
 * the shared CQ's batch with it; none is handed out after it returns.
 */
static rr_ep *victim;
static int victim_calls_at_destroy;

static void destroy_victim_cb(rr_ep *ep, const struct rr_completion *c, void *data)
{
	req_cb(ep, c, data);
	if (victim) {
		cr_assert_eq(rr_ep_destroy(victim), 0);
		victim = NULL;
		destroyed_flag = true;
		victim_calls_at_destroy = seq;
	}
}

Test(endpoint, a_callback_may_destroy_another_endpoint_of_its_bridge)
{
	struct ep_state *c[2];
	struct req *first, *snd[3];

	setup_with(0, RR_EP_SHARED_CQ, 4);
	for (int i = 0; i < 2; i++)
		c[i] = connect_one(RR_EP_SHARED_CQ, 0);
	cr_assert_eq(rr_ep_cq(c[0]->ep), rr_ep_cq(c[1]->ep));
	/* c0's send first, then three of c1's: four successes in one CQ. */
	cli_held = true;
	first = new_req();
	cr_assert_eq(rr_ep_post_send(c[0]->ep, slot(0), 8, MR, destroy_victim_cb, first), 0);
	for (int i = 0; i < 3; i++) {
		snd[i] = new_req();
		cr_assert_eq(rr_ep_post_send(c[1]->ep, slot(1 + i), 8, MR, req_cb, snd[i]), 0);
	}
	settle();
	cr_assert_eq(fake_cq_pending(rr_cq_ibv(rr_ep_cq(c[0]->ep))), 4);
	victim = c[1]->ep;
	cli_held = false;
	PUMP_UNTIL(first->calls);
	cr_expect_null(victim, "the first callback did not run first");
	settle();
	cr_expect_eq(first->calls, 1);
	cr_expect_eq(first->status, 0);
	for (int i = 0; i < 3; i++) {
		cr_expect_eq(snd[i]->calls, 1, "send %d of the destroyed endpoint: %d callbacks", i,
			     snd[i]->calls);
		cr_expect_eq(snd[i]->status, 0, "send %d: %s (its success was in the CQ)", i,
			     strerror(-snd[i]->status));
		cr_expect(!snd[i]->after_destroy, "send %d completed after the destroy returned",
			  i);
		cr_expect_leq(snd[i]->seq, victim_calls_at_destroy);
	}
	teardown_all();
}

/* ---- shared receive queues ---- */

static struct req *post_srq(int i)
{
	struct req *r = new_req();

	cr_assert_eq(rr_srq_post_recv(SRQ, slot(i), SLOT, MR, req_cb, r), 0);
	return r;
}

static void setup_srq(uint32_t depth)
{
	setup_with(0, RR_EP_SRQ, 0);
	cr_assert_eq(rr_srq_create(srv, fake_device(), depth, &SRQ), 0);
}

Test(endpoint, srq_receives_serve_every_endpoint)
{
	struct ep_state *c[2], *s[2];
	struct req *rcv[4], *snd[4];

	setup_srq(16);
	for (int i = 0; i < 2; i++) {
		c[i] = connect_one(0, 0);
		s[i] = server_of(c[i]);
		cr_expect_eq(rr_ep_srq(s[i]->ep), SRQ);
		cr_expect_eq(rr_ep_post_recv(s[i]->ep, slot(60), 8, MR, req_cb, NULL), -EINVAL);
	}
	for (int i = 0; i < 4; i++)
		rcv[i] = post_srq(100 + i);
	for (int i = 0; i < 4; i++) {
		snprintf((char *)slot(i), 16, "msg %d", i);
		snd[i] = new_req();
		cr_assert_eq(rr_ep_post_send(c[i % 2]->ep, slot(i), 16, MR, req_cb, snd[i]), 0);
	}
	PUMP_UNTIL(rcv[0]->calls && rcv[1]->calls && rcv[2]->calls && rcv[3]->calls);
	for (int i = 0; i < 4; i++) {
		char want[16];

		snprintf(want, sizeof(want), "msg %d", i);
		cr_expect_eq(rcv[i]->calls, 1);
		cr_expect_eq(rcv[i]->status, 0);
		/* In posting order: receive i took send i, from client i % 2. */
		cr_expect_eq(rcv[i]->ep, s[i % 2]->ep, "receive %d went to the wrong endpoint", i);
		cr_expect_str_eq((char *)slot(100 + i), want);
	}
	teardown_all();
}

/*
 * A receive the server's QP took from the SRQ, whose completion is in the
 * CQ but not handed out yet when the endpoint is destroyed: it completes,
 * once, with its real status (rr_srq_post_recv()). mlx5 purges the CQE
 * with the QP and gives the WQE back to the SRQ: a library that destroys
 * the QP first loses the receive.
 */
Test(endpoint, srq_receive_taken_by_a_destroyed_endpoint_completes)
{
	struct ep_state *c, *s;
	struct req *rcv, *snd;

	setup_srq(8);
	c = connect_one(0, 0);
	s = server_of(c);
	rcv = post_srq(100);
	snd = new_req();
	cr_assert_eq(rr_ep_post_send(c->ep, slot(0), 16, MR, req_cb, snd), 0);
	/* Consumed at once by the fake: its CQE waits in the server's CQ. */
	cr_assert_eq(fake_srq_posted(fake_device() ? rr_ep_qp(s->ep)->srq : NULL), 0);
	cr_assert_eq(rr_ep_destroy(s->ep), 0);
	destroyed_flag = true;
	PUMP_UNTIL(rcv->calls);
	cr_expect_eq(rcv->calls, 1);
	cr_expect_eq(rcv->status, 0, "the receive took the data: %s", strerror(-rcv->status));
	cr_expect_eq(fake_stats_get().srq_wqes_returned, 0,
		     "mlx5 gave %u consumed receives back to the SRQ (QP destroyed before "
		     "its CQ was drained)",
		     fake_stats_get().srq_wqes_returned);
	teardown_all();
}

/*
 * Endpoints on one SRQ come and go, each taking one receive whose
 * completion is still in its CQ when it is destroyed; a receive is
 * reposted for every callback. mlx5 purges the CQE of a destroyed QP and
 * gives the slot back to the SRQ: the receive would never complete, and
 * the library would count it outstanding for ever.
 */
Test(endpoint, srq_pool_survives_endpoint_churn)
{
	enum { DEPTH = 8, ROUNDS = 20 };
	struct req *rq[DEPTH + ROUNDS + 16];
	struct ibv_srq *isrq = NULL;
	int nrq = 0, calls = 0, rc;

	setup_srq(DEPTH);
	for (int i = 0; i < DEPTH; i++, nrq++)
		rq[nrq] = post_srq(100 + nrq % 64);
	for (int round = 0; round < ROUNDS; round++) {
		struct ep_state *c = connect_one(0, 0), *s = server_of(c);
		struct req *snd = new_req();

		isrq = rr_ep_qp(s->ep)->srq;
		cr_assert_eq(rr_ep_post_send(c->ep, slot(0), 16, MR, req_cb, snd), 0);
		/* Taken at once by the fake: its CQE waits in the server's CQ. */
		cr_assert_eq(fake_srq_posted(isrq), (unsigned int)(nrq - calls - 1));
		cr_assert_eq(rr_ep_destroy(s->ep), 0);
		PUMP_UNTIL(snd->calls);
		cr_expect_eq(snd->status, 0);
		cr_assert_eq(rr_ep_destroy(c->ep), 0);
		settle();
		calls = 0;
		for (int i = 0; i < nrq; i++) {
			cr_assert_leq(rq[i]->calls, 1, "receive %d: %d callbacks", i, rq[i]->calls);
			calls += rq[i]->calls;
		}
		cr_assert_eq(calls, round + 1,
			     "round %d: %d callbacks for the %d receives taken (%s)", round, calls,
			     round + 1, fake_provider_name());
		/* One receive back for every callback. */
		while (nrq < DEPTH + calls) {
			rq[nrq] = new_req();
			rc = rr_srq_post_recv(SRQ, slot(100 + nrq % 64), SLOT, MR, req_cb, rq[nrq]);
			cr_assert(rc != -ENOBUFS || fake_srq_room(isrq) == 0,
				  "round %d: -ENOBUFS with %u of the SRQ's slots free", round,
				  fake_srq_room(isrq));
			cr_assert_eq(rc, 0, "rr_srq_post_recv: %s", strerror(-rc));
			nrq++;
		}
		cr_assert_eq(fake_srq_posted(isrq), (unsigned int)(nrq - calls));
	}
	/* Fill what is left: the library's room must be the SRQ's. */
	for (;;) {
		struct req *r = new_req();

		rc = rr_srq_post_recv(SRQ, slot(100 + nrq % 64), SLOT, MR, req_cb, r);
		if (rc)
			break;
		cr_assert_lt(nrq, (int)(sizeof(rq) / sizeof(rq[0])));
		rq[nrq++] = r;
	}
	cr_expect_eq(rc, -ENOBUFS);
	cr_expect_eq(fake_srq_room(isrq), 0, "-ENOBUFS with %u of the SRQ's slots free",
		     fake_srq_room(isrq));
	cr_expect_eq(fake_srq_posted(isrq), (unsigned int)(nrq - calls));
	cr_assert_eq(rr_srq_destroy(SRQ), 0);
	for (int i = 0; i < nrq; i++)
		cr_expect_eq(rq[i]->calls, 1, "receive %d: %d callbacks", i, rq[i]->calls);
	teardown_all();
}

/* ---- teardown ---- */

Test(endpoint, graceful_disconnect_flushes_and_reports)
{
	struct ep_state *c, *s;

	setup_with(0, 0, 4);
	c = connect_one(0, 2);
	s = server_of(c);
	cr_assert_eq(rr_ep_disconnect(c->ep), 0);
	PUMP_UNTIL(c->downs && s->downs);
	settle();
	cr_expect_eq(c->downs, 1);
	cr_expect_eq(c->down_status, 0);
	cr_expect_eq(s->downs, 1);
	cr_expect_eq(s->down_status, -ECONNRESET);
	PUMP_UNTIL(rr_ep_outstanding(c->ep) == 0 && rr_ep_outstanding(s->ep) == 0);
	for (int i = 0; i < nreqs; i++) {
		cr_expect_eq(reqs[i].calls, 1, "receive %d: %d callbacks", i, reqs[i].calls);
		cr_expect_eq(reqs[i].status, -ECANCELED);
	}
	cr_expect_eq(nreqs, 6);
	cr_expect_eq(rr_ep_disconnect(c->ep), -ENOTCONN);
	teardown_all();
}

/*
 * rr_ep_destroy(): every request outstanding gets one callback before it
 * returns, those whose completion is in the CQ with its real status; none
 * afterwards. A SEND the peer took already has its success waiting in the
 * CQ: mlx5 purges it if the QP is destroyed before the CQ is drained.
 */
Test(endpoint, destroy_reports_completions_already_in_the_cq)
{
	struct ep_state *c;
	struct req *snd[3], *rcv[2];
	int base;

	setup_with(0, 0, 3);
	base = nreqs;
	c = connect_one(0, 2);
	/* The client's on_qp_ready runs first: its receives come first. */
	rcv[0] = &reqs[base];
	rcv[1] = &reqs[base + 1];
	cr_assert_eq(rcv[0]->ep, NULL);
	for (int i = 0; i < 3; i++) {
		snd[i] = new_req();
		cr_assert_eq(rr_ep_post_send(c->ep, slot(i), 8, MR, req_cb, snd[i]), 0);
	}
	/* The fake delivered them at once: three successes wait in the CQ. */
	cr_assert_eq(fake_cq_pending(rr_cq_ibv(rr_ep_cq(c->ep))), 3);
	cr_assert_eq(rr_ep_destroy(c->ep), 0);
	destroyed_flag = true;
	for (int i = 0; i < 3; i++) {
		cr_expect_eq(snd[i]->calls, 1);
		cr_expect_eq(snd[i]->status, 0, "send %d: %s (its success was in the CQ)", i,
			     strerror(-snd[i]->status));
	}
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(rcv[i]->calls, 1);
		cr_expect_eq(rcv[i]->status, -ECANCELED);
	}
	settle();
	for (int i = 0; i < 3; i++)
		cr_expect(snd[i]->calls == 1 && !snd[i]->after_destroy);
	for (int i = 0; i < 2; i++)
		cr_expect(rcv[i]->calls == 1 && !rcv[i]->after_destroy);
	cr_expect_eq(fake_stats_get().cqes_purged, 0,
		     "the QP was destroyed with %u completions in its CQ",
		     fake_stats_get().cqes_purged);
	teardown_all();
}

Test(endpoint, destroy_with_requests_outstanding)
{
	struct ep_state *c, *s;
	struct req *snd[4];
	int before;

	setup_with(0, 0, 0);
	c = connect_one(0, 3);
	s = server_of(c);
	for (int i = 0; i < 4; i++) {
		snd[i] = new_req();
		/* No receive on the server: they wait. */
		cr_assert_eq(rr_ep_post_send(c->ep, slot(i), 8, MR, req_cb, snd[i]), 0);
	}
	settle();
	before = seq;
	cr_assert_eq(rr_ep_destroy(c->ep), 0);
	destroyed_flag = true;
	for (int i = 0; i < nreqs; i++) {
		cr_expect_eq(reqs[i].calls, 1, "request %d: %d callbacks", i, reqs[i].calls);
		cr_expect_eq(reqs[i].status, -ECANCELED);
		cr_expect(!reqs[i].after_destroy);
	}
	cr_expect_eq(seq - before, 7);
	/* The server hears the end. */
	PUMP_UNTIL(s->downs);
	cr_expect_eq(s->down_status, -ECONNRESET);
	settle();
	cr_expect_eq(seq - before, 7, "callbacks after rr_ep_destroy()");
	teardown_all();
}

Test(endpoint, bridge_destroy_with_everything_live)
{
	struct ep_state *c[3];
	struct req *snd;

	setup_with(0, 0, 2);
	for (int i = 0; i < 3; i++)
		c[i] = connect_one(i == 1 ? RR_EP_SHARED_CQ : 0, 2);
	snd = new_req();
	cr_assert_eq(rr_ep_post_send(c[0]->ep, slot(0), 8, MR, req_cb, snd), 0);
	/* A connect half way, too. */
	cli_st[ncli].prepost = 0;
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT, &(struct rr_ep_opts){.data = &cli_st[ncli]},
				sizeof(struct rr_ep_opts), on_connect, &cli_st[ncli].ep),
		     0);
	ncli++;
	cr_assert_eq(rr_mr_dereg(MR), 0);
	MR = NULL;
	cr_assert_eq(rr_bridge_destroy(srv), 0);
	srv = NULL;
	L = NULL; /* went with its bridge */
	cr_assert_eq(rr_bridge_destroy(cli), 0);
	cli = NULL;
	for (int i = 0; i < nreqs; i++)
		cr_expect_eq(reqs[i].calls, 1, "request %d: %d callbacks", i, reqs[i].calls);
	teardown_all();
}

/* ---- the provider's side ---- */

Test(endpoint, cqs_and_events_as_the_provider_wants)
{
	struct ep_state *c, *s;
	struct req *snd[8];
	struct fake_stats st;
	struct fake_cq *fc;

	setup_with(0, 0, 8);
	c = connect_one(0, 0);
	s = server_of(c);
	fc = fake_cq_of(rr_cq_ibv(rr_ep_cq(s->ep)));
	cr_expect_lt(fake_cq_comp_vector(&fc->cq), fake_device()->num_comp_vectors);
	for (int i = 0; i < 8; i++) {
		snd[i] = new_req();
		cr_assert_eq(rr_ep_post_send(c->ep, slot(i), 8, MR, req_cb, snd[i]), 0);
		PUMP_UNTIL(snd[i]->calls && reqs[i].calls);
	}
	st = fake_stats_get();
	cr_expect_gt(fc->events, 0);
	if (fake_provider() == FAKE_MLX5)
		cr_expect_eq(fc->cq_event_calls, fc->delivered,
			     "every event read must pass the cq_event op");
	cr_expect_eq(fc->ignored_arms, 0);
	cr_expect_eq(st.cq_overruns, 0);
	teardown_all();
}

/*
 * Ring reads only where the provider needs no call per event: rxe's
 * channels are read through the ring (no ibv_get_cq_event() at all),
 * mlx5's with ibv_get_cq_event(), every event passing its cq_event op.
 */
Test(endpoint, traffic_with_channels_read_through_the_ring)
{
	unsigned int reads0 = fake_event_reads;
	struct rr_bridge_stats bs[2];
	struct ep_state *c, *s;
	struct fake_stats st;
	struct req *snd[4];

	setup_with(RR_BRIDGE_RING_READ, 0, 4);
	c = connect_one(0, 0);
	s = server_of(c);
	for (int i = 0; i < 4; i++) {
		snd[i] = new_req();
		cr_assert_eq(rr_ep_post_send(c->ep, slot(i), 8, MR, req_cb, snd[i]), 0);
		PUMP_UNTIL(snd[i]->calls && reqs[i].calls);
		cr_expect_eq(reqs[i].ep, s->ep);
	}
	st = fake_stats_get();
	rr_bridge_get_stats(srv, &bs[0], sizeof(bs[0]));
	rr_bridge_get_stats(cli, &bs[1], sizeof(bs[1]));
	cr_expect_gt(bs[0].cq_events + bs[1].cq_events, 0);
	if (fake_provider() == FAKE_MLX5) {
		cr_expect_gt(fake_event_reads - reads0, 0,
			     "mlx5 has a cq_event op: its channels are not for the ring");
		cr_expect_gt(st.cq_events_delivered, 0);
		cr_expect_eq(st.cq_event_calls, st.cq_events_delivered,
			     "%u events read, %u passed the provider's cq_event op",
			     st.cq_events_delivered, st.cq_event_calls);
		cr_expect_eq(st.ignored_arms, 0);
	} else {
		cr_expect_eq(fake_event_reads - reads0, 0,
			     "%u ibv_get_cq_event() calls: rxe's channels were not read through "
			     "the ring",
			     fake_event_reads - reads0);
		cr_expect_eq(st.cq_events_delivered, 0);
		cr_expect_eq(st.cq_event_calls, 0);
	}
	teardown_all();
}

static int fatal_seen;

static void ignore_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
}

static void count_fatal(rr_bridge *b, const struct ibv_async_event *ev, void *data)
{
	if (ev->event_type == IBV_EVENT_DEVICE_FATAL)
		fatal_seen++;
}

Test(endpoint, device_unplug_ends_connections_without_spinning)
{
	struct ep_state *c, *s;
	struct rr_bridge_stats bs;
	int handled = 0;
	double t0;

	async_hook = count_fatal;
	setup_with(0, 0, 1);
	c = connect_one(0, 1);
	s = server_of(c);
	fake_device_disassociate();
	PUMP_UNTIL(c->downs && s->downs);
	cr_expect_eq(c->down_status, -EIO);
	cr_expect_eq(s->down_status, -EIO);
	cr_expect_geq(fatal_seen, 1);
	/* The async fd now says POLLHUP for good: the bridges must not wake
	 * for it on every pass. */
	t0 = now_s();
	while (now_s() - t0 < 0.2)
		handled += rr_bridge_run_once(srv, 10) + rr_bridge_run_once(cli, 10);
	rr_bridge_get_stats(srv, &bs, sizeof(bs));
	cr_expect_lt(handled, 200, "%d CQEs in 200 ms on a dead device", handled);
	cr_expect_lt(bs.async_events, 10);
	teardown_all();
}

/* DEVICE_FATAL heard by srv [0] and by cli [1]. */
static int fatal_by[2];

static void count_fatal_by(rr_bridge *b, const struct ibv_async_event *ev, void *data)
{
	if (ev->event_type == IBV_EVENT_DEVICE_FATAL)
		fatal_by[b == cli]++;
}

/*
 * Two bridges whose CQs are all on channels of rr_channel_create() (many
 * CQs on one channel of the application's each): a hot unplug is heard
 * by both, once each, whichever read the async fd, and the dead device
 * refuses new CQs. Nothing else of theirs is on the device.
 */
Test(endpoint, unplug_reaches_bridges_whose_cqs_are_on_their_own_channels)
{
	struct rr_cq_opts co = {.on_wc = ignore_wc};
	rr_bridge *bs[2];
	rr_channel *ch[2];
	rr_cq *cqs[2][2], *late;
	int handled = 0;
	double t0;

	async_hook = count_fatal_by;
	open_bridges(0);
	bs[0] = srv;
	bs[1] = cli;
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(rr_channel_create(bs[i], fake_device(), &ch[i]), 0);
		for (int k = 0; k < 2; k++)
			cr_assert_eq(rr_cq_create(bs[i], ch[i], fake_device(), &co, sizeof(co),
						  &cqs[i][k]),
				     0);
	}
	settle();
	fake_device_disassociate();
	PUMP_UNTIL(fatal_by[0] && fatal_by[1]);
	t0 = now_s();
	while (now_s() - t0 < 0.2)
		handled += rr_bridge_run_once(srv, 10) + rr_bridge_run_once(cli, 10);
	cr_expect_lt(handled, 200, "%d CQEs in 200 ms on a dead device", handled);
	cr_expect_eq(fatal_by[0], 1, "srv heard DEVICE_FATAL %d times", fatal_by[0]);
	cr_expect_eq(fatal_by[1], 1, "cli heard DEVICE_FATAL %d times", fatal_by[1]);
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(rr_cq_create(bs[i], ch[i], fake_device(), &co, sizeof(co), &late),
			     -ENODEV);
		for (int k = 0; k < 2; k++)
			cr_assert_eq(rr_cq_destroy(cqs[i][k]), 0);
		cr_assert_eq(rr_channel_destroy(ch[i]), 0);
	}
	teardown_all();
}

/* ---- async events reach the bridge that owns what they name ---- */

struct async_rec {
	rr_bridge *b;	    /* the bridge whose callback ran */
	rr_bridge *running; /* the bridge whose pass it ran in */
	enum ibv_event_type type;
	void *element;
	rr_ep *ep; /* a QP event's ev->element.qp->qp_context */
};

static struct async_rec async_seen[32];
static int nasync;
static bool destroy_named;	 /* the hook destroys the endpoint a QP_FATAL names */
static bool destroy_on_last_wqe; /* ... the one LAST_WQE_REACHED names */

static void record_async(rr_bridge *b, const struct ibv_async_event *ev, void *data)
{
	struct async_rec *r = &async_seen[nasync < 32 ? nasync++ : 31];

	*r = (struct async_rec){.b = b, .running = running, .type = ev->event_type};
	if (ev->event_type == IBV_EVENT_QP_LAST_WQE_REACHED && destroy_on_last_wqe) {
		cr_assert_eq(rr_ep_destroy(ev->element.qp->qp_context), 0);
		destroyed_flag = true;
	}
	if (ev->event_type != IBV_EVENT_QP_FATAL)
		return;
	/* Valid during the call: an event of a destroyed QP must not come. */
	r->element = ev->element.qp;
	r->ep = ev->element.qp->qp_context;
	if (destroy_named) {
		cr_assert_eq(rr_ep_destroy(r->ep), 0);
		destroyed_flag = true;
	}
}

/* The QP_FATAL records naming @qp, heard by @b (NULL: by any bridge). */
static int async_count(rr_bridge *b, const struct ibv_qp *qp, struct async_rec **last)
{
	int n = 0;

	for (int i = 0; i < nasync; i++) {
		if (async_seen[i].element != qp || (b && async_seen[i].b != b))
			continue;
		n++;
		if (last)
			*last = &async_seen[i];
	}
	return n;
}

/* Both bridges hear the device (srv: A, the listener; cli: B) and one
 * connection, its client endpoint on B with a receive posted. */
static struct ep_state *async_setup(void)
{
	async_hook = record_async;
	setup_with(0, 0, 0);
	return connect_one(0, 1);
}

/* Queue QP_FATAL for @qp and let only A read the device's async fd. */
static void fatal_read_by_srv(struct ibv_qp *qp)
{
	cr_assert_not_null(qp);
	fake_device_async_event(IBV_EVENT_QP_FATAL, qp);
	cli_held = true;
	PUMP_UNTIL(fake_device_async_queued() == 0);
	cli_held = false;
}

Test(endpoint, async_event_reaches_only_the_bridge_that_owns_the_qp)
{
	struct ep_state *c = async_setup();
	struct ibv_qp *qp = rr_ep_qp(c->ep);
	struct async_rec *r = NULL;

	fatal_read_by_srv(qp);
	cr_assert_eq(async_count(srv, qp, NULL), 0,
		     "the bridge that read QP_FATAL got it: the QP is another bridge's");
	PUMP_UNTIL(c->downs);
	settle();
	cr_expect_eq(async_count(srv, qp, NULL), 0);
	cr_assert_eq(async_count(NULL, qp, &r), 1, "QP_FATAL heard %d times",
		     async_count(NULL, qp, NULL));
	cr_expect_eq(r->b, cli);
	cr_expect_eq(r->running, cli, "the owner heard it outside its own pass");
	cr_expect_eq(r->ep, c->ep);
	cr_expect_eq(c->downs, 1);
	cr_expect_eq(c->down_status, -EIO);
	PUMP_UNTIL(reqs[0].calls);
	cr_expect_eq(reqs[0].status, -ECANCELED);
	teardown_all();
}

/*
 * io_uring_submit() of the library, wrapped (tests/unit/meson.build):
 * while probing, each call checks from another thread whether the
 * process-wide lock of the device layer is held, by asking for it the
 * way any bridge does (a CQ on the device's shared channel is claimed
 * under it). A submit may wait (on SQPOLL up to a second for room):
 * under that lock it would stall every other thread's claims.
 */
int __real_io_uring_submit(struct io_uring *ring);
int __wrap_io_uring_submit(struct io_uring *ring);
static bool probing;
static int probes, probes_blocked;
static pthread_t blocked_probe; /* joined once the library let go */
static rr_cq *probe_cq;

static void probe_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
}

static void *claim_on_cli(void *arg)
{
	struct rr_cq_opts co = {.on_wc = probe_wc};
	rr_cq **cq = arg;

	if (rr_cq_create(cli, NULL, fake_device(), &co, sizeof(co), cq))
		*cq = NULL;
	return NULL;
}

static void probe_done(void)
{
	if (probe_cq)
		cr_assert_eq(rr_cq_destroy(probe_cq), 0);
	probe_cq = NULL;
}

int __wrap_io_uring_submit(struct io_uring *ring)
{
	struct timespec until;
	pthread_t t;

	if (!probing || probes_blocked)
		return __real_io_uring_submit(ring);
	probes++;
	cr_assert_eq(pthread_create(&t, NULL, claim_on_cli, &probe_cq), 0);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	if (pthread_timedjoin_np(t, NULL, &until) == ETIMEDOUT) {
		probes_blocked++;
		blocked_probe = t;
	} else {
		probe_done();
	}
	return __real_io_uring_submit(ring);
}

/*
 * A reads QP_FATAL of B's QP while the application has filled A's SQ
 * (it embeds A and submits later): forwarding the event to B queues a
 * MSG_RING SQE on A's ring, which must make room with a submit. Not
 * while holding the device layer's lock. Before the fix it did.
 */
Test(endpoint, forwarding_an_async_event_submits_outside_the_device_lock)
{
	struct ep_state *c = async_setup();
	struct ibv_qp *qp = rr_ep_qp(c->ep);
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	struct rr_bridge_stats st0, st;

	cr_assert_eq(rr_bridge_flush(srv), 0);
	cr_assert_eq(rr_bridge_get_stats(srv, &st0, sizeof(st0)), 0);
	fake_device_async_event(IBV_EVENT_QP_FATAL, qp);
	while (fake_device_async_queued()) {
		cr_assert_eq(io_uring_wait_cqe(&rings[0], &cqe), 0);
		while ((sqe = io_uring_get_sqe(&rings[0])))
			io_uring_prep_nop(sqe); /* user_data 0: the application's */
		probing = true;
		cr_assert_geq(rr_bridge_handle_cqe(srv, cqe), 0);
		probing = false;
		if (probes_blocked == 1) {
			pthread_join(blocked_probe, NULL);
			probe_done();
			probes_blocked++; /* joined; counted as one */
		}
		io_uring_cqe_seen(&rings[0], cqe);
	}
	/* The application reaps its NOPs before the built-in loop runs. */
	cr_assert_geq(io_uring_submit(&rings[0]), 0);
	for (;;) {
		struct __kernel_timespec ts = {.tv_nsec = 200 * 1000000};

		if (io_uring_wait_cqe_timeout(&rings[0], &cqe, &ts))
			break;
		cr_assert_geq(rr_bridge_handle_cqe(srv, cqe), 0);
		io_uring_cqe_seen(&rings[0], cqe);
	}
	cr_assert_eq(rr_bridge_get_stats(srv, &st, sizeof(st)), 0);
	cr_assert_gt(st.sq_full, st0.sq_full, "A's SQ was never found full");
	cr_expect_gt(probes, 0);
	cr_expect_eq(probes_blocked, 0, "a submit under the device lock (of %d probed)", probes);
	PUMP_UNTIL(c->downs); /* B heard it */
	cr_expect_eq(async_count(NULL, qp, NULL), 1);
	teardown_all();
}

/* Read by A, then B destroys the endpoint before its pass: stale. */
Test(endpoint, async_event_of_an_endpoint_destroyed_before_its_owner_ran_is_dropped)
{
	struct ep_state *c = async_setup();
	struct ibv_qp *qp = rr_ep_qp(c->ep);

	fatal_read_by_srv(qp);
	cr_assert_eq(rr_ep_destroy(c->ep), 0);
	destroyed_flag = true;
	settle();
	cr_expect_eq(async_count(NULL, qp, NULL), 0,
		     "QP_FATAL of a destroyed QP reached an on_async_event");
	cr_expect_eq(c->downs, 0);
	cr_expect_eq(reqs[0].calls, 1);
	cr_expect(!reqs[0].after_destroy);
	teardown_all();
}

/* The hook destroys the endpoint the event names: nothing of it runs
 * afterwards (its QP would otherwise go to error: on_disconnect). */
Test(endpoint, async_hook_may_destroy_the_endpoint_the_event_names)
{
	struct ep_state *c = async_setup();
	struct ibv_qp *qp = rr_ep_qp(c->ep);
	struct async_rec *r = NULL;

	destroy_named = true;
	fatal_read_by_srv(qp);
	PUMP_UNTIL(destroyed_flag);
	settle();
	cr_assert_eq(async_count(NULL, qp, &r), 1);
	cr_expect_eq(r->b, cli, "the endpoint's bridge did not hear its QP's event");
	cr_expect_eq(r->running, cli);
	cr_expect_eq(r->ep, c->ep);
	cr_expect_eq(reqs[0].calls, 1);
	cr_expect_eq(reqs[0].status, -ECANCELED);
	cr_expect(!reqs[0].after_destroy, "a callback after rr_ep_destroy()");
	cr_expect_eq(c->downs, 0, "on_disconnect of an endpoint destroyed in the hook");
	teardown_all();
}

/*
 * The hook destroys the SRQ endpoint that LAST_WQE_REACHED names: the
 * destroy lingers for its QP's last receive, which is that very event, so
 * it ends the linger. (It was consumed before: the QP lingered the whole
 * wait, on rxe and on a provider that raises the event once.)
 */
Test(endpoint, async_hook_destroying_on_last_wqe_reached_ends_the_linger)
{
	struct ep_state *c, *s;
	unsigned int live;

	async_hook = record_async;
	setup_srq(8);
	c = connect_one(0, 0);
	s = server_of(c);
	live = fake_stats_get().qps_live;
	destroy_on_last_wqe = true;
	fake_device_async_event(IBV_EVENT_QP_LAST_WQE_REACHED, rr_ep_qp(s->ep));
	PUMP_UNTIL(destroyed_flag);
	settle();
	cr_expect_eq(fake_stats_get().qps_live, live - 1,
		     "the QP lingers for the event its destroy's hook consumed");
	teardown_all();
}

static int heard_cq_err(rr_bridge *b)
{
	int n = 0;

	for (int i = 0; i < nasync; i++)
		n += async_seen[i].type == IBV_EVENT_CQ_ERR && async_seen[i].b == b;
	return n;
}

/* A CQ of rr_cq_create() belongs to its bridge: a CQ_ERR naming it reaches
 * that bridge's on_async_event alone, on its thread, even when another
 * bridge read it (it went to whichever read the device first). */
Test(endpoint, cq_err_of_an_application_cq_reaches_only_its_bridge)
{
	struct rr_cq_opts co = {.on_wc = ignore_wc};
	rr_cq *mine, *other;

	async_hook = record_async;
	open_bridges(0);
	cr_assert_eq(rr_cq_create(cli, NULL, fake_device(), &co, sizeof(co), &mine), 0);
	cr_assert_eq(rr_cq_create(srv, NULL, fake_device(), &co, sizeof(co), &other), 0);
	fake_device_async_event(IBV_EVENT_CQ_ERR, rr_cq_ibv(mine));
	cli_held = true;
	PUMP_UNTIL(fake_device_async_queued() == 0);
	cli_held = false;
	settle();
	cr_expect_eq(heard_cq_err(srv), 0, "the bridge that read it heard another's CQ_ERR");
	cr_expect_eq(heard_cq_err(cli), 1, "the CQ's bridge heard its CQ_ERR %d times",
		     heard_cq_err(cli));
	cr_assert_eq(rr_cq_destroy(mine), 0);
	cr_assert_eq(rr_cq_destroy(other), 0);
	teardown_all();
}

/* The same for CQs on channels of rr_channel_create(): each CQ is claimed
 * by its bridge whichever channel it signals. */
Test(endpoint, cq_err_of_a_cq_on_an_application_channel_reaches_only_its_bridge)
{
	struct rr_cq_opts co = {.on_wc = ignore_wc};
	rr_channel *cli_ch, *srv_ch;
	rr_cq *mine, *other;

	async_hook = record_async;
	open_bridges(0);
	cr_assert_eq(rr_channel_create(cli, fake_device(), &cli_ch), 0);
	cr_assert_eq(rr_channel_create(srv, fake_device(), &srv_ch), 0);
	cr_assert_eq(rr_cq_create(cli, cli_ch, fake_device(), &co, sizeof(co), &mine), 0);
	cr_assert_eq(rr_cq_create(srv, srv_ch, fake_device(), &co, sizeof(co), &other), 0);
	fake_device_async_event(IBV_EVENT_CQ_ERR, rr_cq_ibv(mine));
	cli_held = true;
	PUMP_UNTIL(fake_device_async_queued() == 0);
	cli_held = false;
	settle();
	cr_expect_eq(heard_cq_err(srv), 0, "the bridge that read it heard another's CQ_ERR");
	cr_expect_eq(heard_cq_err(cli), 1, "the CQ's bridge heard its CQ_ERR %d times",
		     heard_cq_err(cli));
	cr_assert_eq(rr_cq_destroy(mine), 0);
	cr_assert_eq(rr_cq_destroy(other), 0);
	cr_assert_eq(rr_channel_destroy(cli_ch), 0);
	cr_assert_eq(rr_channel_destroy(srv_ch), 0);
	teardown_all();
}

/* ---- groups ---- */

static atomic_int g_recv_calls;

static void g_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct group *g = rr_ep_data(ep);

	if (!g || c->status)
		return;
	if (!pthread_equal(pthread_self(), g->thread))
		atomic_fetch_add(&g->wrong_thread, 1);
	atomic_fetch_add(&g->recvs, 1);
	atomic_fetch_add(&g_recv_calls, 1);
}

static atomic_uint g_slot;

static void g_qp_ready(rr_ep *ep, int status, void *data)
{
	unsigned int i = atomic_fetch_add(&g_slot, 1);

	rr_ep_post_recv(ep, slot(160 + (int)i), SLOT, MR, g_recv, NULL);
}

static void g_down(rr_ep *ep, int status, void *data)
{
	struct group *g = data;

	atomic_fetch_add(&g->downs, 1);
}

static void g_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct group *g = data;

	cr_assert_null(l);
	if (!pthread_equal(pthread_self(), g->thread))
		atomic_fetch_add(&g->wrong_thread, 1);
	rr_ep_set_on_disconnect(ep, g_down);
	g->last = ep;
	atomic_fetch_add(&g->accepts, 1);
}

/* A group bridge on a ring of its own, on the calling thread. */
static int group_open(struct group *g)
{
	if (io_uring_queue_init(64, &g->ring, 0))
		return -1;
	if (rr_bridge_create(&g->b, &g->ring, &(struct rr_bridge_opts){.flags = RR_BRIDGE_GROUP},
			     sizeof(struct rr_bridge_opts))) {
		io_uring_queue_exit(&g->ring);
		return -1;
	}
	return 0;
}

static void group_close(struct group *g)
{
	rr_bridge_destroy(g->b);
	g->b = NULL;
	io_uring_queue_exit(&g->ring);
}

static void *group_main(void *arg)
{
	struct group *g = arg;

	if (group_open(g)) {
		atomic_store(&g->ready, -1);
		return NULL;
	}
	atomic_store(&g->ready, 1);
	/* No timed waits in the ring: a pass that finds nothing naps. */
	while (!atomic_load(&g->stop))
		if (rr_bridge_run_once(g->b, 0) == 0)
			usleep(100);
	group_close(g);
	return NULL;
}

/* A group the test's thread drives in pump_once(); @held: not yet. */
static void group_manual(struct group *g, bool held)
{
	g->thread = pthread_self();
	cr_assert_eq(group_open(g), 0);
	g->manual = true;
	g->held = held;
}

Test(endpoint, groups_place_and_serve_connections)
{
	struct rr_ep_opts lo = {.on_qp_ready = g_qp_ready};
	struct ep_state *c[NCONNS];
	struct req *snd[NCONNS];
	int total = 0;

	open_bridges(0);
	listen_on(&lo, NULL);
	for (int i = 0; i < NGROUPS; i++) {
		cr_assert_eq(pthread_create(&G[i].thread, NULL, group_main, &G[i]), 0);
		while (!atomic_load(&G[i].ready))
			usleep(100);
		cr_assert_eq(atomic_load(&G[i].ready), 1);
		cr_assert_eq(rr_listener_add_group(L, G[i].b, g_accept, &G[i]), 0);
	}
	for (int i = 0; i < NCONNS; i++) {
		struct rr_ep_opts o = {.on_disconnect = on_disconnect, .data = &cli_st[i]};

		c[i] = &cli_st[ncli++];
		cr_assert_eq(
			rr_connect(cli, "127.0.0.1", PORT, &o, sizeof(o), on_connect, &c[i]->ep),
			0);
	}
	for (int i = 0; i < NCONNS; i++) {
		PUMP_UNTIL(c[i]->connects);
		cr_assert_eq(c[i]->connect_status, 0, "connection %d: %s", i,
			     strerror(-c[i]->connect_status));
	}
	for (int i = 0; i < NCONNS; i++) {
		snd[i] = new_req();
		cr_assert_eq(rr_ep_post_send(c[i]->ep, slot(i), 32, MR, req_cb, snd[i]), 0);
	}
	PUMP_UNTIL(atomic_load(&g_recv_calls) == NCONNS);
	for (int i = 0; i < NCONNS; i++)
		PUMP_UNTIL(snd[i]->calls);
	for (int i = 0; i < NGROUPS; i++) {
		int a = atomic_load(&G[i].accepts);

		total += a;
		/* The least loaded group each time: an even spread. */
		cr_expect_eq(a, NCONNS / NGROUPS, "group %d took %d connections", i, a);
		cr_expect_eq(atomic_load(&G[i].recvs), a);
		cr_expect_eq(atomic_load(&G[i].wrong_thread), 0);
	}
	cr_expect_eq(total, NCONNS);
	for (int i = 0; i < NCONNS; i++)
		cr_assert_eq(rr_ep_disconnect(c[i]->ep), 0);
	PUMP_UNTIL(atomic_load(&G[0].downs) + atomic_load(&G[1].downs) == NCONNS);
	for (int i = 0; i < NCONNS; i++)
		PUMP_UNTIL(c[i]->downs);
	/* The listener goes before its groups. */
	cr_assert_eq(rr_listener_destroy(L), 0);
	L = NULL;
	for (int i = 0; i < NGROUPS; i++) {
		atomic_store(&G[i].stop, 1);
		pthread_join(G[i].thread, NULL);
	}
	teardown_all();
}

/*
 * A request placed on a group waits in its inbox while the listener and
 * then the listener's bridge go (an order the header allows). Its cm id
 * must not be left on the listener's event channel: once the group runs,
 * the connection is accepted and works, or at worst is refused cleanly,
 * and the id is destroyed once (the fake aborts on a call on an id whose
 * channel was destroyed, and on a second destroy).
 */
/* A listener with one group the test drives but holds, and a client
 * connecting: the request is placed on the group as soon as the hook
 * admitted it, and waits in its inbox. */
static struct ep_state *place_on_held_group(void)
{
	static struct rr_ep_opts lo = {.on_qp_ready = g_qp_ready};
	struct ep_state *c = &cli_st[ncli++];
	struct rr_ep_opts o = {.on_disconnect = on_disconnect, .data = c};

	open_bridges(0);
	listen_on(&lo, NULL);
	group_manual(&G[0], true);
	cr_assert_eq(rr_listener_add_group(L, G[0].b, g_accept, &G[0]), 0);
	rr_listener_set_on_request(L, admit);
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT, &o, sizeof(o), on_connect, &c->ep), 0);
	PUMP_UNTIL(hook_calls == 1);
	return c;
}

Test(endpoint, group_takes_a_request_after_the_listeners_bridge_is_gone)
{
	struct ep_state *c = place_on_held_group();
	struct req *snd;

	cr_assert_eq(rr_listener_destroy(L), 0);
	L = NULL;
	cr_assert_eq(rr_bridge_destroy(srv), 0);
	srv = NULL;
	G[0].held = false;
	PUMP_UNTIL(c->connects);
	if (c->connect_status == 0) {
		PUMP_UNTIL(atomic_load(&G[0].accepts) == 1);
		snd = new_req();
		cr_assert_eq(rr_ep_post_send(c->ep, slot(0), 32, MR, req_cb, snd), 0);
		PUMP_UNTIL(snd->calls && atomic_load(&G[0].recvs) == 1);
		cr_expect_eq(snd->status, 0);
		cr_expect_eq(atomic_load(&G[0].wrong_thread), 0);
	} else {
		cr_expect_eq(c->connect_status, -ECONNREFUSED, "connect: %s",
			     strerror(-c->connect_status));
		cr_expect_eq(atomic_load(&G[0].accepts), 0);
	}
	teardown_all();
}

static int cq_vector(rr_ep *ep)
{
	return fake_cq_comp_vector(rr_cq_ibv(rr_ep_cq(ep)));
}

/* The k-th group bridge of the process takes completion vector k (modulo
 * the device's): groups' interrupts land on different cores. The ordinal
 * is process-wide: only "different" is asserted. */
Test(endpoint, group_endpoints_spread_over_completion_vectors)
{
	struct rr_ep_opts lo = {.on_qp_ready = g_qp_ready};
	int n = fake_device()->num_comp_vectors, v[NGROUPS];

	open_bridges(0);
	listen_on(&lo, NULL);
	for (int i = 0; i < NGROUPS; i++) {
		group_manual(&G[i], false);
		cr_assert_eq(rr_listener_add_group(L, G[i].b, g_accept, &G[i]), 0);
	}
	for (int i = 0; i < NGROUPS; i++)
		connect_one(0, 0);
	for (int i = 0; i < NGROUPS; i++) {
		cr_assert_eq(atomic_load(&G[i].accepts), 1, "group %d took %d connections", i,
			     atomic_load(&G[i].accepts));
		v[i] = cq_vector(G[i].last);
		cr_expect_lt(v[i], n);
		if (n == 1)
			cr_expect_eq(v[i], 0);
	}
	if (n > 1)
		cr_expect_neq(v[0], v[1], "both groups' CQs on completion vector %d (%s)", v[0],
			      fake_provider_name());
	teardown_all();
}

/* rr_bridge_set_comp_vector(): the bridge's next CQs, modulo the device's
 * vectors (mlx5: 4, rxe: 1); the other bridge's stay on vector 0. */
Test(endpoint, set_comp_vector_moves_the_next_cqs)
{
	int n = fake_device()->num_comp_vectors;
	struct ep_state *c[2];

	setup_with(0, 0, 0);
	c[0] = connect_one(0, 0);
	cr_assert_eq(rr_bridge_set_comp_vector(cli, 3), 0);
	c[1] = connect_one(0, 0);
	cr_expect_eq(cq_vector(c[0]->ep), 0, "an endpoint's CQ moved after its creation");
	cr_expect_eq(cq_vector(c[1]->ep), 3 % n, "vector %d (%s)", cq_vector(c[1]->ep),
		     fake_provider_name());
	cr_expect_eq(cq_vector(server_of(c[1])->ep), 0);
	cr_expect_eq(rr_bridge_set_comp_vector(NULL, 1), -EINVAL);
	teardown_all();
}

/*
 * A server retires a core: its group leaves the listener and is destroyed
 * while the listener lives; later requests go to the groups left. The
 * listener's counters say what it saw, and a caller built against a
 * smaller struct rr_listener_stats gets only its part.
 */
Test(endpoint, a_removed_group_may_go_while_the_listener_lives)
{
	struct rr_ep_opts lo = {.on_qp_ready = g_qp_ready};
	struct rr_listener_stats st;
	size_t head = offsetof(struct rr_listener_stats, placed);

	open_bridges(0);
	listen_on(&lo, NULL);
	for (int i = 0; i < NGROUPS; i++) {
		group_manual(&G[i], false);
		cr_assert_eq(rr_listener_add_group(L, G[i].b, g_accept, &G[i]), 0);
	}
	for (int i = 0; i < NGROUPS; i++)
		connect_one(0, 0);
	cr_assert_eq(atomic_load(&G[1].accepts), 1);
	cr_expect_eq(rr_listener_remove_group(NULL, G[1].b), -EINVAL);
	cr_assert_eq(rr_listener_remove_group(L, G[1].b), 0);
	cr_expect_eq(rr_listener_remove_group(L, G[1].b), -ENOENT);
	group_close(&G[1]);
	G[1].manual = false;
	PUMP_UNTIL(cli_st[1].downs); /* its connection went with it */
	for (int i = 0; i < 2; i++)
		connect_one(0, 0);
	cr_expect_eq(atomic_load(&G[0].accepts), 3);

	cr_assert_eq(rr_listener_get_stats(L, &st, sizeof(st)), 0);
	cr_expect_eq(st.requests, 4);
	cr_expect_eq(st.placed, 4);
	cr_expect_eq(st.refused, 0);
	cr_expect_eq(st.dropped, 0);
	cr_expect_geq(st.bells_msg_ring + st.bells_eventfd, 1);
	cr_expect_leq(st.bells_msg_ring + st.bells_eventfd, st.placed);
	memset(&st, 0xff, sizeof(st));
	cr_assert_eq(rr_listener_get_stats(L, &st, head), 0);
	cr_expect_eq(st.requests, 4);
	cr_expect_eq(st.placed, UINT64_MAX, "written past the caller's size");
	/* A size over a page is refused as for options, nothing written. */
	cr_expect_eq(rr_listener_get_stats(L, &st, (size_t)1 << 40), -E2BIG);
	cr_expect_eq(st.requests, 4);
	cr_expect_eq(rr_listener_get_stats(NULL, &st, sizeof(st)), -EINVAL);
	teardown_all();
}

/* The request hook picks group 1 by index, then retires group 1. */
static int choose_then_remove(rr_listener *l, rr_ep *ep, const void *pdata, size_t len, void *data)
{
	hook_calls++;
	cr_assert_eq(rr_ep_set_group(ep, 1), 0);
	cr_assert_eq(rr_listener_remove_group(l, G[1].b), 0);
	return 0;
}

/*
 * rr_ep_set_group() names a group by its index when it is called. If the
 * hook then removes that group, the request must not go to it (it may be
 * destroyed as soon as the hook returns): it goes to a group still there.
 * Before the fix the stale index placed it on the removed group.
 */
Test(endpoint, a_group_chosen_then_removed_in_the_hook_gets_nothing)
{
	struct rr_ep_opts lo = {.on_qp_ready = g_qp_ready};

	open_bridges(0);
	listen_on(&lo, NULL);
	for (int i = 0; i < NGROUPS; i++) {
		group_manual(&G[i], false);
		cr_assert_eq(rr_listener_add_group(L, G[i].b, g_accept, &G[i]), 0);
	}
	rr_listener_set_on_request(L, choose_then_remove);
	connect_one(0, 0);
	cr_expect_eq(hook_calls, 1);
	cr_expect_eq(atomic_load(&G[0].accepts), 1);
	cr_expect_eq(atomic_load(&G[1].accepts), 0, "placed on the group removed");
	teardown_all();
}

/*
 * The bridge gives up its rdma_cm channel's poll when it keeps failing,
 * and fails whatever waited for an event on it. A connect made after
 * that must still hear its outcome: before the fix the channel was kept
 * with no poll, rr_connect() returned 0 and on_connect never ran.
 */
Test(endpoint, a_connect_after_the_cm_poll_was_given_up_completes)
{
	struct ep_state *c, *late;
	struct rr_bridge_stats st0, st;
	struct rr_ep_opts o = {0};

	setup_with(0, 0, 0);
	c = connect_one(0, 0);
	cr_assert_eq(rr_bridge_get_stats(cli, &st0, sizeof(st0)), 0);
	fake_cm_channel_hang_up(rr_ep_cm_id(c->ep)->channel);
	do {
		pump_once();
		cr_assert_eq(rr_bridge_get_stats(cli, &st, sizeof(st)), 0);
	} while (st.poll_failures == st0.poll_failures);

	late = &cli_st[ncli++];
	o.on_disconnect = on_disconnect;
	o.data = late;
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT, &o, sizeof(o), on_connect, &late->ep), 0);
	PUMP_UNTIL(late->connects);
	cr_expect_eq(late->connects, 1);
	/* The channel stays hung up: the poll fails again and says so. */
	cr_expect_lt(late->connect_status, 0, "connect: %d", late->connect_status);
	teardown_all();
}

/* on_connect of an application that retries a failed connect at once. */
static int retries, retry_limit, retry_calls, retry_status;
static rr_ep *retry_ep;

static void retry_on_fail(rr_ep *ep, int status, void *data)
{
	retry_calls++;
	retry_status = status;
	if (status < 0 && retries < retry_limit) {
		struct rr_ep_opts o = {0};

		retries++;
		cr_assert_eq(
			rr_connect(cli, "127.0.0.1", PORT, &o, sizeof(o), retry_on_fail, &retry_ep),
			0);
	}
}

/*
 * A connect retried from the on_connect that reported the lost poll is a
 * new user of the channel: it waits for the poll made for it, and is not
 * failed again by the same loss. Before the fix the loss went on failing
 * every endpoint not yet connected, the retried ones too, in one loop:
 * an application that retries at once never left it.
 */
Test(endpoint, a_connect_retried_from_a_lost_cm_poll_is_not_failed_by_it)
{
	struct rr_ep_opts o = {0};
	struct ep_state *c;
	int most = 0;

	setup_with(0, 0, 0);
	c = connect_one(0, 0);
	fake_cm_channel_hang_up(rr_ep_cm_id(c->ep)->channel);
	retries = retry_calls = 0;
	retry_limit = 40;
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT, &o, sizeof(o), retry_on_fail, &retry_ep),
		     0);
	while (retries < 3 && most <= 2) {
		int before = retries;

		pump_once();
		if (retries - before > most)
			most = retries - before;
	}
	cr_expect_leq(most, 2, "%d connects failed by one pass", most);
	retry_limit = 0; /* the last one fails without a retry */
	PUMP_UNTIL(retry_calls == retries + 1);
	cr_expect_lt(retry_status, 0);
	teardown_all();
}

/*
 * A request placed on a group whose peer gives up before the group took
 * it: the listener counted it placed, and the group could not take it.
 * That loss is the group's to count (placed_dropped); before, no counter
 * of either bridge said so.
 */
Test(endpoint, a_placed_request_the_group_cannot_take_is_counted_by_the_group)
{
	struct ep_state *c = place_on_held_group();
	struct rr_listener_stats ls;
	struct rr_bridge_stats gs;
	double t0;

	cr_assert_eq(rr_listener_get_stats(L, &ls, sizeof(ls)), 0);
	cr_assert_eq(ls.placed, 1);
	/* The peer goes before the group runs. */
	cr_assert_eq(rr_ep_destroy(c->ep), 0);
	c->ep = NULL;
	G[0].held = false;
	t0 = now_s();
	do {
		pump_once();
		cr_assert_eq(rr_bridge_get_stats(G[0].b, &gs, sizeof(gs)), 0);
	} while (!gs.placed_dropped && !atomic_load(&G[0].accepts) && now_s() - t0 < 3);
	cr_expect_eq(gs.placed_dropped, 1);
	cr_expect_eq(atomic_load(&G[0].accepts), 0);
	cr_assert_eq(rr_listener_get_stats(L, &ls, sizeof(ls)), 0);
	cr_expect_eq(ls.dropped, 0, "the listener placed it: not its drop");
	teardown_all();
}

static int listener_errors, listener_error_status;

static void on_listener_error(rr_listener *l, int status, void *data)
{
	listener_errors++;
	listener_error_status = status;
}

/* RDMA_CM_EVENT_DEVICE_REMOVAL on a listener lets go of everything its
 * bridge holds on the device (its channel, async fd, PD), so the removal
 * can finish; before, only the listener's id went. */
Test(endpoint, device_removal_lets_go_of_the_listeners_device)
{
	struct ep_state *c, *s;
	unsigned int channels;

	setup_with(0, 0, 0);
	rr_listener_set_on_error(L, on_listener_error);
	c = connect_one(0, 0);
	s = server_of(c);
	cr_assert_eq(rr_ep_destroy(s->ep), 0);
	cr_assert_eq(rr_ep_destroy(c->ep), 0);
	cr_assert_eq(rr_mr_dereg(MR), 0);
	MR = NULL;
	channels = fake_channels_live;
	fake_cm_device_removal();
	PUMP_UNTIL(listener_errors);
	cr_expect_eq(listener_error_status, -ENODEV);
	cr_expect_eq(rr_listener_port(L), 0);
	/* The server's device went; the client's, with no id left on it to
	 * hear of the removal, stays until its bridge goes. */
	cr_expect_eq(fake_channels_live, channels - 1, "completion channels: %u, before %u",
		     fake_channels_live, channels);
	settle();
	cr_expect_eq(listener_errors, 1);
	teardown_all();
}

/* ---- listeners that go while the library walks them ---- */

static rr_listener *L2;
static int l2_errors;
static uint64_t l_lost_at, l2_lost_at; /* srv's poll_failures then */
static bool destroy_self_on_error, destroy_l2_on_error, relisten_on_error;
static bool destroy_listener_on_flush;
static int flushes_seen;

static uint64_t srv_poll_failures(void)
{
	struct rr_bridge_stats st;

	cr_assert_eq(rr_bridge_get_stats(srv, &st, sizeof(st)), 0);
	return st.poll_failures;
}

static void on_l2_error(rr_listener *l, int status, void *data)
{
	l2_errors++;
	l2_lost_at = srv_poll_failures();
}

static void on_l_error(rr_listener *l, int status, void *data)
{
	listener_errors++;
	listener_error_status = status;
	l_lost_at = srv_poll_failures();
	if (destroy_l2_on_error && L2) {
		cr_assert_eq(rr_listener_destroy(L2), 0);
		L2 = NULL;
	}
	if (relisten_on_error) {
		/* As an application does: listen again at once. */
		cr_assert_eq(rr_listen(srv, "127.0.0.1", PORT, NULL, 0, on_accept, &srv_proto, &L2),
			     0);
		rr_listener_set_on_error(L2, on_l2_error);
	}
	if (destroy_self_on_error) {
		cr_assert_eq(rr_listener_destroy(l), 0);
		if (l == L)
			L = NULL;
	}
}

/* A receive posted in on_qp_ready of a pending endpoint: its flush
 * destroys the listener, as an application tearing down would. */
static void flush_destroys_listener(rr_ep *ep, const struct rr_completion *c, void *data)
{
	flushes_seen++;
	if (c->status < 0 && destroy_listener_on_flush && L)
		cr_assert_eq(rr_listener_destroy(L), 0);
	if (c->status < 0 && destroy_listener_on_flush)
		L = NULL;
}

static void pending_qp_ready(rr_ep *ep, int status, void *data)
{
	struct ep_state *st = &srv_st[nsrv++];

	rr_ep_set_data(ep, st);
	st->ep = ep;
	st->qp_ready++;
	cr_assert_eq(rr_ep_post_recv(ep, slot(128), SLOT, MR, flush_destroys_listener, NULL), 0);
}

static void listeners_reset(void)
{
	L2 = NULL;
	l2_errors = listener_errors = 0;
	l_lost_at = l2_lost_at = 0;
	destroy_self_on_error = destroy_l2_on_error = relisten_on_error = false;
	destroy_listener_on_flush = false;
	flushes_seen = 0;
}

/* srv's rdma_cm channel, through an endpoint of it, hung up: its poll
 * fails and is given up, and every listener of srv is lost. */
static void lose_srv_cm_poll(rr_ep *srv_ep)
{
	uint64_t before = srv_poll_failures();

	fake_cm_channel_hang_up(rr_ep_cm_id(srv_ep)->channel);
	PUMP_UNTIL(srv_poll_failures() > before);
}

/*
 * A listener destroyed from its own on_error while the lost rdma_cm poll
 * walks the listeners: before, the walk read its link from freed memory
 * (heap-use-after-free in cm_lost under ASan).
 */
Test(endpoint, a_listener_destroyed_in_its_on_error_of_a_lost_cm_poll)
{
	struct ep_state *c;

	listeners_reset();
	setup_with(0, 0, 0);
	cr_assert_eq(rr_listen(srv, "127.0.0.1", 0, NULL, 0, on_accept, &srv_proto, &L2), 0);
	rr_listener_set_on_error(L, on_l_error);
	rr_listener_set_on_error(L2, on_l2_error);
	destroy_self_on_error = true;
	c = connect_one(0, 0);
	lose_srv_cm_poll(server_of(c)->ep);
	settle();
	cr_expect_eq(listener_errors, 1);
	cr_expect_null(L);
	cr_expect_eq(l2_errors, 1, "the listener after it was not told");
	cr_assert_eq(rr_listener_destroy(L2), 0);
	teardown_all();
}

/* The same, destroying the listener the walk comes to next: that one is
 * not told of the loss (it is gone), and nothing reads it. */
Test(endpoint, a_listener_destroyed_in_another_ones_on_error_is_not_told)
{
	struct ep_state *c;

	listeners_reset();
	setup_with(0, 0, 0);
	cr_assert_eq(rr_listen(srv, "127.0.0.1", 0, NULL, 0, on_accept, &srv_proto, &L2), 0);
	rr_listener_set_on_error(L, on_l_error);
	rr_listener_set_on_error(L2, on_l2_error);
	destroy_l2_on_error = true;
	c = connect_one(0, 0);
	lose_srv_cm_poll(server_of(c)->ep);
	settle();
	cr_expect_eq(listener_errors, 1);
	cr_expect_eq(l2_errors, 0, "on_error of a destroyed listener ran");
	teardown_all();
}

/*
 * A listener made in on_error (listening again) is a new user of the
 * channel: the loss it reacted to does not stop it. Before, it was
 * appended to the list being walked and its on_error ran in the same
 * loss (the same poll failure).
 */
Test(endpoint, a_listener_made_in_on_error_is_not_stopped_by_the_same_loss)
{
	struct ep_state *c;

	listeners_reset();
	setup_with(0, 0, 0);
	rr_listener_set_on_error(L, on_l_error);
	relisten_on_error = true;
	c = connect_one(0, 0);
	lose_srv_cm_poll(server_of(c)->ep);
	cr_expect_eq(listener_errors, 1);
	cr_assert_not_null(L2);
	/* The channel stays hung up: the poll made for the new listener
	 * fails in turn, and that loss is its to hear. */
	PUMP_UNTIL(l2_errors);
	cr_expect_gt(l2_lost_at, l_lost_at, "stopped by the loss it reacted to (failure %llu)",
		     (unsigned long long)l_lost_at);
	cr_expect_eq(listener_errors, 1);
	relisten_on_error = false;
	cr_assert_eq(rr_listener_destroy(L2), 0);
	teardown_all();
}

/* A passive endpoint pending on L (its RTU held), with a receive posted
 * in its on_qp_ready whose flush destroys L. */
static struct ep_state *pending_on_listener(void)
{
	struct rr_ep_opts lo = {.on_qp_ready = pending_qp_ready};
	struct rr_ep_opts o = {.data = &cli_st[ncli++]};
	rr_ep *cep;

	open_bridges(0);
	listen_on(&lo, NULL);
	fake_cm_rtu_late(true);
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT, &o, sizeof(o), on_connect, &cep), 0);
	PUMP_UNTIL(nsrv == 1);
	destroy_listener_on_flush = true;
	return &srv_st[0];
}

/*
 * The lost rdma_cm poll drops the listener's pending endpoints; the flush
 * of a receive one of them posted destroys the listener. Before, the
 * listener was freed under listener_lost()'s loop (heap-use-after-free).
 */
Test(endpoint, a_pending_endpoints_flush_destroying_its_listener_on_a_lost_cm_poll)
{
	struct ep_state *s;

	listeners_reset();
	s = pending_on_listener();
	rr_listener_set_on_error(L, on_l_error);
	lose_srv_cm_poll(s->ep);
	settle();
	fake_cm_rtu_late(false);
	cr_expect_eq(flushes_seen, 1);
	cr_expect_null(L);
	cr_expect_eq(listener_errors, 0, "on_error of a destroyed listener ran");
	teardown_all();
}

/* The same from rr_listener_destroy(): the flush's own destroy of the
 * listener being destroyed is a no-op, not a second free. */
Test(endpoint, a_pending_endpoints_flush_destroying_its_listener_in_its_destroy)
{
	rr_listener *l;

	listeners_reset();
	pending_on_listener();
	l = L;
	cr_assert_eq(rr_listener_destroy(l), 0);
	fake_cm_rtu_late(false);
	cr_expect_eq(flushes_seen, 1);
	L = NULL;
	settle();
	teardown_all();
}
