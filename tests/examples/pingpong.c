// SPDX-License-Identifier: MIT
/*
 * rr-pingpong: SEND/RECV ping-pong over rdma_cm between two processes, every
 * echo verified byte for byte. The foundation demo that tools/demo runs in
 * the lab; it uses plain verbs (tests/support/rdma_sync.c), not the bridge.
 *
 *   rr-pingpong -s [-a ADDR] [-p PORT] [-r CONNECTIONS]
 *   rr-pingpong -c ADDR [-p PORT] [-n ITERS] [-S SIZE] [-e]
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdma_sync.h"

#define TIMEOUT_MS 20000
#define FLAG_LAST  1u

enum { WR_RECV = 1, WR_SEND };

struct hdr {
	uint32_t seq;
	uint32_t flags;
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Wait until both the receive and our own send of this round completed. */
static int wait_round(struct rs_conn *c, int want_send)
{
	struct ibv_wc wc;
	int got_recv = 0, got_send = !want_send, rc;

	while (!got_recv || !got_send) {
		rc = rs_wait_wc(c, &wc, TIMEOUT_MS);
		if (rc)
			return rc;
		if (wc.wr_id == WR_RECV)
			got_recv = 1;
		else
			got_send = 1;
	}
	return 0;
}

/* Echo every message of one connection until the client's last one. */
static int serve_conn(struct rs_conn *lc, int use_events)
{
	struct rs_conn c;
	struct ibv_mr *mr = NULL;
	uint8_t *buf = NULL;
	size_t size = 1 << 20;
	struct hdr *in;
	int rc;

	rs_init(&c, 16, use_events);
	c.ec = lc->ec;
	c.ec_borrowed = 1;
	rc = rs_get_request(&c, 600 * 1000);
	buf = calloc(2, size);
	if (!rc && buf) {
		mr = rs_reg(&c, buf, 2 * size, 0);
		rc = mr ? 0 : -ENOMEM;
	}
	in = (struct hdr *)buf;
	if (!rc)
		rc = rs_post_recv(&c, mr, buf, (uint32_t)size, WR_RECV);
	if (!rc)
		rc = rs_accept(&c, TIMEOUT_MS);
	while (!rc) {
		struct ibv_wc wc;
		uint32_t len;

		rc = rs_wait_wc(&c, &wc, TIMEOUT_MS);
		while (!rc && wc.wr_id != WR_RECV)
			rc = rs_wait_wc(&c, &wc, TIMEOUT_MS);
		if (rc)
			break;
		len = wc.byte_len;
		memcpy(buf + size, buf, len); /* echo what came in */
		if (!(in->flags & FLAG_LAST))
			rc = rs_post_recv(&c, mr, buf, (uint32_t)size, WR_RECV);
		if (!rc)
			rc = rs_post_send(&c, mr, buf + size, len, WR_SEND);
		if (!rc && (((struct hdr *)(buf + size))->flags & FLAG_LAST)) {
			rc = rs_wait_wc(&c, &wc, TIMEOUT_MS);
			break;
		}
	}
	if (rc)
		fprintf(stderr, "rr-pingpong server: %s\n", c.err);
	if (mr)
		ibv_dereg_mr(mr);
	free(buf);
	rs_close(&c);
	return rc;
}

static int serve(const char *addr, uint16_t port, long rounds, int use_events)
{
	struct rs_conn lc;
	int rc;

	rs_init(&lc, 16, use_events);
	rc = rs_listen(&lc, addr, &port);
	if (rc) {
		fprintf(stderr, "rr-pingpong: %s\n", lc.err);
		return 1;
	}
	printf("rr-pingpong: listening on %s:%u\n", addr ? addr : "*", port);
	fflush(stdout);
	for (long i = 0; i < rounds && !rc; i++)
		rc = serve_conn(&lc, use_events);
	rs_close(&lc);
	return rc ? 1 : 0;
}

