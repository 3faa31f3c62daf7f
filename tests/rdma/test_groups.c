// SPDX-License-Identifier: MIT
/*
 * Poll groups: a listener on one thread places its connections on groups,
 * each a bridge on a ring and thread of its own; they share the process's
 * PD (one MR serves every group) and, per group, one CQ.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "bridge_pair.h"
#include "require.h"

#define MAX_GROUPS 4
#define MAX_CONNS  256
#define RECVS	   2
#define MSG	   64

/* ---- the server: groups echo what they receive ---- */

struct group {
	struct io_uring ring;
	rr_bridge *b;
	unsigned int bflags;
	pthread_t thread;
	atomic_int ready; /* 1: ring and bridge made, -1: failed */
	atomic_int stop;
	atomic_int accepts;
	atomic_int wrong_thread;	    /* callbacks that ran on another thread */
	rr_cq *cq;			    /* the CQ of its first endpoint */
	atomic_int other_cq;		    /* endpoints on another CQ */
	atomic_int flushed;		    /* receives completed with -ECANCELED */
	atomic_int recv_posted, recv_calls; /* an endpoint's own receives */
	atomic_int downs;
	/* With an SRQ: receives posted on it and their callbacks. */
	rr_srq *srq;
	atomic_int srq_posted, srq_calls, srq_orphans, srq_bad;
};

struct server {
	struct group g[MAX_GROUPS];
	unsigned int ngroups;
	struct io_uring ring;
	rr_bridge *b; /* the listener's */
	rr_listener *l;
	uint8_t *buf; /* RECVS slots per connection, for every group */
	struct ibv_mr *mr;
	atomic_uint next_slot;
	bool srq; /* groups receive through an SRQ each */
};

static struct server S;

static void srv_recv(rr_ep *ep, const struct rr_completion *c, void *data);

static void count_post(struct group *g, int rc)
{
	if (!rc)
		atomic_fetch_add(&g->recv_posted, 1);
}

static struct group *group_of_thread(void)
{
	for (unsigned int i = 0; i < S.ngroups; i++)
		if (pthread_equal(S.g[i].thread, pthread_self()))
			return &S.g[i];
	return NULL;
}

static void srv_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	/* The echo left: its slot takes the next message. */
	if (!c->status)
		count_post(rr_ep_data(ep), rr_ep_post_recv(ep, data, MSG, S.mr, srv_recv, data));
}

static void srv_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct group *g = rr_ep_data(ep);

	atomic_fetch_add(&g->recv_calls, 1);
	if (group_of_thread() != g)
		atomic_fetch_add(&g->wrong_thread, 1);
	if (c->status) {
		if (c->status == -ECANCELED)
			atomic_fetch_add(&g->flushed, 1);
		return;
	}
	rr_ep_post_send(ep, data, c->byte_len, S.mr, srv_sent, data);
}

static void srv_qp_ready(rr_ep *ep, int status, void *data)
{
	unsigned int slot = atomic_fetch_add(&S.next_slot, 1) % (MAX_CONNS * 2);

	(void)status;
	(void)data;
	for (int i = 0; i < RECVS; i++) {
		uint8_t *p = S.buf + ((size_t)slot * RECVS + (size_t)i) * MSG;

		count_post(rr_ep_data(ep), rr_ep_post_recv(ep, p, MSG, S.mr, srv_recv, p));
	}
}

static void srv_down(rr_ep *ep, int status, void *data)
{
	struct group *g = data;

	(void)status;
	atomic_fetch_add(&g->downs, 1);
	rr_ep_destroy(ep);
}

static void srv_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct group *g = data;

	cr_expect_null(l, "a group's accept gets no listener");
	if (group_of_thread() != g)
		atomic_fetch_add(&g->wrong_thread, 1);
	if (rr_ep_data(ep) != g)
		atomic_fetch_add(&g->wrong_thread, 1);
	if (!g->cq)
		g->cq = rr_ep_cq(ep);
	else if (g->cq != rr_ep_cq(ep))
		atomic_fetch_add(&g->other_cq, 1);
	rr_ep_set_on_disconnect(ep, srv_down);
	atomic_fetch_add(&g->accepts, 1);
}

