// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp serve: listen for RDMA connections and store what each one
 * sends under DIR; rx.c does the per-connection work.
 *
 * With --threads N (N > 1) the listener's thread only listens and takes
 * the signals: its listener places each connection on one of N poll
 * groups (rr_listener_add_group()), each a thread with a ring and bridge
 * of its own that runs the same loop (serve_poll()) for the connections
 * placed on it. What the groups share (struct serve_all) is the token,
 * the directory, the --count, --max-conns and --max-pending counters, the
 * exit status and the totals, under a mutex or atomic; the decision to
 * close is a flag each loop reads at every pass, a 100 ms tick at the
 * latest. With one thread (the default) the listener's loop is the only
 * one and no group is made.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "ranks.h"
#include "serve.h"
#include "store.h"

#define RING_ENTRIES  1024
#define EXIT_DRAIN_MS 10000

static bool closing(const struct serve *s)
{
	return s->closing || atomic_load(&s->all->closing);
}

/* rx_env.admit: a connection's token passed. */
static int serve_admit(void *data, char *why, size_t len)
{
	struct serve *s = data;
	struct serve_all *a = s->all;
	const struct cp_opts *o = a->o;
	int rc = 0;

	pthread_mutex_lock(&a->mu);
	if (o->count && a->admitted >= o->count) {
		snprintf(why, len, "refused: receiver done (--count %u reached)", o->count);
		rc = -EBUSY;
	} else if (a->active >= o->max_conns) {
		snprintf(why, len, "refused: %u connections already", o->max_conns);
		rc = -EBUSY;
	} else {
		a->active++;
		a->admitted++;
		if (!a->first_ns)
			a->first_ns = cp_now_ns();
	}
	pthread_mutex_unlock(&a->mu);
	return rc;
}

/* rx_env.stored: a connection stored a file. */
static void serve_stored(void *data, uint64_t bytes, uint64_t checksum)
{
	struct serve *s = data;
	struct serve_all *a = s->all;

	pthread_mutex_lock(&a->mu);
	a->n.files++;
	a->n.bytes += bytes;
	a->n.checksum = checksum;
	pthread_mutex_unlock(&a->mu);
}

/* One loop of @a's, its connections run in s->env. */
static void serve_init(struct serve *s, struct serve_all *a)
{
	s->all = a;
	s->env = (struct rx_env){
		.lp = &s->lp,
		.o = a->o,
		.dirfd = a->dirfd,
		.gate = &a->gate,
		.made = &a->made,
		.n = &s->n,
		.admit = serve_admit,
		.stored = serve_stored,
		.data = s,
	};
}

/*
 * A connect request, on the thread of the loop it was placed on. It is
 * counted from now toward --max-pending, and a full gate makes room by
 * evicting the oldest half-open or unauthenticated connection, whichever
 * thread holds it (rx_create()): one of this loop's is destroyed here,
 * before this returns, one of another's at that loop's next pass.
 */
static void on_qp_ready(rr_ep *ep, int status, void *data)
{
	struct serve *s = data;
	struct rx *r;

	(void)status;
	if (closing(s) || !(r = rx_create(&s->env, ep))) {
		/* Refused before it exists: the library drops the request. */
		rr_ep_destroy(ep);
		return;
	}
	rx_set_next(r, s->conns);
	s->conns = r;
}

/* On the listener's thread, or with a NULL @l on a group's. */
static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct serve *s = data;
	struct rx *r = rr_ep_data(ep);

	/* Not admitted yet: rx.c counts it once its token was checked. */
	rx_accepted(r);
	if (closing(s))
		rx_abort(r, "receiver shutting down");
}

/* Every loop closes: no new connection, every one aborted with @why. */
static void close_all(struct serve_all *a, const char *why)
{
	atomic_store(&a->why, why);
	atomic_store(&a->closing, true);
}

static void abort_conns(struct serve *s, const char *why)
{
	for (struct rx *r = s->conns; r; r = rx_next(r))
		rx_abort(r, why);
}

/* Every connection left ended, or waits only on a hung file system. */
static bool conns_ended(struct serve *s)
{
	uint64_t now = cp_now_ns();

	for (struct rx *r = s->conns; r; r = rx_next(r))
		if (!rx_stuck(r, now))
			return false;
	return true;
}

static bool groups_drained(const struct serve_all *a)
{
	for (unsigned int i = 0; i < a->ngroups; i++)
		if (!atomic_load(&a->groups[i]->drained))
			return false;
	return true;
}

