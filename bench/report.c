// SPDX-License-Identifier: MIT
/*
 * Results out: a table for the terminal, JSON and CSV with one record per
 * (strategy, workload, parameters), and a gnuplot PNG: latency CDFs of the
 * pingpong runs and CPU per operation against median latency.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

static const char *extra_name(const struct result *r)
{
	if (r->cfg.wl == W_IDLE)
		return "cpu%/side";
	if (r->cfg.wl == W_MIXED)
		return "file MB/s";
	return "";
}

void report_table(FILE *out, const struct result *r, int n)
{
	enum workload last = W_COUNT;

	for (int i = 0; i < n; i++) {
		const struct result *x = &r[i];

		if (x->cfg.wl != last) {
			fprintf(out,
				"\n%-10s %-9s %-9s %6s %4s %5s %3s %9s %9s %9s %9s %9s %9s %8s %7s "
				"%7s %s\n",
				"strategy", "workload", "op", "size", "qd", "conns", "thr",
				"p50 us", "p99 us", "p99.9 us", "max us", "ops/s", "cpu us/op",
				"sysc/op", "csw/op", "wc/wake", extra_name(x));
			last = x->cfg.wl;
		}
		fprintf(out, "%-10s %-9s %-9s %6u %4u %5u %3u ", x->name, workload_name(x->cfg.wl),
			op_name(x->cfg.op), x->cfg.msg_size, x->cfg.qd, x->cfg.conns,
			x->threads ? x->threads : 1);
		if (x->has_latency)
			fprintf(out, "%9.1f %9.1f %9.1f %9.1f ", x->p50, x->p99, x->p999, x->max);
		else
			fprintf(out, "%9s %9s %9s %9s ", "-", "-", "-", "-");
		if (x->reference) {
			fprintf(out, "%9s %9s %8s %7s %7s ", "-", "-", "-", "-", "-");
			if (x->cfg.wl == W_MIXED)
				fprintf(out, "%.1f (pread alone, no RDMA)\n", x->file_mb_per_s);
			else
				fprintf(out, "(perftest: one-way x2)\n");
			continue;
		}
		if (x->cfg.wl == W_IDLE)
			fprintf(out, "%9s %9s %8s %7s %7s %.2f\n", "-", "-", "-", "-", "-",
				x->cpu_pct_per_side);
		else {
			fprintf(out, "%9.0f %9.1f ", x->ops_per_s, x->cpu_us_per_op);
			if (x->syscalls_known)
				fprintf(out, "%8.2f", x->syscalls_per_op);
			else
				fprintf(out, "%8s", "n/a");
			fprintf(out, " %7.2f", x->ctx_per_op);
			if (x->wcs_per_wakeup > 0)
				fprintf(out, " %7.1f", x->wcs_per_wakeup);
			else
				fprintf(out, " %7s", "-");
			if (x->cfg.wl == W_MIXED)
				fprintf(out, " %.1f", x->file_mb_per_s);
			if (x->threads > 1 && x->ngroups) {
				fprintf(out, " groups");
				for (uint32_t g = 0; g < x->ngroups; g++)
					fprintf(out, "%s%u", g ? "/" : " ", x->group_conns[g]);
			}
			fputc('\n', out);
		}
	}
}

/* Hybrid's window; "" for the other strategies and reference rows. */
static const char *spin_name(const struct result *x)
{
	if (x->reference || x->cfg.strat != S_HYBRID)
		return "";
	return x->cfg.spin_fixed ? "fixed" : "adaptive";
}

/* Whether bridges could read channels through the ring; null where no
 * bridge waits (busy, thread, epoll, reference rows). */
static const char *ring_read_json(const struct result *x)
{
	if (x->reference || (x->cfg.strat != S_URING && x->cfg.strat != S_HYBRID))
		return "null";
	return x->cfg.ring_read ? "true" : "false";
}

static const char *spin_json(const struct result *x)
{
	const char *n = spin_name(x);

	return !*n ? "null" : x->cfg.spin_fixed ? "\"fixed\"" : "\"adaptive\"";
}

/* "null" for what a record does not have. */
static void num(FILE *f, const char *key, bool have, double v, const char *sep)
{
	if (have && isfinite(v))
		fprintf(f, "\"%s\": %.3f%s", key, v, sep);
	else
		fprintf(f, "\"%s\": null%s", key, sep);
}

