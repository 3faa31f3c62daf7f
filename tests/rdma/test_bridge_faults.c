// SPDX-License-Identifier: MIT
/*
 * Bridge under faults on real rxe: refused and bad connects, graceful
 * disconnect with flushes, a peer killed mid-stream, 1000 connect / abort /
 * destroy cycles without fd or memory growth, and a two-thread ping-pong
 * that stalls if a wake-up is ever lost.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "bridge_pair.h"
#include "rdma_sync.h"
#include "require.h"

TestSuite(faults, .timeout = 300);

/* ---- connect failures ---- */

struct conn_result {
	int calls;
	int status;
};

static void record_connect(rr_ep *ep, int status, void *data)
{
	struct conn_result *r = data;

	r->calls++;
	r->status = status;
}

static bool called(void *arg)
{
	return ((struct conn_result *)arg)->calls > 0;
}

static void run_connect(const char *host, uint16_t port, struct conn_result *r, int *sync_rc,
			int wait_ms)
{
	struct io_uring ring;
	rr_bridge *b;
	rr_ep *ep = NULL;
	struct rr_ep_opts o = {.data = r, .connect_timeout_ms = 3000};

	cr_assert_eq(rr_test_ring_init(&ring, 64), 0);
	cr_assert_eq(
		rr_bridge_create(&b, &ring, rr_test_bridge_opts(), sizeof(struct rr_bridge_opts)),
		0);
	*sync_rc = rr_connect(b, host, port, &o, sizeof(o), record_connect, &ep);
	if (*sync_rc == 0) {
		cr_assert_eq(bp_run_pred(b, called, r, wait_ms), 0, "no connect callback");
		/* More passes: a second callback would show up here. */
		for (int i = 0; i < 20; i++)
			rr_bridge_run_once(b, 5);
		rr_ep_destroy(ep);
	}
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

Test(faults, connect_refused_without_listener)
{
	const char *addr = rr_test_require_rdma();
	struct conn_result r = {0};
	int rc;

	run_connect(addr, 9, &r, &rc, 30000);
	cr_assert_eq(rc, 0);
	cr_assert_eq(r.calls, 1, "connect callback called %d times", r.calls);
	cr_assert(r.status == -ECONNREFUSED || r.status == -EHOSTUNREACH, "status %d (%s)",
		  r.status, strerror(-r.status));
}

Test(faults, connect_bad_address_fails_synchronously)
{
	struct conn_result r = {0};
	int rc;

	rr_test_require_rdma();
	run_connect("not an address", 7000, &r, &rc, 30000);
	cr_assert_lt(rc, 0);
	cr_assert_eq(r.calls, 0, "callback called although the call failed");
}

Test(faults, connect_unreachable_host_times_out)
{
	struct conn_result r = {0};
	int rc;

	rr_test_require_rdma();
	/* In the lab's subnet, but no host answers there: rdma_cm would
	 * retry for a minute or more; the connect timeout ends it. */
	run_connect("192.0.2.77", 7000, &r, &rc, 30000);
	cr_assert_eq(rc, 0);
	cr_assert_eq(r.calls, 1);
	cr_assert(r.status == -ETIMEDOUT || r.status == -EHOSTUNREACH || r.status == -EADDRNOTAVAIL,
		  "status %d (%s)", r.status, strerror(-r.status));
}

/* ---- graceful disconnect flushes everything exactly once ---- */

struct flush_count {
	int ok, cancelled, other;
};

static void count_flush(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct flush_count *f = data;

	if (c->status == 0)
		f->ok++;
	else if (c->status == -ECANCELED && c->wc_status == IBV_WC_WR_FLUSH_ERR)
		f->cancelled++;
	else
		f->other++;
}

static bool both_down(void *arg)
{
	struct bridge_pair *p = arg;

	return p->cli.down_calls && p->srv.down_calls;
}

Test(faults, disconnect_flushes_receives_once)
{
	const char *addr = rr_test_require_rdma();
	struct bridge_pair p;
	struct flush_count fc = {0}, fs = {0};
	static uint8_t buf[16][64];
	struct ibv_mr *mr;

	cr_assert_eq(bp_open(&p, addr, NULL), 0);
	cr_assert_eq(rr_ep_reg_mr(p.cli.ep, buf, sizeof(buf), 0, &mr), 0);
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(rr_ep_post_recv(p.cli.ep, buf[i], 64, mr, count_flush, &fc), 0);
		cr_assert_eq(rr_ep_post_recv(p.srv.ep, buf[8 + i], 64, mr, count_flush, &fs), 0);
	}
	cr_assert_eq(rr_ep_disconnect(p.cli.ep), 0);
	cr_assert_eq(rr_ep_disconnect(p.cli.ep), -ENOTCONN, "second disconnect accepted");
	cr_assert_eq(bp_run_pred(p.b, both_down, &p, 20000), 0, "no disconnect callbacks");
	cr_assert_eq(p.cli.down_status, 0);
	cr_assert_eq(p.srv.down_status, -ECONNRESET);
	/* Flushes arrive through the CQ; what is left is flushed by destroy. */
	for (int i = 0; i < 50; i++)
		rr_bridge_run_once(p.b, 5);
	rr_ep_destroy(p.cli.ep);
	rr_ep_destroy(p.srv.ep);
	cr_assert_eq(fc.cancelled, 8, "client: %d ok %d cancelled %d other", fc.ok, fc.cancelled,
		     fc.other);
	cr_assert_eq(fs.cancelled, 8, "server: %d ok %d cancelled %d other", fs.ok, fs.cancelled,
		     fs.other);
	cr_assert_eq(p.cli.down_calls, 1);
	cr_assert_eq(p.srv.down_calls, 1);
	cr_assert_eq(rr_ep_post_send(NULL, buf[0], 1, mr, count_flush, &fc), -EINVAL);
	rr_mr_dereg(mr);
	bp_close(&p);
}

