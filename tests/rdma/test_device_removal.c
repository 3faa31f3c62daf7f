// SPDX-License-Identifier: MIT
/*
 * `rdma link delete rxe0` while traffic runs: both endpoints and the
 * listener hear about it once, every posted request completes exactly once, nothing crashes, and
 * the bridge lets go of everything it had on the device. (librdmacm keeps
 * its own context of the device open while the process lives, so the
 * kernel finishes the removal only after exit: device_removal.sh checks
 * that, and re-creates rxe0 for the tests after it.)
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "bridge_pair.h"
#include "bridge.h"
#include "rdma_sync.h"
#include "require.h"

#define QD 16

static struct {
	struct bridge_pair p;
	struct ibv_mr *smr, *rmr;
	uint8_t sbuf[QD][256], rbuf[2 * QD][256];
	uint32_t posted, completed, ok, failed, recv_posted, recv_completed;
	int down[2], down_status[2];
	int listener_errors, listener_status;
	bool removing;
	pid_t remover;
} R;

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data);

static void post_sends(void)
{
	while (!R.down[0] && R.posted - R.completed < QD) {
		if (rr_ep_post_send(R.p.cli.ep, R.sbuf[R.posted % QD], 256, R.smr,
				    (rr_req_cb)on_recv, (void *)(uintptr_t)1))
			break;
		R.posted++;
	}
}

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (data == (void *)(uintptr_t)1) { /* a send */
		R.completed++;
		if (c->status)
			R.failed++;
		else
			R.ok++;
		post_sends();
		return;
	}
	R.recv_completed++;
	if (c->status == 0 && !R.down[1] &&
	    rr_ep_post_recv(ep, data, 256, R.rmr, on_recv, data) == 0)
		R.recv_posted++;
}

static void on_down(rr_ep *ep, int status, void *data)
{
	int i = ep == R.p.cli.ep ? 0 : 1;

	R.down[i]++;
	R.down_status[i] = status;
}

static void on_listener_error(rr_listener *l, int status, void *data)
{
	R.listener_errors++;
	R.listener_status = status;
}

static bool settled(void *arg)
{
	return R.down[0] && R.down[1] && R.completed == R.posted && R.listener_errors;
}

static bool enough(void *arg)
{
	return R.ok >= 2000 || R.failed;
}

Test(removal, link_delete_during_traffic, .timeout = 300)
{
	const char *addr = rr_test_require_rdma();
	struct rr_ep_opts o = {.max_send_wr = QD, .max_recv_wr = 2 * QD};
	int status;

	if (!getenv("RDMA_LAB"))
		cr_assert_fail("destroys the RDMA device: lab only (tools/rdma-lab)");
	memset(&R, 0, sizeof(R));
	cr_assert_eq(bp_open(&R.p, addr, &o), 0);
	rr_ep_set_on_disconnect(R.p.cli.ep, on_down);
	rr_ep_set_on_disconnect(R.p.srv.ep, on_down);
	rr_listener_set_on_error(R.p.l, on_listener_error);
	cr_assert_eq(rr_ep_reg_mr(R.p.cli.ep, R.sbuf, sizeof(R.sbuf), 0, &R.smr), 0);
	cr_assert_eq(rr_ep_reg_mr(R.p.srv.ep, R.rbuf, sizeof(R.rbuf), 0, &R.rmr), 0);
	for (int i = 0; i < 2 * QD; i++) {
		cr_assert_eq(rr_ep_post_recv(R.p.srv.ep, R.rbuf[i], 256, R.rmr, on_recv, R.rbuf[i]),
			     0);
		R.recv_posted++;
	}
	post_sends();
	cr_assert_eq(bp_run_pred(R.p.b, enough, NULL, 60000), 0, "traffic did not start");
	cr_assert_eq(R.failed, 0);

	R.remover = fork();
	if (R.remover == 0) {
		execlp("rdma", "rdma", "link", "delete", "rxe0", (char *)NULL);
		_exit(127);
	}
	cr_assert_gt(R.remover, 0);
	cr_assert_eq(bp_run_pred(R.p.b, settled, NULL, 60000), 0,
		     "not settled: down %d/%d, posted %u completed %u", R.down[0], R.down[1],
		     R.posted, R.completed);
	cr_assert_eq(R.down[0], 1);
	cr_assert_eq(R.down[1], 1);
	cr_assert_lt(R.down_status[0], 0);
	cr_assert_lt(R.down_status[1], 0);
	/* The listener, bound to the device's address, stopped and said so. */
	cr_assert_eq(R.listener_errors, 1);
	cr_assert_eq(R.listener_status, -ENODEV);
	cr_assert_eq(rr_listener_port(R.p.l), 0);
	/* Our resources on the dead device go; the removal can complete. */
	rr_mr_dereg(R.smr);
	rr_mr_dereg(R.rmr);
	rr_ep_destroy(R.p.cli.ep);
	rr_ep_destroy(R.p.srv.ep);
	cr_assert_eq(R.completed, R.posted, "posted %u sends, %u completed", R.posted, R.completed);
	cr_assert_eq(R.recv_completed, R.recv_posted, "posted %u receives, %u completed",
		     R.recv_posted, R.recv_completed);
	rr_listener_destroy(R.p.l);
	cr_assert(rr__list_empty(&R.p.b->devs.devices),
		  "the bridge still holds the removed device");
	bp_close(&R.p);
	(void)status; /* the remover finishes after we exit; the script waits */
}
