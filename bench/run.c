// SPDX-License-Identifier: MIT
/*
 * One run = a server side and a client side, each a child process: verbs
 * contexts do not survive fork(), so the parent never opens one. The client
 * child leaves its round trips and both sides' figures in shared memory; a
 * watchdog kills a stuck run. --server serves run after run the same way,
 * one child per run.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static const char *const phase_names[PH_COUNT] = {"starting", "connecting", "running", "finishing",
						  "closing"};

/* /proc/NAME into buf, its lines joined by ";", or "". */
static void proc_text(const char *name, char *buf, size_t len)
{
	char path[128];
	size_t n = 0;
	FILE *f;

	buf[0] = 0;
	snprintf(path, sizeof(path), "/proc/%s", name);
	f = fopen(path, "r");
	if (!f)
		return;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = 0;
	while (n && buf[n - 1] == '\n')
		buf[--n] = 0;
	for (char *p = strchr(buf, '\n'); p; p = strchr(p, '\n'))
		*p = ';';
}

/* "state X, waiting in W; kernel stack: S" of a process or thread, from
 * its /proc directory ("PID" or "PID/task/TID"). */
static void where(const char *dir, char *out, size_t len)
{
	char path[96], stat[512], wchan[64], stack[512];
	const char *rp;

	snprintf(path, sizeof(path), "%s/stat", dir);
	proc_text(path, stat, sizeof(stat));
	snprintf(path, sizeof(path), "%s/wchan", dir);
	proc_text(path, wchan, sizeof(wchan));
	snprintf(path, sizeof(path), "%s/stack", dir);
	proc_text(path, stack, sizeof(stack));
	rp = strrchr(stat, ')');
	snprintf(out, len, "state %c%s%s%s%s", rp && rp[1] && rp[2] ? rp[2] : '?',
		 wchan[0] && strcmp(wchan, "0") ? ", waiting in " : "",
		 wchan[0] && strcmp(wchan, "0") ? wchan : "", stack[0] ? "; kernel stack: " : "",
		 stack);
}

/* Say where a stuck side is before the watchdog kills it: its phase and
 * progress, its scheduler state and, where the kernel shows it, the kernel
 * stack it waits in; then the same for each of its other threads (client
 * threads, io_uring's workers), where a multi-threaded side is stuck. */
static void describe(const char *who, pid_t pid, const struct side_trace *t)
{
	char dir[64], tasks[64], text[1024];
	struct dirent *e;
	int ph = t->phase;
	DIR *d;

	snprintf(dir, sizeof(dir), "%d", (int)pid);
	where(dir, text, sizeof(text));
	fprintf(stderr,
		"ringrdma-bench: at the deadline the %s was %s; %llu completions handled, "
		"%llu sends and %llu receives posted; %s\n",
		who, ph >= 0 && ph < PH_COUNT ? phase_names[ph] : "?", (unsigned long long)t->wcs,
		(unsigned long long)t->sends, (unsigned long long)t->recvs, text);
	snprintf(tasks, sizeof(tasks), "/proc/%d/task", (int)pid);
	d = opendir(tasks);
	while (d && (e = readdir(d))) {
		char comm[32];

		if (e->d_name[0] == '.' || atoi(e->d_name) == (int)pid)
			continue;
		snprintf(dir, sizeof(dir), "%d/task/%.16s", (int)pid, e->d_name);
		where(dir, text, sizeof(text));
		snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "/comm");
		proc_text(dir, comm, sizeof(comm));
		fprintf(stderr, "ringrdma-bench:   its thread %s (%s): %s\n", e->d_name, comm,
			text);
	}
	if (d)
		closedir(d);
}

/* Wait for a child, killing it at the deadline (after saying where it is
 * stuck); its exit status or -1. */
static int reap(pid_t pid, double deadline_us, const char *who, const struct side_trace *t)
{
	int status;

	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now_us() > deadline_us) {
			if (t)
				describe(who, pid, t);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(5000);
	}
	if (WIFSIGNALED(status) && t)
		fprintf(stderr, "ringrdma-bench: the %s was killed by signal %d (%s)\n", who,
			WTERMSIG(status), strsignal(WTERMSIG(status)));
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static double quantile(const double *v, long n, double q)
{
	long i = (long)(q * (double)n);

	return v[i >= n ? n - 1 : i];
}

/* Work requests per ibv_post_send()/_recv() call; 0: none made. */
static double per_chain(int64_t wrs, int64_t chains)
{
	return chains > 0 ? (double)wrs / (double)chains : 0;
}

