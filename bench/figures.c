// SPDX-License-Identifier: MIT
/*
 * Measured figures: CPU time and context switches from getrusage(), the
 * machine's busy CPU time from /proc/stat, and (in a counting pass of its
 * own) syscalls counted by the kernel on the raw_syscalls:sys_enter
 * tracepoint with perf_event_open() (tracefs must be mounted; the lab
 * mounts it).
 */
#include <linux/perf_event.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>

/* Cycles per microsecond, measured against the monotonic clock over a
 * few milliseconds on first use. */
static double cycles_per_us(void)
{
	static double cpu;

	if (!cpu) {
		double t0 = now_us(), t1;
		uint64_t c0 = __rdtsc(), c1;

		do
			t1 = now_us();
		while (t1 - t0 < 20000);
		c1 = __rdtsc();
		cpu = (double)(c1 - c0) / (t1 - t0);
		if (!(cpu > 0))
			cpu = -1; /* no usable counter: the clock it is */
	}
	return cpu;
}

double tick_us(void)
{
	double cpu = cycles_per_us();

	return cpu > 0 ? (double)__rdtsc() / cpu : now_us();
}
#else
double tick_us(void)
{
	return now_us();
}
#endif

/* A counter of raw_syscalls:sys_enter for thread tid (0: this one, and
 * threads it creates later), only syscalls matching `filter` if given. */