/* ---- a peer killed mid-stream ---- */

/* The victim process: accepts one connection, keeps receives posted and
 * kills itself without a goodbye after 500 messages. */
static struct victim {
	struct ibv_mr *mr;
	uint8_t buf[32][128];
	int received;
} V;

static void victim_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (c->status)
		return;
	if (++V.received == 500)
		kill(getpid(), SIGKILL);
	rr_ep_post_recv(ep, data, 128, V.mr, victim_recv, data);
}

static void victim_accept(rr_listener *l, rr_ep *ep, void *data)
{
	if (rr_ep_reg_mr(ep, V.buf, sizeof(V.buf), 0, &V.mr))
		_exit(3);
	for (int i = 0; i < 32; i++)
		rr_ep_post_recv(ep, V.buf[i], 128, V.mr, victim_recv, V.buf[i]);
}

static int run_victim(const char *addr, int port_fd)
{
	struct io_uring ring;
	rr_bridge *b;
	rr_listener *l;
	uint16_t port;

	if (rr_test_ring_init(&ring, 64) ||
	    rr_bridge_create(&b, &ring, rr_test_bridge_opts(), sizeof(struct rr_bridge_opts)) ||
	    rr_listen(b, addr, 0, NULL, 0, victim_accept, NULL, &l))
		return 1;
	port = rr_listener_port(l);
	if (write(port_fd, &port, sizeof(port)) != sizeof(port))
		return 1;
	for (int i = 0; i < 60000; i++)
		rr_bridge_run_once(b, 10);
	return 2; /* should have died */
}

struct streamer {
	rr_ep *ep;
	struct ibv_mr *mr;
	uint8_t buf[128];
	uint32_t posted, completed, ok, failed, inflight;
	bool stop;
	int down_calls, down_status, connect_status, connected;
};

static void stream_more(struct streamer *s);

static void on_stream_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct streamer *s = data;

	s->completed++;
	s->inflight--;
	if (c->status)
		s->failed++;
	else
		s->ok++;
	stream_more(s);
}

