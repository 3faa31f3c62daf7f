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
static int accepts;

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

static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct ep_state *st = rr_ep_data(ep);

	accepts++;
	st->connects++;
	rr_ep_set_on_disconnect(ep, on_disconnect);
}

/* ---- driving the two bridges ---- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int pump_once(void)
{
	int n = 0, rc;

	if (srv) {
		rc = rr_bridge_run_once(srv, 0);
		cr_assert_geq(rc, 0, "run_once: %s", strerror(-rc));
		n += rc;
	}
	if (cli) {
		rc = rr_bridge_run_once(cli, 0);
		cr_assert_geq(rc, 0, "run_once: %s", strerror(-rc));
		n += rc;
	}
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
	struct rr_bridge_opts o = {.flags = bflags};

	for (int i = 0; i < 2; i++)
		cr_assert_eq(io_uring_queue_init(64, &rings[i], 0), 0);
	cr_assert_eq(rr_bridge_create(&srv, &rings[0], &o), 0);
	cr_assert_eq(rr_bridge_create(&cli, &rings[1], &o), 0);
}

/* Listen on 127.0.0.1 (a device address: memory can be registered at
 * once) with @opts; one MR for both sides, which share the PD. */
static void listen_on(const struct rr_ep_opts *opts, void *data)
{
	cr_assert_eq(rr_listen(srv, "127.0.0.1", 0, opts, on_accept, data, &L), 0);
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

static struct ep_state *connect_with(struct rr_ep_opts *o, int prepost)
{
	struct ep_state *st = &cli_st[ncli++];
	int before = accepts;

	st->prepost = prepost;
	o->on_qp_ready = on_qp_ready;
	o->on_disconnect = on_disconnect;
	o->data = st;
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT, o, on_connect, &st->ep), 0);
	PUMP_UNTIL(st->connects);
	cr_assert_eq(st->connect_status, 0, "connect: %s", strerror(-st->connect_status));
	PUMP_UNTIL(accepts > before);
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
	const void *pd;
	int n;

	setup_with(0, 0, 0);
	rr_listener_set_on_request(L, refuse);
	cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT,
				&(struct rr_ep_opts){.data = c, .on_disconnect = on_disconnect},
				on_connect, &c->ep),
		     0);
	PUMP_UNTIL(c->connects);
	cr_expect_eq(c->connect_status, -ECONNREFUSED);
	n = rr_ep_peer_private_data(c->ep, &pd);
	cr_expect_eq(n, RR_PRIVATE_DATA_REJECT_MAX);
	cr_expect_str_eq((const char *)pd, "go away");
	cr_expect_eq(hook_calls, 1);
	cr_expect_eq(accepts, 0);
	cr_expect_eq(nsrv, 0, "a refused request set up a QP");
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
	cr_assert_eq(rr_connect(cli, "127.0.0.1", port, &(struct rr_ep_opts){.data = c}, on_connect,
				&c->ep),
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

Test(endpoint, selective_signalling_one_callback_each_in_order)
{
	struct rr_ep_opts o = {.signal_every = 4, .max_send_wr = 16};
	struct ep_state *c;
	struct req *snd[12];
	int first;

	setup_with(0, 0, 12);
	c = connect_with(&o, 0);
	for (int i = 0; i < 10; i++) {
		snd[i] = new_req();
		cr_assert_eq(rr_ep_post_send(c->ep, slot(i), 8, MR, req_cb, snd[i]), 0);
	}
	/* The 4th and 8th were signalled: 1..8 complete, 9 and 10 wait. */
	PUMP_UNTIL(snd[7]->calls);
	settle();
	for (int i = 0; i < 8; i++)
		cr_expect_eq(snd[i]->calls, 1, "send %d: %d callbacks", i, snd[i]->calls);
	cr_expect_eq(snd[8]->calls, 0);
	cr_expect_eq(snd[9]->calls, 0);
	for (int i = 10; i < 12; i++) {
		snd[i] = new_req();
		cr_assert_eq(rr_ep_post_send(c->ep, slot(i), 8, MR, req_cb, snd[i]), 0);
	}
	PUMP_UNTIL(snd[11]->calls);
	settle();
	first = snd[0]->seq;
	for (int i = 0; i < 12; i++) {
		cr_expect_eq(snd[i]->calls, 1, "send %d: %d callbacks", i, snd[i]->calls);
		cr_expect_eq(snd[i]->status, 0);
		if (i)
			cr_expect_gt(snd[i]->seq, snd[i - 1]->seq, "send %d out of order", i);
	}
	(void)first;
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

/* ---- shared receive queues ---- */

static rr_srq *SRQ;

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
				on_connect, &cli_st[ncli].ep),
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

Test(endpoint, traffic_with_channels_read_through_the_ring)
{
	struct ep_state *c, *s;
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
	teardown_all();
}

static int fatal_seen;

static void count_fatal(rr_bridge *b, const struct ibv_async_event *ev, void *data)
{
	if (ev->event_type == IBV_EVENT_DEVICE_FATAL)
		fatal_seen++;
}

Test(endpoint, device_unplug_ends_connections_without_spinning)
{
	struct rr_bridge_opts o = {.on_async_event = count_fatal};
	struct rr_ep_opts lo = {.on_qp_ready = on_qp_ready, .on_disconnect = on_disconnect};
	struct ep_state *c, *s;
	struct rr_bridge_stats bs;
	int handled = 0;
	double t0;

	for (int i = 0; i < 2; i++)
		cr_assert_eq(io_uring_queue_init(64, &rings[i], 0), 0);
	cr_assert_eq(rr_bridge_create(&srv, &rings[0], &o), 0);
	cr_assert_eq(rr_bridge_create(&cli, &rings[1], &o), 0);
	srv_proto.prepost = 1;
	listen_on(&lo, &srv_proto);
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
	rr_bridge_get_stats(srv, &bs);
	cr_expect_lt(handled, 200, "%d CQEs in 200 ms on a dead device", handled);
	cr_expect_lt(bs.async_events, 10);
	teardown_all();
}

/* ---- groups ---- */

#define NGROUPS 2
#define NCONNS	8

struct group {
	struct io_uring ring;
	rr_bridge *b;
	pthread_t thread;
	atomic_int ready, stop;
	atomic_int accepts, recvs, downs, wrong_thread;
};

static struct group G[NGROUPS];
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
	atomic_fetch_add(&g->accepts, 1);
}

static void *group_main(void *arg)
{
	struct group *g = arg;

	if (io_uring_queue_init(64, &g->ring, 0) ||
	    rr_bridge_create(&g->b, &g->ring, &(struct rr_bridge_opts){.flags = RR_BRIDGE_GROUP})) {
		atomic_store(&g->ready, -1);
		return NULL;
	}
	atomic_store(&g->ready, 1);
	/* No timed waits in the ring: a pass that finds nothing naps. */
	while (!atomic_load(&g->stop))
		if (rr_bridge_run_once(g->b, 0) == 0)
			usleep(100);
	rr_bridge_destroy(g->b);
	io_uring_queue_exit(&g->ring);
	return NULL;
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
		cr_assert_eq(rr_connect(cli, "127.0.0.1", PORT, &o, on_connect, &c[i]->ep), 0);
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