static void reduce(const struct bench_cfg *cfg, struct client_out *co, bool remote,
		   struct result *r)
{
	double ops = cfg->wl == W_IDLE ? 0 : (double)cfg->iters;
	double per = ops > 0 ? ops : 1;

	memset(r, 0, sizeof(*r));
	r->cfg = *cfg;
	r->name = strategy_name(cfg->strat);
	if (cfg->wl != W_IDLE) {
		qsort(co->rtt, (size_t)cfg->iters, sizeof(double), cmp_double);
		r->has_latency = true;
		r->p50 = quantile(co->rtt, cfg->iters, 0.50);
		r->p99 = quantile(co->rtt, cfg->iters, 0.99);
		r->p999 = quantile(co->rtt, cfg->iters, 0.999);
		r->max = co->rtt[cfg->iters - 1];
		for (int i = 0; i <= BENCH_CDF_POINTS; i++)
			r->cdf[i] = quantile(co->rtt, cfg->iters, (double)i / BENCH_CDF_POINTS);
		r->ops_per_s = co->cli.elapsed_s > 0 ? ops / co->cli.elapsed_s : 0;
	}
	r->cpu_us_per_op = ops > 0 ? (co->cli.cpu_s + co->srv.cpu_s) * 1e6 / per : 0;
	r->ctx_per_op = (double)(co->cli.ctx_switches + co->srv.ctx_switches) / per;
	r->syscalls_known = cfg->count_pass && co->cli.syscalls >= 0 && co->srv.syscalls >= 0;
	r->syscalls_per_op =
		r->syscalls_known ? (double)(co->cli.syscalls + co->srv.syscalls) / per : -1;
	if (r->syscalls_known && co->cli.verbs_syscalls >= 0 && co->srv.verbs_syscalls >= 0) {
		r->verbs_syscalls_per_op =
			(double)(co->cli.verbs_syscalls + co->srv.verbs_syscalls) / per;
		r->crossings_per_op = r->syscalls_per_op - r->verbs_syscalls_per_op;
	} else {
		r->verbs_syscalls_per_op = r->crossings_per_op = -1;
	}
	/* Both sides on one machine see the same /proc/stat: count it once. */
	if (remote)
		r->sys_cpu_us_per_op = co->cli.sys_cpu_s >= 0 && co->srv.sys_cpu_s >= 0 && ops > 0
					       ? (co->cli.sys_cpu_s + co->srv.sys_cpu_s) * 1e6 / per
					       : -1;
	else
		r->sys_cpu_us_per_op =
			co->cli.sys_cpu_s >= 0 && ops > 0 ? co->cli.sys_cpu_s * 1e6 / per : -1;
	r->client_threads = co->cli_threads ? co->cli_threads : 1;
	for (uint32_t i = 0; i < r->client_threads && i < BENCH_MAX_THREADS; i++)
		r->client_thread_cpu_us_per_op[i] =
			ops > 0 ? co->cli_thread_cpu_s[i] * 1e6 / per : 0;
	r->repeat = 1;
	r->rep_p50[0] = r->p50;
	r->rep_ops[0] = r->ops_per_s;
	r->rep_cpu[0] = r->cpu_us_per_op;
	if (co->cli.elapsed_s > 0 && co->srv.elapsed_s > 0)
		r->cpu_pct_per_side = 50.0 * (co->cli.cpu_s / co->cli.elapsed_s +
					      co->srv.cpu_s / co->srv.elapsed_s);
	r->wakeups_per_op = (double)(co->cli.wakeups + co->srv.wakeups) / per;
	if (co->cli.wakeups + co->srv.wakeups > 0)
		r->wcs_per_wakeup = (double)(co->cli.wcs + co->srv.wcs) /
				    (double)(co->cli.wakeups + co->srv.wakeups);
	r->posts_per_op = (double)(co->cli.posts + co->srv.posts) / per;
	r->chains_per_op = (double)(co->cli.chains + co->srv.chains) / per;
	r->wrs_per_chain = per_chain(co->cli.wrs + co->srv.wrs, co->cli.chains + co->srv.chains);
	r->cli_wrs_per_chain = per_chain(co->cli.wrs, co->cli.chains);
	r->srv_wrs_per_chain = per_chain(co->srv.wrs, co->srv.chains);
	r->cli_cpu_us_per_op = ops > 0 ? co->cli.cpu_s * 1e6 / per : 0;
	r->srv_cpu_us_per_op = ops > 0 ? co->srv.cpu_s * 1e6 / per : 0;
	r->threads = cfg->threads > 1 ? cfg->threads : 1;
	if (co->grp.threads == r->threads && r->threads <= BENCH_MAX_THREADS) {
		/* A group's CPU per message it echoed. */
		r->ngroups = r->threads;
		for (uint32_t i = 0; i < r->ngroups; i++) {
			r->group_conns[i] = co->grp.conns[i];
			r->group_cpu_us_per_op[i] =
				co->grp.ops[i] ? co->grp.cpu_s[i] * 1e6 / (double)co->grp.ops[i]
					       : 0;
		}
	} else if (r->threads == 1) {
		/* One thread serves every connection: the server side's figures. */
		r->ngroups = 1;
		r->group_conns[0] = cfg->conns;
		r->group_cpu_us_per_op[0] = r->srv_cpu_us_per_op;
	}
	if (workload_mixed(cfg->wl) && co->cli.elapsed_s > 0)
		r->file_mb_per_s = (double)co->file_bytes / 1e6 / co->cli.elapsed_s;
	r->file_most = co->file_most;
	r->file_sc_per_read = co->file_reads ? (double)co->file_calls / (double)co->file_reads : -1;
	r->file_iowq_pct = -1;
	if (workload_mixed(cfg->wl) && co->file_iowq >= 0 && co->file_reads > 0)
		r->file_iowq_pct = co->file_iowq >= (int64_t)co->file_reads
					   ? 100
					   : 100.0 * (double)co->file_iowq / (double)co->file_reads;
}

