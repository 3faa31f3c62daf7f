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
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

static const char *extra_name(const struct result *r)
{
	if (r->cfg.wl == W_IDLE)
		return "cpu%/side";
	if (workload_mixed(r->cfg.wl))
		return "file MB/s, reads ran (% in io-wq), reads in flight, syscalls per read";
	return "";
}

/* Where a mixed row's file reads ran: "inline" in the thread that asked
 * (pread(), or issued within io_uring_enter), "io-wq" in io_uring's
 * workers, "both" between (more than a tenth each); NULL: unknown. */
static const char *reads_ran(const struct result *x)
{
	if (!workload_mixed(x->cfg.wl) || !(x->file_iowq_pct >= 0))
		return NULL;
	return x->file_iowq_pct < 10 ? "inline" : x->file_iowq_pct > 90 ? "io-wq" : "both";
}

/* A mixed row's file reads in flight (pread()'s rows and mixed: one). */
static uint32_t file_qd(const struct result *x)
{
	return x->cfg.file_qd ? x->cfg.file_qd : 1;
}

/* The running kernel's release, for every record. */
static const char *kernel_release(void)
{
	static struct utsname u;

	if (!u.release[0] && uname(&u))
		return "unknown";
	return u.release;
}

void report_table(FILE *out, const struct result *r, int n)
{
	enum workload last = W_COUNT;

	for (int i = 0; i < n; i++) {
		const struct result *x = &r[i];

		if (x->cfg.wl != last) {
			fprintf(out,
				"\n%-12s %-12s %-9s %6s %4s %5s %3s %9s %9s %9s %9s %9s %9s %9s "
				"%8s %7s %7s %7s %7s %8s %8s %s\n",
				"strategy", "workload", "op", "size", "qd", "conns", "thr",
				"p50 us", "p99 us", "p99.9 us", "max us", "ops/s", "cpu us/op",
				"sys us/op", "sysc/op", "kx/op", "csw/op", "wc/wake", "post/op",
				"chain/op", "wr/chain", extra_name(x));
			last = x->cfg.wl;
		}
		fprintf(out, "%-12s %-12s %-9s %6u %4u %5u %3u ", x->name, workload_name(x->cfg.wl),
			op_name(x->cfg.op), x->cfg.msg_size, x->cfg.qd, x->cfg.conns,
			x->threads ? x->threads : 1);
		if (x->has_latency)
			fprintf(out, "%9.1f %9.1f %9.1f %9.1f ", x->p50, x->p99, x->p999, x->max);
		else
			fprintf(out, "%9s %9s %9s %9s ", "-", "-", "-", "-");
		if (x->reference) {
			fprintf(out, "%9s %9s %9s %8s %7s %7s %7s %7s %8s %8s ", "-", "-", "-", "-",
				"-", "-", "-", "-", "-", "-");
			if (workload_mixed(x->cfg.wl))
				fprintf(out, "%.1f (pread alone, no RDMA)\n", x->file_mb_per_s);
			else
				fprintf(out, "(perftest: one-way x2)\n");
			continue;
		}
		if (x->cfg.wl == W_IDLE)
			fprintf(out, "%9s %9s %9s %8s %7s %7s %7s %7s %8s %8s %.2f\n", "-", "-",
				"-", "-", "-", "-", "-", "-", "-", "-", x->cpu_pct_per_side);
		else {
			fprintf(out, "%9.0f %9.1f ", x->ops_per_s, x->cpu_us_per_op);
			if (x->sys_cpu_us_per_op >= 0)
				fprintf(out, "%9.1f ", x->sys_cpu_us_per_op);
			else
				fprintf(out, "%9s ", "n/a");
			if (x->syscalls_known)
				fprintf(out, "%8.2f", x->syscalls_per_op);
			else
				fprintf(out, "%8s", "n/a");
			if (x->crossings_per_op >= 0)
				fprintf(out, " %7.2f", x->crossings_per_op);
			else
				fprintf(out, " %7s", "n/a");
			fprintf(out, " %7.2f", x->ctx_per_op);
			if (x->wcs_per_wakeup > 0)
				fprintf(out, " %7.1f", x->wcs_per_wakeup);
			else
				fprintf(out, " %7s", "-");
			fprintf(out, " %7.2f %8.2f", x->posts_per_op, x->chains_per_op);
			if (x->wrs_per_chain > 0)
				fprintf(out, " %8.2f", x->wrs_per_chain);
			else
				fprintf(out, " %8s", "-");
			if (workload_mixed(x->cfg.wl)) {
				fprintf(out, " %.1f", x->file_mb_per_s);
				if (reads_ran(x))
					fprintf(out, " %s %.0f%%", reads_ran(x), x->file_iowq_pct);
				fprintf(out, " qd %u", file_qd(x));
				if (x->file_sc_per_read >= 0)
					fprintf(out, " %.2f sysc/read", x->file_sc_per_read);
			}
			if (x->threads > 1 && x->ngroups) {
				fprintf(out, " groups");
				for (uint32_t g = 0; g < x->ngroups; g++)
					fprintf(out, "%s%u", g ? "/" : " ", x->group_conns[g]);
				fprintf(out, " cpu us/op");
				for (uint32_t g = 0; g < x->ngroups; g++)
					fprintf(out, "%s%.1f", g ? "/" : " ",
						x->group_cpu_us_per_op[g]);
			}
			if (x->client_threads > 1) {
				fprintf(out, " client threads cpu us/op");
				for (uint32_t t = 0; t < x->client_threads; t++)
					fprintf(out, "%s%.1f", t ? "/" : " ",
						x->client_thread_cpu_us_per_op[t]);
			}
			fputc('\n', out);
		}
	}
}

