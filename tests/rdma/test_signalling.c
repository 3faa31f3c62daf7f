// SPDX-License-Identifier: MIT
/*
 * Selective signalling (rr_ep_opts.signal_every): only one send in N asks
 * for a work completion, yet every request gets exactly one callback, in
 * posting order, on success, on a peer's disconnect and on teardown.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "bridge_pair.h"
#include "require.h"

#define MSGS 56
#define SIZE 64

struct rec {
	int calls[MSGS];
	int status[MSGS];
	int order[MSGS];
	int n;
	int recvs;
	/* destroy_from_callbacks: the endpoints the first two send
	 * callbacks destroy, and the receives' outcomes. */
	rr_ep **kill[2];
	int recv_calls[MSGS], recv_status[MSGS];
};

static struct rec R;
static char buf[2 * MSGS * SIZE];

static void on_send(rr_ep *ep, const struct rr_completion *c, void *data)
{
	int i = (int)(uintptr_t)data;

	cr_assert(i >= 0 && i < MSGS);
	R.calls[i]++;
	R.status[i] = c->status;
	if (R.n < MSGS)
		R.order[R.n] = i;
	R.n++;
	if (c->status == 0)
		cr_assert_eq(c->opcode, IBV_WC_SEND);
	if (R.n <= 2 && R.kill[R.n - 1] && *R.kill[R.n - 1]) {
		rr_ep *victim = *R.kill[R.n - 1];

		*R.kill[R.n - 1] = NULL;
		rr_ep_destroy(victim);
	}
}

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	int i = (int)(uintptr_t)data;

	if (c->status == 0)
		R.recvs++;
	if (i >= 0 && i < MSGS) {
		R.recv_calls[i]++;
		R.recv_status[i] = c->status;
	}
}

static bool all_sent(void *arg)
{
	return R.n >= *(int *)arg;
}

static void open_pair_flags(struct bridge_pair *p, struct ibv_mr **mr, unsigned int every,
			    unsigned int flags)
{
	struct rr_ep_opts o = {
		.max_send_wr = 64, .max_recv_wr = 64, .signal_every = every, .flags = flags};
	const char *addr = rr_test_require_rdma();
	int rc;

	memset(&R, 0, sizeof(R));
	rc = bp_open(p, addr, &o);
	cr_assert_eq(rc, 0, "bp_open: %s", strerror(-rc));
	cr_assert_eq(rr_ep_reg_mr(p->cli.ep, buf, sizeof(buf), 0, mr), 0);
}

static void open_pair(struct bridge_pair *p, struct ibv_mr **mr, unsigned int every)
{
	open_pair_flags(p, mr, every, 0);
}

static void post_sends(struct bridge_pair *p, struct ibv_mr *mr, int from, int to)
{
	for (int i = from; i < to; i++)
		cr_assert_eq(rr_ep_post_send(p->cli.ep, buf + i * SIZE, SIZE, mr, on_send,
					     (void *)(uintptr_t)i),
			     0);
}

static void check_once_in_order(int n)
{
	cr_assert_eq(R.n, n, "%d callbacks for %d requests", R.n, n);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(R.calls[i], 1, "request %d: %d callbacks", i, R.calls[i]);
		cr_assert_eq(R.order[i], i, "callback %d was request %d", i, R.order[i]);
	}
}

static bool recvs_in(void *arg)
{
	return R.recvs >= *(int *)arg;
}

/* Posts from a callback, as an application reposts: the callback of a
 * trigger SEND (posted alone, from the test) posts sends [from, to) in
 * that pass, which the library chains. */
static struct bridge_pair *trig_p;
static struct ibv_mr *trig_mr;
static int trig_from, trig_to, trig_calls;

static void on_trigger(rr_ep *ep, const struct rr_completion *c, void *data)
{
	(void)ep;
	(void)data;
	cr_assert_eq(c->status, 0);
	trig_calls++;
	post_sends(trig_p, trig_mr, trig_from, trig_to);
}

static bool triggered(void *arg)
{
	return trig_calls >= *(int *)arg;
}

static void sends_in_a_pass(struct bridge_pair *p, struct ibv_mr *mr, int from, int to)
{
	int want = trig_calls + 1;

	trig_p = p;
	trig_mr = mr;
	trig_from = from;
	trig_to = to;
	cr_assert_eq(rr_ep_post_send(p->cli.ep, buf, SIZE, mr, on_trigger, NULL), 0);
	cr_assert_eq(bp_run_pred(p->b, triggered, &want, 20000), 0, "the trigger did not complete");
}

