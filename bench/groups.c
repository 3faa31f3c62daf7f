// SPDX-License-Identifier: MIT
/*
 * The server side of a run with --threads N > 1 (uring and hybrid, and
 * their -ep forms): ringrdma's poll groups. A listener on this process's
 * main thread places each connection on one of N groups, each an
 * RR_BRIDGE_GROUP bridge on a ring and thread of its own (the ring created
 * on that thread, as a SINGLE_ISSUER ring must be), where the endpoint's
 * QP joins the group's shared CQ. The echo is the single-threaded server's
 * (server.c), written with the library's endpoints: a SEND from a send
 * slot, or a WRITE_IMM back into the client's slot; on STOP, the figures
 * (FIN). Its posts are coalesced whatever the strategy's name.
 *
 * With one thread it is the server of the -ep strategies: no groups, the
 * listener's own bridge serves every connection on this thread (g[0]),
 * the endpoints on one shared CQ as the single-threaded server's QPs are.
 *
 * Figures: the process's CPU time and context switches (getrusage), the
 * syscalls of every thread (one counter per thread), the groups'
 * completions and CQ events (bridge stats), and per group its
 * connections, the messages it echoed and its thread's CPU time
 * (pthread_getcpuclockid()), all over the timed part.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

struct group;

struct gconn {
	rr_ep *ep;
	uint8_t *recv, *send; /* 2*qd+1 receive slots, qd+1 send slots */
	uint64_t raddr;
	uint32_t rkey;
	uint32_t echo_next;
	uint32_t id;
	/* Echoes of messages that arrived before the connection's
	 * ESTABLISHED reached us (the client sends once it has its own):
	 * sent from on_accept. */
	struct pending_echo {
		uint8_t *buf;
		uint32_t len;
		int slot;
	} pend[BENCH_MAX_QD];
	uint32_t npend;
};

struct group {
	unsigned int idx;
	pthread_t thread;
	int tid;
	struct io_uring ring;
	rr_bridge *b;
	int setup; /* under the lock: 0 not yet, 1 ready, <0 failed */
	atomic_int go, stop;
	atomic_uint conns;
	atomic_ullong wcs, wakeups, ops, posts, chains, wrs;
	uint64_t ops0;
	double cpu0;
	struct gconn **mine; /* its connections, destroyed on its thread */
	uint32_t nmine;
};

struct gserver {
	struct bench_cfg cfg;
	struct group g[BENCH_MAX_THREADS];
	unsigned int n;
	bool self; /* no group threads: g[0] is the listener's bridge */
	struct io_uring ring;
	bool ring_ready;
	rr_bridge *b;
	rr_listener *l;
	uint8_t *buf;
	size_t buf_len, slot_sz;
	uint32_t per;
	struct ibv_mr *mr;
	struct gconn *conns;
	uint32_t nconn; /* requests taken, on the listener's thread */
	atomic_uint accepted;
	atomic_int measuring; /* 0 not yet, 3 starting, 1 measuring, 2 over */
	atomic_int done, err, fin_posted;
	long warm;
	struct side_figures f;
	struct side_counters scs[BENCH_MAX_THREADS + 1];
	int tids[BENCH_MAX_THREADS + 1];
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

static struct gserver *SV;
static __thread struct group *cur_group;

#define FIN_MARK ((void *)1)

static void fail(int err)
{
	int zero = 0;

	if (!atomic_load(&SV->done))
		atomic_compare_exchange_strong(&SV->err, &zero, err);
}

static double thread_cpu_s(const struct group *g)
{
	struct timespec ts;
	clockid_t cid;

	if (pthread_getcpuclockid(g->thread, &cid) || clock_gettime(cid, &ts))
		return 0;
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* As each group's bridge counted them when its last pass ended: what
 * its endpoints posted in a pass has gone to the provider by then. */
static void sums(struct side_counts *c)
{
	memset(c, 0, sizeof(*c));
	for (unsigned int i = 0; i < SV->n; i++) {
		const struct group *g = &SV->g[i];

		c->wcs += atomic_load_explicit(&g->wcs, memory_order_relaxed);
		c->wakeups += atomic_load_explicit(&g->wakeups, memory_order_relaxed);
		c->posts += atomic_load_explicit(&g->posts, memory_order_relaxed);
		c->chains += atomic_load_explicit(&g->chains, memory_order_relaxed);
		c->wrs += atomic_load_explicit(&g->wrs, memory_order_relaxed);
	}
}

/* Threads whose syscalls count: this one, and each group's own. */
static int counted_threads(void)
{
	return SV->self ? 1 : (int)SV->n + 1;
}

static void measure_begin(void)
{
	int zero = 0;
	struct side_counts c;

	if (!atomic_compare_exchange_strong(&SV->measuring, &zero, 3))
		return;
	for (unsigned int i = 0; i < SV->n; i++) {
		SV->g[i].cpu0 = thread_cpu_s(&SV->g[i]);
		SV->g[i].ops0 = atomic_load(&SV->g[i].ops);
	}
	sums(&c);
	side_begin_threads(&SV->f, SV->scs, SV->tids, counted_threads(), &c);
	atomic_store(&SV->measuring, 1);
}

static void measure_end(void)
{
	int one = 1;
	struct side_counts c;

	if (!atomic_compare_exchange_strong(&SV->measuring, &one, 2))
		return;
	sums(&c);
	side_end_threads(&SV->f, SV->scs, counted_threads(), &c);
	if (!group_out || SV->self)
		return; /* one thread: the server's own figures say it all */
	group_out->threads = SV->n;
	for (unsigned int i = 0; i < SV->n; i++) {
		struct group *g = &SV->g[i];

		group_out->conns[i] = atomic_load(&g->conns);
		group_out->ops[i] = atomic_load(&g->ops) - g->ops0;
		group_out->cpu_s[i] = thread_cpu_s(g) - g->cpu0;
	}
}

static void on_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	(void)ep;
	if (data == FIN_MARK) {
		atomic_store(&SV->done, 1); /* out, or flushed once the client left */
		return;
	}
	if (c->status && !atomic_load(&SV->fin_posted))
		fail(c->status);
}

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data);

