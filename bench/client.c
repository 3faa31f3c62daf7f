// SPDX-License-Identifier: MIT
/*
 * The client side of a run: keeps cfg.qd messages in flight on each of
 * cfg.conns connections, checks every echo against what was sent, and
 * times each round trip from post to echo. The echo says the message
 * arrived, so its slot is free again without waiting for the send's own
 * completion, as in perftest. When the last echo is in, it sends STOP and
 * waits for the server's figures (FIN).
 *
 * --client-threads N (conns): N threads, each with its own side (CQ, and
 * ring and bridge where the strategy has one) and an even share of the
 * connections and round trips, so one thread's CPU does not cap the run.
 * They connect one after another (the server accepts in turn), start
 * together, and the last to finish sends STOP; the others wait for the
 * FIN before closing, so the server sees no connection go early.
 *
 * idle: nothing is sent; a timer thread posts STOP after cfg.idle_ms, so
 * both sides spend that time waiting in their strategy.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"

struct slot {
	double t0;
	bool busy;
};

/* What the client's threads share. */
struct cshared {
	const struct bench_cfg *cfg;
	struct client_out *out;
	uint32_t n;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_barrier_t ready;
	uint32_t begun, ended; /* under lock */
	bool over;	       /* under lock: FIN in, or a thread failed */
	atomic_uint finished;
	/* the process's figures from the first thread's start to the last
	 * one's end */
	double cpu0, sys0, t0;
	int64_t csw0;
	struct side_figures agg;
};

struct client {
	struct cshared *sh;
	uint32_t idx;
	struct bench_cfg cfg; /* this thread's share */
	struct client_out *out;
	double *rtt;	    /* this thread's part of out->rtt */
	struct slot *slots; /* conns * qd */
	long warm, total, issued, completed;
	struct side_figures f;
	struct side_counters sc;
	double tcpu0;
	struct iowq_snap iowq0; /* mixed: io-wq's workers as measuring began */
	bool iowq_known;
	bool measuring, fin, stop_sent;
	struct bside *s;
	char err[160];
	int rc;
};

static long warmup_of(const struct bench_cfg *cfg)
{
	long w = cfg->iters / 10;

	return w < 10 ? 10 : w;
}

static void fail(struct bside *s, int err, const char *what)
{
	struct client *c = s->role;

	if (s->err)
		return;
	s->err = err;
	snprintf(c->err, sizeof(c->err), "%s", what);
}

static void process_usage(double *cpu, int64_t *csw)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	*cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	*csw = ru.ru_nvcsw + ru.ru_nivcsw;
}

static void measure_begin(struct client *c)
{
	struct cshared *sh = c->sh;

	pthread_mutex_lock(&sh->lock);
	if (sh->begun++ == 0) {
		process_usage(&sh->cpu0, &sh->csw0);
		sh->sys0 = system_cpu_now();
		sh->t0 = now_us();
	}
	pthread_mutex_unlock(&sh->lock);
	c->tcpu0 = thread_cpu_now();
	side_sync_counts(c->s);
	side_begin(&c->f, &c->sc);
	c->measuring = true;
}

static void measure_end(struct client *c)
{
	struct cshared *sh = c->sh;
	double cpu, sys;
	int64_t csw;

	if (!c->measuring)
		return;
	c->measuring = false;
	side_sync_counts(c->s);
	side_end(&c->f, &c->sc);
	if (c->idx < BENCH_MAX_THREADS)
		c->out->cli_thread_cpu_s[c->idx] = thread_cpu_now() - c->tcpu0;
	pthread_mutex_lock(&sh->lock);
	sh->agg.syscalls =
		sh->agg.syscalls < 0 || c->f.syscalls < 0 ? -1 : sh->agg.syscalls + c->f.syscalls;
	sh->agg.verbs_syscalls = sh->agg.verbs_syscalls < 0 || c->f.verbs_syscalls < 0
					 ? -1
					 : sh->agg.verbs_syscalls + c->f.verbs_syscalls;
	sh->agg.wcs += c->f.wcs;
	sh->agg.wakeups += c->f.wakeups;
	sh->agg.posts += c->f.posts;
	sh->agg.chains += c->f.chains;
	sh->agg.wrs += c->f.wrs;
	if (++sh->ended == sh->n) {
		process_usage(&cpu, &csw);
		sys = system_cpu_now();
		sh->agg.cpu_s = cpu - sh->cpu0;
		sh->agg.ctx_switches = csw - sh->csw0;
		sh->agg.sys_cpu_s = sys < 0 || sh->sys0 < 0 ? -1 : sys - sh->sys0;
		sh->agg.elapsed_s = (now_us() - sh->t0) / 1e6;
	}
	pthread_mutex_unlock(&sh->lock);
}

