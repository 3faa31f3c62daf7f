// SPDX-License-Identifier: MIT
/*
 * The cost harness: what one wake-up costs in each way of waiting for
 * completions, counted exactly. The fake provider (tests/unit/fake_verbs.c)
 * queues K work completions and raises the channel's event; the strategy
 * under test then wakes, takes them and hands each to the same callback.
 *
 * Run natively it counts the syscalls of each wake-up on the kernel's own
 * tracepoints (raw_syscalls and syscalls/sys_enter_*), enabled around the
 * wake-up only. Under `valgrind --tool=callgrind --collect-atstart=no
 * --instr-atstart=no` it instruments from each K's warm-up to its dump,
 * toggles collection around the same wake-ups and dumps once per K, so
 * the instructions of the injection and of the setup are never counted
 * (and the setup runs at the speed of valgrind's core).
 * tests/cost/cost.py drives both and writes the table.
 *
 *   rr-cost STRATEGY rxe|mlx5 K[,K...] [WAKEUPS]
 *   rr-cost fan-cqs|fan-chans|fan-eps rxe|mlx5 N[,N...] [WAKEUPS]
 *
 * Prints one JSON object per K on stdout: {"k":K,"wakeups":N,"syscalls":
 * {kind: count per wake-up, ...}} (syscalls null under valgrind, or where
 * the tracepoints cannot be read).
 *
 * The fan-* strategies hold N CQs on one channel, N channels of one CQ
 * each, or N connected endpoints (each with its own CQ), and one of them
 * fires per wake-up with one completion, in turn: what a wake-up costs
 * must not grow with N. They grow their objects from one N to the next;
 * each object printed as {"k":1,"n":N,...}.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <valgrind/callgrind.h>

#include <ringrdma.h>

#include "fake_verbs.h"

#define CQ_SIZE	  4096
#define BATCH	  32
#define ACK_EVERY 32
#define WARMUP	  16
#define CHAN_UD	  1
#define FAN_CQE	  16 /* the fan-* CQs: one completion at a time */

/* ---- what every strategy does with a completion ---- */

static volatile uint64_t sink;
static uint64_t next_id = 1; /* wr_id (or request data) of the next completion */
static unsigned long wcs_seen;

__attribute__((noinline)) static void app_wc(const struct ibv_wc *wc)
{
	sink += wc->wr_id;
	wcs_seen++;
}

/* ---- the plain loops: one channel, one CQ ---- */

static struct ibv_context *ctx;
static struct ibv_comp_channel *chan;
static struct ibv_cq *cq;
static struct io_uring ring;
static int epfd = -1;
static unsigned int unacked;

/* Poll until a short batch says the CQ is empty. */
static void drain(void)
{
	struct ibv_wc wc[BATCH];
	int n;

	do {
		n = ibv_poll_cq(cq, BATCH, wc);
		for (int i = 0; i < n; i++)
			app_wc(&wc[i]);
	} while (n == BATCH);
}

/* The channel fired: its one CQ's event, acks in batches, poll, arm, poll. */
static void channel_ready(void)
{
	struct ibv_cq *ecq;
	void *ectx;

	if (ibv_get_cq_event(chan, &ecq, &ectx))
		return;
	if (++unacked >= ACK_EVERY) {
		ibv_ack_cq_events(cq, unacked);
		unacked = 0;
	}
	drain();
	ibv_req_notify_cq(cq, 0);
	drain();
}

static void wake_busy(void)
{
	drain();
}

static void wake_thread(void)
{
	channel_ready(); /* blocks in the channel's read */
}

static void wake_epoll(void)
{
	struct epoll_event ev[8];

	if (epoll_wait(epfd, ev, 8, -1) > 0)
		channel_ready();
}

static void poll_channel(void)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

	io_uring_prep_poll_multishot(sqe, chan->fd, POLLIN);
	io_uring_sqe_set_data64(sqe, CHAN_UD);
}

static void wake_uring(void)
{
	struct io_uring_cqe *cqe;
	unsigned int head, seen = 0;

	io_uring_submit_and_wait(&ring, 1);
	io_uring_for_each_cqe(&ring, head, cqe)
	{
		seen++;
		if (cqe->user_data != CHAN_UD)
			continue;
		if (!(cqe->flags & IORING_CQE_F_MORE))
			poll_channel();
		channel_ready();
	}
	io_uring_cq_advance(&ring, seen);
}