static void stream_more(struct streamer *s)
{
	/* At most 16 in flight: the victim keeps 32 receives posted. */
	while (!s->stop && s->inflight < 16) {
		int rc = rr_ep_post_send(s->ep, s->buf, sizeof(s->buf), s->mr, on_stream_done, s);

		if (rc) {
			s->stop = true; /* -ENOTCONN once the connection is gone */
			break;
		}
		s->posted++;
		s->inflight++;
	}
}

static void on_stream_connect(rr_ep *ep, int status, void *data)
{
	struct streamer *s = data;

	s->connect_status = status;
	s->connected = 1;
	if (status == 0 && rr_ep_reg_mr(ep, s->buf, sizeof(s->buf), 0, &s->mr) == 0)
		stream_more(s);
}

static void on_stream_down(rr_ep *ep, int status, void *data)
{
	struct streamer *s = data;

	s->down_calls++;
	s->down_status = status;
	s->stop = true;
}

static bool stream_settled(void *arg)
{
	struct streamer *s = arg;

	return s->down_calls && s->inflight == 0;
}

static bool is_connected(void *arg)
{
	return ((struct streamer *)arg)->connected;
}

Test(faults, peer_killed_mid_stream)
{
	const char *addr = rr_test_require_rdma();
	struct streamer s = {0};
	struct rr_ep_opts o = {.data = &s, .on_disconnect = on_stream_down, .max_send_wr = 32};
	struct io_uring ring;
	rr_bridge *b;
	uint16_t port = 0;
	int pfd[2], status;
	pid_t pid;

	cr_assert_eq(pipe(pfd), 0);
	pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		_exit(run_victim(addr, pfd[1]));
	}
	close(pfd[1]);
	cr_assert_eq(read(pfd[0], &port, sizeof(port)), (ssize_t)sizeof(port), "victim failed");
	cr_assert_eq(rr_test_ring_init(&ring, 64), 0);
	cr_assert_eq(
		rr_bridge_create(&b, &ring, rr_test_bridge_opts(), sizeof(struct rr_bridge_opts)),
		0);
	cr_assert_eq(rr_connect(b, addr, port, &o, sizeof(o), on_stream_connect, &s.ep), 0);
	cr_assert_eq(bp_run_pred(b, is_connected, &s, 20000), 0);
	cr_assert_eq(s.connect_status, 0);
	cr_assert_eq(bp_run_pred(b, stream_settled, &s, 120000), 0,
		     "stream did not settle: posted %u completed %u in flight %u, down %d",
		     s.posted, s.completed, s.inflight, s.down_calls);
	waitpid(pid, &status, 0);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "victim status %#x", status);
	cr_assert_eq(s.completed, s.posted, "posted %u, completed %u", s.posted, s.completed);
	cr_assert_geq(s.ok, 500, "only %u sends succeeded", s.ok);
	cr_assert_eq(s.down_calls, 1);
	cr_assert_lt(s.down_status, 0);
	cr_assert_eq(rr_ep_outstanding(s.ep), 0);
	rr_ep_destroy(s.ep);
	rr_mr_dereg(s.mr);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* ---- 1000 connect / abort / destroy cycles ---- */

struct cycler {
	rr_ep *accepted[8];
	int naccepted;
	int connected, connect_calls;
	int flushed;
};

static void cyc_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct cycler *c = data;

	if (c->naccepted < 8)
		c->accepted[c->naccepted++] = ep;
	else
		rr_ep_destroy(ep);
}

static void cyc_connect(rr_ep *ep, int status, void *data)
{
	struct cycler *c = data;

	c->connect_calls++;
	c->connected = status == 0;
}

static void cyc_flush(rr_ep *ep, const struct rr_completion *c, void *data)
{
	((struct cycler *)data)->flushed += c->status == -ECANCELED;
}

static bool cyc_done(void *arg)
{
	return ((struct cycler *)arg)->connect_calls > 0;
}

