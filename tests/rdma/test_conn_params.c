// SPDX-License-Identifier: MIT
/*
 * Connection parameters from rr_ep_opts: how many RDMA READs an endpoint
 * may have outstanding (initiator_depth) and serves (responder_resources),
 * capped to the device and, on the passive side, to the peer's offer.
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "bridge_pair.h"
#include "require.h"

struct depths {
	unsigned int init, resp; /* the QP's max_rd_atomic, max_dest_rd_atomic */
};

static struct depths qp_depths(rr_ep *ep)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	cr_assert_not_null(ep);
	cr_assert_eq(ibv_query_qp(rr_ep_qp(ep), &a,
				  IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &ia),
		     0, "ibv_query_qp: %s", strerror(errno));
	return (struct depths){a.max_rd_atomic, a.max_dest_rd_atomic};
}

static void open_pair(struct bridge_pair *p, unsigned int srv_init, unsigned int srv_resp,
		      unsigned int cli_init, unsigned int cli_resp)
{
	struct rr_ep_opts so = {.initiator_depth = srv_init, .responder_resources = srv_resp};
	struct rr_ep_opts co = {.initiator_depth = cli_init, .responder_resources = cli_resp};
	int rc = bp_open2(p, rr_test_require_rdma(), &so, &co);

	cr_assert_eq(rc, 0, "bp_open2: %s", strerror(-rc));
	cr_assert_eq(bp_run_until(p, &p->accepts, 10000), 0, "no accept");
}

#define expect_depths(ep, i, r)                                                                    \
	do {                                                                                       \
		struct depths d_ = qp_depths(ep);                                                  \
		cr_expect_eq(d_.init, (i), #ep ": initiator depth %u, want %u", d_.init,           \
			     (unsigned int)(i));                                                   \
		cr_expect_eq(d_.resp, (r), #ep ": responder resources %u, want %u", d_.resp,       \
			     (unsigned int)(r));                                                   \
	} while (0)

Test(conn_params, default_is_one_read_each_way)
{
	struct bridge_pair p;

	open_pair(&p, 0, 0, 0, 0);
	expect_depths(p.cli.ep, 1, 1);
	expect_depths(p.srv.ep, 1, 1);
	bp_close(&p);
}

Test(conn_params, both_sides_ask_for_eight)
{
	struct bridge_pair p;

	open_pair(&p, 8, 8, 8, 8);
	expect_depths(p.cli.ep, 8, 8);
	expect_depths(p.srv.ep, 8, 8);
	bp_close(&p);
}

/* The passive side gives no more than the request offers, and each side's
 * reads are bounded by what the other serves. */
Test(conn_params, the_smaller_offer_wins)
{
	struct bridge_pair p;

	open_pair(&p, 16, 2, 4, 8);
	expect_depths(p.cli.ep, 2, 8); /* 4 asked, the server serves 2 */
	expect_depths(p.srv.ep, 8, 2); /* 16 asked, the client serves 8 */
	bp_close(&p);
}

Test(conn_params, capped_to_the_device)
{
	struct ibv_device_attr da;
	struct bridge_pair p;
	unsigned int init, resp;

	open_pair(&p, 255, 255, 255, 255);
	cr_assert_eq(ibv_query_device(rr_ep_cm_id(p.cli.ep)->verbs, &da), 0);
	init = da.max_qp_init_rd_atom < 255 ? (unsigned int)da.max_qp_init_rd_atom : 255;
	resp = da.max_qp_rd_atom < 255 ? (unsigned int)da.max_qp_rd_atom : 255;
	cr_log_info("device: max_qp_init_rd_atom %d, max_qp_rd_atom %d", da.max_qp_init_rd_atom,
		    da.max_qp_rd_atom);
	expect_depths(p.cli.ep, init < resp ? init : resp, init < resp ? init : resp);
	expect_depths(p.srv.ep, init < resp ? init : resp, init < resp ? init : resp);
	bp_close(&p);
}

#define READS 16
#define RSIZE 4096

static char src[READS * RSIZE], dst[READS * RSIZE];
static int read_calls[READS], read_status[READS], reads_done;

static void on_read(rr_ep *ep, const struct rr_completion *c, void *data)
{
	int i = (int)(uintptr_t)data;

	read_calls[i]++;
	read_status[i] = c->status;
	reads_done++;
}

static bool all_read(void *arg)
{
	return reads_done >= READS;
}

/* Sixteen READs posted at once on a depth of 8: each completes once, with
 * its own bytes. */