Test(signalling, every_send_once_in_order_with_fewer_completions)
{
	struct rr_bridge_stats st0, st;
	struct bridge_pair p;
	struct ibv_mr *mr;
	int want = 50;

	open_pair(&p, &mr, 8);
	for (int i = 0; i < MSGS + 2; i++)
		cr_assert_eq(rr_ep_post_recv(p.srv.ep, buf + (MSGS + i % MSGS) * SIZE, SIZE, mr,
					     on_recv, NULL),
			     0);
	rr_bridge_get_stats(p.b, &st0, sizeof(st0));
	sends_in_a_pass(&p, mr, 0, 50);
	cr_assert_eq(bp_run_pred(p.b, recvs_in, &want, 20000), 0, "messages did not arrive");
	/* The chain's last send asked for a completion: all 50 complete,
	 * none waits for a later post. */
	cr_assert_eq(bp_run_pred(p.b, all_sent, &want, 20000), 0,
		     "%d callbacks after 50 sends, signalling every 8th", R.n);
	sends_in_a_pass(&p, mr, 50, MSGS);
	want = MSGS;
	cr_assert_eq(bp_run_pred(p.b, all_sent, &want, 20000), 0, "sends did not complete");
	check_once_in_order(MSGS);
	for (int i = 0; i < MSGS; i++)
		cr_assert_eq(R.status[i], 0);
	cr_assert_eq(rr_ep_outstanding(p.cli.ep), 0, "requests left outstanding");
	rr_bridge_get_stats(p.b, &st, sizeof(st));
	/* The server's receives, the two triggers, one send completion in
	 * eight and one per chain: far fewer than one per send. Each pass
	 * posted its sends as one chain. */
	cr_assert_leq(st.wcs - st0.wcs, (MSGS + 2) + 2 + MSGS / 8 + 2, "%llu work completions",
		      (unsigned long long)(st.wcs - st0.wcs));
	cr_assert_eq(st.posts - st0.posts, MSGS + 2);
	cr_assert_eq(st.chains - st0.chains, 4, "%llu chains",
		     (unsigned long long)(st.chains - st0.chains));
	rr_mr_dereg(mr);
	bp_close(&p);
}

/*
 * A server written from the docs alone: a client asks, the server answers
 * with a burst of 500 sends (signal_every 8), reposting from its send
 * callbacks as the window frees; the client receives all 500 and hangs
 * up cleanly. Every send the client received completes with status 0 on
 * the server, none with -ECANCELED (500 mod 8 = 4 used to trail the last
 * signalled one).
 */
#define BURST 500

static struct {
	int posted, calls, ok, cancelled, other, recvd;
	struct ibv_mr *mr;
} B;
static char burst_buf[(BURST + 1) * SIZE];

static void burst_fill(rr_ep *ep);

static void on_burst_send(rr_ep *ep, const struct rr_completion *c, void *data)
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
		int rc = rr_ep_post_send(ep, burst_buf, SIZE, B.mr, on_burst_send, NULL);

		if (rc == -ENOBUFS)
			break;
		cr_assert_eq(rc, 0, "send %d: %s", B.posted, strerror(-rc));
		B.posted++;
	}
}

static void on_ask(rr_ep *ep, const struct rr_completion *c, void *data)
{
	(void)data;
	cr_assert_eq(c->status, 0);
	burst_fill(ep);
}

static void on_burst_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	(void)ep;
	(void)data;
	if (!c->status)
		B.recvd++;
}

static void on_asked(rr_ep *ep, const struct rr_completion *c, void *data)
{
	(void)ep;
	(void)data;
	cr_assert_eq(c->status, 0);
}

static bool all_received(void *arg)
{
	(void)arg;
	return B.recvd >= BURST;
}

Test(signalling, burst_then_clean_hangup_every_send_succeeds)
{
	struct rr_ep_opts so = {.max_send_wr = 64, .max_recv_wr = 4, .signal_every = 8};
	struct rr_ep_opts co = {.max_send_wr = 4, .max_recv_wr = BURST};
	const char *addr = rr_test_require_rdma();
	struct bridge_pair p;
	int rc;

	memset(&B, 0, sizeof(B));
	rc = bp_open2(&p, addr, &so, &co);
	cr_assert_eq(rc, 0, "bp_open2: %s", strerror(-rc));
	cr_assert_eq(rr_ep_reg_mr(p.cli.ep, burst_buf, sizeof(burst_buf), 0, &B.mr), 0);
	for (int i = 0; i < BURST; i++)
		cr_assert_eq(rr_ep_post_recv(p.cli.ep, burst_buf + (i + 1) * SIZE, SIZE, B.mr,
					     on_burst_recv, NULL),
			     0);
	cr_assert_eq(rr_ep_post_recv(p.srv.ep, burst_buf, SIZE, B.mr, on_ask, NULL), 0);
	cr_assert_eq(rr_ep_post_send(p.cli.ep, burst_buf, SIZE, B.mr, on_asked, NULL), 0);
	cr_assert_eq(bp_run_pred(p.b, all_received, NULL, 60000), 0, "%d of %d received", B.recvd,
		     BURST);
	cr_assert_eq(rr_ep_disconnect(p.cli.ep), 0);
	cr_assert_eq(bp_run_until(&p, &p.srv.down_calls, 20000), 0, "no on_disconnect");
	for (int i = 0; i < 20; i++)
		rr_bridge_run_once(p.b, 5);
	cr_assert_eq(B.posted, BURST);
	cr_assert_eq(B.ok, BURST, "%d of %d sends the client received succeeded (%d cancelled)",
		     B.ok, BURST, B.cancelled);
	cr_assert_eq(B.calls, BURST);
	cr_assert_eq(B.other, 0);
	rr_mr_dereg(B.mr);
	bp_close(&p);
}