/* Hybrid's window; "" for the other strategies and reference rows. */
static const char *spin_name(const struct result *x)
{
	if (x->reference || (x->cfg.strat != S_HYBRID && x->cfg.strat != S_HYBRID_PLAIN &&
			     x->cfg.strat != S_HYBRID_EP))
		return "";
	return x->cfg.spin_fixed || x->cfg.strat == S_HYBRID_PLAIN ? "fixed" : "adaptive";
}

/* Whether bridges could read channels through the ring; null where no
 * bridge waits (busy, thread, epoll, reference rows). */
static const char *ring_read_json(const struct result *x)
{
	if (x->reference || !strategy_bridge(x->cfg.strat))
		return "null";
	return x->cfg.ring_read ? "true" : "false";
}

static const char *spin_json(const struct result *x)
{
	const char *n = spin_name(x);

	return !*n ? "null" : !strcmp(n, "fixed") ? "\"fixed\"" : "\"adaptive\"";
}

/* The -ep rows: whether their endpoints posted at once (--post-now). */
static const char *post_now_json(const struct result *x)
{
	if (!strategy_ep(x->cfg.strat))
		return "null";
	return x->cfg.post_now ? "true" : "false";
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

/* Each round's value of a figure, its least and most: "[min, max]". */
static bool range_of(const double *v, uint32_t n, double *lo, double *hi)
{
	bool any = false;

	for (uint32_t i = 0; i < n && i < BENCH_MAX_REPEAT; i++) {
		if (!isfinite(v[i]))
			continue;
		if (!any || v[i] < *lo)
			*lo = v[i];
		if (!any || v[i] > *hi)
			*hi = v[i];
		any = true;
	}
	return any;
}

static void range_json(FILE *f, const char *key, bool have, const double *v, uint32_t n)
{
	double lo = 0, hi = 0;

	if (have && range_of(v, n, &lo, &hi))
		fprintf(f, "\"%s\": [%.3f, %.3f], ", key, lo, hi);
	else
		fprintf(f, "\"%s\": null, ", key);
}

static void range_csv(FILE *f, bool have, const double *v, uint32_t n)
{
	double lo = 0, hi = 0;

	if (have && range_of(v, n, &lo, &hi))
		fprintf(f, "%.3f;%.3f", lo, hi);
	fputc(',', f);
}

static uint32_t repeat_of(const struct result *x)
{
	return x->repeat ? x->repeat : 1;
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
			"\"post_now\": %s, \"signal_every\": %u, \"reference\": %s, "
			"\"threads\": %u, \"kernel\": \"%s\", ",
			x->name, workload_name(x->cfg.wl), op_name(x->cfg.op), x->cfg.msg_size,
			x->cfg.qd, x->cfg.conns, idle ? 0 : x->cfg.iters, idle ? x->cfg.idle_ms : 0,
			x->cfg.spin_us, spin_json(x), ring_read_json(x), post_now_json(x),
			x->cfg.signal_every, x->reference ? "true" : "false",
			x->threads ? x->threads : 1, kernel_release());
		groups_json(f, x, ops);
		fprintf(f, "\"client_threads\": %u, \"client_thread_cpu_us_per_op\": ",
			x->client_threads ? x->client_threads : 1);
		if (ops) {
			for (uint32_t t = 0; t < x->client_threads; t++)
				fprintf(f, "%s%.3f", t ? ", " : "[",
					x->client_thread_cpu_us_per_op[t]);
			fprintf(f, x->client_threads ? "], " : "null, ");
		} else {
			fprintf(f, "null, ");
		}
		fprintf(f, "\"repeat\": %u, ", repeat_of(x));
		range_json(f, "p50_us_range", x->has_latency, x->rep_p50, repeat_of(x));
		range_json(f, "ops_per_s_range", ops, x->rep_ops, repeat_of(x));
		num(f, "p50_us", x->has_latency, x->p50, ", ");
		num(f, "p99_us", x->has_latency, x->p99, ", ");
		num(f, "p999_us", x->has_latency, x->p999, ", ");
		num(f, "max_us", x->has_latency, x->max, ", ");
		num(f, "ops_per_s", ops, x->ops_per_s, ", ");
		num(f, "cpu_us_per_op", ops, x->cpu_us_per_op, ", ");
		num(f, "client_cpu_us_per_op", ops, x->cli_cpu_us_per_op, ", ");
		num(f, "server_cpu_us_per_op", ops, x->srv_cpu_us_per_op, ", ");
		num(f, "sys_cpu_us_per_op", ops && x->sys_cpu_us_per_op >= 0, x->sys_cpu_us_per_op,
		    ", ");
		num(f, "syscalls_per_op", ops && x->syscalls_known, x->syscalls_per_op, ", ");
		num(f, "verbs_syscalls_per_op", ops && x->verbs_syscalls_per_op >= 0,
		    x->verbs_syscalls_per_op, ", ");
		num(f, "crossings_per_op", ops && x->crossings_per_op >= 0, x->crossings_per_op,
		    ", ");
		num(f, "ctx_switches_per_op", ops, x->ctx_per_op, ", ");
		num(f, "wcs_per_wakeup", ops && x->wcs_per_wakeup > 0, x->wcs_per_wakeup, ", ");
		num(f, "wakeups_per_op", ops, x->wakeups_per_op, ", ");
		num(f, "posts_per_op", ops, x->posts_per_op, ", ");
		num(f, "chains_per_op", ops, x->chains_per_op, ", ");
		num(f, "wrs_per_chain", ops && x->wrs_per_chain > 0, x->wrs_per_chain, ", ");
		num(f, "client_wrs_per_chain", ops && x->cli_wrs_per_chain > 0,
		    x->cli_wrs_per_chain, ", ");
		num(f, "server_wrs_per_chain", ops && x->srv_wrs_per_chain > 0,
		    x->srv_wrs_per_chain, ", ");
		num(f, "cpu_pct_per_side", !x->reference, x->cpu_pct_per_side, ", ");
		num(f, "file_mb_per_s", workload_mixed(x->cfg.wl), x->file_mb_per_s, ", ");
		if (workload_mixed(x->cfg.wl))
			fprintf(f, "\"file_qd\": %u, \"file_inflight_max\": %u, ", file_qd(x),
				x->file_most);
		else
			fprintf(f, "\"file_qd\": null, \"file_inflight_max\": null, ");
		num(f, "file_syscalls_per_read",
		    workload_mixed(x->cfg.wl) && x->file_sc_per_read >= 0, x->file_sc_per_read,
		    ", ");
		num(f, "file_iowq_pct", reads_ran(x) != NULL, x->file_iowq_pct, ", ");
		if (reads_ran(x))
			fprintf(f, "\"file_reads\": \"%s\"", reads_ran(x));
		else
			fprintf(f, "\"file_reads\": null");
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
	fprintf(f,
		"strategy,workload,op,msg_size,qd,conns,iters,idle_ms,spin_us,spin,ring_read,"
		"signal_every,"
		"reference,threads,group_conns,group_cpu_us_per_op,client_threads,"
		"client_thread_cpu_us_per_op,repeat,p50_us_range,ops_per_s_range,"
		"p50_us,p99_us,p999_us,max_us,ops_per_s,cpu_us_per_op,client_cpu_us_per_op,"
		"server_cpu_us_per_op,sys_cpu_us_per_op,syscalls_per_op,verbs_syscalls_per_op,"
		"crossings_per_op,"
		"ctx_switches_per_op,wcs_per_wakeup,wakeups_per_op,cpu_pct_per_side,file_mb_per_s,"
		"posts_per_op,chains_per_op,wrs_per_chain,client_wrs_per_chain,"
		"server_wrs_per_chain,kernel,file_iowq_pct,file_reads,file_qd,"
		"file_inflight_max,file_syscalls_per_read\n");
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
		fprintf(f, "%u,", x->client_threads ? x->client_threads : 1);
		for (uint32_t t = 0; ops && t < x->client_threads; t++)
			fprintf(f, "%s%.3f", t ? ";" : "", x->client_thread_cpu_us_per_op[t]);
		fprintf(f, ",%u,", repeat_of(x));
		range_csv(f, x->has_latency, x->rep_p50, repeat_of(x));
		range_csv(f, ops, x->rep_ops, repeat_of(x));
		cell(f, x->has_latency, x->p50, ",");
		cell(f, x->has_latency, x->p99, ",");
		cell(f, x->has_latency, x->p999, ",");
		cell(f, x->has_latency, x->max, ",");
		cell(f, ops, x->ops_per_s, ",");
		cell(f, ops, x->cpu_us_per_op, ",");
		cell(f, ops, x->cli_cpu_us_per_op, ",");
		cell(f, ops, x->srv_cpu_us_per_op, ",");
		cell(f, ops && x->sys_cpu_us_per_op >= 0, x->sys_cpu_us_per_op, ",");
		cell(f, ops && x->syscalls_known, x->syscalls_per_op, ",");
		cell(f, ops && x->verbs_syscalls_per_op >= 0, x->verbs_syscalls_per_op, ",");
		cell(f, ops && x->crossings_per_op >= 0, x->crossings_per_op, ",");
		cell(f, ops, x->ctx_per_op, ",");
		cell(f, ops && x->wcs_per_wakeup > 0, x->wcs_per_wakeup, ",");
		cell(f, ops, x->wakeups_per_op, ",");
		cell(f, !x->reference, x->cpu_pct_per_side, ",");
		cell(f, workload_mixed(x->cfg.wl), x->file_mb_per_s, ",");
		cell(f, ops, x->posts_per_op, ",");
		cell(f, ops, x->chains_per_op, ",");
		cell(f, ops && x->wrs_per_chain > 0, x->wrs_per_chain, ",");
		cell(f, ops && x->cli_wrs_per_chain > 0, x->cli_wrs_per_chain, ",");
		cell(f, ops && x->srv_wrs_per_chain > 0, x->srv_wrs_per_chain, ",");
		fprintf(f, "%s,", kernel_release());
		cell(f, reads_ran(x) != NULL, x->file_iowq_pct, ",");
		fprintf(f, "%s,", reads_ran(x) ? reads_ran(x) : "");
		if (workload_mixed(x->cfg.wl))
			fprintf(f, "%u,%u,", file_qd(x), x->file_most);
		else
			fprintf(f, ",,");
		cell(f, workload_mixed(x->cfg.wl) && x->file_sc_per_read >= 0, x->file_sc_per_read,
		     "\n");
	}
	return fclose(f) ? -errno : 0;
}

