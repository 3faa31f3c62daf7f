// SPDX-License-Identifier: MIT
/*
 * An application-owned loop written the way liburing users write one:
 * io_uring_submit_and_wait(), io_uring_for_each_cqe(),
 * rr_bridge_handle_cqe(), io_uring_cq_advance(), and no rr_bridge_flush().
 * The ring has 4 entries and the application's own long-lived requests
 * (reads on pipes that are written only as the RDMA ping-pong goes on)
 * fill its SQ, while a connection on the same bridge plays ping-pong.
 * A missing rr_bridge_flush() may cost latency, never a hang: a test
 * that hangs is failed by Criterion's timeout.
 *
 * Built twice: against the in-process rdma_cm and verbs of fake_cm.c and
 * fake_verbs.c for the unit suite (RR_NOFLUSH_FAKE), and against the real
 * ones for the rdma suite. Ring flavour from RR_TEST_RING_FLAGS.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <ringrdma.h>

#include "test_ring.h"
#ifndef RR_NOFLUSH_FAKE
#include "require.h"
#endif

#define ROUNDS 2000
#define NPIPES 4 /* the application's requests: as many as the SQ holds */
#define MSG    64

struct pipe_req {
	int fd[2];
	char byte;
	unsigned int done;
};

static struct {
	struct io_uring ring;
	rr_bridge *b;
	rr_listener *l;
	rr_ep *srv, *cli;
	struct ibv_mr *mr;
	char *buf; /* [0] client recv, [1] client send, [2] server recv, [3] server send */
	struct pipe_req pipes[NPIPES];
	unsigned int rounds, sends, app_cqes, app_late;
	uint32_t echo_pending; /* a request's first message, before on_accept */
	int connected, error;
} T;

static char *slot(int i)
{
	return T.buf + i * MSG;
}

static void fail(int err)
{
	if (!T.error)
		T.error = err ? err : -EPROTO;
}

/* The application's SQE for pipe @i, got the liburing way: a full SQ is
 * submitted to make room. */
static void queue_pipe_read(int i)
{
	struct io_uring_sqe *sqe;

	while (!(sqe = io_uring_get_sqe(&T.ring)))
		io_uring_submit(&T.ring);
	io_uring_prep_read(sqe, T.pipes[i].fd[0], &T.pipes[i].byte, 1, 0);
	io_uring_sqe_set_data64(sqe, (uint64_t)i + 1);
}

static void app_cqe(const struct io_uring_cqe *cqe)
{
	uint64_t i = cqe->user_data - 1;

	cr_assert_lt(i, NPIPES, "stray CQE %llu", (unsigned long long)cqe->user_data);
	cr_assert_eq(cqe->res, 1, "pipe read: %d", cqe->res);
	T.pipes[i].done++;
	T.app_cqes++;
	queue_pipe_read((int)i);
}

static void sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (c->status)
		fail(c->status);
}

static void fill(char *p, unsigned int round)
{
	memset(p, 'a' + (int)(round % 26), MSG);
	memcpy(p, &round, sizeof(round));
}

static void cli_recv(rr_ep *ep, const struct rr_completion *c, void *data);

static void cli_send_next(void)
{
	int rc;

	fill(slot(1), T.rounds);
	rc = rr_ep_post_recv(T.cli, slot(0), MSG, T.mr, cli_recv, NULL);
	if (!rc)
		rc = rr_ep_post_send(T.cli, slot(1), MSG, T.mr, sent, NULL);
	if (rc)
		fail(rc);
	T.sends++;
}

static void cli_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	char want[MSG];

	if (c->status) {
		fail(c->status);
		return;
	}
	fill(want, T.rounds);
	cr_assert_eq(c->byte_len, MSG);
	cr_assert_eq(memcmp(slot(0), want, MSG), 0, "round %u echoed wrong", T.rounds);
	T.rounds++;
	/* Wake the application's requests: their CQEs and the next round's
	 * RDMA completions arrive together, and their SQEs fill the SQ. */
	for (int i = 0; i < NPIPES; i++)
		cr_assert_eq(write(T.pipes[i].fd[1], "x", 1), 1);
	if (T.rounds < ROUNDS)
		cli_send_next();
}

static void srv_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	int rc;

	if (c->status) {
		fail(c->status);
		return;
	}
	memcpy(slot(3), slot(2), MSG);
	rc = rr_ep_post_recv(ep, slot(2), MSG, T.mr, srv_recv, NULL);
	/* The client may send as soon as it is established, before this
	 * side's ESTABLISHED: sends wait for on_accept. */
	if (!rc && !T.srv)
		T.echo_pending = c->byte_len;
	else if (!rc)
		rc = rr_ep_post_send(ep, slot(3), c->byte_len, T.mr, sent, NULL);
	if (rc)
		fail(rc);
}

