// SPDX-License-Identifier: MIT
/*
 * embed: an application with an io_uring loop of its own gains RDMA by
 * embedding the bridge. The application here reads standard input with
 * IORING_OP_READ; each chunk it reads goes to an echo server
 * (echo_server.c), and the echo comes back to standard output. The output
 * is therefore the input, after a round trip over RDMA.
 *
 *   embed ADDR PORT < FILE
 *
 * The loop is the application's, and stays as it was, with two additions:
 * every CQE it reaps is offered to rr_bridge_handle_cqe() first, which
 * answers 1 for the bridge's own CQEs (and runs their callbacks) and 0 for
 * the application's; and rr_bridge_flush() before each submit, which writes
 * any SQE the bridge could not write yet (a chain of ours was open). That
 * call saves a pass, no more: without it the next rr_bridge_handle_cqe()
 * writes them. The loop must submit, as io_uring_submit_and_wait() does:
 * the bridge submits only to make room when it finds the SQ full.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ringrdma.h>

#define CHUNK 4096

/* user_data of the application's own SQE. The bridge's CQEs carry its tag
 * in the top 16 bits, which small numbers and pointers never have. */
#define STDIN_READ 1

struct app {
	struct io_uring ring;
	rr_bridge *b;
	rr_ep *ep;
	struct ibv_mr *mr;
	char buf[2][CHUNK]; /* [0] receives the echo, [1] is sent */
	int done, failed;
};

static void fail(struct app *app, const char *what, int err)
{
	if (!app->failed)
		fprintf(stderr, "embed: %s: %s\n", what, strerror(-err));
	app->failed = app->done = 1;
}

/* The application's own I/O: one read of standard input at a time. */
static void read_stdin(struct app *app)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&app->ring);

	if (!sqe) { /* the SQ is full: submit to make room */
		io_uring_submit(&app->ring);
		sqe = io_uring_get_sqe(&app->ring);
	}
	io_uring_prep_read(sqe, STDIN_FILENO, app->buf[1], CHUNK, -1);
	io_uring_sqe_set_data64(sqe, STDIN_READ);
}

static void on_echo(rr_ep *ep, const struct rr_completion *c, void *data);

static int post_recv(struct app *app)
{
	return rr_ep_post_recv(app->ep, app->buf[0], CHUNK, app->mr, on_echo, app);
}

static void on_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct app *app = data;

	/* At the end, the last SEND's completion may still be on its way: its
	 * echo arrived, so it was delivered; rr_ep_destroy() flushes it. */
	if (c->status && !app->done)
		fail(app, "send", c->status);
}

/* The echo of the last chunk: print it, then read the next one. */
static void on_echo(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct app *app = data;
	int rc = c->status;

	if (app->done) /* flushed by rr_ep_destroy() at the end */
		return;
	if (!rc && write(STDOUT_FILENO, app->buf[0], c->byte_len) != (ssize_t)c->byte_len)
		rc = -EIO;
	if (!rc)
		rc = post_recv(app);
	if (rc) {
		fail(app, "echo", rc);
		return;
	}
	read_stdin(app);
}

/* A CQE of the application's own, exactly as before the bridge came. */
static void handle_my_cqe(struct app *app, const struct io_uring_cqe *cqe)
{
	int rc;

	if (cqe->user_data != STDIN_READ || app->done)
		return;
	if (cqe->res <= 0) { /* end of input, or an error */
		if (cqe->res < 0)
			fail(app, "read", cqe->res);
		app->done = 1;
		return;
	}
	rc = rr_ep_post_send(app->ep, app->buf[1], (uint32_t)cqe->res, app->mr, on_sent, app);
	if (rc)
		fail(app, "send", rc);
}

/* Our CQEs that the library reaps itself (in rr_bridge_destroy() here). */
static void on_app_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	handle_my_cqe(data, cqe);
}

/* Before the server is asked: memory, and the receive for the first echo. */
static void on_qp_ready(rr_ep *ep, int status, void *data)
{
	struct app *app = data;
	int rc = rr_ep_reg_mr(ep, app->buf, sizeof(app->buf), 0, &app->mr);

	app->ep = ep;
	if (!rc)
		rc = post_recv(app);
	if (rc)
		fail(app, "receive", rc);
}

static void on_connect(rr_ep *ep, int status, void *data)
{
	if (status)
		fail(data, "connect", status);
	else
		read_stdin(data); /* connected: the application starts its work */
}

static void on_disconnect(rr_ep *ep, int status, void *data)
{
	fail(data, "disconnected", status ? status : -ECONNRESET);
}

int main(int argc, char **argv)
{
	static struct app app; /* static: the buffers are 8 KiB */
	struct rr_bridge_opts bridge_opts = {.on_app_cqe = on_app_cqe, .data = &app};
	struct rr_ep_opts opts = {
		.on_qp_ready = on_qp_ready,
		.on_disconnect = on_disconnect,
		.connect_timeout_ms = 10000,
		.data = &app,
	};
	int rc;

	if (argc != 3) {
		fprintf(stderr, "usage: embed ADDR PORT < FILE\n");
		return 2;
	}
	rc = io_uring_queue_init(64, &app.ring, 0);
	if (rc) {
		fail(&app, "io_uring_queue_init", rc);
		return 1;
	}

	/* The whole of the embedding: a bridge on the application's ring... */
	rc = rr_bridge_create(&app.b, &app.ring, &bridge_opts, sizeof(bridge_opts));
	if (!rc)
		rc = rr_connect(app.b, argv[1], (uint16_t)atoi(argv[2]), &opts, sizeof(opts),
				on_connect, &app.ep);
	if (rc) {
		fail(&app, "rr_bridge_create/rr_connect", rc);
		return 1;
	}

	/* The application's loop. */
	while (!app.done) {
		struct io_uring_cqe *cqe;
		unsigned int head, seen = 0;

		/* Submits the application's SQEs and the bridge's alike. */
		rr_bridge_flush(app.b);
		rc = io_uring_submit_and_wait(&app.ring, 1);
		if (rc < 0 && rc != -EINTR) {
			fail(&app, "io_uring_submit_and_wait", rc);
			break;
		}
		io_uring_for_each_cqe(&app.ring, head, cqe)
		{
			/* ...and offering it every CQE. */
			if (!rr_bridge_handle_cqe(app.b, cqe))
				handle_my_cqe(&app, cqe);
			seen++;
		}
		io_uring_cq_advance(&app.ring, seen); /* the application marks them seen */
	}

	rr_ep_destroy(app.ep); /* the last receive completes with -ECANCELED */
	rr_mr_dereg(app.mr);
	rc = rr_bridge_destroy(app.b);
	if (rc)
		fail(&app, "rr_bridge_destroy", rc);
	io_uring_queue_exit(&app.ring);
	return app.failed;
}
