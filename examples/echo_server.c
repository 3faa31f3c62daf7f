// SPDX-License-Identifier: MIT
/*
 * echo_server: accepts RDMA connections and sends every message it receives
 * straight back, until SIGINT or SIGTERM. The bridge's built-in loop,
 * rr_bridge_run(), drives everything; the signals arrive through the same
 * ring, read from a signalfd, and reach the application in on_app_cqe.
 *
 *   echo_server ADDR PORT
 *
 * Memory: one region, registered on the listener before any client
 * arrives, is cut into MAX_CONNS slots of DEPTH message buffers. Every
 * buffer of a connection is always inside exactly one request: a RECV
 * waiting for a message, or the SEND echoing what that RECV brought, which
 * gives the buffer back to a new RECV when it completes. A client may
 * therefore have up to DEPTH - 1 messages in flight.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <ringrdma.h>

#define MAX_CONNS 16
#define DEPTH	  8
#define MSG_MAX	  4096

/* Our own SQE's user_data: any value without the bridge's tag will do. */
#define SIGNAL_READ 1

struct conn;

struct msg {
	struct conn *conn;
	char *data;	/* MSG_MAX bytes inside the registered region */
	uint32_t early; /* length of a message that came before on_accept */
	int waiting;	/* set while such a message waits for on_accept */
};

struct conn {
	rr_ep *ep; /* set while established */
	int live;  /* buffers still inside a request */
	struct msg msg[DEPTH];
};

static char bufs[MAX_CONNS][DEPTH][MSG_MAX];
static struct conn conns[MAX_CONNS];
static struct ibv_mr *mr;
static struct signalfd_siginfo sig;
static unsigned long served;

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data);

/* A buffer leaves service after a failed or flushed request; the slot is
 * free again once all its buffers did and its endpoint is gone. */
static void retire(struct msg *m)
{
	m->conn->live--;
}

static void on_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct msg *m = data;

	/* The echo left: the buffer can wait for the next message. */
	if (c->status || rr_ep_post_recv(ep, m->data, MSG_MAX, mr, on_recv, m))
		retire(m);
}

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct msg *m = data;
	int rc = c->status; /* -ECANCELED: the connection is going away */

	if (!rc)
		rc = rr_ep_post_send(ep, m->data, c->byte_len, mr, on_sent, m);
	/* The client may send as soon as its side is established, so a message
	 * can arrive before on_accept, while sends still fail with -ENOTCONN:
	 * keep it for on_accept. */
	if (rc == -ENOTCONN && !c->status && !m->conn->ep) {
		m->early = c->byte_len;
		m->waiting = 1;
	} else if (rc) {
		retire(m);
	}
	/* Flushed before on_accept: the connection failed, and on_accept will
	 * never pick up its early messages. */
	if (c->status && !m->conn->ep) {
		for (int i = 0; i < DEPTH; i++) {
			struct msg *w = &m->conn->msg[i];

			if (w->waiting) {
				w->waiting = 0;
				retire(w);
			}
		}
	}
}

/*
 * A connection request arrived and its QP exists; it is accepted when this
 * returns. Post the receives now, before the client can send anything.
 */
static void on_qp_ready(rr_ep *ep, int status, void *data)
{
	struct conn *conn = NULL;
	int i;

	for (i = 0; i < MAX_CONNS && !conn; i++)
		if (!conns[i].live && !conns[i].ep)
			conn = &conns[i];
	if (!conn) {
		fprintf(stderr, "echo_server: %d connections already, refusing one\n", MAX_CONNS);
		rr_ep_destroy(ep); /* allowed here: the request is abandoned */
		return;
	}
	rr_ep_set_data(ep, conn);
	for (i = 0; i < DEPTH; i++) {
		struct msg *m = &conn->msg[i];

		m->conn = conn;
		m->data = bufs[conn - conns][i];
		m->waiting = 0;
		if (!rr_ep_post_recv(ep, m->data, MSG_MAX, mr, on_recv, m))
			conn->live++;
	}
}

/* Established: from now on the endpoint is ours to destroy. */
static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct conn *conn = rr_ep_data(ep);
	int i;

	conn->ep = ep;
	served++;
	printf("echo_server: connection %lu\n", served);
	for (i = 0; i < DEPTH; i++) {
		struct msg *m = &conn->msg[i];

		if (m->waiting && rr_ep_post_send(ep, m->data, m->early, mr, on_sent, m))
			retire(m);
		m->waiting = 0;
	}
}

/* The client went away (or the connection failed): destroying the endpoint
 * here flushes its receives, which retire their buffers. */
static void on_disconnect(rr_ep *ep, int status, void *data)
{
	struct conn *conn = rr_ep_data(ep);

	conn->ep = NULL;
	rr_ep_destroy(ep);
}

/* CQEs of our own that the built-in loop reaped: only the signal read. */
static void on_app_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	if (cqe->user_data == SIGNAL_READ)
		rr_bridge_stop(b);
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "echo_server: %s: %s\n", what, strerror(-err));
	return 1;
}

int main(int argc, char **argv)
{
	struct rr_bridge_opts bridge_opts = {.on_app_cqe = on_app_cqe};
	struct rr_ep_opts ep_opts = {
		.max_recv_wr = DEPTH,
		.max_send_wr = DEPTH,
		.on_qp_ready = on_qp_ready,
		.on_disconnect = on_disconnect,
	};
	struct io_uring_sqe *sqe;
	struct io_uring ring;
	rr_listener *l;
	rr_bridge *b;
	sigset_t mask;
	int i, rc, sfd;

	if (argc != 3) {
		fprintf(stderr, "usage: echo_server ADDR PORT\n");
		return 2;
	}
	/* The signals become readable on sfd instead of interrupting us. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sfd < 0)
		return fail("signalfd", -errno);

	rc = io_uring_queue_init(256, &ring, 0);
	if (rc)
		return fail("io_uring_queue_init", rc);
	rc = rr_bridge_create(&b, &ring, &bridge_opts, sizeof(bridge_opts));
	if (rc)
		return fail("rr_bridge_create", rc);

	/* Take the SQE and fill it in before the next rr_ call: the bridge
	 * looks at the last prepared SQE to keep out of linked chains. */
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_read(sqe, sfd, &sig, sizeof(sig), 0);
	io_uring_sqe_set_data64(sqe, SIGNAL_READ);

	rc = rr_listen(b, argv[1], (uint16_t)atoi(argv[2]), &ep_opts, sizeof(ep_opts), on_accept,
		       NULL, &l);
	if (rc)
		return fail("rr_listen", rc);
	/* Bound to ADDR, the listener knows its device: register up front. */
	rc = rr_listener_reg_mr(l, bufs, sizeof(bufs), 0, &mr);
	if (rc)
		return fail("rr_listener_reg_mr", rc);
	printf("echo_server: listening on %s:%u\n", argv[1], rr_listener_port(l));
	fflush(stdout);

	rc = rr_bridge_run(b); /* until on_app_cqe calls rr_bridge_stop() */
	if (rc)
		fail("rr_bridge_run", rc);

	/* Teardown: endpoints, then the memory, then the bridge. */
	rr_listener_destroy(l);
	for (i = 0; i < MAX_CONNS; i++)
		rr_ep_destroy(conns[i].ep); /* NULL is fine */
	rr_mr_dereg(mr);
	rr_bridge_destroy(b);
	io_uring_queue_exit(&ring);
	close(sfd);
	printf("echo_server: served %lu connections\n", served);
	return rc ? 1 : 0;
}