Test(faults, thousand_connect_abort_destroy_cycles, .timeout = 600)
{
	const char *addr = rr_test_require_rdma();
	struct cycler c = {0};
	struct rr_ep_opts o = {.data = &c, .max_send_wr = 4, .max_recv_wr = 4};
	struct io_uring ring;
	rr_bridge *b;
	rr_listener *l;
	static uint8_t buf[64];
	int fds0 = 0, expect_flushed = 0;
	long rss0 = 0;
	/* Past the warm-up's 100, enough to see fds or memory grow. */
	int cycles = (int)rr_test_count("RR_TEST_CYCLES", 1000, 200);

	cr_assert_eq(rr_test_ring_init(&ring, 128), 0);
	cr_assert_eq(
		rr_bridge_create(&b, &ring, rr_test_bridge_opts(), sizeof(struct rr_bridge_opts)),
		0);
	cr_assert_eq(rr_listen(b, addr, 0, &o, sizeof(o), cyc_accept, &c, &l), 0);
	for (int i = 0; i < cycles; i++) {
		rr_ep *ep;

		if (i == 100) { /* after warm-up: caches and pools are filled */
			fds0 = bp_count_fds();
			rss0 = bp_rss_kib();
		}
		c.connect_calls = 0;
		c.connected = 0;
		cr_assert_eq(
			rr_connect(b, addr, rr_listener_port(l), &o, sizeof(o), cyc_connect, &ep),
			0);
		switch (i % 4) {
		case 0: /* abort at once, mid address resolution */
			break;
		case 1: /* abort after a pass or two */
			rr_bridge_run_once(b, 0);
			rr_bridge_run_once(b, 1);
			break;
		default: { /* connected; case 3 also leaves a receive posted */
			struct ibv_mr *mr = NULL;

			cr_assert_eq(bp_run_pred(b, cyc_done, &c, 20000), 0,
				     "cycle %d: no callback", i);
			cr_assert(c.connected, "cycle %d: connect failed", i);
			if (i % 4 == 3) {
				cr_assert_eq(rr_ep_reg_mr(ep, buf, sizeof(buf), 0, &mr), 0);
				cr_assert_eq(
					rr_ep_post_recv(ep, buf, sizeof(buf), mr, cyc_flush, &c),
					0);
				expect_flushed++;
			}
			rr_ep_destroy(ep);
			rr_mr_dereg(mr);
			ep = NULL;
			break;
		}
		}
		if (ep)
			rr_ep_destroy(ep);
		for (int k = 0; k < c.naccepted; k++)
			rr_ep_destroy(c.accepted[k]);
		c.naccepted = 0;
		cr_assert_leq(c.connect_calls, 1, "cycle %d: %d connect callbacks", i,
			      c.connect_calls);
	}
	/* Let stragglers (events of destroyed ids) drain. */
	for (int k = 0; k < 100; k++)
		rr_bridge_run_once(b, 2);
	for (int k = 0; k < c.naccepted; k++)
		rr_ep_destroy(c.accepted[k]);
	cr_assert_eq(c.flushed, expect_flushed, "flushed %d of %d receives", c.flushed,
		     expect_flushed);
	cr_assert_eq(bp_count_fds(), fds0, "fds grew from %d to %d", fds0, bp_count_fds());
#ifndef __SANITIZE_ADDRESS__
	/* Under ASan freed memory sits in its quarantine, so RSS says nothing
	 * there; LeakSanitizer checks for leaks at exit instead. */
	cr_assert_lt(bp_rss_kib() - rss0, 8 * 1024, "RSS grew by %ld KiB", bp_rss_kib() - rss0);
#else
	(void)rss0;
#endif
	rr_listener_destroy(l);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* ---- two threads, two rings: no lost wake-up ---- */

#define PP_ROUNDS 20000 /* RR_TEST_ROUNDS may lower it */
static unsigned int pp_rounds;

struct pp_side {
	struct io_uring ring;
	rr_bridge *b;
	rr_ep *ep;
	struct ibv_mr *mr;
	uint8_t buf[2][64];
	uint32_t rounds;
	int failed;
	enum rr_wait_mode mode;
	const char *addr;
	uint16_t port;
	pthread_mutex_t *lock;
	pthread_cond_t *cond;
	uint16_t *port_out;
	int *stop; /* set by the client thread when it is done */
};

static void pp_recv(rr_ep *ep, const struct rr_completion *c, void *data);

static void pp_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (c->status)
		((struct pp_side *)data)->failed++;
}