static int issue(struct client *c, uint32_t conn, uint32_t slot)
{
	struct bside *s = c->s;
	uint8_t *buf = side_send_slot(s, conn, slot);
	struct msg_hdr h = {.slot = slot, .seq = (uint32_t)c->issued};
	struct slot *sl = &c->slots[conn * s->cfg.qd + slot];

	memset(buf, (int)(c->issued & 0xff), s->cfg.msg_size);
	memcpy(buf, &h, sizeof(h));
	*sl = (struct slot){.t0 = tick_us(), .busy = true};
	c->issued++;
	return side_post(s, conn, wr_id_of(conn, WR_MSG, slot), buf, s->cfg.msg_size,
			 s->cfg.op == OP_WRITE_IMM ? (int)slot : -1);
}

static void send_stop(struct client *c)
{
	struct bside *s = c->s;
	uint8_t *buf = side_send_slot(s, 0, s->cfg.qd);
	struct msg_hdr h = {.slot = HDR_STOP};
	int rc;

	memcpy(buf, &h, sizeof(h));
	side_phase(PH_FINISH);
	c->stop_sent = true;
	rc = side_post(s, 0, wr_id_of(0, WR_CTRL, 0), buf, sizeof(h), -1);
	if (rc)
		fail(s, rc, "post STOP");
}

static void slot_done(struct client *c, uint32_t conn, uint32_t slot)
{
	struct bside *s = c->s;
	struct slot *sl = &c->slots[conn * s->cfg.qd + slot];
	double t = tick_us();

	if (c->completed >= c->warm)
		c->rtt[c->completed - c->warm] = t - sl->t0;
	sl->busy = false;
	c->completed++;
	if (c->completed == c->warm) {
		/* io-wq's workers outside the syscall count's bounds. */
		if (s->filer)
			c->iowq_known = iowq_snap(&c->iowq0) == 0;
		measure_begin(c);
		if (s->filer) {
			s->filer->bytes = s->filer->reads = 0;
			s->filer->calls = s->filer->lone_wakes = 0;
			s->filer->most = s->filer->inflight;
		}
	}
	if (c->completed == c->total) {
		struct iowq_snap now;

		measure_end(c);
		if (s->filer) {
			c->out->file_bytes = s->filer->bytes;
			c->out->file_reads = s->filer->reads;
			c->out->file_most = s->filer->most;
			c->out->file_calls = s->filer->calls + s->filer->lone_wakes;
			c->out->file_iowq = c->iowq_known && !iowq_snap(&now)
						    ? iowq_since(&c->iowq0, &now)
						    : -1;
		}
		s->filer = NULL; /* the reads stop with the measurement */
		/* The last thread to finish asks for the figures; the others
		 * are done with their connections. */
		if (atomic_fetch_add(&c->sh->finished, 1) + 1 == c->sh->n)
			send_stop(c);
		else
			s->done = true;
		return;
	}
	if (c->issued < c->total) {
		int rc = issue(c, conn, slot);

		if (rc)
			fail(s, rc, "post message");
	}
}

static void on_fin(struct client *c, const uint8_t *buf)
{
	memcpy(&c->out->srv, buf + sizeof(struct msg_hdr), sizeof(c->out->srv));
	c->fin = true;
	c->s->done = true;
}