/* The groups' connections and CPU per operation: JSON arrays, or null. */
static void groups_json(FILE *f, const struct result *x, bool ops)
{
	if (!x->ngroups) {
		fprintf(f, "\"group_conns\": null, \"group_cpu_us_per_op\": null, ");
		return;
	}
	fprintf(f, "\"group_conns\": [");
	for (uint32_t g = 0; g < x->ngroups; g++)
		fprintf(f, "%s%u", g ? ", " : "", x->group_conns[g]);
	fprintf(f, "], \"group_cpu_us_per_op\": ");
	if (!ops) {
		fprintf(f, "null, ");
		return;
	}
	fprintf(f, "[");
	for (uint32_t g = 0; g < x->ngroups; g++)
		fprintf(f, "%s%.3f", g ? ", " : "", x->group_cpu_us_per_op[g]);
	fprintf(f, "], ");
}

/* The same for CSV: values joined by ';', or empty. */
static void groups_csv(FILE *f, const struct result *x, bool ops)
{
	for (uint32_t g = 0; g < x->ngroups; g++)
		fprintf(f, "%s%u", g ? ";" : "", x->group_conns[g]);
	fputc(',', f);
	for (uint32_t g = 0; ops && g < x->ngroups; g++)
		fprintf(f, "%s%.3f", g ? ";" : "", x->group_cpu_us_per_op[g]);
	fputc(',', f);
}

int report_json(const char *path, const struct result *r, int n)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	fprintf(f, "[\n");
	for (int i = 0; i < n; i++) {
		const struct result *x = &r[i];
		bool ops = x->has_latency && !x->reference, idle = x->cfg.wl == W_IDLE;

		fprintf(f,
			"  {\"strategy\": \"%s\", \"workload\": \"%s\", \"op\": \"%s\", "
			"\"msg_size\": %u, \"qd\": %u, \"conns\": %u, \"iters\": %ld, "
			"\"idle_ms\": %u, \"spin_us\": %u, \"spin\": %s, \"ring_read\": %s, "
			"\"signal_every\": %u, \"reference\": %s, \"threads\": %u, ",
			x->name, workload_name(x->cfg.wl), op_name(x->cfg.op), x->cfg.msg_size,
			x->cfg.qd, x->cfg.conns, idle ? 0 : x->cfg.iters, idle ? x->cfg.idle_ms : 0,
			x->cfg.spin_us, spin_json(x), ring_read_json(x), x->cfg.signal_every,
			x->reference ? "true" : "false", x->threads ? x->threads : 1);
		groups_json(f, x, ops);
		num(f, "p50_us", x->has_latency, x->p50, ", ");
		num(f, "p99_us", x->has_latency, x->p99, ", ");
		num(f, "p999_us", x->has_latency, x->p999, ", ");
		num(f, "max_us", x->has_latency, x->max, ", ");
		num(f, "ops_per_s", ops, x->ops_per_s, ", ");
		num(f, "cpu_us_per_op", ops, x->cpu_us_per_op, ", ");
		num(f, "client_cpu_us_per_op", ops, x->cli_cpu_us_per_op, ", ");
		num(f, "server_cpu_us_per_op", ops, x->srv_cpu_us_per_op, ", ");
		num(f, "syscalls_per_op", ops && x->syscalls_known, x->syscalls_per_op, ", ");
		num(f, "ctx_switches_per_op", ops, x->ctx_per_op, ", ");
		num(f, "wcs_per_wakeup", ops && x->wcs_per_wakeup > 0, x->wcs_per_wakeup, ", ");
		num(f, "cpu_pct_per_side", !x->reference, x->cpu_pct_per_side, ", ");
		num(f, "file_mb_per_s", x->cfg.wl == W_MIXED, x->file_mb_per_s, "");
		fprintf(f, "}%s\n", i + 1 < n ? "," : "");
	}
	fprintf(f, "]\n");
	return fclose(f) ? -errno : 0;
}

static void cell(FILE *f, bool have, double v, const char *sep)
{
	if (have && isfinite(v))
		fprintf(f, "%.3f%s", v, sep);
	else
		fprintf(f, "%s", sep);
}