static void pp_bounce(struct pp_side *s)
{
	if (rr_ep_post_recv(s->ep, s->buf[0], 64, s->mr, pp_recv, s) ||
	    rr_ep_post_send(s->ep, s->buf[1], 64, s->mr, pp_sent, s))
		s->failed++;
}

static void pp_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct pp_side *s = data;

	if (c->status) {
		if (c->status != -ECANCELED)
			s->failed++;
		return;
	}
	s->rounds++;
	if (s->rounds < pp_rounds || s->port_out) /* the server answers every ping */
		pp_bounce(s);
}

static bool pp_done(void *arg)
{
	struct pp_side *s = arg;

	return s->rounds >= pp_rounds || s->failed ||
	       (s->stop && __atomic_load_n(s->stop, __ATOMIC_ACQUIRE));
}

static void pp_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct pp_side *s = data;

	s->ep = ep;
	if (rr_ep_reg_mr(ep, s->buf, sizeof(s->buf), 0, &s->mr) ||
	    rr_ep_post_recv(ep, s->buf[0], 64, s->mr, pp_recv, s))
		s->failed++;
}

static void *pp_server(void *arg)
{
	struct pp_side *s = arg;
	struct rr_ep_opts o = {.mode = s->mode, .spin_us = 2};
	rr_listener *l;

	if (rr_test_ring_init(&s->ring, 64) ||
	    rr_bridge_create(&s->b, &s->ring, rr_test_bridge_opts(),
			     sizeof(struct rr_bridge_opts)) ||
	    rr_listen(s->b, s->addr, 0, &o, sizeof(o), pp_accept, s, &l)) {
		s->failed++;
		l = NULL;
	}
	pthread_mutex_lock(s->lock);
	*s->port_out = l ? rr_listener_port(l) : 1;
	pthread_cond_signal(s->cond);
	pthread_mutex_unlock(s->lock);
	if (l)
		bp_run_pred(s->b, pp_done, s, 240000);
	/* Let the last pong's send complete before tearing down. */
	for (int i = 0; i < 20; i++)
		rr_bridge_run_once(s->b, 5);
	if (s->ep)
		rr_ep_destroy(s->ep);
	rr_mr_dereg(s->mr);
	rr_bridge_destroy(s->b);
	io_uring_queue_exit(&s->ring);
	return NULL;
}

static void pp_connected(rr_ep *ep, int status, void *data)
{
	struct pp_side *s = data;

	if (status || rr_ep_reg_mr(ep, s->buf, sizeof(s->buf), 0, &s->mr)) {
		s->failed++;
		return;
	}
	pp_bounce(s); /* first ping */
}

static void pingpong_two_threads(enum rr_wait_mode mode)
{
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
	uint16_t port = 0;
	int stop = 0;
	struct pp_side srv = {
		.mode = mode, .lock = &lock, .cond = &cond, .port_out = &port, .stop = &stop};
	struct pp_side cli = {.mode = mode};
	struct rr_ep_opts o = {.mode = mode, .spin_us = 2, .data = &cli};
	pthread_t t;
	int rc;

	srv.addr = cli.addr = rr_test_require_rdma();
	pp_rounds = rr_test_count("RR_TEST_ROUNDS", PP_ROUNDS, 1000);
	cr_assert_eq(pthread_create(&t, NULL, pp_server, &srv), 0);
	pthread_mutex_lock(&lock);
	while (!port)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	cr_assert_eq(rr_test_ring_init(&cli.ring, 64), 0);
	cr_assert_eq(rr_bridge_create(&cli.b, &cli.ring, rr_test_bridge_opts(),
				      sizeof(struct rr_bridge_opts)),
		     0);
	cr_assert_eq(rr_connect(cli.b, cli.addr, port, &o, sizeof(o), pp_connected, &cli.ep), 0);
	/* A lost wake-up on either side stops the ping-pong for good. */
	rc = bp_run_pred(cli.b, pp_done, &cli, 240000);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE); /* let the server thread finish */
	rr_ep_destroy(cli.ep);
	rr_mr_dereg(cli.mr);
	rr_bridge_destroy(cli.b);
	io_uring_queue_exit(&cli.ring);
	pthread_join(t, NULL);
	cr_assert_eq(rc, 0, "ping-pong stalled after %u of %u rounds", cli.rounds, pp_rounds);
	cr_assert_eq(cli.failed, 0);
	cr_assert_eq(srv.failed, 0);
}

