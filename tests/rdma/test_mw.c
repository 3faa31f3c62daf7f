// SPDX-License-Identifier: MIT
/*
 * Memory windows: a window bound on one endpoint serves that endpoint's
 * peer only, and only until it is invalidated; the region behind it grants
 * no remote access of its own. Other connections of the same device (same
 * PD) are the attackers.
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "bridge_pair.h"
#include "require.h"

struct op {
	int calls, status;
	enum ibv_wc_opcode opcode;
	enum ibv_wc_status wc_status;
};

static void on_op(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct op *o = data;

	o->calls++;
	o->status = c->status;
	o->opcode = c->opcode;
	o->wc_status = c->wc_status;
}

static struct bridge_pair p;
static rr_listener *l2; /* keeps the extra connections (the pair's drops them) */
static rr_ep *kept[4];
static int nkept;

static void keep_accept(rr_listener *l, rr_ep *ep, void *data)
{
	cr_assert_lt(nkept, 4);
	kept[nkept++] = ep;
}
static char win[4096], src[3][64];
static struct ibv_mr *win_mr;

/* Run until @o completed; returns its status. */
static int wait_op(struct op *o)
{
	cr_assert_eq(bp_run_until(&p, &o->calls, 10000), 0, "no completion");
	cr_assert_eq(o->calls, 1, "%d callbacks", o->calls);
	return o->status;
}

struct extra {
	rr_ep *ep;
	int calls, status;
};

static void extra_up(rr_ep *ep, int status, void *data)
{
	struct extra *x = data;

	x->status = status;
	x->calls++;
}

/* Another connection to the same bridge: same device, same PD on our side. */
static void connect_extra(struct extra *x)
{
	struct rr_ep_opts o = {.data = x};
	int n = nkept;

	memset(x, 0, sizeof(*x));
	if (!l2)
		cr_assert_eq(
			rr_listen(p.b, rr_test_require_rdma(), 0, NULL, 0, keep_accept, NULL, &l2),
			0);
	cr_assert_eq(rr_connect(p.b, rr_test_require_rdma(), rr_listener_port(l2), &o, sizeof(o),
				extra_up, &x->ep),
		     0);
	cr_assert_eq(bp_run_until(&p, &x->calls, 10000), 0);
	cr_assert_eq(x->status, 0, "extra client: %s", strerror(-x->status));
	while (nkept == n)
		cr_assert_eq(bp_run_until(&p, (int[]){0}, 100), -ETIMEDOUT);
}

static int write_from(rr_ep *ep, int i, const char *text, uint32_t rkey)
{
	struct ibv_mr *mr;
	struct op o = {0};
	int rc;

	strcpy(src[i], text);
	cr_assert_eq(rr_ep_reg_mr(ep, src[i], sizeof(src[i]), 0, &mr), 0);
	rc = rr_ep_post_write(ep, src[i], (uint32_t)strlen(text) + 1, mr, (uintptr_t)win, rkey,
			      on_op, &o);
	cr_assert_eq(rc, 0, "post write of '%s': %s", text, strerror(-rc));
	rc = wait_op(&o);
	rr_mr_dereg(mr);
	return rc;
}

static void setup(void)
{
	int rc = bp_open(&p, rr_test_require_rdma(), NULL);

	l2 = NULL;
	nkept = 0;
	cr_assert_eq(rc, 0, "bp_open: %s", strerror(-rc));
	cr_assert_eq(bp_run_until(&p, &p.accepts, 10000), 0, "no accept");
	memset(win, 0, sizeof(win));
	/* No remote access of its own: only through a window. */
	cr_assert_eq(rr_ep_reg_mr(p.srv.ep, win, sizeof(win), IBV_ACCESS_MW_BIND, &win_mr), 0);
}

static void teardown(void)
{
	rr_mr_dereg(win_mr);
	bp_close(&p);
}

Test(mw, serves_its_own_peer_only_until_invalidated, .init = setup, .fini = teardown)
{
	rr_ep *srv = p.srv.ep; /* the server side of p.cli's connection */
	struct extra by_mr, by_mw;
	struct op bind = {0}, inv = {0};
	struct ibv_mw *mw;
	uint32_t rkey;

	connect_extra(&by_mr);
	connect_extra(&by_mw);
	cr_assert_eq(rr_ep_alloc_mw(srv, &mw), 0);
	rkey = ibv_inc_rkey(mw->rkey);
	cr_assert_eq(rr_ep_post_bind_mw(srv, mw, rkey, win_mr, win, sizeof(win),
					IBV_ACCESS_REMOTE_WRITE, on_op, &bind),
		     0);
	cr_assert_eq(wait_op(&bind), 0, "bind: %s", strerror(-bind.status));
	cr_expect_eq(bind.opcode, IBV_WC_BIND_MW);

	cr_expect_eq(write_from(p.cli.ep, 0, "mine", rkey), 0);
	cr_expect_str_eq(win, "mine");
	/* Another connection: with the region's own key, and with the window's. */
	cr_expect_eq(write_from(by_mr.ep, 1, "by the region", win_mr->rkey), -EACCES);
	cr_expect_eq(write_from(by_mw.ep, 2, "by the window", rkey), -EACCES);
	cr_expect_str_eq(win, "mine");

	cr_assert_eq(rr_ep_post_local_inv(srv, rkey, on_op, &inv), 0);
	cr_assert_eq(wait_op(&inv), 0, "invalidate: %s", strerror(-inv.status));
	cr_expect_eq(inv.opcode, IBV_WC_LOCAL_INV);
	cr_expect_eq(write_from(p.cli.ep, 0, "too late", rkey), -EACCES);
	cr_expect_str_eq(win, "mine");
	rr_ep_destroy(by_mr.ep);
	rr_ep_destroy(by_mw.ep);
	cr_expect_eq(rr_mw_dealloc(mw), 0);
}

