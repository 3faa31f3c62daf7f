// SPDX-License-Identifier: MIT
/*
 * ringrdma-bench: every way of waiting for RDMA completions, measured side
 * by side on the same workloads and the same connection setup.
 *
 * Each run is a server and a client process (on one host, or --server and
 * --client on two); figures cover both sides: latency percentiles,
 * operations per second, CPU time, context switches and kernel-counted
 * syscalls per operation.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"
#include "optab.h"

#define MAX_CONNS_LIST 16

struct opts {
	enum strategy strats[S_COUNT];
	int nstrat;
	bool all_strats; /* none named: the -ep ones where they say something */
	enum workload wls[W_COUNT];
	int nwl;
	enum op ops[OP_COUNT];
	int nop;
	uint32_t conns[MAX_CONNS_LIST];
	int nconns;
	uint32_t threads[MAX_CONNS_LIST];
	int nthreads;
	uint32_t file_qds[MAX_CONNS_LIST];
	int nfile_qd;
	uint32_t qd, msg_size, idle_ms;
	long iters; /* 0: per-workload defaults */
	unsigned int spin_us;
	bool spin_fixed, ring_read, post_now;
	unsigned int signal_every;
	bool quick, server, perftest, file_direct, no_count;
	uint32_t client_threads;
	int repeat;
	int timeout_s;
	const char *addr, *client, *json, *csv, *plot, *file, *file_dir, *dfile;
	uint16_t port;
};

static const struct optab bench_optab[];

static void usage(FILE *out)
{
	fputs("usage: ringrdma-bench [OPTIONS]\n", out);
	optab_usage(out, bench_optab, 0, 17);
	fputs("With no RDMA device, a ringrdma checkout's tools/bench-lab runs this in\n"
	      "its lab (Soft-RoCE under QEMU).\n",
	      out);
}

/* Parse a comma-separated list with `one`; -1 on a bad or long list. */
static int parse_list(const char *list, int max, int (*one)(const char *, void *), void *out,
		      size_t elem)
{
	char *save = NULL, *tok, *copy = strdup(list); /* argv stays as given */
	int n = 0;

	if (!copy)
		return -1;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == max || one(tok, (char *)out + (size_t)n * elem)) {
			fprintf(stderr, "ringrdma-bench: bad list item '%s'\n", tok);
			n = -1;
			break;
		}
		n++;
	}
	free(copy);
	return n > 0 ? n : -1;
}

static int one_strat(const char *t, void *o)
{
	int rc = strategy_parse(t, o);

	if (!rc && strategy_aio(*(enum strategy *)o) && !bench_has_aio()) {
		fprintf(stderr,
			"ringrdma-bench: %s: this ringrdma-bench was built without libaio "
			"(Debian: libaio-dev; install it, then meson setup --reconfigure)\n",
			t);
		return -1;
	}
	return rc;
}
static int one_wl(const char *t, void *o)
{
	return workload_parse(t, o);
}
static int one_op(const char *t, void *o)
{
	return op_parse(t, o);
}
static int one_conns(const char *t, void *o)
{
	char *end;
	unsigned long v = strtoul(t, &end, 10);

	if (*end || !v || v > BENCH_MAX_CONNS)
		return -1;
	*(uint32_t *)o = (uint32_t)v;
	return 0;
}

static int one_file_qd(const char *t, void *o)
{
	char *end;
	unsigned long v = strtoul(t, &end, 10);

	if (*end || !v || v > FILER_MAX_DEPTH)
		return -1;
	*(uint32_t *)o = (uint32_t)v;
	return 0;
}

static int one_threads(const char *t, void *o)
{
	char *end;
	unsigned long v = strtoul(t, &end, 10);

	if (*end || !v || v > BENCH_MAX_THREADS)
		return -1;
	*(uint32_t *)o = (uint32_t)v;
	return 0;
}

static long num_arg(const char *s, long lo, long hi)
{
	char *end;
	long v = strtol(s, &end, 10);

	return (*end || v < lo || v > hi) ? LONG_MIN : v;
}

