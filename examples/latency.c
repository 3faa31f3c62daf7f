// SPDX-License-Identifier: MIT
/*
 * rr-latency: SEND/RECV round trips at queue depth 1 through the bridge's
 * built-in loop, for comparing its wait modes (event, hybrid, busy) on the
 * same connection setup. Both sides use the same mode.
 *
 *   rr-latency -s ADDR [-p PORT] [-m MODE] [-w SPIN_US]
 *   rr-latency -c ADDR [-p PORT] [-m MODE] [-w SPIN_US] [-n ITERS] [-S SIZE]
 *
 * MODE is event, hybrid or busy. The client prints one line of figures;
 * every echo is verified.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <ringrdma.h>

#define MAX_SIZE 4096

struct side {
	rr_bridge *b;
	rr_ep *ep;
	struct ibv_mr *mr;
	uint8_t buf[2][MAX_SIZE]; /* [0] receive, [1] send */
	uint32_t size;
	long iters, done;
	int server, failed, finished;
	double t0, *rtt;
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data);

static void on_send(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct side *s = data;

	if (c->status) {
		fprintf(stderr, "rr-latency: send failed: %s\n", strerror(-c->status));
		s->failed = 1;
	}
}

static int ping(struct side *s)
{
	int rc = rr_ep_post_recv(s->ep, s->buf[0], s->size, s->mr, on_recv, s);

	if (!rc) {
		memset(s->buf[1], (int)(s->done & 0xff), s->size);
		s->t0 = now_us();
		rc = rr_ep_post_send(s->ep, s->buf[1], s->size, s->mr, on_send, s);
	}
	if (rc) {
		fprintf(stderr, "rr-latency: post: %s\n", strerror(-rc));
		s->failed = 1;
	}
	return rc;
}

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct side *s = data;

	if (c->status) {
		if (!s->finished)
			s->failed = c->status != -ECANCELED || !s->server;
		s->finished = 1;
		return;
	}
	if (s->server) { /* echo it back */
		memcpy(s->buf[1], s->buf[0], c->byte_len);
		if (rr_ep_post_recv(ep, s->buf[0], s->size, s->mr, on_recv, s) ||
		    rr_ep_post_send(ep, s->buf[1], c->byte_len, s->mr, on_send, s))
			s->failed = 1;
		return;
	}
	s->rtt[s->done] = now_us() - s->t0;
	if (c->byte_len != s->size || memcmp(s->buf[0], s->buf[1], s->size)) {
		fprintf(stderr, "rr-latency: echo %ld differs\n", s->done);
		s->failed = 1;
		return;
	}
	if (++s->done == s->iters)
		s->finished = 1;
	else
		ping(s);
}

static void on_down(rr_ep *ep, int status, void *data)
{
	((struct side *)data)->finished = 1;
}

static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct side *s = data;

	s->ep = ep;
	rr_ep_set_data(ep, s);
	rr_ep_set_on_disconnect(ep, on_down);
	if (rr_ep_reg_mr(ep, s->buf, sizeof(s->buf), 0, &s->mr) ||
	    rr_ep_post_recv(ep, s->buf[0], s->size, s->mr, on_recv, s))
		s->failed = 1;
}

static void on_connect(rr_ep *ep, int status, void *data)
{
	struct side *s = data;

	if (status) {
		fprintf(stderr, "rr-latency: connect: %s\n", strerror(-status));
		s->failed = 1;
		return;
	}
	if (rr_ep_reg_mr(ep, s->buf, sizeof(s->buf), 0, &s->mr) == 0)
		ping(s);
	else
		s->failed = 1;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv)
{
	static struct side s;
	struct rr_ep_opts o = {.max_send_wr = 4, .max_recv_wr = 4, .connect_timeout_ms = 20000};
	const char *addr = NULL, *mode = "event";
	long port = 7490, spin = 50;
	struct io_uring ring;
	rr_listener *l = NULL;
	double wall0, cpu0;
	int opt, rc;

	s.iters = 10000;
	s.size = 64;
	while ((opt = getopt(argc, argv, "s:c:p:m:w:n:S:")) != -1) {
		switch (opt) {
		case 's': s.server = 1; addr = optarg; break;
		case 'c': addr = optarg; break;
		case 'p': port = strtol(optarg, NULL, 10); break;
		case 'm': mode = optarg; break;
		case 'w': spin = strtol(optarg, NULL, 10); break;
		case 'n': s.iters = strtol(optarg, NULL, 10); break;
		case 'S': s.size = (uint32_t)strtoul(optarg, NULL, 10); break;
		default: goto usage;
		}
	}
	if (!addr || port <= 0 || port > 65535 || s.iters < 1 || s.size < 1 || s.size > MAX_SIZE ||
	    spin < 1)
		goto usage;
	if (!strcmp(mode, "event"))
		o.mode = RR_WAIT_EVENT;
	else if (!strcmp(mode, "hybrid"))
		o.mode = RR_WAIT_HYBRID;
	else if (!strcmp(mode, "busy"))
		o.mode = RR_WAIT_BUSY;
	else
		goto usage;
	o.spin_us = (unsigned int)spin;
	o.data = &s;
	o.on_disconnect = on_down;
	s.rtt = calloc((size_t)s.iters, sizeof(double));
	if (!s.rtt || io_uring_queue_init(64, &ring, 0) || rr_bridge_create(&s.b, &ring, NULL))
		return 1;
	if (s.server)
		rc = rr_listen(s.b, addr, (uint16_t)port, &o, on_accept, &s, &l);
	else
		rc = rr_connect(s.b, addr, (uint16_t)port, &o, on_connect, &s.ep);
	if (rc) {
		fprintf(stderr, "rr-latency: %s: %s\n", s.server ? "listen" : "connect", strerror(-rc));
		return 1;
	}
	wall0 = now_us();
	cpu0 = cpu_s();
	while (!s.finished && !s.failed) {
		rc = rr_bridge_run_once(s.b, 1000);
		if (rc < 0 && rc != -EINTR)
			break;
	}
	if (!s.server && !s.failed) {
		double wall = now_us() - wall0, cpu = cpu_s() - cpu0, sum = 0;

		for (long i = 0; i < s.iters; i++)
			sum += s.rtt[i];
		qsort(s.rtt, (size_t)s.iters, sizeof(double), cmp);
		printf("rr-latency: mode %-6s size %u iters %ld: avg %.1f us p50 %.1f us p99 %.1f us "
		       "max %.1f us, client CPU %.0f%%\n",
		       mode, s.size, s.iters, sum / (double)s.iters, s.rtt[s.iters / 2],
		       s.rtt[(s.iters * 99) / 100], s.rtt[s.iters - 1], 100.0 * cpu / (wall / 1e6));
	}
	if (s.ep)
		rr_ep_destroy(s.ep);
	rr_mr_dereg(s.mr);
	rr_listener_destroy(l);
	rr_bridge_destroy(s.b);
	io_uring_queue_exit(&ring);
	free(s.rtt);
	return s.failed ? 1 : 0;
usage:
	fprintf(stderr, "usage: rr-latency -s ADDR | -c ADDR [-p PORT] [-m event|hybrid|busy] "
			"[-w SPIN_US] [-n ITERS] [-S SIZE]\n");
	return 2;
}