static bool plotted(const struct result *x)
{
	return x->cfg.wl == W_PINGPONG && x->cfg.op == OP_SEND && x->has_latency && !x->reference;
}

static const struct result *find_q(const struct result *r, int n, const char *name,
				   uint32_t file_qd);

/* gnuplot reads the script on stdin; the data sits in a temporary file. */
int report_plot(const char *path, const struct result *r, int n)
{
	static const char *const labels[] = {"ring, 4 in flight", "epoll + libaio, 4",
					     "epoll + pread, 1"};
	char data[] = "/tmp/ringrdma-bench-plot.XXXXXX";
	int fd = mkstemp(data), k = 0, rc = 0, status, ndev = 0;
	const struct result *cand[3] = {find_q(r, n, "uring", 4), find_q(r, n, "epoll-aio", 4),
					find_q(r, n, "epoll", 1)},
			    *dev[3], *idle = NULL;
	const char *dev_label[3];
	FILE *d, *gp;

	for (int i = 0; i < n; i++)
		if (!strcmp(r[i].name, "hybrid") && r[i].cfg.wl == W_IDLE)
			idle = &r[i];
	for (int i = 0; i < 3; i++)
		if (cand[i] && cand[i]->has_latency) {
			dev[ndev] = cand[i];
			dev_label[ndev++] = labels[i];
		}

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
		"set terminal pngcairo size %d,560 noenhanced\nset output '%s'\n"
		"set multiplot layout 1,%d title 'ringrdma-bench'\nset grid\n",
		ndev ? 2100 : 1400, path, ndev ? 3 : 2);
	if (ndev) {
		/* First what the library is for: the device row. */
		fprintf(gp,
			"set title 'mixed-direct: O_DIRECT reads beside a pingpong'\n"
			"set style fill solid 0.5\nset boxwidth 0.6\nset yrange [0:*]\n"
			"set xrange [-0.6:%d.6]\n"
			"set ylabel 'file MB/s (labels: RDMA round trip p50)'\nset xtics (",
			ndev - 1);
		for (int i = 0; i < ndev; i++)
			fprintf(gp, "%s'%s' %d", i ? ", " : "", dev_label[i], i);
		fprintf(gp, ")\nplot '-' using 1:2 with boxes notitle, "
			    "'-' using 1:2:3 with labels offset 0,1 notitle\n");
		for (int i = 0; i < ndev; i++)
			fprintf(gp, "%d %.3f\n", i, dev[i]->file_mb_per_s);
		fprintf(gp, "e\n");
		for (int i = 0; i < ndev; i++)
			fprintf(gp, "%d %.3f \"p50 %.0f us\"\n", i, dev[i]->file_mb_per_s,
				dev[i]->p50);
		fprintf(gp, "e\nunset title\nset xtics autofreq\nset autoscale\n");
	}
	fprintf(gp, "set title 'pingpong SEND/RECV'\nset logscale x\nset key bottom right\n"
		    "set xlabel 'round trip (us)'\nset ylabel 'fraction of round trips'\n"
		    "plot ");
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
		    "set title 'CPU per round trip");
	if (idle)
		fprintf(gp, "; idle, no traffic: hybrid %.2f%% CPU per side",
			idle->cpu_pct_per_side);
	fprintf(gp, "'\nset xlabel 'p50 round trip (us)'\nset ylabel 'CPU us per round trip "
		    "(both sides)'\n"
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
		    r[i].cfg.conns == 1 && r[i].threads <= 1 && r[i].client_threads <= 1)
			return &r[i];
	return NULL;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