static void send_fin(struct gconn *k)
{
	uint8_t *buf = k->send + (size_t)SV->cfg.qd * SV->slot_sz;
	struct msg_hdr h = {.slot = HDR_FIN};
	int rc;

	measure_end();
	side_phase(PH_FINISH);
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), &SV->f, sizeof(SV->f));
	atomic_store(&SV->fin_posted, 1);
	rc = rr_ep_post_send(k->ep, buf, sizeof(h) + sizeof(SV->f), SV->mr, on_sent, FIN_MARK);
	if (rc) {
		atomic_store(&SV->fin_posted, 0);
		fail(rc);
	}
}

static int echo(rr_ep *ep, struct gconn *k, uint8_t *buf, uint32_t len, int slot)
{
	if (slot < 0)
		return rr_ep_post_send(ep, buf, len, SV->mr, on_sent, NULL);
	return rr_ep_post_write_imm(ep, buf, len, SV->mr, k->raddr + (uint64_t)slot * SV->slot_sz,
				    k->rkey, (uint32_t)slot, on_sent, NULL);
}

static void on_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	uint8_t *p = data, *buf = p;
	size_t off = (size_t)(p - SV->buf) / SV->slot_sz;
	struct gconn *k = &SV->conns[off / SV->per];
	struct msg_hdr h;
	int rc, slot = -1;

	if (c->status) {
		if (!atomic_load(&SV->fin_posted))
			fail(c->status);
		return;
	}
	if (c->has_imm) {
		slot = (int)c->imm_data;
		if ((uint32_t)slot >= SV->cfg.qd)
			return fail(-EPROTO);
		buf = k->recv + (size_t)slot * SV->slot_sz;
	}
	memcpy(&h, buf, sizeof(h));
	if (slot < 0 && h.slot == HDR_STOP) {
		rc = rr_ep_post_recv(ep, p, (uint32_t)SV->slot_sz, SV->mr, on_recv, p);
		if (rc)
			fail(rc);
		send_fin(k);
		return;
	}
	if (h.seq == (uint32_t)SV->warm)
		measure_begin();
	if (cur_group)
		atomic_fetch_add_explicit(&cur_group->ops, 1, memory_order_relaxed);
	if (slot < 0) {
		uint8_t *out = k->send + (size_t)(k->echo_next++ % SV->cfg.qd) * SV->slot_sz;

		memcpy(out, buf, c->byte_len);
		buf = out;
	}
	if (!k->ep) {
		/* Not accepted yet: posts would fail, so the echo waits. */
		if (k->npend == SV->cfg.qd)
			return fail(-ENOBUFS);
		k->pend[k->npend++] = (struct pending_echo){buf, c->byte_len, slot};
		rc = 0;
	} else {
		rc = echo(ep, k, buf, c->byte_len, slot);
	}
	if (!rc)
		rc = rr_ep_post_recv(ep, p, (uint32_t)SV->slot_sz, SV->mr, on_recv, p);
	if (rc)
		fail(rc);
}