static int syscalls_open_tid(int tid, const char *filter)
{
	struct perf_event_attr a;
	unsigned long long id = 0;
	FILE *f = fopen("/sys/kernel/tracing/events/raw_syscalls/sys_enter/id", "r");
	int fd;

	if (!f)
		f = fopen("/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id", "r");
	if (!f)
		return -1;
	if (fscanf(f, "%llu", &id) != 1)
		id = 0;
	fclose(f);
	if (!id)
		return -1;
	memset(&a, 0, sizeof(a));
	a.type = PERF_TYPE_TRACEPOINT;
	a.size = sizeof(a);
	a.config = id;
	a.disabled = 1;
	a.inherit = 1;
	a.exclude_kernel = 0;
	fd = (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, 0);
	if (fd >= 0 && filter && ioctl(fd, PERF_EVENT_IOC_SET_FILTER, filter)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The syscalls by which rxe's provider posts work requests and arms CQs
 * (uverbs commands are write(2)s; newer ones ioctl(2)s): on a NIC with
 * user-space doorbells (mlx5) none of them is a syscall. */
static const char *verbs_filter(void)
{
	static char f[64];

	if (!f[0])
		snprintf(f, sizeof(f), "id == %d || id == %d", (int)SYS_write, (int)SYS_ioctl);
	return f;
}

bool count_syscalls;

/*
 * Opening the first perf event on a syscall tracepoint (and closing the
 * last) flips a static key: the kernel patches its syscall entry code with
 * int3 breakpoints and cross-CPU syncs, and while any such event exists
 * every syscall of every process takes the tracing slow path. Under QEMU's
 * TCG (the lab) the patching, done while the peer side was making syscalls
 * on the other vCPU, livelocked both vCPUs ("soft lockup" in
 * syscall_trace_enter). So the key is flipped only between runs, when no
 * side is running: syscalls_hold(true) before a counting pass starts its
 * sides, syscalls_hold(false) after they are gone; the sides' own counters
 * then only move a reference count. Timed passes run with the key off.
 * Returns whether a counter is held.
 */
bool syscalls_hold(bool on)
{
	static int held = -1;

	if (on && held < 0)
		held = syscalls_open_tid(0, NULL);
	else if (!on && held >= 0) {
		close(held);
		held = -1;
	}
	return held >= 0;
}

static int64_t syscalls_read(int fd)
{
	unsigned long long v;

	if (fd < 0 || read(fd, &v, sizeof(v)) != sizeof(v))
		return -1;
	return (int64_t)v;
}

static void usage_now(double *cpu, int64_t *csw)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	*cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	*csw = ru.ru_nvcsw + ru.ru_nivcsw;
}

double thread_cpu_now(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Busy CPU time of the whole machine, every CPU, in seconds, from
 * /proc/stat: softirq and kworker time that no process is charged for
 * while it blocks (rxe's packet work) included; -1 if unreadable. */
double system_cpu_now(void)
{
	unsigned long long v[10] = {0};
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f = fopen("/proc/stat", "r");
	int n;

	if (!f)
		return -1;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
		   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
	fclose(f);
	if (n < 8 || hz <= 0)
		return -1;
	/* user nice system idle iowait irq softirq steal: all but idle and
	 * iowait (guest time is already in user). */
	return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

static void counters_open(struct side_counters *c, int tid)
{
	c->all = c->verbs = -1;
	if (!count_syscalls)
		return;
	c->all = syscalls_open_tid(tid, NULL);
	c->verbs = syscalls_open_tid(tid, verbs_filter());
}

static void counters_enable(struct side_counters *c, unsigned long req)
{
	if (c->all >= 0)
		ioctl(c->all, req, 0);
	if (c->verbs >= 0)
		ioctl(c->verbs, req, 0);
}

/* Add what c counted to f (-1 stays -1) and close it. */
static void counters_close(struct side_counters *c, struct side_figures *f)
{
	int64_t all = syscalls_read(c->all), verbs = syscalls_read(c->verbs);

	f->syscalls = f->syscalls < 0 || all < 0 ? -1 : f->syscalls + all;
	f->verbs_syscalls = f->verbs_syscalls < 0 || verbs < 0 ? -1 : f->verbs_syscalls + verbs;
	if (c->all >= 0)
		close(c->all);
	if (c->verbs >= 0)
		close(c->verbs);
	c->all = c->verbs = -1;
}

static void counts_begin(struct side_figures *f, const struct side_counts *c)
{
	f->wcs = (int64_t)c->wcs;
	f->wakeups = (int64_t)c->wakeups;
	f->posts = (int64_t)c->posts;
	f->chains = (int64_t)c->chains;
	f->wrs = (int64_t)c->wrs;
}

static void counts_end(struct side_figures *f, const struct side_counts *c)
{
	f->wcs = (int64_t)c->wcs - f->wcs;
	f->wakeups = (int64_t)c->wakeups - f->wakeups;
	f->posts = (int64_t)c->posts - f->posts;
	f->chains = (int64_t)c->chains - f->chains;
	f->wrs = (int64_t)c->wrs - f->wrs;
}

void side_counts_of(const rr_bridge *b, struct side_counts *c)
{
	struct rr_bridge_stats st;

	memset(c, 0, sizeof(*c));
	if (rr_bridge_get_stats(b, &st, sizeof(st)))
		return;
	c->wcs = st.wcs;
	c->wakeups = st.cq_events;
	c->posts = st.posts;
	c->chains = st.chains;
	c->wrs = st.wrs;
}

void side_begin(struct side_figures *f, struct side_counters *sc)
{
	counters_open(sc, 0);
	usage_now(&f->cpu_s, &f->ctx_switches);
	f->sys_cpu_s = system_cpu_now();
	f->elapsed_s = now_us() / 1e6;
	counts_begin(f, &side_counts);
	counters_enable(sc, PERF_EVENT_IOC_ENABLE);
}

void side_end(struct side_figures *f, struct side_counters *sc)
{
	double cpu, sys;
	int64_t csw;

	counters_enable(sc, PERF_EVENT_IOC_DISABLE);
	usage_now(&cpu, &csw);
	sys = system_cpu_now();
	f->cpu_s = cpu - f->cpu_s;
	f->sys_cpu_s = sys < 0 || f->sys_cpu_s < 0 ? -1 : sys - f->sys_cpu_s;
	f->ctx_switches = csw - f->ctx_switches;
	f->elapsed_s = now_us() / 1e6 - f->elapsed_s;
	counts_end(f, &side_counts);
	f->syscalls = f->verbs_syscalls = 0;
	counters_close(sc, f);
}

void side_begin_threads(struct side_figures *f, struct side_counters *scs, const int *tids, int n,
			const struct side_counts *c)
{
	for (int i = 0; i < n; i++)
		counters_open(&scs[i], tids[i]);
	usage_now(&f->cpu_s, &f->ctx_switches);
	f->sys_cpu_s = system_cpu_now();
	f->elapsed_s = now_us() / 1e6;
	counts_begin(f, c);
	for (int i = 0; i < n; i++)
		counters_enable(&scs[i], PERF_EVENT_IOC_ENABLE);
}

void side_end_threads(struct side_figures *f, struct side_counters *scs, int n,
		      const struct side_counts *c)
{
	double cpu, sys;
	int64_t csw;

	for (int i = 0; i < n; i++)
		counters_enable(&scs[i], PERF_EVENT_IOC_DISABLE);
	usage_now(&cpu, &csw);
	sys = system_cpu_now();
	f->cpu_s = cpu - f->cpu_s;
	f->sys_cpu_s = sys < 0 || f->sys_cpu_s < 0 ? -1 : sys - f->sys_cpu_s;
	f->ctx_switches = csw - f->ctx_switches;
	f->elapsed_s = now_us() / 1e6 - f->elapsed_s;
	counts_end(f, c);
	f->syscalls = f->verbs_syscalls = n ? 0 : -1;
	for (int i = 0; i < n; i++)
		counters_close(&scs[i], f);
}