enum fig { F_P50, F_OPS, F_FILE };

/* Each round's figure; NULL: the medians only (file MB/s). */
static const double *rounds(const struct result *x, enum fig f)
{
	return f == F_P50 ? x->rep_p50 : f == F_OPS ? x->rep_ops : NULL;
}

static double fig_of(const struct result *x, enum fig f)
{
	return f == F_P50 ? x->p50 : f == F_OPS ? x->ops_per_s : x->file_mb_per_s;
}

/* a's figure over b's: paired round by round where both ran the same
 * rounds (median, least and most of the ratios), else of the medians.
 * No goals here: they are the checkout's tools/bench-targets.txt. */
static void ratio(FILE *out, const char *what, const struct result *a, const struct result *b,
		  enum fig f, const char *note)
{
	double va, vb, v[BENCH_MAX_REPEAT];
	int n = 0;

	if (!a || !b)
		return;
	va = fig_of(a, f);
	vb = fig_of(b, f);
	if (!(vb > 0))
		return;
	if (rounds(a, f) && !a->reference && !b->reference && a->repeat > 1 &&
	    a->repeat == b->repeat) {
		for (uint32_t i = 0; i < a->repeat && i < BENCH_MAX_REPEAT; i++) {
			double x = rounds(a, f)[i], y = rounds(b, f)[i];

			if (isfinite(x) && isfinite(y) && y > 0)
				v[n++] = x / y;
		}
	}
	if (n > 1) {
		qsort(v, (size_t)n, sizeof(double), cmp_d);
		fprintf(out, "  %-40s %6.2fx   %s%s%spaired over %d rounds: %.2f-%.2f\n", what,
			n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, note ? "(" : "",
			note ? note : "", note ? ")  " : "", n, v[0], v[n - 1]);
		return;
	}
	fprintf(out, "  %-40s %6.2fx%s%s%s\n", what, va / vb, note ? "   (" : "", note ? note : "",
		note ? ")" : "");
}