Test(conn_params, reads_beyond_the_depth_complete_in_order)
{
	struct ibv_mr *smr, *dmr;
	struct bridge_pair p;

	open_pair(&p, 8, 8, 8, 8);
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (char)(i * 7 + i / RSIZE);
	memset(dst, 0, sizeof(dst));
	memset(read_calls, 0, sizeof(read_calls));
	reads_done = 0;
	cr_assert_eq(rr_ep_reg_mr(p.srv.ep, src, sizeof(src), IBV_ACCESS_REMOTE_READ, &smr), 0);
	cr_assert_eq(rr_ep_reg_mr(p.cli.ep, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE, &dmr), 0);
	for (int i = 0; i < READS; i++)
		cr_assert_eq(rr_ep_post_read(p.cli.ep, dst + i * RSIZE, RSIZE, dmr,
					     (uintptr_t)src + (uint64_t)i * RSIZE, smr->rkey,
					     on_read, (void *)(uintptr_t)i),
			     0);
	cr_assert_eq(bp_run_pred(p.b, all_read, NULL, 20000), 0, "%d of %d reads", reads_done,
		     READS);
	for (int i = 0; i < READS; i++) {
		cr_expect_eq(read_calls[i], 1, "read %d: %d callbacks", i, read_calls[i]);
		cr_expect_eq(read_status[i], 0, "read %d: %s", i, strerror(-read_status[i]));
	}
	cr_expect_eq(memcmp(src, dst, sizeof(src)), 0);
	rr_mr_dereg(dmr);
	rr_mr_dereg(smr);
	bp_close(&p);
}

static bool starts_with(rr_ep *ep, const char *s)
{
	const void *d;
	int n = rr_ep_peer_private_data(ep, &d);

	return n >= (int)strlen(s) && d && !memcmp(d, s, strlen(s));
}

/* Private data with the request and with the acceptance, each side reads
 * the other's. */
Test(conn_params, private_data_both_ways)
{
	struct rr_ep_opts so = {.private_data = "from the server", .private_data_len = 16};
	struct rr_ep_opts co = {.private_data = "from the client", .private_data_len = 16};
	struct bridge_pair p;
	int rc = bp_open2(&p, rr_test_require_rdma(), &so, &co);

	cr_assert_eq(rc, 0, "bp_open2: %s", strerror(-rc));
	cr_assert_eq(bp_run_until(&p, &p.accepts, 10000), 0, "no accept");
	cr_expect(starts_with(p.srv.ep, "from the client"));
	cr_expect(starts_with(p.cli.ep, "from the server"));
	/* Answered already: too late to set. */
	cr_expect_eq(rr_ep_set_private_data(p.srv.ep, "x", 1), -EINVAL);
	cr_expect_eq(rr_ep_set_private_data(p.cli.ep, "x", 1), -EINVAL);
	bp_close(&p);
}

struct second {
	rr_ep *ep;
	int status, calls;
};

static int requests, refused;

/* Refuses peers whose data starts with "bad", saying why; answers the
 * others with data of its own. */
static int on_request(rr_listener *l, rr_ep *ep, const void *pdata, size_t len, void *data)
{
	requests++;
	cr_expect(pdata && len >= 3);
	if (pdata && !memcmp(pdata, "bad", 3)) {
		refused++;
		cr_expect_eq(rr_ep_set_private_data(ep, "go away", 8), 0);
		return -EPERM;
	}
	cr_expect_eq(rr_ep_set_private_data(ep, NULL, RR_PRIVATE_DATA_REJECT_MAX + 1), -EINVAL);
	cr_expect_eq(rr_ep_set_private_data(ep, "welcome", 8), 0);
	return 0;
}

static void second_connected(rr_ep *ep, int status, void *data)
{
	struct second *s = data;

	s->status = status;
	s->calls++;
}

static void connect_second(struct bridge_pair *p, const char *pdata, struct second *s)
{
	struct rr_ep_opts o = {.private_data = pdata,
			       .private_data_len = (unsigned int)strlen(pdata) + 1,
			       .data = s};
	int rc;

	memset(s, 0, sizeof(*s));
	rc = rr_connect(p->b, rr_test_require_rdma(), rr_listener_port(p->l), &o, sizeof(o),
			second_connected, &s->ep);
	cr_assert_eq(rc, 0, "rr_connect: %s", strerror(-rc));
	cr_assert_eq(bp_run_until(p, &s->calls, 10000), 0, "no on_connect");
}

static bool two_accepts(void *arg)
{
	return ((struct bridge_pair *)arg)->accepts >= 2;
}