static void serve_poll(struct cp_loop *lp)
{
	struct serve *s = (struct serve *)lp;
	struct serve_all *a = s->all;
	struct rx *r, *prev = NULL, *next;

	for (r = s->conns; r; r = next) {
		enum rx_poll_res pr;
		int result = 0;

		next = rx_next(r); /* rx_poll() may free r */
		pr = rx_poll(r, &result);
		if (pr == RX_ALIVE) {
			prev = r;
			continue;
		}
		if (prev)
			rx_set_next(prev, next);
		else
			s->conns = next;
		if (pr == RX_REFUSED)
			s->n.refused++;
		if (pr == RX_ENDED) {
			s->n.connections++;
			if (result)
				s->n.failures++;
			pthread_mutex_lock(&a->mu);
			a->active--;
			if (result && !a->result)
				a->result = result;
			pthread_mutex_unlock(&a->mu);
		}
	}
	/* --count admitted connections all ended: only strangers are left. */
	if (a->o->count && !atomic_load(&a->closing)) {
		bool done;

		pthread_mutex_lock(&a->mu);
		done = a->admitted >= a->o->count && !a->active;
		pthread_mutex_unlock(&a->mu);
		if (done)
			close_all(a, "receiver done (--count reached)");
	}
	if (!s->closing && atomic_load(&a->closing)) {
		s->closing = true;
		abort_conns(s, atomic_load(&a->why));
	}
	/* A connection stuck on a file system is not waited for: its call
	 * may never return (it stays in the list, never freed). */
	if (s->group) {
		if (s->closing && conns_ended(s))
			atomic_store(&s->drained, true);
		if (atomic_load(&a->exit))
			lp->stop = true;
	} else if (s->closing && conns_ended(s) && groups_drained(a)) {
		lp->stop = true;
	}
}

/* The listener's loop only: the groups' threads block the signals. */
static void serve_signal(struct cp_loop *lp, int signo)
{
	struct serve *s = (struct serve *)lp;
	struct serve_all *a = s->all;

	if (closing(s)) {
		lp->stop = true; /* a second signal: leave now */
		return;
	}
	cp_log("serve: %s, closing", strsignal(signo));
	pthread_mutex_lock(&a->mu);
	a->result = CP_EXIT_INTERRUPTED;
	pthread_mutex_unlock(&a->mu);
	close_all(a, "receiver interrupted");
	s->closing = true;
	abort_conns(s, "receiver interrupted");
}

/* After the loop: still end every connection (temp files removed, MRs
 * deregistered) before the bridge goes, which a second signal skipped. */
static void serve_drain(struct serve *s)
{
	uint64_t end = cp_now_ns() + EXIT_DRAIN_MS * 1000000ull;

	if (!s->conns)
		return;
	s->closing = true;
	abort_conns(s, "receiver exiting");
	while (!conns_ended(s) && cp_now_ns() < end && cp_loop_pass(&s->lp, 100) >= 0)
		serve_poll(&s->lp);
	if (s->conns)
		cp_log("serve: connections still open at exit");
	for (struct rx *r = s->conns; r; r = rx_next(r))
		rx_free_windows(r);
}

/* A group's thread: its ring and bridge are made here, where they run. */
static void *group_main(void *arg)
{
	struct serve *g = arg;
	struct serve_all *a = g->all;
	int rc;

	g->init_rc = cp_loop_init_group(&g->lp, RING_ENTRIES);
	g->lp.poll = serve_poll;
	sem_post(&g->ready);
	if (g->init_rc)
		return NULL;
	rc = cp_loop_run(&g->lp);
	if (rc) {
		/* The whole serve goes, but this bridge only after the
		 * listener, which may still place requests on it. */
		pthread_mutex_lock(&a->mu);
		if (!a->result)
			a->result = CP_EXIT_FAIL;
		pthread_mutex_unlock(&a->mu);
		close_all(a, "receiver failing");
		g->closing = true;
		abort_conns(g, "receiver failing");
		atomic_store(&g->drained, true);
		while (!atomic_load(&a->exit))
			usleep(10000);
	}
	serve_drain(g);
	cp_loop_fini(&g->lp);
	atomic_store(&g->drained, true);
	return NULL;
}

/* --threads N: start the groups, each added to the listener once ready. */
static int start_groups(struct serve *s, unsigned int n)
{
	struct serve_all *a = s->all;
	int rc;

	a->groups = calloc(n, sizeof(*a->groups));
	if (!a->groups)
		return -ENOMEM;
	for (unsigned int i = 0; i < n; i++) {
		struct serve *g = calloc(1, sizeof(*g));

		if (!g)
			return -ENOMEM;
		serve_init(g, a);
		g->group = true;
		sem_init(&g->ready, 0, 0);
		rc = pthread_create(&g->thread, NULL, group_main, g);
		if (rc) {
			sem_destroy(&g->ready);
			free(g);
			return -rc;
		}
		a->groups[a->ngroups++] = g;
		sem_wait(&g->ready);
		if (g->init_rc)
			return g->init_rc;
		rc = rr_listener_add_group(s->l, g->lp.b, on_accept, g);
		if (rc) {
			cp_log("serve: rr_listener_add_group: %s", strerror(-rc));
			return rc;
		}
	}
	return 0;
}