Test(faults, no_lost_wakeup_event_two_threads)
{
	pingpong_two_threads(RR_WAIT_EVENT);
}

Test(faults, no_lost_wakeup_hybrid_two_threads)
{
	pingpong_two_threads(RR_WAIT_HYBRID);
}

/* ---- receives posted in on_qp_ready; completions before on_disconnect ---- */

#define BURST 16

struct orderly {
	struct ibv_mr *srv_mr, *cli_mr;
	uint8_t srv_buf[BURST][64], cli_buf[BURST][64];
	rr_ep *srv;
	int qp_ready_cli, qp_ready_srv, connected;
	int received, received_at_down, down_calls, sends_done;
	bool order_ok;
};

static struct orderly O;

static void o_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (c->status == 0 && rs_check(data, 64, (uint32_t)O.received) < 0)
		O.received++;
}

static void o_cli_qp_ready(rr_ep *ep, int status, void *data)
{
	O.qp_ready_cli++;
	O.order_ok = !O.connected;
	cr_assert_eq(rr_ep_reg_mr(ep, O.cli_buf, sizeof(O.cli_buf), 0, &O.cli_mr), 0);
	for (int i = 0; i < BURST; i++)
		cr_assert_eq(rr_ep_post_recv(ep, O.cli_buf[i], 64, O.cli_mr, o_recv, O.cli_buf[i]),
			     0);
}

static void o_srv_qp_ready(rr_ep *ep, int status, void *data)
{
	O.qp_ready_srv++;
}

static void o_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (c->status == 0 && ++O.sends_done == BURST)
		rr_ep_disconnect(ep); /* the last SEND is acknowledged: leave */
}

static void o_accept(rr_listener *l, rr_ep *ep, void *data)
{
	O.srv = ep;
	/* Send at once: the client's receives were posted in on_qp_ready. */
	for (int i = 0; i < BURST; i++) {
		rs_fill(O.srv_buf[i], 64, (uint32_t)i);
		cr_assert_eq(rr_ep_post_send(ep, O.srv_buf[i], 64, O.srv_mr, o_sent, NULL), 0);
	}
}

static void o_connect(rr_ep *ep, int status, void *data)
{
	O.connected = status == 0 ? 1 : -1;
}

static void o_down(rr_ep *ep, int status, void *data)
{
	O.down_calls++;
	O.received_at_down = O.received;
}

static bool o_down_seen(void *arg)
{
	return O.down_calls > 0 || O.connected < 0;
}