static int plain_setup(const char *strategy)
{
	chan = ibv_create_comp_channel(ctx);
	if (!chan)
		return -ENOMEM;
	cq = ibv_create_cq(ctx, CQ_SIZE, NULL, chan, 0);
	if (!cq)
		return -ENOMEM;
	if (!strcmp(strategy, "busy"))
		return 0;
	ibv_req_notify_cq(cq, 0);
	if (!strcmp(strategy, "thread"))
		return 0;
	if (fcntl(chan->fd, F_SETFL, fcntl(chan->fd, F_GETFL) | O_NONBLOCK))
		return -errno;
	if (!strcmp(strategy, "epoll")) {
		struct epoll_event ev = {.events = EPOLLIN};

		epfd = epoll_create1(0);
		return epoll_ctl(epfd, EPOLL_CTL_ADD, chan->fd, &ev) ? -errno : 0;
	}
	poll_channel();
	return io_uring_submit(&ring) == 1 ? 0 : -EIO;
}

/* ---- the bridge ---- */

static rr_bridge *bridge;
static rr_channel *bridge_ch;
static rr_cq *rcq;

static void bridge_wc(rr_cq *c, const struct ibv_wc *wc, void *data)
{
	app_wc(wc);
}

/* on_wc_batch: the same callback per completion, a poll's worth a call. */
static void bridge_wc_batch(rr_cq *c, const struct ibv_wc *wc, int n, void *data)
{
	for (int i = 0; i < n; i++)
		app_wc(&wc[i]);
}

static void wake_bridge(void)
{
	rr_bridge_run_once(bridge, -1);
}

/* An application's loop that offers every CQE to the bridge. */
static void wake_embed(void)
{
	struct io_uring_cqe *cqe;
	unsigned int head, seen = 0;

	rr_bridge_flush(bridge);
	io_uring_submit_and_wait(&ring, 1);
	io_uring_for_each_cqe(&ring, head, cqe)
	{
		rr_bridge_handle_cqe(bridge, cqe);
		seen++;
	}
	io_uring_cq_advance(&ring, seen);
}

static int bridge_setup(unsigned int flags, enum rr_wait_mode mode, unsigned int spin_us,
			bool batch)
{
	struct rr_bridge_opts bo = {.flags = flags};
	struct rr_cq_opts co = {.cqe = CQ_SIZE,
				.mode = mode,
				.spin_us = spin_us,
				.on_wc = batch ? NULL : bridge_wc,
				.on_wc_batch = batch ? bridge_wc_batch : NULL};
	int rc;

	rc = rr_bridge_create(&bridge, &ring, &bo, sizeof(bo));
	if (!rc)
		rc = rr_channel_create(bridge, ctx, &bridge_ch);
	if (!rc)
		rc = rr_cq_create(bridge, bridge_ch, ctx, &co, sizeof(co), &rcq);
	if (rc)
		return rc;
	cq = rr_cq_ibv(rcq);
	/* Settle what creating it queued (its channel's poll). */
	rr_bridge_run_once(bridge, 0);
	if (mode != RR_WAIT_EVENT) {
		/* A completion opens the spin window the passes measure. */
		fake_complete(fake_cq_of(cq), 1, 0);
		rr_bridge_run_once(bridge, -1);
		if (wcs_seen != 1)
			return -EIO;
	}
	return 0;
}

/* ---- the endpoint layer: one callback per request ---- */

static rr_listener *lst;
static rr_ep *cli;
static struct ibv_mr *cli_mr, *srv_mr;
static char cli_buf[4096], srv_buf[4096];
static int connected;

__attribute__((noinline)) static void app_req(void *data)
{
	sink += (uintptr_t)data;
	wcs_seen++;
}

static void req_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	app_req(data);
}

static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	rr_ep_reg_mr(ep, srv_buf, sizeof(srv_buf), IBV_ACCESS_REMOTE_WRITE, &srv_mr);
}