static void no_accept(rr_listener *l, rr_ep *ep, void *data)
{
	(void)l;
	(void)data;
	cr_expect_fail("the listener's own on_accept ran for a placed connection");
	rr_ep_destroy(ep);
}

/* ---- with an SRQ per group ---- */

#define SRQ_WR 64

static void srq_recv(rr_ep *ep, const struct rr_completion *c, void *data);

static void srq_post(struct group *g, uint8_t *p)
{
	if (!rr_srq_post_recv(g->srq, p, MSG, S.mr, srq_recv, p))
		atomic_fetch_add(&g->srq_posted, 1);
}

static void srq_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	(void)c;
	/* The echo left (or was flushed): the buffer serves the next one. */
	srq_post(rr_ep_data(ep), data);
}

static void srq_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct group *g = group_of_thread();

	atomic_fetch_add(&g->srq_calls, 1);
	if (!ep) {
		/* Only the SRQ's own teardown completes one without a QP. */
		if (c->status != -ECANCELED)
			atomic_fetch_add(&g->srq_bad, 1);
		atomic_fetch_add(&g->srq_orphans, 1);
		return;
	}
	if (rr_ep_data(ep) != g || rr_ep_srq(ep) != g->srq)
		atomic_fetch_add(&g->srq_bad, 1);
	if (c->status || rr_ep_post_send(ep, data, c->byte_len, S.mr, srq_sent, data))
		srq_post(g, data);
}

static void group_srq_open(struct group *g)
{
	uint8_t *base = S.buf + (size_t)(g - S.g) * SRQ_WR * MSG;

	if (rr_srq_create(g->b, S.mr->context, SRQ_WR, &g->srq))
		return;
	for (int i = 0; i < SRQ_WR; i++)
		srq_post(g, base + (size_t)i * MSG);
}

static void *group_main(void *arg)
{
	struct rr_bridge_opts bo = {.flags = RR_BRIDGE_GROUP};
	struct group *g = arg;

	/* Its own thread makes the ring: a SINGLE_ISSUER ring belongs to the
	 * thread that created it. */
	bo.flags |= g->bflags | rr_test_bridge_flags();
	if (rr_test_ring_init(&g->ring, 256) ||
	    rr_bridge_create(&g->b, &g->ring, &bo, sizeof(bo))) {
		atomic_store(&g->ready, -1);
		return NULL;
	}
	if (S.srq)
		group_srq_open(g);
	atomic_store(&g->ready, 1);
	while (!atomic_load(&g->stop)) {
		int rc = rr_bridge_run_once(g->b, 50);

		if (rc < 0 && rc != -EINTR)
			break;
	}
	/* Torn down by its own thread, live connections and all. */
	rr_bridge_destroy(g->b);
	io_uring_queue_exit(&g->ring);
	return NULL;
}

