// SPDX-License-Identifier: MIT
/*
 * wait_modes: the bridge's three ways of waiting for work completions, side
 * by side on one connection to an echo server (echo_server.c):
 *
 *   RR_WAIT_EVENT   the CQ is armed and its channel polled through the
 *                   ring: the thread sleeps until a completion arrives.
 *   RR_WAIT_BUSY    the CQ is polled on every loop pass: lowest latency,
 *                   one core burnt even when nothing happens.
 *   RR_WAIT_HYBRID  after each completion the CQ is polled for a while
 *                   (about twice the gaps it sees, at most spin_us), then
 *                   armed: busy latency in a burst, no CPU when idle.
 *
 *   wait_modes ADDR PORT [ROUND_TRIPS]
 *
 * For each mode, rr_cq_set_mode() switches the endpoint's CQ, then the
 * program does ROUND_TRIPS SEND/RECV round trips (queue depth 1) and idles
 * in the loop for IDLE_MS, and prints the time per round trip and the CPU
 * used, busy and idle. Only this side changes modes; the server's own
 * wakeups are part of every figure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <ringrdma.h>

#define SIZE	64
#define IDLE_MS 200
#define SPIN_US 50

struct state {
	rr_bridge *b;
	rr_ep *ep;
	struct ibv_mr *mr;
	char buf[2][SIZE]; /* [0] receives the echo, [1] is sent */
	long sent, sends_done, echoed;
	int connected, failed;
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + ru.ru_utime.tv_usec +
	       ru.ru_stime.tv_usec;
}

static void fail(struct state *s, const char *what, int err)
{
	if (!s->failed)
		fprintf(stderr, "wait_modes: %s: %s\n", what, strerror(-err));
	s->failed = 1;
}

static void on_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct state *s = data;

	if (c->status)
		fail(s, "send", c->status);
	s->sends_done++;
}

static void on_echo(rr_ep *ep, const struct rr_completion *c, void *data);

/* The next round trip: a receive for its echo, then the message, numbered. */
static void ping(struct state *s)
{
	int rc = rr_ep_post_recv(s->ep, s->buf[0], SIZE, s->mr, on_echo, s);

	snprintf(s->buf[1], SIZE, "round trip %ld", s->sent);
	if (!rc)
		rc = rr_ep_post_send(s->ep, s->buf[1], SIZE, s->mr, on_sent, s);
	if (rc)
		fail(s, "post", rc);
	else
		s->sent++;
}

static void on_echo(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct state *s = data;

	if (c->status) {
		fail(s, "receive", c->status);
		return;
	}
	if (c->byte_len != SIZE || memcmp(s->buf[0], s->buf[1], SIZE)) {
		fail(s, "echo differs", -EBADMSG);
		return;
	}
	s->echoed++;
}

static void on_qp_ready(rr_ep *ep, int status, void *data)
{
	struct state *s = data;
	int rc = rr_ep_reg_mr(ep, s->buf, sizeof(s->buf), 0, &s->mr);

	if (rc)
		fail(s, "rr_ep_reg_mr", rc);
}

static void on_connect(rr_ep *ep, int status, void *data)
{
	struct state *s = data;

	if (status)
		fail(s, "connect", status);
	else
		s->connected = 1;
}

/* One mode: round trips, then idling; prints one line of figures. */
static void measure(struct state *s, enum rr_wait_mode mode, const char *name, long n)
{
	double t0, c0, t1, c1, t2;
	int rc;

	rc = rr_cq_set_mode(rr_ep_cq(s->ep), mode, SPIN_US);
	if (rc) {
		fail(s, "rr_cq_set_mode", rc);
		return;
	}
	t0 = now_us();
	c0 = cpu_us();
	s->sent = s->sends_done = s->echoed = 0;
	/* The echo can come back before the SEND's own completion: wait for
	 * both, so that nothing is outstanding between modes. */
	while ((s->echoed < n || s->sends_done < s->sent) && !s->failed) {
		if (s->sent == s->echoed && s->sent < n)
			ping(s);
		rc = rr_bridge_run_once(s->b, -1);
		if (rc < 0 && rc != -EINTR)
			fail(s, "rr_bridge_run_once", rc);
	}
	t1 = now_us();
	c1 = cpu_us();
	/* Nothing to do: a busy CQ keeps the loop spinning, the others sleep. */
	while ((t2 = now_us()) < t1 + IDLE_MS * 1000.0 && !s->failed)
		rr_bridge_run_once(s->b, 10);
	if (s->failed)
		return;
	printf("%-7s %14.1f %15.1f %11.0f%%\n", name, (t1 - t0) / n, (c1 - c0) / n,
	       100.0 * (cpu_us() - c1) / (t2 - t1));
}

int main(int argc, char **argv)
{
	static struct state s;
	struct rr_ep_opts opts = {
		.on_qp_ready = on_qp_ready,
		.connect_timeout_ms = 10000,
		.data = &s,
	};
	struct io_uring ring;
	long n = 10000;
	int rc;

	if (argc < 3 || argc > 4 || (argc == 4 && (n = atol(argv[3])) <= 0)) {
		fprintf(stderr, "usage: wait_modes ADDR PORT [ROUND_TRIPS]\n");
		return 2;
	}
	rc = io_uring_queue_init(64, &ring, 0);
	if (!rc)
		rc = rr_bridge_create(&s.b, &ring, NULL, 0);
	if (!rc)
		rc = rr_connect(s.b, argv[1], (uint16_t)atoi(argv[2]), &opts, sizeof(opts),
				on_connect, &s.ep);
	if (rc) {
		fail(&s, "setup", rc);
		return 1;
	}
	while (!s.connected && !s.failed)
		rr_bridge_run_once(s.b, -1);

	if (!s.failed)
		printf("mode    us/round trip  CPU us/round trip  CPU idle\n");
	measure(&s, RR_WAIT_EVENT, "event", n);
	measure(&s, RR_WAIT_HYBRID, "hybrid", n);
	measure(&s, RR_WAIT_BUSY, "busy", n);

	rr_ep_destroy(s.ep);
	rr_mr_dereg(s.mr);
	rr_bridge_destroy(s.b);
	io_uring_queue_exit(&ring);
	return s.failed;
}