static int client(const char *addr, uint16_t port, long iters, uint32_t size, int use_events)
{
	struct rs_conn c;
	struct ibv_mr *mr = NULL;
	uint8_t *buf = calloc(2, size);
	double *rtt = calloc((size_t)iters, sizeof(double)), t0, sum = 0;
	struct hdr *out = (struct hdr *)buf;
	int rc = buf && rtt ? 0 : -ENOMEM;
	long i;

	rs_init(&c, 16, use_events);
	if (!rc)
		rc = rs_resolve(&c, addr, port, TIMEOUT_MS);
	if (!rc) {
		mr = rs_reg(&c, buf, 2 * (size_t)size, 0);
		rc = mr ? 0 : -ENOMEM;
	}
	if (!rc)
		rc = rs_post_recv(&c, mr, buf + size, size, WR_RECV);
	if (!rc)
		rc = rs_connect(&c, addr, port, TIMEOUT_MS * 3);
	for (i = 0; i < iters && !rc; i++) {
		rs_fill(buf, size, (uint32_t)i);
		out->seq = (uint32_t)i;
		out->flags = i == iters - 1 ? FLAG_LAST : 0;
		t0 = now_us();
		rc = rs_post_send(&c, mr, buf, size, WR_SEND);
		if (!rc)
			rc = wait_round(&c, 1);
		rtt[i] = now_us() - t0;
		if (!rc && memcmp(buf, buf + size, size) != 0) {
			snprintf(c.err, sizeof(c.err), "echo %ld differs from what was sent", i);
			rc = -EBADMSG;
		}
		if (!rc && i < iters - 1)
			rc = rs_post_recv(&c, mr, buf + size, size, WR_RECV);
	}
	if (rc) {
		fprintf(stderr, "rr-pingpong client: %s (%s)\n", c.err, strerror(-rc));
	} else {
		for (i = 0; i < iters; i++)
			sum += rtt[i];
		qsort(rtt, (size_t)iters, sizeof(double), cmp_double);
		printf("rr-pingpong: %ld round trips of %u bytes (%s), all echoes verified\n",
		       iters, size, use_events ? "completion events" : "busy polling");
		printf("rr-pingpong: round trip avg %.1f us  p50 %.1f us  p99 %.1f us  max %.1f "
		       "us\n",
		       sum / (double)iters, rtt[iters / 2], rtt[(iters * 99) / 100],
		       rtt[iters - 1]);
	}
	if (mr)
		ibv_dereg_mr(mr);
	rs_close(&c);
	free(buf);
	free(rtt);
	return rc ? 1 : 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: rr-pingpong -s [-a ADDR] [-p PORT] [-r CONNECTIONS] [-e]\n"
		   "       rr-pingpong -c ADDR [-p PORT] [-n ITERS] [-S SIZE] [-e]\n"
		   "  -e  wait on the completion channel instead of busy polling\n");
}

int main(int argc, char **argv)
{
	const char *addr = NULL;
	long iters = 1000, size = 64, port = 7470, rounds = 1;
	int opt, server = 0, use_events = 0;

	while ((opt = getopt(argc, argv, "sc:a:p:n:S:r:eh")) != -1) {
		switch (opt) {
		case 's':
			server = 1;
			break;
		case 'c':
			addr = optarg;
			break;
		case 'a':
			addr = optarg;
			break;
		case 'p':
			port = strtol(optarg, NULL, 10);
			break;
		case 'n':
			iters = strtol(optarg, NULL, 10);
			break;
		case 'S':
			size = strtol(optarg, NULL, 10);
			break;
		case 'r':
			rounds = strtol(optarg, NULL, 10);
			break;
		case 'e':
			use_events = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (port <= 0 || port > 65535 || iters < 1 || iters > 100000000 ||
	    size < (long)sizeof(struct hdr) || size > (1 << 20) || rounds < 1 ||
	    (!server && !addr)) {
		usage(stderr);
		return 2;
	}
	if (server)
		return serve(addr, (uint16_t)port, rounds, use_events);
	return client(addr, (uint16_t)port, iters, (uint32_t)size, use_events);
}