static double dist(double a, double b)
{
	return a > b ? a - b : b - a;
}

static double median_of(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Every figure the median over the runs (each run's own values kept for
 * paired ratios); the CDF of the run whose p50 is the median's nearest. */
void reduce_repeats(const struct result *runs, int n, struct result *out)
{
	static const size_t fields[] = {
		offsetof(struct result, p50),
		offsetof(struct result, p99),
		offsetof(struct result, p999),
		offsetof(struct result, max),
		offsetof(struct result, ops_per_s),
		offsetof(struct result, cpu_us_per_op),
		offsetof(struct result, ctx_per_op),
		offsetof(struct result, sys_cpu_us_per_op),
		offsetof(struct result, cpu_pct_per_side),
		offsetof(struct result, file_mb_per_s),
		offsetof(struct result, file_iowq_pct),
		offsetof(struct result, wcs_per_wakeup),
		offsetof(struct result, wakeups_per_op),
		offsetof(struct result, posts_per_op),
		offsetof(struct result, chains_per_op),
		offsetof(struct result, wrs_per_chain),
		offsetof(struct result, cli_wrs_per_chain),
		offsetof(struct result, srv_wrs_per_chain),
		offsetof(struct result, cli_cpu_us_per_op),
		offsetof(struct result, srv_cpu_us_per_op),
	};
	double v[BENCH_MAX_REPEAT];
	int best = 0;

	if (n > BENCH_MAX_REPEAT)
		n = BENCH_MAX_REPEAT;
	*out = runs[0];
	if (n <= 1)
		return;
	for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
		for (int i = 0; i < n; i++)
			memcpy(&v[i], (const char *)&runs[i] + fields[f], sizeof(double));
		memcpy((char *)out + fields[f], &(double){median_of(v, n)}, sizeof(double));
	}
	for (uint32_t g = 0; g < out->ngroups; g++) {
		for (int i = 0; i < n; i++)
			v[i] = runs[i].group_cpu_us_per_op[g];
		out->group_cpu_us_per_op[g] = median_of(v, n);
	}
	for (uint32_t t = 0; t < out->client_threads && t < BENCH_MAX_THREADS; t++) {
		for (int i = 0; i < n; i++)
			v[i] = runs[i].client_thread_cpu_us_per_op[t];
		out->client_thread_cpu_us_per_op[t] = median_of(v, n);
	}
	for (int i = 0; i < n; i++) {
		out->rep_p50[i] = runs[i].p50;
		out->rep_ops[i] = runs[i].ops_per_s;
		out->rep_cpu[i] = runs[i].cpu_us_per_op;
		if (dist(runs[i].p50, out->p50) < dist(runs[best].p50, out->p50))
			best = i;
	}
	memcpy(out->cdf, runs[best].cdf, sizeof(out->cdf));
	out->repeat = (uint32_t)n;
}

static struct client_out *out_map(const struct bench_cfg *cfg, size_t *len)
{
	long n = cfg->wl == W_IDLE ? 0 : cfg->iters;
	struct client_out *co;

	*len = sizeof(*co) + (size_t)n * sizeof(double);
	co = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return co == MAP_FAILED ? NULL : co;
}

static pid_t start_client(const struct bench_cfg *cfg, struct client_out *co)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(client_run(cfg, co) ? 1 : 0);
	return pid;
}