int report_csv(const char *path, const struct result *r, int n)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	fprintf(f, "strategy,workload,op,msg_size,qd,conns,iters,idle_ms,spin_us,spin,ring_read,"
		   "signal_every,"
		   "reference,threads,group_conns,group_cpu_us_per_op,"
		   "p50_us,p99_us,p999_us,max_us,ops_per_s,cpu_us_per_op,client_cpu_us_per_op,"
		   "server_cpu_us_per_op,syscalls_per_op,"
		   "ctx_switches_per_op,wcs_per_wakeup,cpu_pct_per_side,file_mb_per_s\n");
	for (int i = 0; i < n; i++) {
		const struct result *x = &r[i];
		bool ops = x->has_latency && !x->reference, idle = x->cfg.wl == W_IDLE;

		const char *rread = ring_read_json(x);

		fprintf(f, "%s,%s,%s,%u,%u,%u,%ld,%u,%u,%s,%s,%u,%d,%u,", x->name,
			workload_name(x->cfg.wl), op_name(x->cfg.op), x->cfg.msg_size, x->cfg.qd,
			x->cfg.conns, idle ? 0 : x->cfg.iters, idle ? x->cfg.idle_ms : 0,
			x->cfg.spin_us, spin_name(x), strcmp(rread, "null") ? rread : "",
			x->cfg.signal_every, x->reference, x->threads ? x->threads : 1);
		groups_csv(f, x, ops);
		cell(f, x->has_latency, x->p50, ",");
		cell(f, x->has_latency, x->p99, ",");
		cell(f, x->has_latency, x->p999, ",");
		cell(f, x->has_latency, x->max, ",");
		cell(f, ops, x->ops_per_s, ",");
		cell(f, ops, x->cpu_us_per_op, ",");
		cell(f, ops, x->cli_cpu_us_per_op, ",");
		cell(f, ops, x->srv_cpu_us_per_op, ",");
		cell(f, ops && x->syscalls_known, x->syscalls_per_op, ",");
		cell(f, ops, x->ctx_per_op, ",");
		cell(f, ops && x->wcs_per_wakeup > 0, x->wcs_per_wakeup, ",");
		cell(f, !x->reference, x->cpu_pct_per_side, ",");
		cell(f, x->cfg.wl == W_MIXED, x->file_mb_per_s, "\n");
	}
	return fclose(f) ? -errno : 0;
}

static bool plotted(const struct result *x)
{
	return x->cfg.wl == W_PINGPONG && x->cfg.op == OP_SEND && x->has_latency && !x->reference;
}

/* gnuplot reads the script on stdin; the data sits in a temporary file. */
int report_plot(const char *path, const struct result *r, int n)
{
	char data[] = "/tmp/ringrdma-bench-plot.XXXXXX";
	int fd = mkstemp(data), k = 0, rc = 0, status;
	FILE *d, *gp;

	if (fd < 0)
		return -errno;
	d = fdopen(fd, "w");
	for (int i = 0; i < n && d; i++) {
		if (!plotted(&r[i]))
			continue;
		fprintf(d, "# %s\n", r[i].name);
		for (int q = 0; q <= BENCH_CDF_POINTS; q++)
			fprintf(d, "%.3f %.4f\n", r[i].cdf[q], (double)q / BENCH_CDF_POINTS);
		fprintf(d, "\n\n");
	}
	if (!d || fclose(d)) {
		unlink(data);
		return -EIO;
	}
	gp = popen("gnuplot 2>&1", "w");
	if (!gp) {
		unlink(data);
		return -errno;
	}
	fprintf(gp,
		"set terminal pngcairo size 1400,560 noenhanced\nset output '%s'\n"
		"set multiplot layout 1,2 title 'ringrdma-bench: pingpong SEND/RECV'\n"
		"set logscale x\nset grid\nset key bottom right\n"
		"set xlabel 'round trip (us)'\nset ylabel 'fraction of round trips'\n"
		"plot ",
		path);
	for (int i = 0; i < n; i++) {
		if (!plotted(&r[i]))
			continue;
		fprintf(gp, "%s'%s' index %d using 1:2 with lines lw 2 title '%s'", k ? ", " : "",
			data, k, r[i].name);
		k++;
	}
	if (!k)
		fprintf(gp, "NaN notitle");
	fprintf(gp, "\nunset logscale x\nset logscale xy\nset key top right\n"
		    "set xlabel 'p50 round trip (us)'\nset ylabel 'CPU us per round trip (both "
		    "sides)'\n"
		    "plot ");
	k = 0;
	for (int i = 0; i < n; i++) {
		if (!plotted(&r[i]))
			continue;
		fprintf(gp, "%s'-' using 1:2 with points pt 7 ps 2 title '%s'", k++ ? ", " : "",
			r[i].name);
	}
	if (!k)
		fprintf(gp, "NaN notitle");
	fprintf(gp, "\n");
	for (int i = 0; i < n; i++) {
		if (!plotted(&r[i]))
			continue;
		fprintf(gp, "%.3f %.3f\ne\n", r[i].p50, r[i].cpu_us_per_op);
	}
	fprintf(gp, "unset multiplot\n");
	status = pclose(gp);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status))
		rc = -EIO;
	unlink(data);
	return rc;
}

