// SPDX-License-Identifier: MIT
/*
 * echo_groups: echo_server.c spread over threads, one ring per core, as
 * SPDK's NVMe-oF target runs one poll group per core. The main thread only
 * listens; each worker thread drives a ring and bridge of its own, a group
 * (RR_BRIDGE_GROUP), and the listener places every new connection on the
 * group with the fewest. The connection then belongs to that worker alone:
 * its callbacks run there and its QP shares the worker's CQ, so nothing
 * here takes a lock.
 *
 *   echo_groups ADDR PORT [THREADS]
 *
 * THREADS defaults to the number of CPUs. SIGINT or SIGTERM ends it; each
 * thread then says how many connections it served.
 *
 * Memory: one region, registered once on the listener, serves every thread
 * (the protection domain is the process's, not a bridge's); each worker
 * uses a part of it as echo_server.c uses its own region.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <ringrdma.h>

#define MAX_THREADS 64
#define MAX_CONNS   16 /* per thread */
#define DEPTH	    4  /* buffers per connection: DEPTH - 1 messages in flight */
#define MSG_MAX	    4096

struct msg {
	char *data;
	uint32_t early; /* 1 + length of a message that came before on_accept */
};

struct conn {
	rr_ep *ep; /* set while established */
	int live;  /* buffers inside a request, or kept for on_accept */
	struct msg msg[DEPTH];
};

struct worker {
	pthread_t thread;
	struct io_uring ring;
	rr_bridge *b;
	uint64_t stop; /* read from stop_efd */
	unsigned long served;
	int rc;
	struct conn conns[MAX_CONNS];
};

static struct worker workers[MAX_THREADS];
static char (*bufs)[MAX_CONNS][DEPTH][MSG_MAX]; /* one row per worker */
static struct ibv_mr *mr;
static int stop_efd; /* written once to stop every worker */
static sem_t ready;

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data);

/* The echo left: the buffer can take the next message. */
static void on_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct conn *conn = rr_ep_data(ep);
	struct msg *m = data;

	if (c->status || rr_ep_post_recv(ep, m->data, MSG_MAX, mr, on_recv, m))
		conn->live--;
}

static void echo(rr_ep *ep, struct conn *conn, struct msg *m, uint32_t len)
{
	if (rr_ep_post_send(ep, m->data, len, mr, on_sent, m))
		conn->live--;
}

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct conn *conn = rr_ep_data(ep);
	struct msg *m = data;

	if (!c->status && conn->ep) {
		echo(ep, conn, m, c->byte_len);
	} else if (!c->status) {
		/* The client may send before our side is established, while
		 * sends fail with -ENOTCONN: keep it for on_accept. */
		m->early = c->byte_len + 1;
	} else {
		/* Flushed: the connection is going away. Before on_accept it
		 * failed, and what was kept for on_accept leaves service too. */
		conn->live--;
		for (int i = 0; i < DEPTH && !conn->ep; i++) {
			conn->live -= conn->msg[i].early != 0;
			conn->msg[i].early = 0;
		}
	}
}

/* On the worker's thread, with the worker as data: the listener placed the
 * request here. Post the receives before it is accepted. */
static void on_qp_ready(rr_ep *ep, int status, void *data)
{
	struct worker *w = data;
	struct conn *conn = NULL;
	int i;

	for (i = 0; i < MAX_CONNS && !conn; i++)
		if (!w->conns[i].live && !w->conns[i].ep)
			conn = &w->conns[i];
	if (!conn) {
		rr_ep_destroy(ep); /* full: the request is abandoned */
		return;
	}
	rr_ep_set_data(ep, conn);
	for (i = 0; i < DEPTH; i++) {
		struct msg *m = &conn->msg[i];

		m->data = bufs[w - workers][conn - w->conns][i];
		m->early = 0;
		conn->live += !rr_ep_post_recv(ep, m->data, MSG_MAX, mr, on_recv, m);
	}
}

/* Established, still on the worker's thread; there is no listener here. */
static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct worker *w = data;
	struct conn *conn = rr_ep_data(ep);

	conn->ep = ep;
	w->served++;
	for (int i = 0; i < DEPTH; i++) {
		if (conn->msg[i].early)
			echo(ep, conn, &conn->msg[i], conn->msg[i].early - 1);
		conn->msg[i].early = 0;
	}
}

/* Destroying the endpoint flushes its receives, which free the slot. */
static void on_disconnect(rr_ep *ep, int status, void *data)
{
	struct conn *conn = data;

	conn->ep = NULL;
	rr_ep_destroy(ep);
}

/* Our one SQE on every ring is a read whose completion means stop: of the
 * signalfd on the main thread's ring, of stop_efd on the workers'. */