static void on_connect(rr_ep *ep, int status, void *data)
{
	connected = status ? -1 : 1;
}

/* K RDMA WRITEs posted outside a pass: each a signalled chain of one. */
static void post_writes(unsigned int k)
{
	for (unsigned int i = 0; i < k; i++)
		if (rr_ep_post_write(cli, cli_buf, 64, cli_mr, (uintptr_t)srv_buf, srv_mr->rkey,
				     req_done, (void *)(uintptr_t)next_id++))
			abort();
}

static int ep_setup(void)
{
	struct rr_bridge_opts bo = {0};
	struct rr_ep_opts eo = {.max_send_wr = 128};
	int rc;

	rc = rr_bridge_create(&bridge, &ring, &bo, sizeof(bo));
	if (!rc)
		rc = rr_listen(bridge, "127.0.0.1", 0, NULL, 0, on_accept, NULL, &lst);
	if (!rc)
		rc = rr_connect(bridge, "127.0.0.1", rr_listener_port(lst), &eo, sizeof(eo),
				on_connect, &cli);
	for (int i = 0; !rc && !connected && i < 1000; i++)
		rr_bridge_run_once(bridge, 10);
	if (rc || connected != 1 || !srv_mr)
		return rc ? rc : -ENOTCONN;
	return rr_ep_reg_mr(cli, cli_buf, sizeof(cli_buf), 0, &cli_mr);
}

/* ---- many CQs, channels or endpoints, one of which fires ---- */

enum { FAN_NONE, FAN_CQS, FAN_CHANS, FAN_EPS };

struct strategy {
	const char *name;
	void (*wake)(void);
	bool spin;   /* measures empty passes: nothing is injected */
	bool sleeps; /* polls before it sleeps: inject as it goes to sleep */
	bool ep;     /* completions of requests posted through the endpoint layer */
	bool batch;  /* the CQ hands its completions out with on_wc_batch */
	int fan;     /* FAN_*: N objects, one of which fires per wake-up */
	unsigned int flags;
	enum rr_wait_mode mode;
};

static rr_cq **fan_cq;
static rr_ep **fan_ep;
static struct ibv_mr **fan_cli_mr, **fan_srv_mr;
static unsigned int fan_n, fan_next;

/* One more endpoint, connected, with its MRs: one at a time, so the
 * server's MR registered on accept is this client's peer's. */
static int fan_add_ep(unsigned int i)
{
	struct rr_ep_opts eo = {.max_send_wr = 8, .max_recv_wr = 1};
	int rc;

	connected = 0;
	srv_mr = NULL;
	rc = rr_connect(bridge, "127.0.0.1", rr_listener_port(lst), &eo, sizeof(eo), on_connect,
			&fan_ep[i]);
	/* The fake's rdma_cm answers at once: passes that do not sleep
	 * (a 10 ms wait a connect was 160 s of setup at N=16,384). */
	for (int t = 0; !rc && (!connected || !srv_mr) && t < 100000; t++)
		rr_bridge_run_once(bridge, t < 1000 ? 0 : 10);
	if (rc || connected != 1 || !srv_mr)
		return rc ? rc : -ENOTCONN;
	fan_srv_mr[i] = srv_mr;
	return rr_ep_reg_mr(fan_ep[i], cli_buf, sizeof(cli_buf), 0, &fan_cli_mr[i]);
}