static void server_start(const char *addr, unsigned int ngroups, unsigned int bflags)
{
	struct rr_ep_opts eo = {
		.max_send_wr = 4, .max_recv_wr = RECVS, .on_qp_ready = srv_qp_ready};
	bool srq = S.srq;
	struct rr_bridge_opts bo = {0};
	int rc;

	memset(&S, 0, sizeof(S));
	S.ngroups = ngroups;
	S.srq = srq;
	if (srq) {
		eo.flags = RR_EP_SRQ;
		eo.on_qp_ready = NULL; /* the SRQ holds the receives */
	}
	cr_assert_eq(rr_test_ring_init(&S.ring, 64), 0);
	/* RR_BRIDGE_NO_MSG_RING is the ringing side's: the listener's bridge. */
	bo.flags = (bflags & RR_BRIDGE_NO_MSG_RING) | rr_test_bridge_flags();
	cr_assert_eq(rr_bridge_create(&S.b, &S.ring, &bo, sizeof(bo)), 0);
	rc = rr_listen(S.b, addr, 0, &eo, sizeof(eo), no_accept, NULL, &S.l);
	cr_assert_eq(rc, 0, "rr_listen: %s", strerror(-rc));
	S.buf = calloc(MAX_CONNS * 2 * RECVS, MSG);
	cr_assert_not_null(S.buf);
	/* One registration for the endpoints of every group. */
	cr_assert_eq(rr_listener_reg_mr(S.l, S.buf, MAX_CONNS * 2 * RECVS * MSG, 0, &S.mr), 0);
	for (unsigned int i = 0; i < ngroups; i++) {
		struct group *g = &S.g[i];

		g->bflags = bflags;
		cr_assert_eq(pthread_create(&g->thread, NULL, group_main, g), 0);
		while (!atomic_load(&g->ready))
			usleep(1000);
		cr_assert_eq(atomic_load(&g->ready), 1, "group %u: no ring or bridge", i);
		cr_assert(!srq || g->srq, "group %u: no SRQ", i);
		rc = rr_listener_add_group(S.l, g->b, srv_accept, g);
		cr_assert_eq(rc, 0, "rr_listener_add_group: %s", strerror(-rc));
	}
	cr_assert_eq(rr_listener_add_group(S.l, S.g[0].b, srv_accept, &S.g[0]), -EEXIST);
	cr_assert_eq(rr_listener_add_group(S.l, S.b, srv_accept, NULL), -EINVAL,
		     "a bridge created without RR_BRIDGE_GROUP is no group");
}

static void group_stop(struct group *g)
{
	atomic_store(&g->stop, 1);
	pthread_join(g->thread, NULL);
	g->b = NULL;
}

static void server_stop(void)
{
	/* The listener goes before its groups. */
	if (S.l)
		rr_listener_destroy(S.l);
	S.l = NULL;
	for (unsigned int i = 0; i < S.ngroups; i++)
		if (S.g[i].b)
			group_stop(&S.g[i]);
	rr_mr_dereg(S.mr);
	rr_bridge_destroy(S.b);
	io_uring_queue_exit(&S.ring);
	free(S.buf);
	S.buf = NULL;
}

/* ---- the clients: one bridge, every connection on one shared CQ ---- */

struct conn {
	rr_ep *ep;
	unsigned int id;
	unsigned int seq; /* next to send */
	unsigned int echoed;
	int connected; /* 1, or the failed connect's errno */
	int down;
	int flushed;
	uint8_t out[MSG], in[MSG];
};

struct clients {
	rr_bridge *b;
	struct ibv_mr *mr;
	struct conn *c;
	unsigned int n, msgs;
	unsigned int connected, failed, done, bad, post_failed;
};

static struct clients C;

static void fill(uint8_t *p, unsigned int id, unsigned int seq)
{
	memcpy(p, &id, 4);
	memcpy(p + 4, &seq, 4);
	for (int i = 8; i < MSG; i++)
		p[i] = (uint8_t)(id * 31 + seq * 7 + (unsigned int)i);
}

static void cli_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	(void)ep;
	(void)c;
	(void)data;
}

static void cli_recv(rr_ep *ep, const struct rr_completion *c, void *data);

static void cli_send_next(struct conn *k)
{
	fill(k->out, k->id, k->seq);
	k->seq++;
	/* Fails once the connection is gone (a group torn down). */
	if (rr_ep_post_recv(k->ep, k->in, MSG, C.mr, cli_recv, k) ||
	    rr_ep_post_send(k->ep, k->out, MSG, C.mr, cli_sent, k))
		C.post_failed++;
}