static const struct result *find(const struct result *r, int n, const char *name, enum workload wl)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(r[i].name, name) && r[i].cfg.wl == wl && r[i].cfg.op == OP_SEND &&
		    r[i].cfg.conns == 1 && r[i].threads <= 1)
			return &r[i];
	return NULL;
}

static void ratio(FILE *out, const char *what, const struct result *a, const struct result *b,
		  double va, double vb, const char *goal)
{
	if (a && b && vb > 0)
		fprintf(out, "  %-40s %6.2fx   (%s)\n", what, va / vb, goal);
}

/* The ratios the project's claims are about, when the runs are there. */
void report_targets(FILE *out, const struct result *r, int n)
{
	const struct result *busy = find(r, n, "busy", W_PINGPONG),
			    *thr = find(r, n, "thread", W_PINGPONG),
			    *ep = find(r, n, "epoll", W_PINGPONG),
			    *ur = find(r, n, "uring", W_PINGPONG),
			    *hy = find(r, n, "hybrid", W_PINGPONG),
			    *pt = find(r, n, "perftest", W_PINGPONG),
			    *pte = find(r, n, "perftest-e", W_PINGPONG),
			    *rb = find(r, n, "busy", W_RATE), *ru = find(r, n, "uring", W_RATE),
			    *rh = find(r, n, "hybrid", W_RATE), *ih = find(r, n, "hybrid", W_IDLE),
			    *iu = find(r, n, "uring", W_IDLE);

	fprintf(out, "\nratios (pingpong p50 round trip, send, one connection):\n");
	ratio(out, "uring / epoll", ur, ep, ur ? ur->p50 : 0, ep ? ep->p50 : 0, "<= 1");
	ratio(out, "uring / thread", ur, thr, ur ? ur->p50 : 0, thr ? thr->p50 : 0, "<= 1");
	ratio(out, "uring / perftest -e", ur, pte, ur ? ur->p50 : 0, pte ? pte->p50 : 0, "<= 1");
	ratio(out, "hybrid / busy", hy, busy, hy ? hy->p50 : 0, busy ? busy->p50 : 0, "<= 1.15");
	ratio(out, "hybrid / perftest", hy, pt, hy ? hy->p50 : 0, pt ? pt->p50 : 0, "<= 1.15");
	ratio(out, "rate: uring / busy ops/s", ru, rb, ru ? ru->ops_per_s : 0,
	      rb ? rb->ops_per_s : 0, ">= 0.95");
	ratio(out, "rate: hybrid / busy ops/s", rh, rb, rh ? rh->ops_per_s : 0,
	      rb ? rb->ops_per_s : 0, ">= 0.95");
	if (rb && rb->syscalls_known) {
		if (ru && ru->syscalls_known)
			fprintf(out, "  %-40s %+6.2f    (<= +0.1)\n",
				"rate: uring - busy syscalls/op",
				ru->syscalls_per_op - rb->syscalls_per_op);
		if (rh && rh->syscalls_known)
			fprintf(out, "  %-40s %+6.2f    (<= +0.1)\n",
				"rate: hybrid - busy syscalls/op",
				rh->syscalls_per_op - rb->syscalls_per_op);
	}
	if (ih)
		fprintf(out, "  %-40s %6.2f%%   (< 1%%)\n", "idle: hybrid CPU per side",
			ih->cpu_pct_per_side);
	if (iu)
		fprintf(out, "  %-40s %6.2f%%   (< 1%%)\n", "idle: uring CPU per side",
			iu->cpu_pct_per_side);
}