/* On the group's thread, before the connection is accepted. */
static void on_qp_ready(rr_ep *ep, int status, void *data)
{
	struct gconn *k = rr_ep_data(ep);

	(void)data;
	if (status)
		return;
	for (uint32_t i = 0; i < 2 * SV->cfg.qd + 1; i++) {
		uint8_t *p = k->recv + (size_t)i * SV->slot_sz;
		int rc = rr_ep_post_recv(ep, p, (uint32_t)SV->slot_sz, SV->mr, on_recv, p);

		if (rc)
			return fail(rc);
	}
}

static void on_down(rr_ep *ep, int status, void *data)
{
	(void)ep;
	(void)data;
	if (atomic_load(&SV->fin_posted))
		atomic_store(&SV->done, 1); /* the client has its figures */
	else
		fail(status ? status : -ECONNRESET);
}

/* On the group's thread, once established. */
static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct group *g = data;
	struct gconn *k = rr_ep_data(ep);

	(void)l;
	k->ep = ep;
	g->mine[g->nmine++] = k;
	for (uint32_t i = 0; i < k->npend; i++) {
		int rc = echo(ep, k, k->pend[i].buf, k->pend[i].len, k->pend[i].slot);

		if (rc)
			fail(rc);
	}
	k->npend = 0;
	atomic_fetch_add(&g->conns, 1);
	atomic_fetch_add(&SV->accepted, 1);
}

static void no_accept(rr_listener *l, rr_ep *ep, void *data)
{
	(void)l;
	(void)data;
	fail(-EPROTO); /* every connection belongs on a group */
	rr_ep_destroy(ep);
}

/* On the listener's thread: the request's hello must be this run's; the
 * connection gets its slots, and the answer says where they are. */
static int on_request(rr_listener *l, rr_ep *ep, const void *pdata, size_t len, void *data)
{
	struct bench_cfg c = {0};
	const struct bench_cfg *w = &SV->cfg;
	uint8_t ans[RR_PRIVATE_DATA_CONNECT_MAX];
	struct gconn *k;
	uint64_t raddr;
	uint32_t rkey;
	size_t n;

	(void)l;
	(void)data;
	if (SV->nconn >= w->conns || hello_parse(pdata, len, &c, &raddr, &rkey) ||
	    c.strat != w->strat || c.wl != w->wl || c.op != w->op || c.qd != w->qd ||
	    c.conns != w->conns || c.msg_size != w->msg_size)
		return -EPROTO;
	k = &SV->conns[SV->nconn];
	k->raddr = raddr;
	k->rkey = rkey;
	rr_ep_set_data(ep, k);
	n = hello_answer(ans, sizeof(ans), w, k->id, (uintptr_t)k->recv, SV->mr->rkey);
	if (!n || rr_ep_set_private_data(ep, ans, n))
		return -EPROTO;
	SV->nconn++;
	return 0;
}

/* On the group's thread: its bridge's counters, for the others to read. */
static void group_stats(struct group *g)
{
	struct side_counts c;

	side_counts_of(g->b, &c);
	atomic_store_explicit(&g->wcs, c.wcs, memory_order_relaxed);
	atomic_store_explicit(&g->wakeups, c.wakeups, memory_order_relaxed);
	atomic_store_explicit(&g->posts, c.posts, memory_order_relaxed);
	atomic_store_explicit(&g->chains, c.chains, memory_order_relaxed);
	atomic_store_explicit(&g->wrs, c.wrs, memory_order_relaxed);
}

static unsigned int bridge_flags(void)
{
	return SV->cfg.ring_read ? RR_BRIDGE_RING_READ : 0;
}