/*
 * Grant @first, write through it, invalidate it, then grant @second (a
 * fresh window, or @first again) under its next key: the peer writes
 * through the new key, the old one is dead. Returns the new key.
 */
static uint32_t regrant(struct ibv_mw *first, struct ibv_mw *second)
{
	struct op o[3] = {{0}};
	uint32_t k1, k2;

	k1 = ibv_inc_rkey(first->rkey);
	cr_assert_eq(rr_ep_post_bind_mw(p.srv.ep, first, k1, win_mr, win, 64,
					IBV_ACCESS_REMOTE_WRITE, on_op, &o[0]),
		     0);
	cr_assert_eq(wait_op(&o[0]), 0);
	cr_expect_eq(write_from(p.cli.ep, 0, "first", k1), 0);
	cr_assert_eq(rr_ep_post_local_inv(p.srv.ep, k1, on_op, &o[1]), 0);
	cr_assert_eq(wait_op(&o[1]), 0);
	k2 = ibv_inc_rkey(second->rkey); /* the same window: ibv_inc_rkey(k1) */
	cr_assert_eq(rr_ep_post_bind_mw(p.srv.ep, second, k2, win_mr, win, 64,
					IBV_ACCESS_REMOTE_WRITE, on_op, &o[2]),
		     0);
	cr_assert_eq(wait_op(&o[2]), 0, "second bind: %s", ibv_wc_status_str(o[2].wc_status));
	cr_expect_eq(write_from(p.cli.ep, 0, "second", k2), 0);
	cr_expect_str_eq(win, "second");
	cr_expect_eq(write_from(p.cli.ep, 0, "stale", k1), -EACCES);
	cr_expect_str_eq(win, "second");
	return k2;
}

/*
 * One window per grant: invalidated, and the next grant on a fresh window;
 * the old key is dead.
 */
Test(mw, a_fresh_window_per_grant_retires_the_old_key, .init = setup, .fini = teardown)
{
	struct ibv_mw *mw1, *mw2;

	cr_assert_eq(rr_ep_alloc_mw(p.srv.ep, &mw1), 0);
	cr_assert_eq(rr_ep_alloc_mw(p.srv.ep, &mw2), 0);
	regrant(mw1, mw2);
	cr_expect_eq(rr_mw_dealloc(mw1), 0);
	cr_expect_eq(rr_mw_dealloc(mw2), 0);
}

/*
 * One window, bound again after each invalidate under the next key. Before
 * the library kept mw->rkey current, the provider presented the window's
 * first key on the second bind and rxe failed it (memory management
 * operation error).
 */
Test(mw, the_same_window_bound_again_after_invalidate, .init = setup, .fini = teardown)
{
	struct ibv_mw *mw;
	uint32_t first_key, k2;

	cr_assert_eq(rr_ep_alloc_mw(p.srv.ep, &mw), 0);
	first_key = mw->rkey;
	k2 = regrant(mw, mw);
	cr_expect_eq(k2, ibv_inc_rkey(ibv_inc_rkey(first_key)));
	cr_expect_eq(mw->rkey, k2);
	cr_expect_eq(rr_mw_dealloc(mw), 0);
}

Test(mw, bad_arguments_are_refused_without_a_callback, .init = setup, .fini = teardown)
{
	struct op o = {0};
	struct ibv_mw *mw;
	uint32_t k;

	cr_assert_eq(rr_ep_alloc_mw(p.srv.ep, &mw), 0);
	/* Beyond the region, no length, local access flags, another index. */
	k = ibv_inc_rkey(mw->rkey);
	cr_expect_eq(rr_ep_post_bind_mw(p.srv.ep, mw, k ^ 0x100, win_mr, win, 64,
					IBV_ACCESS_REMOTE_WRITE, on_op, &o),
		     -EINVAL);
	cr_expect_eq(rr_ep_post_bind_mw(p.srv.ep, mw, k, win_mr, win + 1, sizeof(win),
					IBV_ACCESS_REMOTE_WRITE, on_op, &o),
		     -EINVAL);
	cr_expect_eq(rr_ep_post_bind_mw(p.srv.ep, mw, k, win_mr, win, 0, IBV_ACCESS_REMOTE_WRITE,
					on_op, &o),
		     -EINVAL);
	cr_expect_eq(rr_ep_post_bind_mw(p.srv.ep, mw, k, win_mr, win, 64, IBV_ACCESS_LOCAL_WRITE,
					on_op, &o),
		     -EINVAL);
	cr_expect_eq(rr_ep_post_local_inv(p.srv.ep, 1, NULL, NULL), -EINVAL);
	cr_expect_eq(bp_run_until(&p, &o.calls, 300), -ETIMEDOUT);
	cr_expect_eq(o.calls, 0);
	cr_expect_eq(rr_mw_dealloc(mw), 0);
	cr_expect_eq(rr_mw_dealloc(NULL), 0);
}
