// SPDX-License-Identifier: MIT
/*
 * The five ways of waiting for work completions, each written as its best
 * users write it: batched acks, re-arm then poll again.
 *   busy    poll the CQ without a channel (SPDK's pollers)
 *   thread  block in ibv_get_cq_event() (the rdma-core example servers)
 *   epoll   the non-blocking channel fd in epoll (an smbdirect-style server)
 *   uring   the ringrdma bridge, event mode
 *   hybrid  the ringrdma bridge, spin then arm
 * In the mixed workload the first three read the file with pread() while
 * they have nothing else to do; the bridge keeps io_uring reads in flight.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>

#include "bench.h"

#define ACK_BATCH  32
#define POLL_BATCH 16

static const char *const snames[S_COUNT] = {"busy", "thread", "epoll", "uring", "hybrid"};
static const char *const wnames[W_COUNT] = {"pingpong", "rate", "mixed", "idle", "conns"};
static const char *const onames[OP_COUNT] = {"send", "write_imm"};

static int parse(const char *const *names, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(name, names[i]))
			return i;
	return -EINVAL;
}

const char *strategy_name(enum strategy s)
{
	return s < S_COUNT ? snames[s] : "?";
}

int strategy_parse(const char *name, enum strategy *out)
{
	int i = parse(snames, S_COUNT, name);

	if (i >= 0)
		*out = (enum strategy)i;
	return i < 0 ? i : 0;
}

const char *workload_name(enum workload w)
{
	return w < W_COUNT ? wnames[w] : "?";
}

int workload_parse(const char *name, enum workload *out)
{
	int i = parse(wnames, W_COUNT, name);

	if (i >= 0)
		*out = (enum workload)i;
	return i < 0 ? i : 0;
}

const char *op_name(enum op o)
{
	return o < OP_COUNT ? onames[o] : "?";
}

int op_parse(const char *name, enum op *out)
{
	int i = parse(onames, OP_COUNT, name);

	if (i >= 0)
		*out = (enum op)i;
	return i < 0 ? i : 0;
}

struct side_counts side_counts;
struct side_trace *side_trace;
struct group_figures *group_out;

static void count_event(struct bside *s)
{
	if (++s->unacked >= ACK_BATCH) {
		ibv_ack_cq_events(s->cq, s->unacked);
		s->unacked = 0;
	}
}

static int poll_and_handle(struct bside *s)
{
	struct ibv_wc wc[POLL_BATCH];
	int n = ibv_poll_cq(s->cq, POLL_BATCH, wc);

	if (n < 0)
		return -EIO;
	side_counts.wcs += (unsigned int)n;
	for (int i = 0; i < n; i++)
		s->on_wc(s, &wc[i]);
	return n;
}

/* Nothing completed: the file reader's turn, then one more look. */
static int idle_turn(struct bside *s)
{
	int rc;

	if (!s->filer)
		return 0;
	rc = filer_pread(s->filer);
	return rc < 0 ? rc : poll_and_handle(s);
}

/* After an event, in the bridge's order: hand out what is there first,
 * then arm, then poll again (a completion that raced the arm raised no
 * event). */
static int poll_arm_poll(struct bside *s)
{
	int n = poll_and_handle(s), m;

	if (n < 0)
		return n;
	if (ibv_req_notify_cq(s->cq, 0))
		return -EIO;
	m = poll_and_handle(s);
	return m < 0 ? m : n + m;
}

static int step_busy(struct bside *s)
{
	int n = poll_and_handle(s);

	return n == 0 ? idle_turn(s) : n;
}

static int step_thread(struct bside *s)
{
	struct ibv_cq *cq;
	void *ctx;
	int n = poll_and_handle(s);

	if (n == 0)
		n = idle_turn(s);
	while (n == 0) {
		if (ibv_get_cq_event(s->ch, &cq, &ctx))
			return -errno;
		side_counts.wakeups++;
		count_event(s);
		n = poll_arm_poll(s);
	}
	return n;
}

static int step_epoll(struct bside *s)
{
	struct epoll_event ev;
	struct ibv_cq *cq;
	void *ctx;
	int n = poll_and_handle(s);

	if (n == 0)
		n = idle_turn(s);
	while (n == 0) {
		if (epoll_wait(s->epfd, &ev, 1, -1) < 0 && errno != EINTR)
			return -errno;
		side_counts.wakeups++;
		/* One CQ on the channel, armed once: at most one event. */
		if (ibv_get_cq_event(s->ch, &cq, &ctx) == 0)
			count_event(s);
		n = poll_arm_poll(s);
	}
	return n;
}

static int step_bridge(struct bside *s)
{
	struct rr_bridge_stats st;
	int rc;

	if (s->filer) {
		rc = filer_kick(s);
		if (rc)
			return rc;
	}
	rc = rr_bridge_run_once(s->b, -1);
	rr_bridge_get_stats(s->b, &st, sizeof(st));
	side_counts.wakeups += st.cq_events - s->cq_events_seen;
	s->cq_events_seen = st.cq_events;
	return rc == -EINTR ? 0 : rc;
}

/* Wait for at least one completion (or file read) and handle it. */
int side_step(struct bside *s)
{
	switch (s->cfg.strat) {
	case S_BUSY:
		return step_busy(s);
	case S_THREAD:
		return step_thread(s);
	case S_EPOLL:
		return step_epoll(s);
	default:
		return step_bridge(s);
	}
}

int side_loop(struct bside *s)
{
	while (!s->done && !s->err) {
		int rc = side_step(s);

		if (rc < 0 && !s->err)
			s->err = rc;
		if (side_trace)
			side_trace->wcs = side_counts.wcs;
	}
	return s->err;
}