/* A list into its array and count; -1 (said) on a bad one. */
static int list_into(const char *arg, int max, int (*one)(const char *, void *), void *arr,
		     size_t elem, int *n)
{
	*n = parse_list(arg, max, one, arr, elem);
	return *n < 0 ? -1 : 0;
}

static int p_strats(const struct optab *d, const char *arg, void *ctx)
{
	struct opts *o = ctx;

	(void)d;
	return list_into(arg, S_COUNT, one_strat, o->strats, sizeof(o->strats[0]), &o->nstrat);
}

static int p_wls(const struct optab *d, const char *arg, void *ctx)
{
	struct opts *o = ctx;

	(void)d;
	return list_into(arg, W_COUNT, one_wl, o->wls, sizeof(o->wls[0]), &o->nwl);
}

static int p_ops(const struct optab *d, const char *arg, void *ctx)
{
	struct opts *o = ctx;

	(void)d;
	return list_into(arg, OP_COUNT, one_op, o->ops, sizeof(o->ops[0]), &o->nop);
}

static int p_conns(const struct optab *d, const char *arg, void *ctx)
{
	struct opts *o = ctx;

	(void)d;
	return list_into(arg, MAX_CONNS_LIST, one_conns, o->conns, sizeof(o->conns[0]), &o->nconns);
}

static int p_threads(const struct optab *d, const char *arg, void *ctx)
{
	struct opts *o = ctx;

	(void)d;
	return list_into(arg, MAX_CONNS_LIST, one_threads, o->threads, sizeof(o->threads[0]),
			 &o->nthreads);
}

static int p_file_qd(const struct optab *d, const char *arg, void *ctx)
{
	struct opts *o = ctx;

	(void)d;
	return list_into(arg, MAX_CONNS_LIST, one_file_qd, o->file_qds, sizeof(o->file_qds[0]),
			 &o->nfile_qd);
}

/* A number in the row's range into its field. */
static int p_num(const struct optab *d, const char *arg, void *o)
{
	long v = num_arg(arg, (long)d->min, (long)d->max);

	if (v == LONG_MIN) {
		fprintf(stderr, "ringrdma-bench: bad value '%s'\n", arg);
		return -1;
	}
	optab_store(d, o, (uint64_t)v);
	return 0;
}

static int p_help(const struct optab *d, const char *arg, void *o)
{
	(void)d, (void)arg, (void)o;
	usage(stdout);
	exit(0);
}

#define STR_(x)	       #x
#define STR(x)	       STR_(x)
#define MAX_CONNS_S    STR(BENCH_MAX_CONNS)
#define MAX_DEPTH_S    STR(FILER_MAX_DEPTH)
#define PORT_S	       STR(BENCH_DEFAULT_PORT)
#define F(f)	       OPTAB_FIELD(struct opts, f)
#define FLAG(f)	       .parse = optab_flag, F(f), .min = 1
#define PATH(f)	       .parse = optab_string, F(f)
#define NUM(f, lo, hi) .parse = p_num, F(f), .min = (lo), .max = (hi)

/*
 * Every option of ringrdma-bench, in the order of its usage: a new option
 * is a row here (and its place in docs/man/ringrdma-bench.1.md's
 * SYNOPSIS, which the test bench-options checks).
 */