static void cli_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct conn *k = data;
	uint8_t want[MSG];

	(void)ep;
	if (c->status) {
		if (c->status == -ECANCELED)
			k->flushed++;
		return;
	}
	fill(want, k->id, k->seq - 1);
	if (c->byte_len != MSG || memcmp(k->in, want, MSG))
		C.bad++;
	k->echoed++;
	if (k->seq < C.msgs)
		cli_send_next(k);
	else
		C.done++;
}

static void cli_connected(rr_ep *ep, int status, void *data)
{
	struct conn *k = data;

	(void)ep;
	if (status) {
		k->connected = status;
		C.failed++;
		return;
	}
	k->connected = 1;
	C.connected++;
}

static void cli_down(rr_ep *ep, int status, void *data)
{
	struct conn *k = data;

	(void)ep;
	(void)status;
	k->down++;
}

static void clients_open(struct io_uring *ring, const char *addr, unsigned int n, unsigned int msgs)
{
	struct rr_ep_opts o = {.max_send_wr = 2,
			       .max_recv_wr = 2,
			       .flags = RR_EP_SHARED_CQ,
			       .on_disconnect = cli_down};
	uint16_t port = rr_listener_port(S.l);
	int rc;

	memset(&C, 0, sizeof(C));
	C.n = n;
	C.msgs = msgs;
	C.c = calloc(n, sizeof(*C.c));
	cr_assert_not_null(C.c);
	cr_assert_eq(rr_test_ring_init(ring, 256), 0);
	cr_assert_eq(
		rr_bridge_create(&C.b, ring, rr_test_bridge_opts(), sizeof(struct rr_bridge_opts)),
		0);
	for (unsigned int i = 0; i < n; i++) {
		C.c[i].id = i;
		o.data = &C.c[i];
		rc = rr_connect(C.b, addr, port, &o, sizeof(o), cli_connected, &C.c[i].ep);
		cr_assert_eq(rc, 0, "rr_connect %u: %s", i, strerror(-rc));
	}
}

static bool all_connected(void *arg)
{
	(void)arg;
	return C.connected + C.failed == C.n;
}

static bool all_done(void *arg)
{
	(void)arg;
	return C.done == C.n || C.bad;
}

static void clients_close(struct io_uring *ring)
{
	for (unsigned int i = 0; i < C.n; i++)
		rr_ep_destroy(C.c[i].ep);
	rr_mr_dereg(C.mr);
	rr_bridge_destroy(C.b);
	io_uring_queue_exit(ring);
	free(C.c);
}

static unsigned int accepts_total(void)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < S.ngroups; i++)
		n += (unsigned int)atomic_load(&S.g[i].accepts);
	return n;
}

static bool all_accepted(void *arg)
{
	return accepts_total() == *(unsigned int *)arg;
}

/* The listener's thread runs its own bridge while the clients' loop runs:
 * one thread drives both rings here, alternately. */
static bool pump(bool (*pred)(void *), void *arg, int timeout_ms)
{
	uint64_t deadline = bp_now_ms() + (uint64_t)timeout_ms;

	while (!pred(arg)) {
		if (bp_now_ms() > deadline)
			return false;
		rr_bridge_run_once(S.b, 0);
		rr_bridge_run_once(C.b, 5);
	}
	return true;
}