Test(conn_params, request_hook_refuses_with_a_reason)
{
	struct bridge_pair p;
	struct second bad, good;
	int rc = bp_open(&p, rr_test_require_rdma(), NULL);

	cr_assert_eq(rc, 0, "bp_open: %s", strerror(-rc));
	cr_assert_eq(bp_run_until(&p, &p.accepts, 10000), 0, "no accept");
	requests = refused = 0;
	rr_listener_set_on_request(p.l, on_request);

	connect_second(&p, "bad peer", &bad);
	cr_expect_eq(bad.status, -ECONNREFUSED, "refused peer: %s", strerror(-bad.status));
	cr_expect(starts_with(bad.ep, "go away"));
	cr_expect_eq(p.accepts, 1, "a refused request was accepted");

	connect_second(&p, "good peer", &good);
	cr_expect_eq(good.status, 0, "good peer: %s", strerror(-good.status));
	cr_expect(starts_with(good.ep, "welcome"));
	cr_expect_eq(bp_run_pred(p.b, two_accepts, &p, 10000), 0, "the good peer not accepted");
	cr_expect_eq(requests, 2);
	cr_expect_eq(refused, 1);
	rr_ep_destroy(bad.ep);
	rr_ep_destroy(good.ep);
	bp_close(&p);
}

static void no_accept(rr_listener *l, rr_ep *ep, void *data)
{
	cr_assert_fail("nothing connects to this listener");
}

Test(conn_params, private_data_too_long_is_refused)
{
	static char big[RR_PRIVATE_DATA_ACCEPT_MAX + 1];
	struct rr_ep_opts o = {.private_data = big};
	struct bridge_pair p;
	rr_listener *l;
	rr_ep *ep;
	int rc = bp_open(&p, rr_test_require_rdma(), NULL);

	cr_assert_eq(rc, 0, "bp_open: %s", strerror(-rc));
	o.private_data_len = RR_PRIVATE_DATA_CONNECT_MAX + 1;
	cr_expect_eq(rr_connect(p.b, rr_test_require_rdma(), rr_listener_port(p.l), &o, sizeof(o),
				second_connected, &ep),
		     -EINVAL);
	o.private_data_len = RR_PRIVATE_DATA_ACCEPT_MAX + 1;
	cr_expect_eq(rr_listen(p.b, rr_test_require_rdma(), 0, &o, sizeof(o), no_accept, NULL, &l),
		     -EINVAL);
	o.private_data = NULL;
	o.private_data_len = 1;
	cr_expect_eq(rr_connect(p.b, rr_test_require_rdma(), rr_listener_port(p.l), &o, sizeof(o),
				second_connected, &ep),
		     -EINVAL);
	bp_close(&p);
}

enum hook_mode { REFUSE_SILENTLY, DESTROY_EP, DESTROY_LISTENER };
static enum hook_mode mode;
static int hook_rc;

static int odd_hook(rr_listener *l, rr_ep *ep, const void *pdata, size_t len, void *data)
{
	requests++;
	switch (mode) {
	case REFUSE_SILENTLY:
		return 1;
	case DESTROY_EP:
		rr_ep_destroy(ep);
		return 0;
	case DESTROY_LISTENER:
		hook_rc = rr_listener_destroy(l);
		return 1;
	}
	return 1;
}

/* A refusal carries what the hook set, never the listener's acceptance
 * data; a hook may destroy the endpoint (a refusal) but not its listener. */
Test(conn_params, refusals_keep_acceptance_data_and_survive_the_hook)
{
	struct rr_ep_opts so = {.private_data = "for members only", .private_data_len = 17};
	struct bridge_pair p;
	struct second s;
	int rc = bp_open2(&p, rr_test_require_rdma(), &so, NULL);

	cr_assert_eq(rc, 0, "bp_open2: %s", strerror(-rc));
	cr_assert_eq(bp_run_until(&p, &p.accepts, 10000), 0, "no accept");
	cr_expect(starts_with(p.cli.ep, "for members only"));
	requests = 0;
	rr_listener_set_on_request(p.l, odd_hook);
	for (mode = REFUSE_SILENTLY; mode <= DESTROY_LISTENER; mode++) {
		hook_rc = 0;
		connect_second(&p, "anyone", &s);
		cr_expect_eq(s.status, -ECONNREFUSED, "mode %d: %s", mode, strerror(-s.status));
		cr_expect(!starts_with(s.ep, "for members only"), "mode %d: acceptance data leaked",
			  mode);
		rr_ep_destroy(s.ep);
	}
	cr_expect_eq(hook_rc, -EBUSY);
	cr_expect_eq(requests, 3);
	cr_expect_eq(p.accepts, 1);
	bp_close(&p);
}