static const struct result *find_c(const struct result *r, int n, const char *name,
				   enum workload wl, uint32_t conns)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(r[i].name, name) && r[i].cfg.wl == wl && r[i].cfg.op == OP_SEND &&
		    r[i].cfg.conns == conns && r[i].threads <= 1 && r[i].client_threads <= 1)
			return &r[i];
	return NULL;
}

/* mixed-direct with file_qd reads in flight (one connection, send). */
static const struct result *find_q(const struct result *r, int n, const char *name,
				   uint32_t file_qd)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(r[i].name, name) && r[i].cfg.wl == W_MIXED_DIRECT &&
		    r[i].cfg.conns == 1 && r[i].threads <= 1 && !r[i].reference &&
		    (r[i].cfg.file_qd ? r[i].cfg.file_qd : 1) == file_qd)
			return &r[i];
	return NULL;
}

/* The ratios the project's claims are about, when the runs are there. */
void report_targets(FILE *out, const struct result *r, int n)
{
	const struct result *busy = find(r, n, "busy", W_PINGPONG),
			    *thr = find(r, n, "thread", W_PINGPONG),
			    *ep = find(r, n, "epoll", W_PINGPONG),
			    *ur = find(r, n, "uring", W_PINGPONG),
			    *hy = find(r, n, "hybrid", W_PINGPONG),
			    *hp = find(r, n, "hybrid-plain", W_PINGPONG),
			    *pt = find(r, n, "perftest", W_PINGPONG),
			    *pte = find(r, n, "perftest-e", W_PINGPONG),
			    *rb = find(r, n, "busy", W_RATE), *ru = find(r, n, "uring", W_RATE),
			    *rh = find(r, n, "hybrid", W_RATE),
			    *rhp = find(r, n, "hybrid-plain", W_RATE),
			    *me = find(r, n, "epoll", W_MIXED), *mu = find(r, n, "uring", W_MIXED),
			    *ih = find(r, n, "hybrid", W_IDLE), *iu = find(r, n, "uring", W_IDLE),
			    *cb = find_c(r, n, "busy", W_CONNS, 256),
			    *cu = find_c(r, n, "uring", W_CONNS, 256),
			    *rue = find(r, n, "uring-ep", W_RATE),
			    *rhe = find(r, n, "hybrid-ep", W_RATE),
			    *rbe = find(r, n, "busy-ep", W_RATE),
			    *cue = find_c(r, n, "uring-ep", W_CONNS, 256),
			    *du = find_q(r, n, "uring", 4), *da = find_q(r, n, "epoll-aio", 4),
			    *dp = find_q(r, n, "epoll", 1);

	fprintf(out, "\nratios, this run (the project's targets and their goals: "
		     "tools/bench-targets.txt in a\nringrdma checkout, judged over boots by "
		     "tools/bench-boots):\n");
	ratio(out, "uring / epoll", ur, ep, F_P50, NULL);
	ratio(out, "uring / thread", ur, thr, F_P50, NULL);
	ratio(out, "uring / perftest -e", ur, pte, F_P50, NULL);
	ratio(out, "hybrid / busy", hy, busy, F_P50, NULL);
	ratio(out, "hybrid / hybrid-plain", hy, hp, F_P50, "what the bridge adds");
	ratio(out, "hybrid / perftest", hy, pt, F_P50, NULL);
	ratio(out, "mixed p50: uring / epoll", mu, me, F_P50, NULL);
	ratio(out, "mixed-direct qd 4 MB/s: uring / epoll-aio", du, da, F_FILE, NULL);
	ratio(out, "mixed-direct qd 4 p50: uring / epoll-aio", du, da, F_P50, NULL);
	ratio(out, "mixed-direct MB/s: uring qd 4 / epoll", du, dp, F_FILE, NULL);
	ratio(out, "rate: uring / busy ops/s", ru, rb, F_OPS, NULL);
	ratio(out, "rate: hybrid / busy ops/s", rh, rb, F_OPS, NULL);
	ratio(out, "rate: hybrid / hybrid-plain ops/s", rh, rhp, F_OPS, "what the bridge adds");
	ratio(out, "conns 256: uring / busy ops/s", cu, cb, F_OPS, NULL);
	ratio(out, "rate: uring-ep / busy ops/s", rue, rb, F_OPS, NULL);
	ratio(out, "rate: hybrid-ep / busy ops/s", rhe, rb, F_OPS, NULL);
	ratio(out, "rate: uring-ep / busy-ep ops/s", rue, rbe, F_OPS, NULL);
	ratio(out, "rate: hybrid-ep / busy-ep ops/s", rhe, rbe, F_OPS, NULL);
	ratio(out, "rate: uring-ep / uring ops/s", rue, ru, F_OPS, "what chaining adds");
	ratio(out, "conns 256: uring-ep / busy ops/s", cue, cb, F_OPS, NULL);
	if (rue && rue->wrs_per_chain > 0)
		fprintf(out, "  %-40s %6.2f    (> 1: posts chained)\n",
			"rate: uring-ep WRs per chain", rue->wrs_per_chain);
	if (rb && rb->syscalls_known) {
		if (ru && ru->syscalls_known)
			fprintf(out, "  %-40s %+6.2f\n", "rate: uring - busy syscalls/op",
				ru->syscalls_per_op - rb->syscalls_per_op);
		if (rh && rh->syscalls_known)
			fprintf(out, "  %-40s %+6.2f\n", "rate: hybrid - busy syscalls/op",
				rh->syscalls_per_op - rb->syscalls_per_op);
		if (rue && rue->syscalls_known)
			fprintf(out, "  %-40s %+6.2f\n", "rate: uring-ep - busy syscalls/op",
				rue->syscalls_per_op - rb->syscalls_per_op);
		if (rhe && rhe->syscalls_known)
			fprintf(out, "  %-40s %+6.2f\n", "rate: hybrid-ep - busy syscalls/op",
				rhe->syscalls_per_op - rb->syscalls_per_op);
		if (ru && ru->crossings_per_op >= 0 && rb->crossings_per_op >= 0)
			fprintf(out, "  %-40s %+6.2f    (on a NIC with doorbells)\n",
				"rate: uring - busy crossings/op",
				ru->crossings_per_op - rb->crossings_per_op);
	}
	if (pt && pt->repeat == 2)
		fprintf(out, "  %-40s %6.1f / %.1f us\n", "perftest p50 before / after",
			pt->rep_p50[0], pt->rep_p50[1]);
	if (pte && pte->repeat == 2)
		fprintf(out, "  %-40s %6.1f / %.1f us\n", "perftest -e p50 before / after",
			pte->rep_p50[0], pte->rep_p50[1]);
	if (ih)
		fprintf(out, "  %-40s %6.2f%%\n", "idle: hybrid CPU per side",
			ih->cpu_pct_per_side);
	if (iu)
		fprintf(out, "  %-40s %6.2f%%\n", "idle: uring CPU per side", iu->cpu_pct_per_side);
}