Test(faults, first_sends_meet_receives_and_precede_disconnect)
{
	const char *addr = rr_test_require_rdma();
	struct rr_ep_opts so = {.on_qp_ready = o_srv_qp_ready};
	struct rr_ep_opts co = {.on_qp_ready = o_cli_qp_ready, .on_disconnect = o_down};
	struct io_uring ring;
	rr_bridge *b;
	rr_listener *l;
	rr_ep *cli;

	memset(&O, 0, sizeof(O));
	cr_assert_eq(rr_test_ring_init(&ring, 64), 0);
	cr_assert_eq(
		rr_bridge_create(&b, &ring, rr_test_bridge_opts(), sizeof(struct rr_bridge_opts)),
		0);
	cr_assert_eq(rr_listen(b, addr, 0, &so, sizeof(so), o_accept, NULL, &l), 0);
	/* Server memory exists before any client does. */
	cr_assert_eq(rr_listener_reg_mr(l, O.srv_buf, sizeof(O.srv_buf), 0, &O.srv_mr), 0);
	cr_assert_eq(rr_connect(b, addr, rr_listener_port(l), &co, sizeof(co), o_connect, &cli), 0);
	cr_assert_eq(bp_run_pred(b, o_down_seen, NULL, 30000), 0, "no disconnect");
	cr_assert_eq(O.connected, 1);
	cr_assert_eq(O.qp_ready_cli, 1);
	cr_assert_eq(O.qp_ready_srv, 1);
	cr_assert(O.order_ok, "on_qp_ready ran after on_connect");
	cr_assert_eq(O.received_at_down, BURST, "on_disconnect came after %d of %d receives",
		     O.received_at_down, BURST);
	rr_ep_destroy(cli);
	rr_ep_destroy(O.srv);
	rr_mr_dereg(O.cli_mr);
	rr_mr_dereg(O.srv_mr);
	rr_listener_destroy(l);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}

/* ---- destroying an endpoint from its on_qp_ready ---- */

static struct {
	int srv_ready, cli_ready, accepts, connects, connect_status;
} Q;

static void q_destroy_ready(rr_ep *ep, int status, void *data)
{
	(*(int *)data)++;
	rr_ep_destroy(ep); /* abandon the accept / connect */
}

static void q_accept(rr_listener *l, rr_ep *ep, void *data)
{
	Q.accepts++;
	rr_ep_destroy(ep);
}

static void q_connect(rr_ep *ep, int status, void *data)
{
	Q.connects++;
	Q.connect_status = status;
}

static bool q_client_done(void *arg)
{
	return Q.connects > 0;
}

Test(faults, destroy_in_on_qp_ready_abandons_both_sides)
{
	const char *addr = rr_test_require_rdma();
	struct rr_ep_opts so = {.on_qp_ready = q_destroy_ready, .data = &Q.srv_ready};
	struct rr_ep_opts co = {.connect_timeout_ms = 5000};
	struct rr_ep_opts co2 = {.on_qp_ready = q_destroy_ready, .data = &Q.cli_ready};
	struct io_uring ring;
	rr_bridge *b;
	rr_listener *l;
	rr_ep *cli, *cli2;

	memset(&Q, 0, sizeof(Q));
	cr_assert_eq(rr_test_ring_init(&ring, 64), 0);
	cr_assert_eq(
		rr_bridge_create(&b, &ring, rr_test_bridge_opts(), sizeof(struct rr_bridge_opts)),
		0);
	cr_assert_eq(rr_listen(b, addr, 0, &so, sizeof(so), q_accept, NULL, &l), 0);
	/* Passive side abandons: the client hears a clear error. */
	cr_assert_eq(rr_connect(b, addr, rr_listener_port(l), &co, sizeof(co), q_connect, &cli), 0);
	cr_assert_eq(bp_run_pred(b, q_client_done, NULL, 20000), 0, "client never heard back");
	cr_assert_eq(Q.srv_ready, 1);
	cr_assert_eq(Q.accepts, 0, "accepted an abandoned connection");
	cr_assert_eq(Q.connects, 1);
	cr_assert_lt(Q.connect_status, 0);
	rr_ep_destroy(cli);
	/* Active side abandons: no on_connect at all, listener unaffected. */
	Q.connects = 0;
	co2.connect_timeout_ms = 5000;
	cr_assert_eq(rr_connect(b, addr, rr_listener_port(l), &co2, sizeof(co2), q_connect, &cli2),
		     0);
	for (int i = 0; i < 200 && !Q.cli_ready; i++)
		rr_bridge_run_once(b, 10);
	cr_assert_eq(Q.cli_ready, 1);
	for (int i = 0; i < 100; i++)
		rr_bridge_run_once(b, 10);
	cr_assert_eq(Q.connects, 0, "on_connect ran for an endpoint destroyed in on_qp_ready");
	rr_listener_destroy(l);
	cr_assert_eq(rr_bridge_destroy(b), 0);
	io_uring_queue_exit(&ring);
}
