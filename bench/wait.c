// SPDX-License-Identifier: MIT
/*
 * The five ways of waiting for work completions, each written as its best
 * users write it: batched acks, re-arm then poll again.
 *   busy    poll the CQ without a channel (SPDK's pollers)
 *   thread  block in ibv_get_cq_event() (the rdma-core example servers)
 *   epoll   the non-blocking channel fd in epoll (an smbdirect-style server)
 *   uring   the ringrdma bridge, event mode
 *   hybrid  the ringrdma bridge, spin then arm
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>

#include "bench.h"

#define ACK_BATCH 32

static const char *const names[S_COUNT] = {"busy", "thread", "epoll", "uring", "hybrid"};

const char *strategy_name(enum strategy s)
{
	return s < S_COUNT ? names[s] : "?";
}

int strategy_parse(const char *name, enum strategy *out)
{
	for (int i = 0; i < S_COUNT; i++) {
		if (!strcmp(name, names[i])) {
			*out = (enum strategy)i;
			return 0;
		}
	}
	return -EINVAL;
}

static void count_event(struct bconn *c)
{
	if (++c->unacked >= ACK_BATCH) {
		ibv_ack_cq_events(c->cq, c->unacked);
		c->unacked = 0;
	}
}

/* After an event: re-arm, then poll (a completion that raced the arm
 * raised no event). */
static int rearm_and_poll(struct bconn *c, struct ibv_wc *wc, int max)
{
	if (ibv_req_notify_cq(c->cq, 0))
		return -EIO;
	return ibv_poll_cq(c->cq, max, wc);
}

static int wait_thread(struct bconn *c, struct ibv_wc *wc, int max)
{
	struct ibv_cq *cq;
	void *ctx;
	int n = ibv_poll_cq(c->cq, max, wc);

	while (n == 0) {
		if (ibv_get_cq_event(c->ch, &cq, &ctx))
			return -errno;
		count_event(c);
		n = rearm_and_poll(c, wc, max);
	}
	return n;
}

static int wait_epoll(struct bconn *c, struct ibv_wc *wc, int max)
{
	struct epoll_event ev;
	struct ibv_cq *cq;
	void *ctx;
	int n = ibv_poll_cq(c->cq, max, wc);

	while (n == 0) {
		if (epoll_wait(c->epfd, &ev, 1, -1) < 0 && errno != EINTR)
			return -errno;
		while (ibv_get_cq_event(c->ch, &cq, &ctx) == 0)
			count_event(c);
		n = rearm_and_poll(c, wc, max);
	}
	return n;
}

static int wait_bridge(struct bconn *c, struct ibv_wc *wc, int max)
{
	int n, rc;

	while (c->fifo_n == 0) {
		rc = rr_bridge_run_once(c->b, -1);
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
	n = (int)c->fifo_n < max ? (int)c->fifo_n : max;
	memcpy(wc, c->fifo, (size_t)n * sizeof(*wc));
	memmove(c->fifo, c->fifo + n, (c->fifo_n - (unsigned int)n) * sizeof(*wc));
	c->fifo_n -= (unsigned int)n;
	return n;
}

int bconn_wait(struct bconn *c, struct ibv_wc *wc, int max)
{
	int n;

	switch (c->cfg.strat) {
	case S_BUSY:
		do
			n = ibv_poll_cq(c->cq, max, wc);
		while (n == 0);
		return n < 0 ? -EIO : n;
	case S_THREAD:
		return wait_thread(c, wc, max);
	case S_EPOLL:
		return wait_epoll(c, wc, max);
	default:
		return wait_bridge(c, wc, max);
	}
}