static void on_wc(struct bside *s, const struct ibv_wc *wc)
{
	struct client *c = s->role;
	uint32_t conn = wr_conn(wc->wr_id), idx = wr_idx(wc->wr_id), slot;
	const uint8_t *got;
	struct msg_hdr h;
	struct slot *sl;

	if (wc->status != IBV_WC_SUCCESS) {
		if (!s->done)
			fail(s, -rr_wc_status_errno(wc->status), ibv_wc_status_str(wc->status));
		return;
	}
	if (conn >= s->nqp)
		return fail(s, -EPROTO, "completion of an unknown connection");
	switch (wr_kind(wc->wr_id)) {
	case WR_CTRL:
		return;
	case WR_MSG:
		return; /* the echo is what counts */
	case WR_RECV:
		got = side_recv_slot(s, conn, idx);
		memcpy(&h, got, sizeof(h));
		if (wc->opcode == IBV_WC_RECV && h.slot == HDR_FIN &&
		    wc->byte_len >= sizeof(h) + sizeof(struct side_figures))
			return on_fin(c, got);
		if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
			slot = be32toh(wc->imm_data);
			if (slot >= s->cfg.qd)
				return fail(s, -EPROTO, "echo for an unknown slot");
			got = side_recv_slot(s, conn, slot);
		} else {
			slot = h.slot;
		}
		if (slot >= s->cfg.qd || wc->byte_len != s->cfg.msg_size ||
		    memcmp(got, side_send_slot(s, conn, slot), s->cfg.msg_size))
			return fail(s, -EBADMSG, "echo differs from the message sent");
		if (side_post_recv(s, conn, idx))
			return fail(s, -EIO, "post receive");
		break;
	default:
		return fail(s, -EPROTO, "completion of an unknown request");
	}
	sl = &c->slots[conn * s->cfg.qd + slot];
	if (!sl->busy)
		return fail(s, -EPROTO, "echo for an idle slot");
	slot_done(c, conn, slot);
}

static void *idle_timer(void *arg)
{
	struct client *c = arg;

	usleep(c->s->cfg.idle_ms * 1000u);
	send_stop(c);
	return NULL;
}

/* Connect this thread's share, in turn with the others. */
static int connect_share(struct client *c, struct bside *s)
{
	struct cshared *sh = c->sh;
	int rc;

	pthread_mutex_lock(&sh->lock);
	rc = side_connect(s, &c->cfg, 10);
	pthread_mutex_unlock(&sh->lock);
	s->role = c;
	s->on_wc = on_wc;
	if (s->retries)
		fprintf(stderr, "ringrdma-bench: client%s: %u connection requests made again\n",
			sh->n > 1 ? " thread" : "", s->retries);
	if (rc)
		snprintf(c->err, sizeof(c->err), "connect to %s:%u: %s", c->cfg.addr, c->cfg.port,
			 strerror(-rc));
	return rc;
}

/* Tell the others this thread is over (FIN in, or failed). */
static void say_over(struct cshared *sh)
{
	pthread_mutex_lock(&sh->lock);
	sh->over = true;
	pthread_cond_broadcast(&sh->cond);
	pthread_mutex_unlock(&sh->lock);
}

static int client_thread(struct client *c)
{
	struct cshared *sh = c->sh;
	const struct bench_cfg *cfg = &c->cfg;
	struct bside s;
	struct filer file = {.fd = -1};
	pthread_t timer;
	int rc;

	c->s = &s;
	c->sc = (struct side_counters){-1, -1};
	c->warm = cfg->wl == W_IDLE ? 0 : warmup_of(sh->cfg);
	c->total = cfg->wl == W_IDLE ? 0 : c->warm + cfg->iters;
	rc = connect_share(c, &s);
	if (sh->n > 1)
		pthread_barrier_wait(&sh->ready); /* every thread, connected or not */
	if (rc)
		goto out;
	c->slots = calloc((size_t)cfg->conns * cfg->qd, sizeof(*c->slots));
	if (!c->slots) {
		rc = -ENOMEM;
		goto out;
	}
	if (workload_mixed(cfg->wl)) {
		bool direct = cfg->wl == W_MIXED_DIRECT || cfg->file_direct;
		const char *path = cfg->wl == W_MIXED_DIRECT ? cfg->dfile : cfg->file;

		unsigned int depth =
			strategy_file_qd(cfg->strat) && cfg->file_qd ? cfg->file_qd : 1;

		rc = path ? filer_open(&file, path, direct, depth) : -ENOENT;
		if (rc) {
			snprintf(c->err, sizeof(c->err), "%s%s: %s", path ? path : "no file",
				 direct ? " (O_DIRECT)" : "", strerror(-rc));
			goto out;
		}
		s.filer = &file;
		if (strategy_aio(cfg->strat)) {
			s.aio_filer = &file;
			rc = filer_aio_attach(&s);
			if (rc) {
				snprintf(c->err, sizeof(c->err),
					 "Linux AIO (io_setup, eventfd): %s", strerror(-rc));
				goto out;
			}
		}
	}
	if (cfg->wl == W_IDLE) {
		side_phase(PH_RUN);
		measure_begin(c);
		rc = -pthread_create(&timer, NULL, idle_timer, c);
		if (rc)
			goto out;
	} else {
		for (uint32_t q = 0; q < cfg->conns && !rc; q++)
			for (uint32_t k = 0; k < cfg->qd && !rc && c->issued < c->total; k++)
				rc = issue(c, q, k);
		if (rc) {
			snprintf(c->err, sizeof(c->err), "post message: %s", strerror(-rc));
			goto out;
		}
		/* The connections' receives and the first window are out:
		 * counted before a measurement can begin. */
		side_sync_counts(&s);
	}
	if (cfg->wl != W_IDLE)
		side_phase(PH_RUN);
	rc = side_loop(&s);
	if (cfg->wl == W_IDLE) {
		pthread_join(timer, NULL);
		measure_end(c);
	}
	if (rc && !c->err[0])
		snprintf(c->err, sizeof(c->err), "%s", strerror(-rc));
	else if (rc)
		snprintf(c->err + strlen(c->err), sizeof(c->err) - strlen(c->err), ": %s",
			 strerror(-rc));
out:
	measure_end(c);
	if (rc || c->stop_sent) {
		say_over(sh);
	} else {
		/* Done with its share: its connections stay up until the FIN
		 * is in, or the server would see them go mid-run. */
		pthread_mutex_lock(&sh->lock);
		while (!sh->over)
			pthread_cond_wait(&sh->cond, &sh->lock);
		pthread_mutex_unlock(&sh->lock);
	}
	if (rc && sh->n > 1) {
		/* The other threads may be blocked in a wait nothing ends:
		 * end the process with the reason. */
		snprintf(c->out->err, sizeof(c->out->err), "client thread %u: %.120s", c->idx,
			 c->err);
		c->out->rc = rc;
		_exit(1);
	}
	side_phase(PH_CLOSE);
	side_close(&s); /* first: the ring's reads are done once it is gone */
	filer_close(&file);
	free(c->slots);
	c->rc = rc;
	return rc;
}