/* The listener is gone: every group leaves its loop, ends its
 * connections and its bridge. */
static void stop_groups(struct serve_all *a)
{
	atomic_store(&a->exit, true);
	for (unsigned int i = 0; i < a->ngroups; i++) {
		pthread_join(a->groups[i]->thread, NULL);
		sem_destroy(&a->groups[i]->ready);
	}
}

int cp_serve(const struct cp_opts *o)
{
	struct rr_ep_opts eo = {
		.max_send_wr = 2 * o->window + RX_SENDS, /* a bind and a shut per slot */
		.max_recv_wr = o->window + RX_SPARE_RECVS,
		.on_qp_ready = on_qp_ready,
		/* Isolation that holds without memory windows too: no other
		 * connection's QP can reach this one's registrations. */
		.flags = RR_EP_OWN_PD,
	};
	struct cp_summary sum = {.mode = "serve"};
	unsigned int nthreads = o->threads > 1 ? o->threads : 1;
	unsigned int *thread_conns = NULL;
	struct cp_rank_figs *ranks = NULL;
	bool listen_agreed = false;
	char rank_words[32] = "";
	struct serve_all *a;
	char host[256], mw_dev[128];
	uint16_t port;
	struct serve *s;
	uint64_t start_ns;
	int rc, ret;

	if (cp_parse_hostport(o->listen, host, sizeof(host), &port)) {
		cp_log("serve: --listen wants ADDR:PORT, got \"%s\"", o->listen);
		return CP_EXIT_USAGE;
	}
	if (o->mpi) {
		/* One port per rank of this host: PORT, PORT + 1, ... */
		if (port + cp_mpi_local_rank() > 65535) {
			cp_log("serve: --mpi: port %u + rank %d is past 65535", port,
			       cp_mpi_local_rank());
			return CP_EXIT_USAGE;
		}
		port = (uint16_t)(port + cp_mpi_local_rank());
		snprintf(rank_words, sizeof(rank_words), "rank %d ", cp_mpi_rank());
	}
	s = calloc(1, sizeof(*s));
	a = calloc(1, sizeof(*a));
	thread_conns = calloc(nthreads, sizeof(*thread_conns));
	if (!s || !a || !thread_conns) {
		cp_log("serve: out of memory");
		free(s);
		free(a);
		free(thread_conns);
		return CP_EXIT_FAIL;
	}
	pthread_mutex_init(&a->mu, NULL);
	cp_gate_init(&a->gate, o->max_pending);
	pthread_mutex_init(&a->made.mu, NULL);
	a->o = o;
	start_ns = cp_now_ns();
	a->dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (a->dirfd < 0)
		cp_log("serve: cannot open directory %s: %s", o->dir, strerror(errno));
	if (o->mpi) {
		char why[256];

		/* Room for the ranks' figures now: the end must not fail. */
		if (!cp_mpi_rank() && !(ranks = calloc((size_t)cp_mpi_size(), sizeof(*ranks))))
			cp_log("serve: out of memory");
		/* Every rank goes on, or none: the others would wait for it. */
		ret = cp_mpi_worst(a->dirfd < 0		      ? CP_EXIT_LOCAL_IO
				   : !cp_mpi_rank() && !ranks ? CP_EXIT_FAIL
							      : 0);
		if (!ret)
			ret = cp_mpi_same_dir(a->dirfd, why, sizeof(why));
		if (ret) {
			if (a->dirfd >= 0 && !cp_mpi_rank())
				cp_log("serve: --mpi: %s", why);
			if (a->dirfd >= 0)
				close(a->dirfd);
			goto out_free;
		}
	} else if (a->dirfd < 0) {
		ret = CP_EXIT_LOCAL_IO;
		goto out_free;
	}
	serve_init(s, a);
	if (o->partial_age_s) {
		unsigned int removed = 0;
		struct timespec now;

		clock_gettime(CLOCK_REALTIME, &now);
		rc = cp_store_expire(a->dirfd, o->partial_age_s, now.tv_sec, &removed);
		if (rc)
			cp_log("serve: looking for stale partials under %s: %s", o->dir,
			       strerror(-rc));
		if (removed && !o->quiet)
			cp_log("serve: removed %u partials unchanged for %llu s (--partial-age)",
			       removed, (unsigned long long)o->partial_age_s);
	}
	if (o->require_mw && cp_mw_check(mw_dev, sizeof(mw_dev))) {
		cp_log("serve: --require-mw: %s has no memory windows", mw_dev);
		ret = CP_EXIT_FAIL;
		goto out_dir;
	}
	if (o->direct && cp_store_direct_ok(a->dirfd)) {
		cp_log("serve: --direct: the file system of %s takes no O_DIRECT writes", o->dir);
		ret = CP_EXIT_LOCAL_IO;
		goto out_dir;
	}
	/* Blocks SIGINT/SIGTERM before any group's thread exists: they
	 * inherit the mask, and only this loop reads the signalfd. */
	if (cp_loop_init(&s->lp, RING_ENTRIES)) {
		ret = CP_EXIT_FAIL;
		goto out_dir;
	}
	if (!cp_store_supported(&s->lp)) {
		cp_log("serve: this kernel's io_uring lacks openat2, statx, linkat, renameat or "
		       "unlinkat or close (Linux 5.15 or later has them)");
		ret = CP_EXIT_FAIL;
		goto out_loop;
	}
	s->lp.poll = serve_poll;
	s->lp.on_signal = serve_signal;
	rc = rr_listen(s->lp.b, host, port, &eo, sizeof(eo), on_accept, s, &s->l);
	if (rc)
		cp_log("serve: cannot listen on %s:%u: %s", host, port, strerror(-rc));
	listen_agreed = true;
	if (o->mpi && cp_mpi_worst(rc ? CP_EXIT_NET : 0)) {
		/* One rank that cannot listen ends them all, before any
		 * connection was taken. */
		if (!rc)
			rr_listener_destroy(s->l);
		ret = CP_EXIT_NET;
		goto out_loop;
	}
	if (rc) {
		ret = CP_EXIT_NET;
		goto out_loop;
	}
	/* Whoever reads the log must not miss it, --quiet or not. */
	if (o->no_auth)
		cp_log("serve: WARNING: --no-auth: no token is checked; any host that can reach "
		       "%s:%u may store files in %s%s",
		       host, port, o->dir, o->force ? " and replace existing ones (--force)" : "");
	if (nthreads > 1) {
		rc = start_groups(s, nthreads);
		if (rc) {
			cp_log("serve: cannot start %u threads: %s", nthreads, strerror(-rc));
			rr_listener_destroy(s->l);
			stop_groups(a);
			ret = CP_EXIT_FAIL;
			goto out_loop;
		}
		printf(CP_PROG ": serve: %slistening on %s:%u, storing into %s, %u threads\n",
		       rank_words, host, port, o->dir, nthreads);
	} else {
		printf(CP_PROG ": serve: %slistening on %s:%u, storing into %s\n", rank_words, host,
		       port, o->dir);
	}
	fflush(stdout);
	rc = cp_loop_run(&s->lp);
	pthread_mutex_lock(&a->mu);
	ret = rc ? CP_EXIT_FAIL : a->result;
	pthread_mutex_unlock(&a->mu);
	/* The listener before its groups: until then it may place requests
	 * on them. */
	rr_listener_destroy(s->l);
	atomic_store(&a->exit, true);
	serve_drain(s);
	stop_groups(a);
out_loop:
	cp_loop_fini(&s->lp);
out_dir:
	close(a->dirfd);
	sum.exit_code = ret;
	sum.n = a->n;
	cp_tally_add(&sum.n, &s->n);
	thread_conns[0] = s->n.connections;
	for (unsigned int i = 0; i < a->ngroups; i++) {
		cp_tally_add(&sum.n, &a->groups[i]->n);
		thread_conns[i] = a->groups[i]->n.connections;
	}
	sum.start_ns = a->first_ns ? a->first_ns : start_ns;
	if (o->mpi && !listen_agreed)
		cp_mpi_worst(ret ? ret : CP_EXIT_FAIL); /* the others ask it at their listen */
	if (o->mpi) {
		struct cp_rank_figs mine = {.n = sum.n, .exit_code = ret};

		ret = cp_mpi_summary(&mine, &sum, ranks);
		if (cp_mpi_rank())
			goto out_free; /* rank 0 writes the summary */
	}
	sum.threads = nthreads;
	sum.thread_conns = thread_conns;
	if (nthreads > 1 && !o->quiet && a->ngroups == nthreads) {
		char line[512];
		size_t len = 0;

		for (unsigned int i = 0; i < nthreads && len < sizeof(line); i++)
			len += (size_t)snprintf(line + len, sizeof(line) - len, " %u",
						thread_conns[i]);
		cp_log("serve: connections per thread:%s", line);
	}
	cp_json_report(o, &sum);
out_free:
	for (unsigned int i = 0; i < a->ngroups; i++)
		free(a->groups[i]);
	free(a->groups);
	pthread_mutex_destroy(&a->mu);
	cp_gate_fini(&a->gate);
	cp_dirs_free(&a->made);
	free(ranks);
	free(thread_conns);
	free(a);
	free(s);
	return ret;
}
