// SPDX-License-Identifier: MIT
/*
 * The ways of waiting for work completions, each written as its best
 * users write it: batched acks, re-arm then poll again.
 *   busy          poll the CQ without a channel (SPDK's pollers)
 *   thread        block in ibv_get_cq_event() (the rdma-core example servers)
 *   epoll         the non-blocking channel fd in epoll (an smbdirect-style
 *                 server), in the bridge's order: poll, read the event, arm,
 *                 poll again
 *   uring         the ringrdma bridge, event mode
 *   hybrid        the ringrdma bridge, spin then arm
 *   hybrid-plain  spin --spin-us on the CQ, then arm and block in
 *                 ibv_get_cq_event(): hybrid without the bridge, so hybrid's
 *                 figures say what the bridge adds
 *   uring-ep      uring, every post through the library's endpoints: what a
 *   hybrid-ep     pass posts on a queue goes out as one chain
 *   busy-ep       the same endpoints and chains, the bridge's CQ busy-polled
 *                 (RR_WAIT_BUSY) on every pass: the -ep rows' reference
 *   epoll-aio     epoll whose file reads are Linux AIO: io_submit(), an
 *                 eventfd in the epoll set, io_getevents() when it fires
 * In the mixed workload every strategy reads one file chunk after each pass
 * that handled completions, inline (filer.c): pread() for those without a
 * ring, an io_uring read submitted by the bridge's next io_uring_enter,
 * epoll-aio an io_submit() (--file-qd: each tops its reads up to N).
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>

#include "bench.h"

#define ACK_BATCH  32
#define POLL_BATCH 16

static const char *const snames[S_COUNT] = {"busy",    "thread",       "epoll",	   "uring",
					    "hybrid",  "hybrid-plain", "uring-ep", "hybrid-ep",
					    "busy-ep", "epoll-aio"};
static const char *const wnames[W_COUNT] = {"pingpong", "rate",	 "mixed",
					    "idle",	"conns", "mixed-direct"};
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

__thread struct side_counts side_counts;
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
	s->armed = true;
	m = poll_and_handle(s);
	return m < 0 ? m : n + m;
}

static int step_thread(struct bside *s)
{
	struct ibv_cq *cq;
	void *ctx;
	int n = poll_and_handle(s);

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
	struct epoll_event ev[2];
	struct ibv_cq *cq;
	void *ctx;
	int n = poll_and_handle(s), m;

	while (n == 0) {
		int k = epoll_wait(s->epfd, ev, 2, -1), rc;
		bool chan = k <= 0, file = false; /* EINTR: poll, as on an event */

		if (k < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; i < k; i++) {
			if (ev[i].data.u64 == FILER_AIO_EVENT)
				file = true;
			else
				chan = true;
		}
		/* epoll-aio's file reads done: reaped after the channel's
		 * completions when both fired (RDMA latency first). */
		if (!chan) {
			s->aio_filer->lone_wakes++;
			rc = filer_aio_reap(s->aio_filer);
			if (rc)
				return rc;
			continue;
		}
		side_counts.wakeups++;
		/* The bridge's order: hand out what is there before the read
		 * that fetches the event, so a reply posted from on_wc does
		 * not wait behind that syscall. */
		n = poll_and_handle(s);
		if (n < 0)
			return n;
		/* One CQ on the channel, armed once: at most one event. */
		if (ibv_get_cq_event(s->ch, &cq, &ctx) == 0)
			count_event(s);
		m = poll_arm_poll(s);
		if (m < 0)
			return m;
		n += m;
		if (file) {
			rc = filer_aio_reap(s->aio_filer);
			if (rc)
				return rc;
		}
		if (k < 0)
			break; /* a signal: side_loop() looks at s->stop */
	}
	return n;
}

/* Spin on the CQ for the window, then arm (only now: a CQ armed while
 * spinning raises events nobody waits for) and block. */
static int step_hybrid_plain(struct bside *s)
{
	struct ibv_cq *cq;
	void *ctx;
	double until;
	int n = poll_and_handle(s);

	if (n)
		return n;
	until = tick_us() + s->cfg.spin_us;
	do
		n = poll_and_handle(s);
	while (n == 0 && tick_us() < until);
	while (n == 0) {
		if (!s->armed) {
			if (ibv_req_notify_cq(s->cq, 0))
				return -EIO;
			s->armed = true;
			n = poll_and_handle(s); /* raced the arm: no event for it */
			if (n)
				break;
		}
		if (ibv_get_cq_event(s->ch, &cq, &ctx))
			return -errno;
		side_counts.wakeups++;
		count_event(s);
		s->armed = false;
		n = poll_and_handle(s);
	}
	return n;
}

/* What the bridge counted since the last look: its CQ events are the
 * wake-ups; with endpoints, the completions and posts are its too. */
static void bridge_counts(struct bside *s)
{
	struct side_counts now;

	side_counts_of(s->b, &now);
	side_counts.wakeups += now.wakeups - s->seen.wakeups;
	if (strategy_ep(s->cfg.strat)) {
		side_counts.wcs += now.wcs - s->seen.wcs;
		side_counts.posts += now.posts - s->seen.posts;
		side_counts.chains += now.chains - s->seen.chains;
		side_counts.wrs += now.wrs - s->seen.wrs;
	}
	s->seen = now;
}

void side_sync_counts(struct bside *s)
{
	if (s->b)
		bridge_counts(s);
}

static int step_bridge(struct bside *s)
{
	uint64_t wcs = side_counts.wcs, reads = s->filer ? s->filer->reads : 0;
	int rc;

	if (s->filer) {
		rc = filer_kick(s);
		if (rc)
			return rc;
	}
	rc = rr_bridge_run_once(s->b, -1);
	/* The raw rows want the bridge's counts only at a measurement's
	 * bounds (side_sync_counts()): read on every pass, they were work
	 * the other loops do not do. The -ep rows count their completions
	 * there, which the file's schedule and the watchdog follow. */
	if (strategy_ep(s->cfg.strat))
		bridge_counts(s);
	if (s->filer && side_counts.wcs != wcs)
		s->filer->want = true; /* read on the next pass's enter */
	else if (s->filer && s->filer->reads != reads)
		s->filer->lone_wakes++; /* woken for file reads alone */
	return rc == -EINTR ? 0 : rc;
}

/* Wait for at least one completion (or file read) and handle it. */
int side_step(struct bside *s)
{
	int n;

	switch (s->cfg.strat) {
	case S_BUSY:
		n = poll_and_handle(s);
		break;
	case S_THREAD:
		n = step_thread(s);
		break;
	case S_EPOLL:
	case S_EPOLL_AIO:
		n = step_epoll(s);
		break;
	case S_HYBRID_PLAIN:
		n = step_hybrid_plain(s);
		break;
	default:
		return step_bridge(s);
	}
	/* The file's turn: one chunk after a pass that handled completions. */
	if (n > 0 && s->filer) {
		int rc;

		if (s->filer->aio) {
			s->filer->want = true;
			rc = filer_aio_kick(s->filer);
		} else {
			rc = filer_pread(s->filer);
		}

		if (rc)
			return rc;
	}
	return n;
}

int side_loop(struct bside *s)
{
	while (!s->done && !s->err && !(s->stop && *s->stop)) {
		int rc = side_step(s);

		/* EINTR: a signal, which says through s->stop what it meant. */
		if (rc < 0 && rc != -EINTR && !s->err)
			s->err = rc;
		if (side_trace)
			side_trace->wcs = side_counts.wcs;
	}
	return s->err;
}