static void spread(unsigned int ngroups, unsigned int nconns, unsigned int bflags)
{
	const char *addr = rr_test_require_rdma();
	struct io_uring cring;
	int min = nconns, max = 0;
	unsigned int n = nconns;

	server_start(addr, ngroups, bflags);
	clients_open(&cring, addr, nconns, 20);
	cr_assert_eq(rr_ep_reg_mr(C.c[0].ep, C.c, nconns * sizeof(*C.c), 0, &C.mr), -ENOTCONN,
		     "no PD before the QP");
	cr_assert(pump(all_connected, NULL, 120000), "%u of %u connected", C.connected, nconns);
	cr_assert_eq(C.failed, 0, "%u connects failed", C.failed);
	cr_assert(pump(all_accepted, &n, 30000), "%u of %u accepted", accepts_total(), nconns);
	cr_assert_eq(rr_ep_reg_mr(C.c[0].ep, C.c, nconns * sizeof(*C.c), 0, &C.mr), 0);
	for (unsigned int i = 0; i < nconns; i++) {
		cr_assert_eq(rr_ep_cq(C.c[i].ep), rr_ep_cq(C.c[0].ep), "one CQ for the clients");
		cli_send_next(&C.c[i]);
	}
	cr_assert(pump(all_done, NULL, 180000), "%u of %u connections done", C.done, nconns);
	cr_expect_eq(C.bad, 0, "%u echoes differ from what was sent", C.bad);
	cr_expect_eq(C.post_failed, 0, "%u posts failed", C.post_failed);
	for (unsigned int i = 0; i < nconns; i++)
		cr_expect_eq(C.c[i].echoed, 20, "connection %u: %u echoes", i, C.c[i].echoed);
	for (unsigned int i = 0; i < ngroups; i++) {
		int a = atomic_load(&S.g[i].accepts);

		min = a < min ? a : min;
		max = a > max ? a : max;
		cr_expect_eq(atomic_load(&S.g[i].wrong_thread), 0, "group %u: callbacks elsewhere",
			     i);
		cr_expect_eq(atomic_load(&S.g[i].other_cq), 0, "group %u: more than one CQ", i);
	}
	cr_expect_leq(max - min, 1, "placement: %d to %d connections per group", min, max);
	clients_close(&cring);
	server_stop();
}

Test(groups, two_groups_256_connections_eventfd)
{
	spread(2, 256, RR_BRIDGE_NO_MSG_RING);
}

/* The flavours' runs (tests/rdma/meson.build) hand fewer over:
 * RR_TEST_CONNS=64, 16 a group. */
Test(groups, four_groups_256_connections_msg_ring)
{
	spread(4, rr_test_count("RR_TEST_CONNS", 256, 16), 0);
}

/* Each group's endpoints take their receives from one SRQ of the group:
 * every completion names the endpoint that received (the echo goes back
 * on it, and each client checks it got its own bytes), and at teardown
 * each receive still posted completes once, with no endpoint. */
Test(groups, srq_receives_shared_by_the_endpoints_of_a_group)
{
	S.srq = true;
	spread(2, 64, 0);
	for (unsigned int i = 0; i < 2; i++) {
		struct group *g = &S.g[i];

		cr_expect_eq(atomic_load(&g->srq_bad), 0, "group %u: misrouted receives", i);
		cr_expect_eq(atomic_load(&g->srq_calls), atomic_load(&g->srq_posted),
			     "group %u: %d receives posted, %d callbacks", i,
			     atomic_load(&g->srq_posted), atomic_load(&g->srq_calls));
		cr_expect_gt(atomic_load(&g->srq_orphans), 0, "group %u: none flushed", i);
	}
}

static bool enough_down(void *arg)
{
	unsigned int down = 0;

	for (unsigned int i = 0; i < C.n; i++)
		down += C.c[i].down > 0;
	return down >= *(unsigned int *)arg;
}

/* A group torn down under live connections: its endpoints flush, exactly
 * once each; the other group's connections go on. */
