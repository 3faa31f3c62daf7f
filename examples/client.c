// SPDX-License-Identifier: MIT
/*
 * client: the shortest ringrdma program. It connects to an echo server
 * (echo_server.c), sends one message, waits for the echo and prints it. The
 * bridge's built-in loop, rr_bridge_run_once(), drives everything.
 *
 *   client ADDR PORT [MESSAGE]
 *
 * Build: cc client.c $(pkg-config --cflags --libs ringrdma)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ringrdma.h>

#define MSG_MAX 4096

/* One registered buffer: the first half receives the echo, the second half
 * holds the message to send. */
static char buf[2 * MSG_MAX];
static struct ibv_mr *mr;
static const char *msg = "hello";
static int pending; /* requests posted and not completed yet */
static int done, failed;

/* Report the first failure only: the requests it leaves behind are flushed
 * with -ECANCELED later, which says nothing new. */
static void fail(const char *what, int err)
{
	if (!failed)
		fprintf(stderr, "client: %s: %s\n", what, strerror(-err));
	failed = done = 1;
}

/* Every posted request completes exactly once, here with its status. */
static void on_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (c->status)
		fail("send", c->status);
	else if (--pending == 0)
		done = 1;
}

static void on_echo(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (c->status) {
		fail("receive", c->status);
		return;
	}
	printf("echo: %.*s\n", (int)c->byte_len, buf);
	if (--pending == 0)
		done = 1;
}

/*
 * The QP exists and the server has not been asked to connect yet: register
 * the buffer and post the receive for the echo now, so it is in place
 * before the server can send anything.
 */
static void on_qp_ready(rr_ep *ep, int status, void *data)
{
	int rc = rr_ep_reg_mr(ep, buf, sizeof(buf), 0, &mr);

	if (!rc)
		rc = rr_ep_post_recv(ep, buf, MSG_MAX, mr, on_echo, NULL);
	if (rc)
		fail("receive", rc);
	else
		pending++;
}

/* Connected (status 0) or failed: sends need an established connection. */
static void on_connect(rr_ep *ep, int status, void *data)
{
	size_t len = strlen(msg);
	int rc = status;

	if (!rc) {
		memcpy(buf + MSG_MAX, msg, len);
		rc = rr_ep_post_send(ep, buf + MSG_MAX, len, mr, on_sent, NULL);
	}
	if (rc)
		fail(status ? "connect" : "send", rc);
	else
		pending++;
}

int main(int argc, char **argv)
{
	struct rr_ep_opts opts = {
		.on_qp_ready = on_qp_ready,
		.connect_timeout_ms = 10000, /* rather than rdma_cm's minute */
	};
	struct io_uring ring;
	rr_bridge *b;
	rr_ep *ep = NULL;
	int rc;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: client ADDR PORT [MESSAGE]\n");
		return 2;
	}
	if (argc == 4)
		msg = argv[3];
	if (strlen(msg) > MSG_MAX) {
		fprintf(stderr, "client: the message is longer than %d bytes\n", MSG_MAX);
		return 2;
	}

	/* The ring is the application's; the bridge only borrows it. */
	rc = io_uring_queue_init(64, &ring, 0);
	if (rc) {
		fail("io_uring_queue_init", rc);
		return 1;
	}
	rc = rr_bridge_create(&b, &ring, NULL, 0);
	if (rc) {
		fail("rr_bridge_create", rc);
		return 1;
	}

	/* Returns at once: resolving, connecting and on_connect happen in the loop. */
	rc = rr_connect(b, argv[1], (uint16_t)atoi(argv[2]), &opts, sizeof(opts), on_connect, &ep);
	if (rc)
		fail("rr_connect", rc);

	/* One pass: submit, wait for CQEs (-1: as long as it takes), run callbacks. */
	while (!done) {
		rc = rr_bridge_run_once(b, -1);
		if (rc < 0 && rc != -EINTR)
			fail("rr_bridge_run_once", rc);
	}

	/* Whatever is still outstanding completes (with -ECANCELED) in here. */
	rr_ep_destroy(ep);
	/* Memory before the bridge: the protection domain is the bridge's. */
	rr_mr_dereg(mr);
	rr_bridge_destroy(b);
	io_uring_queue_exit(&ring);
	return failed;
}