static void *group_main(void *arg)
{
	struct group *g = arg;
	struct rr_bridge_opts bo = {.flags = RR_BRIDGE_GROUP | bridge_flags()};
	int rc;

	cur_group = g;
	g->tid = (int)syscall(SYS_gettid);
	/* Its ring is made here: a SINGLE_ISSUER ring belongs to the thread
	 * that created it. */
	rc = bench_ring_init(&g->ring, NULL);
	if (!rc) {
		rc = rr_bridge_create(&g->b, &g->ring, &bo, sizeof(bo));
		if (rc)
			io_uring_queue_exit(&g->ring);
	}
	pthread_mutex_lock(&SV->lock);
	g->setup = rc ? rc : 1;
	pthread_cond_broadcast(&SV->cond);
	pthread_mutex_unlock(&SV->lock);
	if (rc)
		return NULL;
	while (!atomic_load(&g->go) && !atomic_load(&g->stop))
		usleep(1000);
	while (!atomic_load(&g->stop)) {
		rc = rr_bridge_run_once(g->b, 100);
		group_stats(g);
		if (rc < 0 && rc != -EINTR) {
			fail(rc);
			break;
		}
	}
	for (uint32_t i = 0; i < g->nmine; i++)
		rr_ep_destroy(g->mine[i]->ep);
	rr_bridge_destroy(g->b);
	io_uring_queue_exit(&g->ring);
	return NULL;
}

static int start_groups(void)
{
	int rc = 0;

	for (unsigned int i = 0; i < SV->n; i++) {
		struct group *g = &SV->g[i];

		g->idx = i;
		g->mine = calloc(SV->cfg.conns, sizeof(*g->mine));
		if (!g->mine)
			return -ENOMEM;
		rc = -pthread_create(&g->thread, NULL, group_main, g);
		if (rc)
			return rc;
		pthread_mutex_lock(&SV->lock);
		while (!g->setup)
			pthread_cond_wait(&SV->cond, &SV->lock);
		pthread_mutex_unlock(&SV->lock);
		if (g->setup < 0)
			return g->setup;
		/* The listener's thread adds the group once its bridge exists. */
		rc = rr_listener_add_group(SV->l, g->b, on_accept, g);
		if (rc)
			return rc;
		SV->tids[i + 1] = g->tid;
	}
	for (unsigned int i = 0; i < SV->n; i++)
		atomic_store(&SV->g[i].go, 1);
	return 0;
}

static int setup(const struct bench_cfg *known, const char *addr, int port_fd)
{
	const struct bench_cfg *c = known;
	/* The library signals the send that takes the SQ's last free slot, so
	 * one run of unsignalled sends beside the window is room enough; a
	 * group's shared CQ grows by the QP's send and receive depth, doubling,
	 * and cannot pass the device's max_cqe (rxe: 32767): with 24 per QP
	 * (qd 1, --signal-every 16) a group holds up to 682 connections. */
	struct rr_ep_opts eo = {.max_send_wr = 2 * c->qd + 2 + c->signal_every,
				.max_recv_wr = 2 * c->qd + 2,
				.mode = strategy_mode(c),
				.spin_us = c->spin_us,
				.signal_every = c->signal_every,
				.on_qp_ready = on_qp_ready,
				.on_disconnect = on_down,
				.flags = RR_EP_SHARED_CQ | (c->post_now ? RR_EP_POST_NOW : 0)};
	struct rr_bridge_opts bo = {.flags = bridge_flags()};
	uint16_t port;
	int rc;

	rc = bench_ring_init(&SV->ring, NULL);
	if (rc)
		return rc;
	SV->ring_ready = true;
	rc = rr_bridge_create(&SV->b, &SV->ring, &bo, sizeof(bo));
	if (!rc && SV->self) {
		/* The listener's bridge is the one group, on this thread. */
		SV->g[0].b = SV->b;
		SV->g[0].thread = pthread_self();
		SV->g[0].tid = SV->tids[0];
		SV->g[0].mine = calloc(c->conns, sizeof(*SV->g[0].mine));
		cur_group = &SV->g[0];
		if (!SV->g[0].mine)
			rc = -ENOMEM;
	}
	if (!rc)
		rc = SV->self ? rr_listen(SV->b, addr, 0, &eo, sizeof(eo), on_accept, &SV->g[0],
					  &SV->l)
			      : rr_listen(SV->b, addr, 0, &eo, sizeof(eo), no_accept, SV, &SV->l);
	if (rc)
		return rc;
	rr_listener_set_on_request(SV->l, on_request);
	SV->slot_sz = c->msg_size < BENCH_MIN_SLOT ? BENCH_MIN_SLOT : c->msg_size;
	SV->per = (2 * c->qd + 1) + (c->qd + 1);
	SV->buf_len = (size_t)c->conns * SV->per * SV->slot_sz;
	SV->buf = aligned_alloc(4096, (SV->buf_len + 4095) & ~(size_t)4095);
	SV->conns = calloc(c->conns, sizeof(*SV->conns));
	if (!SV->buf || !SV->conns)
		return -ENOMEM;
	memset(SV->buf, 0, SV->buf_len);
	for (uint32_t i = 0; i < c->conns; i++) {
		SV->conns[i].id = i;
		SV->conns[i].recv = SV->buf + (size_t)i * SV->per * SV->slot_sz;
		SV->conns[i].send = SV->conns[i].recv + (size_t)(2 * c->qd + 1) * SV->slot_sz;
	}
	/* One MR in the process's PD serves every group's endpoints. */
	rc = rr_listener_reg_mr(SV->l, SV->buf, SV->buf_len, IBV_ACCESS_REMOTE_WRITE, &SV->mr);
	if (!rc && !SV->self)
		rc = start_groups();
	port = rc ? 0 : rr_listener_port(SV->l);
	if (port_fd >= 0 && write(port_fd, &port, sizeof(port)) != sizeof(port) && !rc)
		rc = -EIO;
	return rc;
}