static const struct optab bench_optab[] = {
	{"strategies", 0, "LIST", .parse = p_strats,
	 .help = "busy,thread,epoll,uring,hybrid,hybrid-plain,uring-ep,\n"
		 "hybrid-ep,busy-ep,epoll-aio (default: all; the -ep\n"
		 "ones, uring, hybrid and busy polling posting through\n"
		 "the library's endpoints, on pingpong, rate and conns\n"
		 "only, local runs only; epoll-aio, epoll reading its\n"
		 "file with Linux AIO and an eventfd, on mixed-direct\n"
		 "only)"},
	{"workloads", 0, "LIST", .parse = p_wls,
	 .help = "pingpong,rate,mixed,idle,conns,mixed-direct (default:\n"
		 "all; mixed-direct: mixed reading with O_DIRECT from a\n"
		 "file in --file-dir)"},
	{"ops", 0, "LIST", .parse = p_ops,
	 .help = "send,write_imm: pingpong runs each, the others the\n"
		 "first (default: send,write_imm)"},
	{"size", 0, "BYTES", NUM(msg_size, sizeof(struct msg_hdr), BENCH_MAX_MSG),
	 .help = "message size (default 64)"},
	{"qd", 0, "N", NUM(qd, 1, BENCH_MAX_QD), .help = "rate: messages in flight (default 64)"},
	{"conns", 0, "LIST", .parse = p_conns,
	 .help = "conns: connection counts, up to " MAX_CONNS_S " (default\n"
		 "1,16,64,256)"},
	{"threads", 0, "LIST", .parse = p_threads,
	 .help = "server threads: N > 1 places the connections on N\n"
		 "poll groups, each a bridge on its own ring and\n"
		 "thread; uring and hybrid (and -ep) only, local\n"
		 "runs only\n"
		 "(default 1: one thread, no groups)"},
	{"client-threads", 0, "N", NUM(client_threads, 1, BENCH_MAX_THREADS),
	 .help = "conns: the client's connections split over N threads,\n"
		 "each with its own CQ (and ring and bridge) (default 1)"},
	{"iters", 0, "N", NUM(iters, 1, 100000000),
	 .help = "round trips per run (default: 20000; rate 200000;\n"
		 "conns at least 64 a connection)"},
	{"repeat", 0, "N", NUM(repeat, 1, BENCH_MAX_REPEAT),
	 .help = "run each configuration N times, the strategies of one\n"
		 "configuration interleaved (A B, B A, ...); figures are\n"
		 "medians, ratios paired per round (default 1)"},
	{"no-count", 0, NULL, FLAG(no_count),
	 .help = "no syscall-counting pass (it runs after the timed ones)"},
	{"idle-ms", 0, "MS", NUM(idle_ms, 1, 3600000),
	 .help = "idle: how long to wait (default 10000)"},
	{"spin-us", 0, "US", NUM(spin_us, 1, 1000000),
	 .help = "hybrid: longest spin window (default 200)"},
	{"spin-fixed", 0, NULL, FLAG(spin_fixed),
	 .help = "hybrid: always spin --spin-us (default: adapt)"},
	{"ring-read", 0, NULL, FLAG(ring_read),
	 .help = "uring, hybrid: read completion channels through the\n"
		 "ring (RR_BRIDGE_RING_READ), not with read(2)"},
	{"post-now", 0, NULL, FLAG(post_now),
	 .help = "the -ep strategies: each post goes at once\n"
		 "(RR_EP_POST_NOW), no coalesced chains"},
	{"signal-every", 0, "N", NUM(signal_every, 1, 64),
	 .help = "one message send in N asks for a completion, in\n"
		 "every strategy (default 16; 1: all)"},
	{"quick", 0, NULL, FLAG(quick), .help = "a short run (minutes in the lab, not seconds)"},
	{"json", 0, "FILE", PATH(json)},
	{"csv", 0, "FILE", PATH(csv)},
	{"plot", 0, "FILE.png", PATH(plot), .help = "also write these"},
	{"with-perftest", 0, NULL, FLAG(perftest),
	 .help = "add perftest ib_send_lat (polling and -e) rows"},
	{"timeout", 0, "SECS", NUM(timeout_s, 1, 86400), .help = "watchdog per run (default 300)"},
	{"file", 0, "PATH", PATH(file),
	 .help = "mixed: the file to read (default: a temporary one)"},
	{"file-direct", 0, NULL, FLAG(file_direct),
	 .help = "mixed: read it with O_DIRECT (not on tmpfs)"},
	{"file-qd", 0, "LIST", .parse = p_file_qd,
	 .help = "mixed-direct: file reads in flight, up to " MAX_DEPTH_S " (default\n"
		 "1,4); above 1 only the strategies that can keep\n"
		 "several (uring, hybrid, the -ep ones, epoll-aio): a\n"
		 "blocking pread() has one"},
	{"file-dir", 0, "DIR", PATH(file_dir),
	 .help = "mixed-direct: where its file is made, on a block\n"
		 "device (default: $RDMA_LAB_DISK, the lab's disk, or\n"
		 "/var/tmp)"},
	{"addr", 0, "ADDR", PATH(addr),
	 .help = "a local RDMA device's address (default: $RR_TEST_ADDR)"},
	{"server", 0, NULL, FLAG(server),
	 .help = "serve runs for --client on --addr (port --port)"},
	{"client", 0, "ADDR", PATH(client),
	 .help = "run against `ringrdma-bench --server` at ADDR"},
	{"port", 0, "PORT", NUM(port, 1, 65535),
	 .help = "--server/--client port (default " PORT_S ")"},
	{"help", 0, NULL, .parse = p_help, .help = "this text"},
	{.name = NULL},
};