/* Grow to n objects; the first is the bridge's (or ep_setup()'s) own. */
static int fan_grow(const struct strategy *s, unsigned int n)
{
	struct rr_cq_opts co = {.cqe = FAN_CQE, .on_wc = bridge_wc};
	void **a = s->fan == FAN_EPS ? (void **)&fan_ep : (void **)&fan_cq;
	void *p = realloc(*a, n * sizeof(void *));
	int rc = 0;

	if (!p)
		return -ENOMEM;
	*a = p;
	if (s->fan == FAN_EPS) {
		fan_cli_mr = realloc(fan_cli_mr, n * sizeof(*fan_cli_mr));
		fan_srv_mr = realloc(fan_srv_mr, n * sizeof(*fan_srv_mr));
		if (!fan_cli_mr || !fan_srv_mr)
			return -ENOMEM;
		if (!fan_n) {
			fan_ep[0] = cli;
			fan_cli_mr[0] = cli_mr;
			fan_srv_mr[0] = srv_mr;
			fan_n = 1;
		}
	} else if (!fan_n) {
		fan_cq[0] = rcq;
		fan_n = 1;
	}
	for (; !rc && fan_n < n; fan_n++) {
		rr_channel *ch = NULL;

		if (s->fan == FAN_EPS) {
			rc = fan_add_ep(fan_n);
			continue;
		}
		if (s->fan == FAN_CHANS)
			rc = rr_channel_create(bridge, ctx, &ch);
		else
			ch = bridge_ch;
		if (!rc)
			rc = rr_cq_create(bridge, ch, ctx, &co, sizeof(co), &fan_cq[fan_n]);
		/* Settle what creating them queued (polls, arms) as it goes. */
		if (!rc && fan_n % 64 == 0)
			rr_bridge_run_once(bridge, 0);
	}
	if (rc)
		return rc;
	rr_bridge_run_once(bridge, 0);
	return 0;
}

/* One completion on the next of them, in turn. */
static void fan_fire(const struct strategy *s)
{
	unsigned int i = fan_next++ % fan_n;

	if (s->fan == FAN_EPS) {
		if (rr_ep_post_write(fan_ep[i], cli_buf, 64, fan_cli_mr[i], (uintptr_t)srv_buf,
				     fan_srv_mr[i]->rkey, req_done, (void *)(uintptr_t)next_id++))
			abort();
		return;
	}
	fake_complete(fake_cq_of(rr_cq_ibv(fan_cq[i])), 1, next_id++);
}

/* ---- the strategies ---- */

static void spin_busy(void)
{
	struct ibv_wc wc[BATCH];

	if (ibv_poll_cq(cq, BATCH, wc) > 0)
		abort(); /* nothing was injected */
}

static void spin_bridge(void)
{
	rr_bridge_run_once(bridge, 0);
}

static const struct strategy strategies[] = {
	{.name = "busy", .wake = wake_busy},
	{.name = "thread", .wake = wake_thread},
	{.name = "epoll", .wake = wake_epoll},
	{.name = "uring", .wake = wake_uring},
	{.name = "bridge", .wake = wake_bridge},
	{.name = "bridge-waits",
	 .wake = wake_bridge,
	 .sleeps = true,
	 .flags = RR_BRIDGE_LOOP_WAITS},
	{.name = "bridge-embed", .wake = wake_embed},
	{.name = "bridge-batch", .wake = wake_bridge, .batch = true},
	{.name = "bridge-read", .wake = wake_bridge, .flags = RR_BRIDGE_RING_READ},
	{.name = "bridge-read-waits",
	 .wake = wake_bridge,
	 .sleeps = true,
	 .flags = RR_BRIDGE_RING_READ | RR_BRIDGE_LOOP_WAITS},
	{.name = "ep", .wake = wake_bridge, .ep = true},
	/* An empty poll: a busy loop's, and a hybrid CQ's pass in its window. */
	{.name = "busy-spin", .wake = spin_busy, .spin = true},
	{.name = "hybrid-spin", .wake = spin_bridge, .spin = true, .mode = RR_WAIT_HYBRID_FIXED},
	/* N of them, one fires: the first is the bridge (ep) row's own. */
	{.name = "fan-cqs", .wake = wake_bridge, .fan = FAN_CQS},
	{.name = "fan-chans", .wake = wake_bridge, .fan = FAN_CHANS},
	{.name = "fan-eps", .wake = wake_bridge, .ep = true, .fan = FAN_EPS},
};

/* ---- syscalls, as the kernel counts them ---- */

/* ioctl last: the counters' own. */
static const char *const kinds[] = {"io_uring_enter", "read", "write", "epoll_wait", "ioctl"};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))
static int counters[NKINDS + 1] = {-1}; /* [0]: every syscall; -1: not counting */

