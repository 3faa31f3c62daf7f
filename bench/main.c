// SPDX-License-Identifier: MIT
/*
 * ringrdma-bench: every way of waiting for RDMA completions, measured side
 * by side on the same workload and the same connection setup.
 *
 * This first version has the pingpong workload (SEND/RECV round trips at
 * queue depth 1) for the five strategies, run as two processes on one
 * machine (server and client), with figures per run: latency percentiles,
 * operations per second, CPU time, context switches and syscalls per
 * operation of both sides, the last counted by the kernel.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

struct result {
	enum strategy strat;
	uint32_t msg_size;
	long iters;
	double p50, p99, p999, max, ops_per_s;
	double cpu_us_per_op, syscalls_per_op, ctx_per_op;
	bool syscalls_known;
};

static long warmup_of(long iters)
{
	long w = iters / 10;

	return w < 100 ? 100 : w;
}

/* Server: echo every message back; figures over the timed part only. */
static int serve(const struct bench_cfg *cfg, int report_fd)
{
	struct bconn c;
	struct ibv_wc wc[16];
	struct side_figures f = {0};
	uint16_t port = 0;
	long total = warmup_of(cfg->iters) + cfg->iters, got = 0, sent = 0;
	int sc = -1, rc;

	rc = bconn_listen(&c, cfg, &port);
	if (write(report_fd, &port, sizeof(port)) != sizeof(port) || rc)
		return 1;
	rc = bconn_accept(&c);
	while (!rc && (got < total || sent < total)) {
		int n = bconn_wait(&c, wc, 16);

		if (n < 0) {
			rc = n;
			break;
		}
		for (int i = 0; i < n && !rc; i++) {
			uint32_t slot = (uint32_t)wc[i].wr_id;

			if (wc[i].status != IBV_WC_SUCCESS) {
				rc = -EIO;
			} else if (wc[i].opcode == IBV_WC_SEND) {
				sent++;
			} else {
				if (++got == warmup_of(cfg->iters) + 1)
					side_begin(&f, &sc);
				memcpy(c.buf + (size_t)(BENCH_MAX_QD) * cfg->msg_size,
				       c.buf + (size_t)slot * cfg->msg_size, wc[i].byte_len);
				rc = bconn_post_recv(&c, slot);
				if (!rc)
					rc = bconn_post_send(&c, 0, wc[i].byte_len);
			}
		}
	}
	side_end(&f, sc);
	if (write(report_fd, &f, sizeof(f)) != sizeof(f))
		rc = -EIO;
	bconn_close(&c);
	if (rc)
		fprintf(stderr, "ringrdma-bench server (%s): %s\n", strategy_name(cfg->strat),
			strerror(-rc));
	return rc ? 1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Client: round trips; each echo checked against what was sent. */
static int pingpong(const struct bench_cfg *cfg, struct side_figures *f, double *rtt,
		    double *elapsed_us)
{
	struct bconn c;
	struct ibv_wc wc[16];
	long warm = warmup_of(cfg->iters), total = warm + cfg->iters;
	uint8_t *out;
	double t0 = 0, start = 0;
	int sc = -1, rc = bconn_connect(&c, cfg);

	out = c.buf ? c.buf + (size_t)BENCH_MAX_QD * cfg->msg_size : NULL;
	for (long i = 0; !rc && i < total; i++) {
		int got_recv = 0, got_send = 0;

		if (i == warm) {
			side_begin(f, &sc);
			start = now_us();
		}
		memset(out, (int)(i & 0xff), cfg->msg_size);
		memcpy(out, &i, cfg->msg_size < sizeof(i) ? cfg->msg_size : sizeof(i));
		t0 = now_us();
		rc = bconn_post_send(&c, 0, cfg->msg_size);
		while (!rc && (!got_recv || !got_send)) {
			int n = bconn_wait(&c, wc, 16);

			if (n < 0) {
				rc = n;
				break;
			}
			for (int k = 0; k < n && !rc; k++) {
				uint32_t slot = (uint32_t)wc[k].wr_id;

				if (wc[k].status != IBV_WC_SUCCESS) {
					rc = -EIO;
				} else if (wc[k].opcode == IBV_WC_SEND) {
					got_send = 1;
				} else {
					got_recv = 1;
					if (wc[k].byte_len != cfg->msg_size ||
					    memcmp(c.buf + (size_t)slot * cfg->msg_size, out,
						   cfg->msg_size))
						rc = -EBADMSG;
					else
						rc = bconn_post_recv(&c, slot);
				}
			}
		}
		if (i >= warm)
			rtt[i - warm] = now_us() - t0;
	}
	*elapsed_us = now_us() - start;
	side_end(f, sc);
	bconn_close(&c);
	if (rc)
		fprintf(stderr, "ringrdma-bench client (%s): %s\n", strategy_name(cfg->strat),
			strerror(-rc));
	return rc;
}

/* What the client child hands back to the parent (shared memory). */
struct client_out {
	struct side_figures f;
	double elapsed_us;
	int rc;
	double rtt[];
};

/* Wait for a child, killing it at the deadline; its exit status or -1. */
static int reap(pid_t pid, double deadline_us)
{
	int status;

	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now_us() > deadline_us) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(10000);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/*
 * Server and client are both children: verbs contexts do not survive
 * fork(), so the parent never opens one. A watchdog kills a stuck run.
 */
static int run_one(struct bench_cfg cfg, struct result *r, int timeout_s)
{
	size_t len = sizeof(struct client_out) + (size_t)cfg.iters * sizeof(double);
	struct client_out *co = mmap(NULL, len, PROT_READ | PROT_WRITE,
				     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct side_figures fs = {0};
	double deadline = now_us() + timeout_s * 1e6;
	int p[2], rc = 0, srv_status, cli_status;
	uint16_t port = 0;
	pid_t srv, cli;

	if (co == MAP_FAILED || pipe(p))
		return -ENOMEM;
	srv = fork();
	if (srv < 0)
		return -errno;
	if (srv == 0) {
		close(p[0]);
		_exit(serve(&cfg, p[1]));
	}
	close(p[1]);
	if (read(p[0], &port, sizeof(port)) != sizeof(port)) {
		reap(srv, deadline);
		close(p[0]);
		munmap(co, len);
		return -EIO;
	}
	cfg.port = port;
	cli = fork();
	if (cli == 0) {
		co->rc = pingpong(&cfg, &co->f, co->rtt, &co->elapsed_us);
		_exit(co->rc ? 1 : 0);
	}
	cli_status = cli > 0 ? reap(cli, deadline) : -1;
	if (cli_status != 0)
		kill(srv, SIGKILL);
	else if (read(p[0], &fs, sizeof(fs)) != sizeof(fs))
		rc = -EIO;
	srv_status = reap(srv, deadline);
	close(p[0]);
	if (cli_status != 0 || srv_status != 0)
		rc = cli_status == -1 && now_us() > deadline ? -ETIMEDOUT : -EIO;
	if (!rc) {
		double *rtt = co->rtt;

		qsort(rtt, (size_t)cfg.iters, sizeof(double), cmp_double);
		*r = (struct result){.strat = cfg.strat, .msg_size = cfg.msg_size, .iters = cfg.iters};
		r->p50 = rtt[cfg.iters / 2];
		r->p99 = rtt[(cfg.iters * 99) / 100];
		r->p999 = rtt[(cfg.iters * 999) / 1000];
		r->max = rtt[cfg.iters - 1];
		r->ops_per_s = cfg.iters / (co->elapsed_us / 1e6);
		r->cpu_us_per_op = (co->f.cpu_s + fs.cpu_s) * 1e6 / (double)cfg.iters;
		r->ctx_per_op = (double)(co->f.ctx_switches + fs.ctx_switches) / (double)cfg.iters;
		r->syscalls_known = co->f.syscalls >= 0 && fs.syscalls >= 0;
		r->syscalls_per_op = r->syscalls_known ?
			(double)(co->f.syscalls + fs.syscalls) / (double)cfg.iters : -1;
	}
	munmap(co, len);
	return rc;
}

static void print_table(const struct result *r, int n)
{
	printf("%-8s %-9s %6s %9s %9s %9s %9s %10s %8s %9s %8s\n", "strategy", "workload",
	       "size", "p50 us", "p99 us", "p99.9 us", "max us", "ops/s", "cpu us/op",
	       "sysc/op", "csw/op");
	for (int i = 0; i < n; i++) {
		printf("%-8s %-9s %6u %9.1f %9.1f %9.1f %9.1f %10.0f %8.1f ", strategy_name(r[i].strat),
		       "pingpong", r[i].msg_size, r[i].p50, r[i].p99, r[i].p999, r[i].max,
		       r[i].ops_per_s, r[i].cpu_us_per_op);
		if (r[i].syscalls_known)
			printf("%9.2f", r[i].syscalls_per_op);
		else
			printf("%9s", "n/a");
		printf(" %8.2f\n", r[i].ctx_per_op);
	}
}

static int write_json(const char *path, const struct result *r, int n)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	fprintf(f, "[\n");
	for (int i = 0; i < n; i++) {
		fprintf(f,
			"  {\"strategy\": \"%s\", \"workload\": \"pingpong\", \"msg_size\": %u, "
			"\"qd\": 1, \"iters\": %ld, \"p50_us\": %.3f, \"p99_us\": %.3f, "
			"\"p999_us\": %.3f, \"max_us\": %.3f, \"ops_per_s\": %.1f, "
			"\"cpu_us_per_op\": %.3f, ",
			strategy_name(r[i].strat), r[i].msg_size, r[i].iters, r[i].p50, r[i].p99,
			r[i].p999, r[i].max, r[i].ops_per_s, r[i].cpu_us_per_op);
		if (r[i].syscalls_known)
			fprintf(f, "\"syscalls_per_op\": %.3f, ", r[i].syscalls_per_op);
		else
			fprintf(f, "\"syscalls_per_op\": null, ");
		fprintf(f, "\"ctx_switches_per_op\": %.3f}%s\n", r[i].ctx_per_op,
			i + 1 < n ? "," : "");
	}
	fprintf(f, "]\n");
	return fclose(f) ? -errno : 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: ringrdma-bench [--strategies LIST] [--size BYTES] [--iters N] [--spin-us US]\n"
		"                      [--addr ADDR] [--json FILE] [--quick] [--timeout SECS]\n"
		"  LIST: comma-separated of busy,thread,epoll,uring,hybrid (default: all)\n"
		"  ADDR: an address of the local RDMA device (default: $RR_TEST_ADDR or\n"
		"        $RDMA_LAB_ADDR); without a device, run it through tools/rdma-lab\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"strategies", required_argument, NULL, 's'}, {"size", required_argument, NULL, 'S'},
		{"iters", required_argument, NULL, 'n'},      {"spin-us", required_argument, NULL, 'w'},
		{"addr", required_argument, NULL, 'a'},       {"json", required_argument, NULL, 'j'},
		{"quick", no_argument, NULL, 'q'},            {"help", no_argument, NULL, 'h'},
		{"timeout", required_argument, NULL, 't'},
		{NULL, 0, NULL, 0}};
	struct bench_cfg cfg = {.msg_size = 64, .iters = 20000, .spin_us = 50};
	char *list = NULL, *tok, *save = NULL;
	const char *json = NULL;
	struct result res[S_COUNT];
	enum strategy order[S_COUNT];
	int nstrat = 0, nres = 0, opt, failed = 0, timeout_s = 300;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 's': list = optarg; break;
		case 'S': cfg.msg_size = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'n': cfg.iters = strtol(optarg, NULL, 10); break;
		case 'w': cfg.spin_us = (unsigned int)strtoul(optarg, NULL, 10); break;
		case 'a': cfg.addr = optarg; break;
		case 'j': json = optarg; break;
		case 'q': cfg.iters = 2000; break;
		case 't': timeout_s = atoi(optarg); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (cfg.msg_size < sizeof(long) || cfg.msg_size > BENCH_MAX_MSG || cfg.iters < 10 ||
	    cfg.spin_us < 1 || timeout_s < 1 || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (!cfg.addr)
		cfg.addr = getenv("RR_TEST_ADDR");
	if (!cfg.addr)
		cfg.addr = getenv("RDMA_LAB_ADDR");
	if (!cfg.addr) {
		fprintf(stderr, "ringrdma-bench: no RDMA address: give --addr, or run it in the lab:\n"
				"  tools/rdma-lab run -- build/bench/ringrdma-bench\n");
		return 2;
	}
	if (list) {
		for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (nstrat == S_COUNT || strategy_parse(tok, &order[nstrat])) {
				fprintf(stderr, "ringrdma-bench: unknown strategy '%s'\n", tok);
				return 2;
			}
			nstrat++;
		}
	} else {
		for (int i = 0; i < S_COUNT; i++)
			order[nstrat++] = (enum strategy)i;
	}
	for (int i = 0; i < nstrat; i++) {
		int rc;

		cfg.strat = order[i];
		rc = run_one(cfg, &res[nres], timeout_s);
		if (rc) {
			fprintf(stderr, "ringrdma-bench: %s failed: %s\n", strategy_name(cfg.strat),
				strerror(-rc));
			failed = 1;
			continue;
		}
		nres++;
	}
	print_table(res, nres);
	if (json) {
		int rc = write_json(json, res, nres);

		if (rc) {
			fprintf(stderr, "ringrdma-bench: %s: %s\n", json, strerror(-rc));
			failed = 1;
		}
	}
	return failed ? 1 : 0;
}