static int parse_args(int argc, char **argv, struct opts *o)
{
	uint64_t seen = 0;

	if (optab_parse(bench_optab, argc, argv, o, &seen))
		return -1;
	return optind == argc ? 0 : -1;
}

/* conns: at least CONN_ROUNDS round trips a connection, or --quick timed
 * 2000 at 256 connections, 8 each: under 0.1 s, the pipeline barely full,
 * and runs of one boot differed by 2x where they hardly differ at 16. */
#define CONN_ROUNDS 64

static long iters_for(const struct opts *o, enum workload w, unsigned int conns)
{
	long n;

	if (o->iters)
		return o->iters;
	if (w == W_RATE)
		return o->quick ? 20000 : 200000;
	n = o->quick ? 2000 : 20000;
	if (w == W_CONNS && n < (long)conns * CONN_ROUNDS)
		n = (long)conns * CONN_ROUNDS;
	return n;
}

/* Whether strategy st runs on workload wl at fqd file reads in flight. */
static bool planned(const struct opts *o, enum strategy st, enum workload wl, uint32_t fqd)
{
	if (o->all_strats && strategy_ep(st) && (workload_mixed(wl) || wl == W_IDLE))
		return false; /* waits as uring, hybrid do */
	if (o->all_strats && strategy_aio(st) && wl != W_MIXED_DIRECT)
		return false;			 /* epoll without a device to read */
	return fqd == 1 || strategy_file_qd(st); /* pread() has one in flight */
}

/* Every run the options ask for, in table order. */
static int plan(const struct opts *o, struct bench_cfg *runs, int max)
{
	int n = 0;

	for (int w = 0; w < o->nwl; w++) {
		enum workload wl = o->wls[w];
		int nops = wl == W_PINGPONG ? o->nop : 1;
		int ncon = wl == W_CONNS ? o->nconns : 1;
		int nfqd = wl == W_MIXED_DIRECT ? o->nfile_qd : 1;

		/* k: op, c: connections, f: file reads in flight, t: threads */
		for (int i = 0; i < nops * ncon * nfqd * o->nthreads; i++) {
			int t = i % o->nthreads, f = i / o->nthreads % nfqd;
			int c = i / o->nthreads / nfqd % ncon, k = i / o->nthreads / nfqd / ncon;
			uint32_t fqd = wl == W_MIXED_DIRECT ? o->file_qds[f] : 1;

			for (int s = 0; s < o->nstrat && n < max; s++) {
				struct bench_cfg *r;

				if (!planned(o, o->strats[s], wl, fqd))
					continue;
				r = &runs[n++];
				memset(r, 0, sizeof(*r));
				r->strat = o->strats[s];
				r->wl = wl;
				r->op = o->ops[k];
				r->msg_size = o->msg_size;
				r->qd = wl == W_RATE ? o->qd : 1;
				r->conns = wl == W_CONNS ? o->conns[c] : 1;
				r->threads = o->threads[t];
				r->client_threads = wl == W_CONNS ? o->client_threads : 1;
				r->iters = iters_for(o, wl, r->conns);
				r->idle_ms = wl == W_IDLE ? o->idle_ms : 0;
				r->spin_us = o->spin_us;
				r->spin_fixed = o->spin_fixed;
				r->ring_read = o->ring_read;
				r->post_now = o->post_now;
				r->signal_every = o->signal_every;
				r->timeout_s = (unsigned int)o->timeout_s;
				r->file_qd = fqd;
			}
		}
	}
	return n;
}