static int tracepoint_id(const char *event)
{
	static const char *const roots[] = {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"};
	char path[256];

	for (unsigned int r = 0; r < 2; r++) {
		FILE *f;
		int id;

		snprintf(path, sizeof(path), "%s/events/%s/id", roots[r], event);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%d", &id) != 1)
			id = -1;
		fclose(f);
		return id;
	}
	return -1;
}

static int open_counter(const char *event, int group)
{
	struct perf_event_attr a = {.type = PERF_TYPE_TRACEPOINT,
				    .size = sizeof(a),
				    .disabled = group < 0,
				    .read_format = PERF_FORMAT_GROUP};
	int id = tracepoint_id(event);

	if (id < 0)
		return -1;
	a.config = (uint64_t)id;
	return (int)syscall(SYS_perf_event_open, &a, 0, -1, group, 0);
}

/* Counters on this thread, or none (then syscalls print null). */
static void counters_open(void)
{
	char ev[64];

	/* As root, tracefs may only want mounting. */
	if (tracepoint_id("raw_syscalls/sys_enter") < 0)
		mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, NULL);
	counters[0] = open_counter("raw_syscalls/sys_enter", -1);
	if (counters[0] < 0)
		return;
	for (unsigned int i = 0; i < NKINDS; i++) {
		snprintf(ev, sizeof(ev), "syscalls/sys_enter_%s", kinds[i]);
		counters[i + 1] = open_counter(ev, counters[0]);
		if (counters[i + 1] < 0) {
			counters[0] = -1;
			return;
		}
	}
}

static void counters_read(uint64_t v[NKINDS + 1])
{
	uint64_t buf[NKINDS + 2];

	if (read(counters[0], buf, sizeof(buf)) != (ssize_t)sizeof(buf) || buf[0] != NKINDS + 1)
		abort();
	memcpy(v, &buf[1], (NKINDS + 1) * sizeof(v[0]));
}

static void counting(bool on)
{
	if (counters[0] >= 0)
		ioctl(counters[0], on ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE,
		      PERF_IOC_FLAG_GROUP);
}

/* ---- the run ---- */

static void inject(unsigned int k)
{
	fake_complete(fake_cq_of(cq), k, next_id);
	next_id += k;
}

/*
 * With RR_BRIDGE_LOOP_WAITS a pass polls the CQ it left unarmed before it
 * arms it and sleeps: completions queued before the pass would never wake
 * it. They arrive as it goes to sleep instead: the fake's hook runs just
 * before the loop's io_uring_enter() that waits, uncounted, and the enter
 * then finds the channel's CQE as if it had slept until it came.
 */
static unsigned int inject_k; /* to inject at the next wait; 0: none */

static void inject_at_wait(void)
{
	unsigned int k = inject_k;

	if (!k)
		return;
	inject_k = 0;
	CALLGRIND_TOGGLE_COLLECT;
	counting(false);
	inject(k);
	counting(true);
	CALLGRIND_TOGGLE_COLLECT;
}

/* n wake-ups of k completions each, measured as the caller says. */
static void run(const struct strategy *s, unsigned int k, unsigned int n, bool measure)
{
	for (unsigned int i = 0; i < n; i++) {
		unsigned long before = wcs_seen;

		if (s->fan)
			fan_fire(s);
		else if (s->sleeps)
			inject_k = k;
		else if (s->ep)
			post_writes(k);
		else if (!s->spin)
			inject(k);
		if (measure) {
			counting(true);
			CALLGRIND_TOGGLE_COLLECT;
		}
		s->wake();
		if (measure) {
			CALLGRIND_TOGGLE_COLLECT;
			counting(false);
		}
		if (inject_k) {
			fprintf(stderr, "rr-cost: %s did not wait\n", s->name);
			exit(1);
		}
		if (wcs_seen - before != (s->spin ? 0 : k)) {
			fprintf(stderr, "rr-cost: %s took %lu completions in a wake-up, not %u\n",
				s->name, wcs_seen - before, s->spin ? 0 : k);
			exit(1);
		}
	}
}