static void teardown(void)
{
	/* The listener goes before its groups. */
	if (SV->l)
		rr_listener_destroy(SV->l);
	if (SV->self && SV->g[0].mine) {
		for (uint32_t i = 0; i < SV->g[0].nmine; i++)
			rr_ep_destroy(SV->g[0].mine[i]->ep);
		free(SV->g[0].mine);
		SV->g[0].mine = NULL;
	}
	for (unsigned int i = 0; i < SV->n; i++) {
		struct group *g = &SV->g[i];

		if (!g->mine)
			continue;
		atomic_store(&g->stop, 1);
		if (g->setup)
			pthread_join(g->thread, NULL);
		free(g->mine);
	}
	if (SV->mr)
		rr_mr_dereg(SV->mr);
	if (SV->b)
		rr_bridge_destroy(SV->b);
	if (SV->ring_ready)
		io_uring_queue_exit(&SV->ring);
	free(SV->buf);
	free(SV->conns);
}

int group_server_run(const struct bench_cfg *known, const char *addr, int port_fd)
{
	struct gserver sv = {0};
	bool running = false;
	int rc;

	if (known->threads > BENCH_MAX_THREADS || !strategy_bridge(known->strat) ||
	    (known->threads <= 1 && !strategy_ep(known->strat)))
		return -EINVAL;
	SV = &sv;
	sv.cfg = *known;
	sv.self = known->threads <= 1;
	sv.n = sv.self ? 1 : known->threads;
	sv.warm = known->wl == W_IDLE ? -1 : (known->iters / 10 < 10 ? 10 : known->iters / 10);
	sv.tids[0] = (int)syscall(SYS_gettid);
	for (unsigned int i = 0; i <= BENCH_MAX_THREADS; i++)
		sv.scs[i] = (struct side_counters){-1, -1};
	count_syscalls = known->count_pass;
	pthread_mutex_init(&sv.lock, NULL);
	pthread_cond_init(&sv.cond, NULL);
	side_phase(PH_CONNECT);
	rc = setup(known, addr, port_fd);
	if (!rc && known->timeout_s)
		alarm(known->timeout_s + known->idle_ms / 1000);
	while (!rc && !atomic_load(&sv.done) && !atomic_load(&sv.err)) {
		rc = rr_bridge_run_once(sv.b, sv.self ? -1 : 50);
		rc = rc == -EINTR || rc > 0 ? 0 : rc;
		if (sv.self)
			group_stats(&sv.g[0]);
		if (!running && atomic_load(&sv.accepted) == known->conns) {
			running = true;
			side_phase(PH_RUN);
			if (known->wl == W_IDLE)
				measure_begin();
		}
		if (side_trace) {
			struct side_counts c;

			sums(&c);
			side_trace->wcs = c.wcs;
		}
	}
	if (!rc)
		rc = atomic_load(&sv.err);
	if (known->wl == W_IDLE && atomic_load(&sv.measuring) != 2)
		measure_end();
	side_phase(PH_CLOSE);
	teardown();
	pthread_cond_destroy(&sv.cond);
	pthread_mutex_destroy(&sv.lock);
	SV = NULL;
	return rc;
}