static void defaults(struct opts *o)
{
	static const uint32_t conns[] = {1, 16, 64, 256}, qconns[] = {1, 16, 256};

	if (!o->nstrat) {
		o->all_strats = true;
		for (int i = 0; i < S_COUNT; i++)
			if (!strategy_aio((enum strategy)i) || bench_has_aio())
				o->strats[o->nstrat++] = (enum strategy)i;
	}
	if (!o->nwl)
		for (int i = 0; i < W_COUNT; i++)
			o->wls[o->nwl++] = (enum workload)i;
	if (!o->nop) {
		o->ops[o->nop++] = OP_SEND;
		o->ops[o->nop++] = OP_WRITE_IMM;
	}
	if (!o->nconns) {
		const uint32_t *c = o->quick ? qconns : conns;
		int n = o->quick ? 3 : 4;

		for (int i = 0; i < n; i++)
			o->conns[o->nconns++] = c[i];
	}
	if (!o->nthreads)
		o->threads[o->nthreads++] = 1;
	if (!o->nfile_qd) {
		o->file_qds[o->nfile_qd++] = 1;
		o->file_qds[o->nfile_qd++] = 4;
	}
	if (!o->idle_ms)
		o->idle_ms = o->quick ? 2000 : 10000;
}

/* --threads N > 1: groups are bridges (uring, hybrid), and the server is
 * this process's child (a --server serves with one thread). */
static int check_threads(const struct opts *o, bool remote)
{
	uint32_t most = 1;

	for (int i = 0; i < o->nthreads; i++)
		most = o->threads[i] > most ? o->threads[i] : most;
	if (most == 1)
		return 0;
	for (int i = 0; i < o->nstrat; i++)
		if (!strategy_bridge(o->strats[i])) {
			fprintf(stderr,
				"ringrdma-bench: --threads %u: poll groups are ringrdma bridges, "
				"so only the uring and hybrid strategies (and their -ep forms) run "
				"on them; give --strategies uring,hybrid (run %s with one "
				"thread)\n",
				most, strategy_name(o->strats[i]));
			return -1;
		}
	if (o->server || remote) {
		fprintf(stderr, "ringrdma-bench: --threads > 1 runs the server in this process's "
				"child: not with --server or --client\n");
		return -1;
	}
	return 0;
}

/* The -ep strategies' server is this process's child: it sets up its
 * endpoints before the first request, from the run it knows. Named with
 * --client, refused; in the default list, left out. */
static int check_ep(struct opts *o, bool remote)
{
	int k = 0;

	for (int i = 0; i < o->nstrat; i++) {
		if (!strategy_ep(o->strats[i]) || !remote) {
			o->strats[k++] = o->strats[i];
			continue;
		}
		if (!o->all_strats) {
			fprintf(stderr,
				"ringrdma-bench: %s: its server is set up from the run it "
				"knows, so it runs locally only: not with --client\n",
				strategy_name(o->strats[i]));
			return -1;
		}
	}
	o->nstrat = k;
	return 0;
}

/* Many connections: as many descriptors and as much locked memory as the
 * hard limits allow. */
static void raise_limits(void)
{
	static const int which[] = {RLIMIT_NOFILE, RLIMIT_MEMLOCK};
	struct rlimit rl;

	for (int i = 0; i < 2; i++)
		if (!getrlimit(which[i], &rl) && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(which[i], &rl);
		}
}

static bool wants(const struct opts *o, enum workload w)
{
	for (int i = 0; i < o->nwl; i++)
		if (o->wls[i] == w)
			return true;
	return false;
}

static int write_outputs(const struct opts *o, const struct result *res, int n)
{
	int rc, failed = 0;

	if (o->json && (rc = report_json(o->json, res, n))) {
		fprintf(stderr, "ringrdma-bench: %s: %s\n", o->json, strerror(-rc));
		failed = 1;
	}
	if (o->csv && (rc = report_csv(o->csv, res, n))) {
		fprintf(stderr, "ringrdma-bench: %s: %s\n", o->csv, strerror(-rc));
		failed = 1;
	}
	if (o->plot && (rc = report_plot(o->plot, res, n))) {
		fprintf(stderr, "ringrdma-bench: %s: gnuplot failed\n", o->plot);
		failed = 1;
	}
	return failed;
}