static void on_app_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	rr_bridge_stop(b);
}

/* SINGLE_ISSUER|DEFER_TASKRUN tie a ring to the thread that creates it, and
 * keep the kernel's completion work on that thread, inside its waits. */
static int ring_init(struct io_uring *ring, rr_bridge **b, unsigned int flags, int stop_fd,
		     void *buf, unsigned int len)
{
	unsigned int setup =
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
	struct rr_bridge_opts opts = {.flags = flags, .on_app_cqe = on_app_cqe};
	struct io_uring_sqe *sqe;
	int rc = io_uring_queue_init(256, ring, setup);

	if (!rc)
		rc = rr_bridge_create(b, ring, &opts, sizeof(opts));
	if (!rc) {
		sqe = io_uring_get_sqe(ring);
		io_uring_prep_read(sqe, stop_fd, buf, len, 0);
		io_uring_sqe_set_data64(sqe, 1); /* any value without the bridge's tag */
	}
	return rc;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	w->rc = ring_init(&w->ring, &w->b, RR_BRIDGE_GROUP, stop_efd, &w->stop, sizeof(w->stop));
	sem_post(&ready);
	if (w->rc)
		return NULL;
	w->rc = rr_bridge_run(w->b);
	for (int i = 0; i < MAX_CONNS; i++)
		rr_ep_destroy(w->conns[i].ep); /* NULL is fine */
	rr_bridge_destroy(w->b);	       /* and the requests not established yet */
	io_uring_queue_exit(&w->ring);
	return NULL;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "echo_groups: %s: %s\n", what, strerror(-err));
	return 1;
}

int main(int argc, char **argv)
{
	struct rr_ep_opts ep_opts = {
		.max_recv_wr = DEPTH,
		.max_send_wr = DEPTH,
		.on_qp_ready = on_qp_ready,
		.on_disconnect = on_disconnect,
	};
	struct signalfd_siginfo sig;
	struct io_uring ring;
	rr_listener *l;
	rr_bridge *b;
	sigset_t mask;
	uint64_t n;
	int i, rc, sfd, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);

	if (argc == 4)
		threads = atoi(argv[3]);
	if (argc < 3 || argc > 4 || threads < 1 || threads > MAX_THREADS) {
		fprintf(stderr, "usage: echo_groups ADDR PORT [THREADS (1-%d)]\n", MAX_THREADS);
		return 2;
	}
	/* Blocked before the threads start, which inherit the mask: the
	 * signals reach the main thread's ring only. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	/* A semaphore: each worker's read takes one of the THREADS we write. */
	stop_efd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
	bufs = calloc(threads, sizeof(*bufs));
	if (sfd < 0 || stop_efd < 0 || !bufs)
		return fail("setup", -errno);

	/* Each worker creates its ring on its own thread, then says so. */
	sem_init(&ready, 0, 0);
	for (i = 0; i < threads; i++) {
		if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]))
			return fail("pthread_create", -EAGAIN);
		sem_wait(&ready);
		if (workers[i].rc)
			return fail("worker ring", workers[i].rc);
	}

	rc = ring_init(&ring, &b, 0, sfd, &sig, sizeof(sig));
	if (!rc)
		rc = rr_listen(b, argv[1], (uint16_t)atoi(argv[2]), &ep_opts, sizeof(ep_opts),
			       on_accept, NULL, &l);
	if (!rc)
		rc = rr_listener_reg_mr(l, bufs, threads * sizeof(*bufs), 0, &mr);
	/* Requests are read in rr_bridge_run() only, so each finds every
	 * group added, and goes to one of them. */
	for (i = 0; i < threads && !rc; i++)
		rc = rr_listener_add_group(l, workers[i].b, on_accept, &workers[i]);
	if (rc)
		return fail("listener", rc);
	printf("echo_groups: listening on %s:%u, %d threads\n", argv[1], rr_listener_port(l),
	       threads);
	fflush(stdout);

	rc = rr_bridge_run(b); /* until SIGINT or SIGTERM */
	if (rc)
		fail("rr_bridge_run", rc);

	/* The listener goes before its groups; then every worker stops. */
	rr_listener_destroy(l);
	n = threads;
	if (write(stop_efd, &n, sizeof(n)) != sizeof(n))
		return fail("write", -errno);
	for (i = 0; i < threads; i++) {
		pthread_join(workers[i].thread, NULL);
		rc |= workers[i].rc;
		printf("echo_groups: thread %d served %lu connections\n", i, workers[i].served);
	}
	rr_mr_dereg(mr); /* once no endpoint of any group uses it */
	rr_bridge_destroy(b);
	io_uring_queue_exit(&ring);
	return rc ? 1 : 0;
}