static int finish(const struct bench_cfg *cfg, struct client_out *co, int cli, int srv,
		  double deadline, bool remote, struct result *r)
{
	if (cli == 0 && srv == 0) {
		reduce(cfg, co, remote, r);
		return 0;
	}
	if (cli == -1 && now_us() > deadline) {
		fprintf(stderr, "ringrdma-bench: %s %s timed out\n", strategy_name(cfg->strat),
			workload_name(cfg->wl));
		return -ETIMEDOUT;
	}
	/* A failed client's server was killed: its status says nothing. */
	if (cli == 0)
		fprintf(stderr, "ringrdma-bench: %s %s: the server side failed\n",
			strategy_name(cfg->strat), workload_name(cfg->wl));
	else if (co->err[0])
		fprintf(stderr, "ringrdma-bench: %s %s: %s\n", strategy_name(cfg->strat),
			workload_name(cfg->wl), co->err);
	else
		fprintf(stderr, "ringrdma-bench: %s %s: the client failed (status %d)\n",
			strategy_name(cfg->strat), workload_name(cfg->wl), cli);
	return co->rc ? co->rc : -EIO;
}

int run_local(const struct bench_cfg *cfg_in, struct result *r, int timeout_s)
{
	struct bench_cfg cfg = *cfg_in;
	size_t len;
	struct client_out *co = out_map(&cfg, &len);
	double deadline = now_us() + (timeout_s + cfg.idle_ms / 1000.0) * 1e6;
	int p[2], rc, cli_status = -1, srv_status;
	uint16_t port = 0;
	pid_t srv, cli;

	if (!co)
		return -ENOMEM;
	if (pipe(p)) {
		munmap(co, len);
		return -errno;
	}
	fflush(NULL);
	srv = fork();
	if (srv == 0) {
		struct bside s;

		close(p[0]);
		side_trace = &co->srv_at;
		group_out = &co->grp;
		rc = server_run_one(&s, cfg.addr, 0, p[1], &cfg);
		if (rc)
			fprintf(stderr, "ringrdma-bench server (%s): %s\n",
				strategy_name(cfg.strat), strerror(-rc));
		side_phase(PH_CLOSE);
		side_close(&s);
		_exit(rc ? 1 : 0);
	}
	close(p[1]);
	if (srv < 0 || read(p[0], &port, sizeof(port)) != sizeof(port) || !port) {
		close(p[0]);
		if (srv > 0)
			reap(srv, deadline, "server", &co->srv_at);
		munmap(co, len);
		return -EIO;
	}
	close(p[0]);
	cfg.port = port;
	cli = start_client(&cfg, co);
	if (cli > 0)
		cli_status = reap(cli, deadline, "client", &co->cli_at);
	if (cli_status != 0) {
		if (now_us() > deadline)
			describe("server", srv, &co->srv_at);
		kill(srv, SIGKILL);
	}
	srv_status = reap(srv, deadline, "server", cli_status ? NULL : &co->srv_at);
	rc = finish(&cfg, co, cli_status, srv_status, deadline, false, r);
	munmap(co, len);
	return rc;
}

/* Client only: the server is `ringrdma-bench --server` on another host. */
int run_remote(const struct bench_cfg *cfg, struct result *r, int timeout_s)
{
	size_t len;
	struct client_out *co = out_map(cfg, &len);
	double deadline = now_us() + (timeout_s + cfg->idle_ms / 1000.0) * 1e6;
	int rc, status = -1;
	pid_t cli;

	if (!co)
		return -ENOMEM;
	fflush(NULL);
	cli = start_client(cfg, co);
	if (cli > 0)
		status = reap(cli, deadline, "client", &co->cli_at);
	rc = finish(cfg, co, status, 0, deadline, true, r);
	munmap(co, len);
	return rc;
}

int serve_forever(const char *addr, uint16_t port)
{
	printf("ringrdma-bench: serving runs on %s:%u\n", addr, port);
	fflush(stdout);
	for (;;) {
		int status;
		pid_t pid = fork();

		if (pid < 0)
			return -errno;
		if (pid == 0) {
			struct bside s;
			int rc = server_run_one(&s, addr, port, -1, NULL);
			bool listened = s.listening;

			if (rc)
				fprintf(stderr, "ringrdma-bench server: %s: %s\n",
					listened ? "run failed" : "cannot listen", strerror(-rc));
			side_close(&s);
			_exit(rc ? (listened ? 1 : 3) : 0);
		}
		if (waitpid(pid, &status, 0) < 0)
			return -errno;
		/* A bind that fails at once (address not local, port taken)
		 * would fail again: stop rather than spin. */
		if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
			return -EADDRNOTAVAIL;
	}
}