/* Runs g.. that differ only by strategy: one configuration. */
static int group_len(const struct bench_cfg *runs, int g, int n)
{
	const struct bench_cfg *a = &runs[g];
	int k = 1;

	for (; g + k < n; k++) {
		const struct bench_cfg *b = &runs[g + k];

		if (a->wl != b->wl || a->op != b->op || a->msg_size != b->msg_size ||
		    a->qd != b->qd || a->conns != b->conns || a->threads != b->threads ||
		    a->client_threads != b->client_threads || a->iters != b->iters ||
		    a->file_qd != b->file_qd)
			break;
	}
	return k;
}

/*
 * One run, and a line that says so. On a terminal the line starts before
 * the run and ends after it; otherwise it is written whole afterwards, so
 * what the run's sides say (a watchdog's report, an error) begins a line
 * of its own where logs and tests look for it.
 */
static int run_one(struct bench_cfg *cfg, const struct opts *o, bool remote, struct result *r,
		   const char *what)
{
	bool tty = isatty(STDERR_FILENO);
	double t0 = now_us();
	char line[160];
	int rc;
	size_t n = (size_t)snprintf(line, sizeof(line), "  %-12s %-9s %-9s qd %-3u conns %-4u ",
				    strategy_name(cfg->strat), workload_name(cfg->wl),
				    op_name(cfg->op), cfg->qd, cfg->conns);

	if (cfg->threads > 1 && n < sizeof(line))
		n += (size_t)snprintf(line + n, sizeof(line) - n, "threads %u ", cfg->threads);
	if (cfg->wl == W_MIXED_DIRECT && n < sizeof(line))
		n += (size_t)snprintf(line + n, sizeof(line) - n, "file qd %u ", cfg->file_qd);
	if (cfg->client_threads > 1 && n < sizeof(line))
		n += (size_t)snprintf(line + n, sizeof(line) - n, "client threads %u ",
				      cfg->client_threads);
	if (n < sizeof(line))
		snprintf(line + n, sizeof(line) - n, "%s", what);
	if (tty)
		fprintf(stderr, "%s", line);
	rc = remote ? run_remote(cfg, r, o->timeout_s) : run_local(cfg, r, o->timeout_s);
	fprintf(stderr, "%s%s in %.1f s\n", tty ? "" : line, rc ? "failed" : "done",
		(now_us() - t0) / 1e6);
	return rc;
}

/*
 * One configuration's k strategies: o->repeat timed rounds, the order
 * reversed every other round (A B C, C B A, ...) so drift within a boot
 * falls on every strategy alike, with no syscall counter anywhere; then a
 * counting pass per strategy, with the counter held (syscalls_hold()), for
 * the syscall columns. Results appended at out; 1 if any run failed.
 */