static void *thread_main(void *arg)
{
	client_thread(arg);
	return NULL;
}

int client_run(const struct bench_cfg *cfg, struct client_out *out)
{
	uint32_t n = cfg->client_threads > 1 && cfg->wl != W_IDLE ? cfg->client_threads : 1;
	struct cshared sh = {.cfg = cfg, .out = out};
	struct client *cs;
	pthread_t tids[BENCH_MAX_THREADS];
	long off = 0;
	uint32_t started = 0;
	int rc = 0;

	if (n > cfg->conns)
		n = cfg->conns;
	if (n > BENCH_MAX_THREADS)
		n = BENCH_MAX_THREADS;
	sh.n = n;
	count_syscalls = cfg->count_pass;
	side_trace = &out->cli_at;
	side_phase(PH_CONNECT);
	tick_us(); /* calibrate before anything is timed (and before threads) */
	cs = calloc(n, sizeof(*cs));
	if (!cs)
		return out->rc = -ENOMEM;
	pthread_mutex_init(&sh.lock, NULL);
	pthread_cond_init(&sh.cond, NULL);
	pthread_barrier_init(&sh.ready, NULL, n);
	for (uint32_t i = 0; i < n; i++) {
		struct client *c = &cs[i];

		c->sh = &sh;
		c->idx = i;
		c->out = out;
		c->cfg = *cfg;
		c->cfg.conns = cfg->conns / n + (i < cfg->conns % n);
		c->cfg.iters = cfg->iters / n + (i < cfg->iters % n);
		c->cfg.all_conns = cfg->conns;
		c->cfg.all_iters = cfg->iters;
		c->rtt = out->rtt + off;
		off += c->cfg.iters;
	}
	if (n == 1) {
		rc = client_thread(&cs[0]);
	} else {
		for (uint32_t i = 0; i < n; i++, started++)
			if (pthread_create(&tids[i], NULL, thread_main, &cs[i]))
				break;
		if (started < n) {
			snprintf(out->err, sizeof(out->err), "cannot start client thread %u",
				 started);
			out->rc = -EAGAIN;
			_exit(1); /* the started ones wait at the barrier */
		}
		for (uint32_t i = 0; i < n; i++) {
			pthread_join(tids[i], NULL);
			if (cs[i].rc && !rc)
				rc = cs[i].rc;
		}
	}
	for (uint32_t i = 0; i < n; i++)
		if (cs[i].rc && cs[i].err[0]) {
			snprintf(out->err, sizeof(out->err), "%s", cs[i].err);
			break;
		}
	out->cli = sh.agg;
	out->cli_threads = n;
	pthread_barrier_destroy(&sh.ready);
	pthread_cond_destroy(&sh.cond);
	pthread_mutex_destroy(&sh.lock);
	free(cs);
	out->rc = rc;
	return rc;
}