static void srv_qp_ready(rr_ep *ep, int status, void *data)
{
	if (status || rr_ep_post_recv(ep, slot(2), MSG, T.mr, srv_recv, NULL))
		fail(status);
}

static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	T.srv = ep;
	if (T.echo_pending && rr_ep_post_send(ep, slot(3), T.echo_pending, T.mr, sent, NULL))
		fail(-EIO);
}

static void on_connect(rr_ep *ep, int status, void *data)
{
	if (status) {
		fail(status);
		return;
	}
	T.connected = 1;
	cli_send_next();
}

static void late_app_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	T.app_late++;
}

static const char *test_addr(void)
{
#ifdef RR_NOFLUSH_FAKE
	return "127.0.0.1";
#else
	return rr_test_require_rdma();
#endif
}

static void no_flush_loop(unsigned int bridge_flags, enum rr_wait_mode mode)
{
	struct rr_bridge_opts bo = {.flags = bridge_flags | rr_test_bridge_flags(),
				    .on_app_cqe = late_app_cqe};
	struct rr_ep_opts so = {.on_qp_ready = srv_qp_ready, .mode = mode};
	struct rr_ep_opts co = {.mode = mode};
	const char *addr = test_addr();
	int rc;

	memset(&T, 0, sizeof(T));
	rc = rr_test_ring_init(&T.ring, 4);
	if (rc == -EPERM || rc == -ENOSYS)
		cr_skip_test("this ring flavour is not supported here: %s", strerror(-rc));
	cr_assert_eq(rc, 0, "io_uring_queue_init: %s", strerror(-rc));
	cr_assert_eq(rr_bridge_create(&T.b, &T.ring, &bo, sizeof(bo)), 0);
	T.buf = aligned_alloc(4096, 4096);
	cr_assert_not_null(T.buf);
	cr_assert_eq(rr_listen(T.b, addr, 0, &so, sizeof(so), on_accept, NULL, &T.l), 0);
	cr_assert_eq(rr_listener_reg_mr(T.l, T.buf, 4096, 0, &T.mr), 0);
	for (int i = 0; i < NPIPES; i++) {
		cr_assert_eq(pipe2(T.pipes[i].fd, O_CLOEXEC), 0);
		queue_pipe_read(i);
	}
	cr_assert_eq(rr_connect(T.b, addr, rr_listener_port(T.l), &co, sizeof(co), on_connect,
				&T.cli),
		     0);

	/* Until the last round's pipe writes were read too. */
	while ((T.rounds < ROUNDS || T.app_cqes < ROUNDS * NPIPES) && !T.error) {
		struct io_uring_cqe *cqe;
		unsigned int head, seen = 0;

		rc = io_uring_submit_and_wait(&T.ring, 1);
		if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY)
			continue;
		cr_assert_geq(rc, 0, "io_uring_submit_and_wait: %s", strerror(-rc));
		io_uring_for_each_cqe(&T.ring, head, cqe) {
			if (!rr_bridge_handle_cqe(T.b, cqe))
				app_cqe(cqe);
			seen++;
		}
		io_uring_cq_advance(&T.ring, seen);
	}
	cr_assert_eq(T.error, 0, "error: %s", strerror(-T.error));
	cr_expect_eq(T.sends, ROUNDS);

	cr_assert_eq(rr_ep_destroy(T.cli), 0);
	cr_assert_eq(rr_ep_destroy(T.srv), 0);
	cr_assert_eq(rr_mr_dereg(T.mr), 0);
	cr_assert_eq(rr_listener_destroy(T.l), 0);
	cr_assert_eq(rr_bridge_destroy(T.b), 0);
	/* Every pipe write of every round was read, once, in the loop. */
	cr_expect_eq(T.app_cqes, (unsigned int)ROUNDS * NPIPES);
	cr_expect_eq(T.app_late, 0);
	io_uring_queue_exit(&T.ring);
	for (int i = 0; i < NPIPES; i++) {
		close(T.pipes[i].fd[0]);
		close(T.pipes[i].fd[1]);
	}
	free(T.buf);
}

TestSuite(noflush, .timeout = 120);

/* Single-shot polls: every channel event needs a new poll SQE. */
Test(noflush, singleshot_event_cqs)
{
	no_flush_loop(RR_BRIDGE_SINGLESHOT, RR_WAIT_EVENT);
}

/* Hybrid CQs come back through NOP kicks, SQEs of the bridge too. */
Test(noflush, multishot_hybrid_cqs)
{
	no_flush_loop(0, RR_WAIT_HYBRID);
}