static int run_group(const struct opts *o, struct bench_cfg *cfgs, int k, const char *addr,
		     bool remote, struct result *out, int *nres)
{
	struct result *reps = calloc((size_t)k * BENCH_MAX_REPEAT, sizeof(*reps)), cnt;
	bool *ok = calloc((size_t)k * BENCH_MAX_REPEAT, sizeof(*ok));
	int failed = 0;
	char what[32];

	if (!reps || !ok) {
		free(reps);
		free(ok);
		return 1;
	}
	for (int r = 0; r < o->repeat; r++)
		for (int j = 0; j < k; j++) {
			int i = r % 2 ? k - 1 - j : j;
			struct bench_cfg c = cfgs[i];

			c.addr = addr;
			c.port = o->port;
			c.file = o->file;
			c.file_direct = o->file_direct;
			c.dfile = o->dfile;
			what[0] = 0;
			if (o->repeat > 1)
				snprintf(what, sizeof(what), "round %d ", r + 1);
			ok[i * BENCH_MAX_REPEAT + r] =
				!run_one(&c, o, remote, &reps[i * BENCH_MAX_REPEAT + r], what);
			failed |= !ok[i * BENCH_MAX_REPEAT + r];
		}
	for (int i = 0; i < k; i++) {
		struct result good[BENCH_MAX_REPEAT], *x = &out[*nres];
		int n = 0;

		for (int r = 0; r < o->repeat; r++)
			if (ok[i * BENCH_MAX_REPEAT + r])
				good[n++] = reps[i * BENCH_MAX_REPEAT + r];
		if (!n)
			continue;
		reduce_repeats(good, n, x);
		/* Paired by round: a failed round is NaN in every list. */
		x->repeat = (uint32_t)o->repeat;
		for (int r = 0; r < o->repeat; r++) {
			const struct result *y = &reps[i * BENCH_MAX_REPEAT + r];
			bool have = ok[i * BENCH_MAX_REPEAT + r];

			x->rep_p50[r] = have ? y->p50 : NAN;
			x->rep_ops[r] = have ? y->ops_per_s : NAN;
			x->rep_cpu[r] = have ? y->cpu_us_per_op : NAN;
		}
		x->syscalls_known = false;
		x->syscalls_per_op = x->verbs_syscalls_per_op = x->crossings_per_op = -1;
		if (!o->no_count && cfgs[i].wl != W_IDLE) {
			struct bench_cfg c = cfgs[i];

			c.addr = addr;
			c.port = o->port;
			c.file = o->file;
			c.file_direct = o->file_direct;
			c.dfile = o->dfile;
			c.count_pass = true;
			/* Counts per operation settle quickly: a shorter pass. */
			if (c.iters > 8000)
				c.iters = c.iters / 4 > 8000 ? c.iters / 4 : 8000;
			/* The key flips here, with no side running. */
			syscalls_hold(true);
			if (run_one(&c, o, remote, &cnt, "count ") == 0) {
				x->syscalls_known = cnt.syscalls_known;
				x->syscalls_per_op = cnt.syscalls_per_op;
				x->verbs_syscalls_per_op = cnt.verbs_syscalls_per_op;
				x->crossings_per_op = cnt.crossings_per_op;
			} else {
				failed = 1;
			}
			syscalls_hold(false);
		}
		(*nres)++;
	}
	free(reps);
	free(ok);
	return failed;
}