Test(signalling, unsignalled_sends_complete_once_on_teardown)
{
	struct bridge_pair p;
	struct ibv_mr *mr;

	open_pair(&p, &mr, 16);
	/* No receive on the server: the sends wait in RNR retries. */
	post_sends(&p, mr, 0, 10);
	for (int i = 0; i < 20; i++)
		rr_bridge_run_once(p.b, 5);
	cr_assert_eq(R.n, 0, "a send completed without a receive");
	rr_ep_destroy(p.cli.ep);
	p.cli.ep = NULL;
	check_once_in_order(10);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(R.status[i], -ECANCELED);
	rr_mr_dereg(mr);
	bp_close(&p);
}

Test(signalling, unsignalled_sends_complete_once_on_peer_disconnect)
{
	struct bridge_pair p;
	struct ibv_mr *mr;

	open_pair(&p, &mr, 16);
	post_sends(&p, mr, 0, 10);
	for (int i = 0; i < 20; i++)
		rr_bridge_run_once(p.b, 5);
	cr_assert_eq(rr_ep_disconnect(p.srv.ep), 0);
	cr_assert_eq(bp_run_until(&p, &p.cli.down_calls, 20000), 0, "no on_disconnect");
	/* Flushed through the CQ or completed by the destroy: once each. */
	rr_ep_destroy(p.cli.ep);
	p.cli.ep = NULL;
	check_once_in_order(10);
	for (int i = 0; i < 10; i++)
		cr_assert(R.status[i] == -ECANCELED || R.status[i] == 0, "status %d", R.status[i]);
	rr_mr_dereg(mr);
	bp_close(&p);
}

/*
 * The first send callback destroys its endpoint while its other sends'
 * completions wait in the same batch, and the second (handed out by that
 * destroy) destroys the server, whose receives' completions are in the
 * batch too (or, apart, in its own CQ). Everything had completed on the
 * wire: each request is a real outcome, handed out once, in order, with
 * its status, none as cancelled.
 */
static void destroy_from_callbacks(unsigned int flags)
{
	struct bridge_pair p;
	struct ibv_mr *mr;
	int want = 8;

	open_pair_flags(&p, &mr, 1, flags);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(rr_ep_post_recv(p.srv.ep, buf + (MSGS + i) * SIZE, SIZE, mr, on_recv,
					     (void *)(uintptr_t)i),
			     0);
	post_sends(&p, mr, 0, 8);
	/* Not dispatched: every completion lands in the CQ (a generous
	 * wait for rxe), so one poll takes them all into one batch. */
	usleep(1000 * 1000);
	R.kill[0] = &p.cli.ep;
	R.kill[1] = &p.srv.ep;
	cr_assert_eq(bp_run_pred(p.b, all_sent, &want, 20000), 0, "sends did not complete");
	check_once_in_order(8);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(R.status[i], 0, "send %d: status %d after its endpoint's destroy", i,
			     R.status[i]);
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(R.recv_calls[i], 1, "receive %d: %d callbacks", i, R.recv_calls[i]);
		cr_assert_eq(R.recv_status[i], 0,
			     "receive %d: status %d after the server's destroy", i,
			     R.recv_status[i]);
	}
	cr_assert_null(p.cli.ep);
	cr_assert_null(p.srv.ep);
	rr_mr_dereg(mr);
	bp_close(&p);
}

Test(signalling, destroy_from_callbacks_keeps_real_outcomes_private_cq)
{
	destroy_from_callbacks(0);
}

Test(signalling, destroy_from_callbacks_keeps_real_outcomes_shared_cq)
{
	destroy_from_callbacks(RR_EP_SHARED_CQ);
}