int main(int argc, char **argv)
{
	const struct strategy *s = NULL;
	unsigned int n = argc > 4 ? (unsigned int)atoi(argv[4]) : 100;
	bool valgrind = RUNNING_ON_VALGRIND;
	uint64_t base[NKINDS + 1] = {0}, v[NKINDS + 1];
	char *ks, *tok;
	int rc;

	if (argc < 4 || (strcmp(argv[2], "rxe") && strcmp(argv[2], "mlx5")) || !n) {
		fprintf(stderr,
			"usage: rr-cost STRATEGY rxe|mlx5 K[,K...] [WAKEUPS]\n"
			"       rr-cost fan-cqs|fan-chans|fan-eps rxe|mlx5 N[,N...] [WAKEUPS]\n");
		return 2;
	}
	for (unsigned int i = 0; i < sizeof(strategies) / sizeof(strategies[0]); i++)
		if (!strcmp(strategies[i].name, argv[1]))
			s = &strategies[i];
	if (!s) {
		fprintf(stderr, "rr-cost: no strategy %s\n", argv[1]);
		return 2;
	}
	/* rxe: events carry CQ handles, arms are syscalls; mlx5: a cq_event op. */
	ctx = !strcmp(argv[2], "rxe") ? &fake_ctx_rr : &fake_ctx;
	setenv("RR_FAKE_PROVIDER", argv[2], 1); /* the fake device's, for endpoints */
	if (io_uring_queue_init(256, &ring, 0))
		return 1;
	/* The ring's fd registered (liburing 2.3): the kernel skips its fd
	 * lookup; whether user space gains anything is what this shows. */
	if (getenv("RR_COST_REGISTER_RING") && io_uring_register_ring_fd(&ring) != 1)
		return 1;
	if (s->ep)
		rc = ep_setup();
	else if (strncmp(s->name, "bridge", 6) && strcmp(s->name, "hybrid-spin") && !s->fan)
		rc = plain_setup(s->name);
	else
		rc = bridge_setup(s->flags, s->mode, 100000000, s->batch);
	if (rc) {
		fprintf(stderr, "rr-cost: %s setup: %s\n", s->name, strerror(-rc));
		return 1;
	}
	if (s->fan) {
		/* A channel is a pipe in the fake: two fds each. */
		struct rlimit rl;

		if (!getrlimit(RLIMIT_NOFILE, &rl)) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
	}
	if (!valgrind)
		counters_open();
	fake_before_wait = inject_at_wait;
	ks = argv[3];
	while ((tok = strsep(&ks, ","))) {
		unsigned int k = (unsigned int)atoi(tok), fan = 0;

		if (!k && !s->spin)
			return 2;
		if (s->fan) {
			fan = k;
			k = 1;
			rc = fan_grow(s, fan);
			if (rc) {
				fprintf(stderr, "rr-cost: %s: %u of %u: %s\n", s->name, fan_n, fan,
					strerror(-rc));
				return 1;
			}
		}
		/* Under callgrind --instr-atstart=no, the setup above ran
		 * uninstrumented (16,384 endpoints connect in seconds, not
		 * minutes); the warm-up fills the instrumented code's caches. */
		CALLGRIND_START_INSTRUMENTATION;
		run(s, k, WARMUP, false);
		if (counters[0] >= 0)
			counters_read(base);
		run(s, k, n, true);
		printf("{\"k\":%u,", k);
		if (fan)
			printf("\"n\":%u,", fan);
		printf("\"wakeups\":%u,\"syscalls\":", n);
		if (counters[0] < 0) {
			printf("null}\n");
		} else {
			/* No strategy calls ioctl(2): those counted are the
			 * counters' own disables, each counted as it stops them. */
			uint64_t ioctls;

			counters_read(v);
			ioctls = v[NKINDS] - base[NKINDS];
			printf("{\"all\":%.3f", (double)(v[0] - base[0] - ioctls) / n);
			for (unsigned int j = 0; j < NKINDS - 1; j++)
				printf(",\"%s\":%.3f", kinds[j],
				       (double)(v[j + 1] - base[j + 1]) / n);
			printf("}}\n");
		}
		fflush(stdout);
		if (valgrind) {
			char what[32];

			snprintf(what, sizeof(what), fan ? "n=%u" : "k=%u", fan ? fan : k);
			CALLGRIND_DUMP_STATS_AT(what);
			CALLGRIND_STOP_INSTRUMENTATION;
		}
	}
	return 0;
}