int main(int argc, char **argv)
{
	struct opts o = {.qd = 64,
			 .repeat = 1,
			 .client_threads = 1,
			 .msg_size = 64,
			 .spin_us = 200,
			 .signal_every = 16,
			 .timeout_s = 300,
			 .port = BENCH_DEFAULT_PORT};
	char file_buf[PATH_MAX] = "", dfile_buf[PATH_MAX] = "";
	struct bench_cfg *runs;
	struct result *res, pt_before[2];
	int nruns, nres = 0, failed = 0, max, npt = 0;
	bool remote = false;
	const char *addr;

	/* For the test that holds the man page to the table. */
	if (argc == 2 && !strcmp(argv[1], "--list-options")) {
		optab_list(stdout, bench_optab, NULL, 0);
		return 0;
	}
	if (parse_args(argc, argv, &o)) {
		usage(stderr);
		return 2;
	}
	defaults(&o);
	if (check_threads(&o, o.client) || check_ep(&o, o.client)) {
		usage(stderr);
		return 2;
	}
	raise_limits();
	if (o.plot && system("command -v gnuplot >/dev/null 2>&1")) {
		fprintf(stderr, "ringrdma-bench: --plot needs gnuplot "
				"(Debian: apt-get install gnuplot-nox)\n");
		return 2;
	}
	addr = o.addr ? o.addr : getenv("RR_TEST_ADDR");
	if (o.server) {
		if (!addr) {
			fprintf(stderr, "ringrdma-bench: --server needs --addr ADDR\n");
			return 2;
		}
		return serve_forever(addr, o.port) ? 1 : 0;
	}
	if (o.client) {
		addr = o.client;
		remote = true;
	}
	if (!addr) {
		fputs("ringrdma-bench: no address: give --addr ADDR (a local RDMA device's\n"
		      "  IPv4 address; or set RR_TEST_ADDR), or --client ADDR of a --server.\n"
		      "  Without RDMA hardware, a ringrdma checkout runs it in its lab\n"
		      "  (Soft-RoCE under QEMU): tools/bench-lab [OPTIONS]\n",
		      stderr);
		return 2;
	}
	max = S_COUNT * (W_COUNT + OP_COUNT + 2 * MAX_CONNS_LIST) * o.nthreads + 4;
	runs = calloc((size_t)max, sizeof(*runs));
	res = calloc((size_t)max, sizeof(*res));
	if (!runs || !res)
		return 1;
	nruns = plan(&o, runs, max);
	if (wants(&o, W_MIXED)) {
		if (!o.file) {
			const char *tmp = getenv("TMPDIR");
			int rc = filer_make_file(tmp ? tmp : "/tmp", o.quick ? 16 << 20 : 64 << 20,
						 file_buf, sizeof(file_buf));

			if (rc) {
				fprintf(stderr,
					"ringrdma-bench: cannot create a file to read: %s\n",
					strerror(-rc));
				return 1;
			}
			o.file = file_buf;
		}
	}
	if (wants(&o, W_MIXED_DIRECT) && o.all_strats && !bench_has_aio())
		fprintf(stderr, "ringrdma-bench: built without libaio (Debian: libaio-dev): "
				"no epoll-aio rows\n");
	if (wants(&o, W_MIXED_DIRECT)) {
		/* Larger than the guest's page cache could matter: O_DIRECT
		 * never uses it, but the file's own writes go through it. */
		const char *dir = o.file_dir ? o.file_dir : getenv("RDMA_LAB_DISK");
		int rc = filer_make_file(dir ? dir : "/var/tmp", o.quick ? 64 << 20 : 256 << 20,
					 dfile_buf, sizeof(dfile_buf));

		if (rc) {
			fprintf(stderr, "ringrdma-bench: cannot create a file to read in %s: %s\n",
				dir ? dir : "/var/tmp", strerror(-rc));
			if (file_buf[0])
				unlink(file_buf);
			return 1;
		}
		o.dfile = dfile_buf;
	}
	printf("ringrdma-bench %s: %d runs against %s%s\n", rr_version(), nruns, addr,
	       remote ? " (remote server)" : "");
	fflush(stdout);
	if (o.perftest && !remote) {
		/* Before the runs and again after them: the lab drifts. */
		int n = perftest_rows(addr, o.msg_size, iters_for(&o, W_PINGPONG, 1), pt_before, 2);

		if (n < 0)
			failed = 1;
		npt = n < 0 ? 0 : n;
	}
	for (int g = 0; g < nruns;) {
		int k = group_len(runs, g, nruns);

		failed |= run_group(&o, &runs[g], k, addr, remote, res, &nres);
		g += k;
	}
	for (int w = W_MIXED; w == W_MIXED || w == W_MIXED_DIRECT;
	     w = w == W_MIXED ? W_MIXED_DIRECT : W_COUNT) {
		bool direct = w == W_MIXED_DIRECT || o.file_direct;
		const char *path = w == W_MIXED_DIRECT ? o.dfile : o.file;

		if (!wants(&o, (enum workload)w) || remote || nres >= max)
			continue;
		if (filer_only(path, direct, (enum workload)w, o.quick ? 1000 : 3000, &res[nres]) ==
		    0) {
			res[nres].cfg.msg_size = o.msg_size;
			res[nres].cfg.qd = res[nres].cfg.conns = 1;
			nres++;
		} else
			failed = 1;
	}
	if (file_buf[0])
		unlink(file_buf);
	if (dfile_buf[0])
		unlink(dfile_buf);
	if (npt) {
		int n = perftest_rows(addr, o.msg_size, iters_for(&o, W_PINGPONG, 1), &res[nres],
				      2);

		if (n == npt)
			perftest_merge(&res[nres], pt_before, n);
		else {
			/* No after: the before rows alone. */
			memcpy(&res[nres], pt_before, sizeof(pt_before[0]) * (size_t)npt);
			failed = 1;
		}
		nres += npt;
	}
	report_table(stdout, res, nres);
	report_targets(stdout, res, nres);
	failed |= write_outputs(&o, res, nres);
	free(runs);
	free(res);
	return failed ? 1 : 0;
}