Test(groups, a_group_torn_down_leaves_the_others_alone)
{
	const char *addr = rr_test_require_rdma();
	struct io_uring cring;
	unsigned int n = 16, lost = 0, kept = 0, want_down;
	int flushed;

	server_start(addr, 2, 0);
	clients_open(&cring, addr, n, 1000000);
	cr_assert(pump(all_connected, NULL, 60000));
	cr_assert(pump(all_accepted, &n, 30000));
	cr_assert_eq(rr_ep_reg_mr(C.c[0].ep, C.c, n * sizeof(*C.c), 0, &C.mr), 0);
	for (unsigned int i = 0; i < n; i++)
		cli_send_next(&C.c[i]);
	for (int i = 0; i < 50; i++) {
		rr_bridge_run_once(S.b, 0);
		rr_bridge_run_once(C.b, 5);
	}
	group_stop(&S.g[1]);
	flushed = atomic_load(&S.g[1].flushed);
	/* Every receive it posted completed exactly once, most of those
	 * still posted flushed by the teardown. */
	cr_expect_eq(atomic_load(&S.g[1].recv_calls), atomic_load(&S.g[1].recv_posted),
		     "%d receives posted, %d callbacks", atomic_load(&S.g[1].recv_posted),
		     atomic_load(&S.g[1].recv_calls));
	cr_expect_gt(flushed, 0, "none flushed on %d endpoints", atomic_load(&S.g[1].accepts));
	cr_expect_eq(atomic_load(&S.g[0].flushed), 0, "the other group flushed");
	/* Its clients hear of it (a generous watchdog: the lab may be
	 * loaded); the others still get echoes. */
	want_down = (unsigned int)atomic_load(&S.g[1].accepts);
	pump(enough_down, &want_down, 60000);
	for (unsigned int i = 0; i < n; i++) {
		unsigned int before = C.c[i].echoed;
		uint64_t deadline = bp_now_ms() + 20000;

		if (C.c[i].down) {
			lost++;
			continue;
		}
		while (C.c[i].echoed == before && bp_now_ms() < deadline) {
			rr_bridge_run_once(S.b, 0);
			rr_bridge_run_once(C.b, 5);
		}
		kept += C.c[i].echoed > before;
	}
	cr_expect_eq(lost, (unsigned int)atomic_load(&S.g[1].accepts), "%u clients lost", lost);
	cr_expect_eq(kept, n - lost, "%u of %u others still echoed", kept, n - lost);
	for (unsigned int i = 0; i < n; i++)
		cr_expect_leq(C.c[i].down, 1);
	clients_close(&cring);
	server_stop();
}

/* Connect, then destroy after a few passes, over and over: handoffs
 * torn in every state leave no descriptor or memory behind. */
Test(groups, churn_of_connects_and_aborts, .timeout = 600)
{
	const char *addr = rr_test_require_rdma();
	struct rr_ep_opts o = {.max_send_wr = 2, .max_recv_wr = 2, .flags = RR_EP_SHARED_CQ};
	struct io_uring cring;
	int fds0 = 0;
	long rss0 = 0;

	server_start(addr, 2, 0);
	clients_open(&cring, addr, 1, 1);
	for (unsigned int i = 0; i < 1000; i++) {
		struct conn *k = &C.c[0];
		int rc;

		if (i == 100) {
			fds0 = bp_count_fds();
			rss0 = bp_rss_kib();
		}
		rr_ep_destroy(k->ep);
		o.data = k;
		rc = rr_connect(C.b, addr, rr_listener_port(S.l), &o, sizeof(o), cli_connected,
				&k->ep);
		cr_assert_eq(rc, 0, "rr_connect: %s", strerror(-rc));
		for (unsigned int p = 0; p < i % 13; p++) {
			rr_bridge_run_once(S.b, 0);
			rr_bridge_run_once(C.b, 1);
		}
	}
	for (int p = 0; p < 200; p++) {
		rr_bridge_run_once(S.b, 0);
		rr_bridge_run_once(C.b, 5);
	}
	cr_expect_leq(bp_count_fds(), fds0 + 4, "descriptors: %d, then %d", fds0, bp_count_fds());
#ifndef __SANITIZE_ADDRESS__
	/* Under ASan freed memory sits in its quarantine; LeakSanitizer
	 * checks for leaks at exit instead. */
	cr_expect_leq(bp_rss_kib(), rss0 + 16384, "RSS: %ld KiB, then %ld", rss0, bp_rss_kib());
#else
	(void)rss0;
#endif
	clients_close(&cring);
	server_stop();
}
