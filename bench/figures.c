// SPDX-License-Identifier: MIT
/*
 * Measured figures: CPU time and context switches from getrusage(), and
 * syscalls counted by the kernel on the raw_syscalls:sys_enter tracepoint
 * with perf_event_open() (tracefs must be mounted; the lab mounts it).
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

static int syscalls_open_tid(int tid)
{
	struct perf_event_attr a;
	unsigned long long id = 0;
	FILE *f = fopen("/sys/kernel/tracing/events/raw_syscalls/sys_enter/id", "r");

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
	return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, 0);
}

int syscalls_open(void)
{
	return syscalls_open_tid(0);
}

/*
 * Opening the first perf event on a syscall tracepoint (and closing the
 * last) flips a static key: the kernel patches its syscall entry code with
 * int3 breakpoints and cross-CPU syncs. Under QEMU's TCG (the lab) that
 * patching, done while the peer side is making syscalls on the other vCPU,
 * livelocked both vCPUs ("soft lockup" in syscall_trace_enter). One event
 * held open for the whole process keeps the key on, so the per-run events
 * only move a reference count. Returns the held fd, or -1.
 */
int syscalls_hold(void)
{
	static int held = -1;

	if (held < 0)
		held = syscalls_open();
	return held;
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

void side_begin(struct side_figures *f, int *sc_fd)
{
	*sc_fd = syscalls_open();
	usage_now(&f->cpu_s, &f->ctx_switches);
	f->elapsed_s = now_us() / 1e6;
	f->wcs = (int64_t)side_counts.wcs;
	f->wakeups = (int64_t)side_counts.wakeups;
	if (*sc_fd >= 0)
		ioctl(*sc_fd, PERF_EVENT_IOC_ENABLE, 0);
}

void side_end(struct side_figures *f, int sc_fd)
{
	double cpu;
	int64_t csw;

	if (sc_fd >= 0)
		ioctl(sc_fd, PERF_EVENT_IOC_DISABLE, 0);
	usage_now(&cpu, &csw);
	f->cpu_s = cpu - f->cpu_s;
	f->ctx_switches = csw - f->ctx_switches;
	f->elapsed_s = now_us() / 1e6 - f->elapsed_s;
	f->wcs = (int64_t)side_counts.wcs - f->wcs;
	f->wakeups = (int64_t)side_counts.wakeups - f->wakeups;
	f->syscalls = syscalls_read(sc_fd);
	if (sc_fd >= 0)
		close(sc_fd);
}

void side_begin_threads(struct side_figures *f, int *fds, const int *tids, int n, uint64_t wcs,
			uint64_t wakeups)
{
	for (int i = 0; i < n; i++)
		fds[i] = syscalls_open_tid(tids[i]);
	usage_now(&f->cpu_s, &f->ctx_switches);
	f->elapsed_s = now_us() / 1e6;
	f->wcs = (int64_t)wcs;
	f->wakeups = (int64_t)wakeups;
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			ioctl(fds[i], PERF_EVENT_IOC_ENABLE, 0);
}

void side_end_threads(struct side_figures *f, int *fds, int n, uint64_t wcs, uint64_t wakeups)
{
	double cpu;
	int64_t csw, sc = 0;

	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			ioctl(fds[i], PERF_EVENT_IOC_DISABLE, 0);
	usage_now(&cpu, &csw);
	f->cpu_s = cpu - f->cpu_s;
	f->ctx_switches = csw - f->ctx_switches;
	f->elapsed_s = now_us() / 1e6 - f->elapsed_s;
	f->wcs = (int64_t)wcs - f->wcs;
	f->wakeups = (int64_t)wakeups - f->wakeups;
	for (int i = 0; i < n; i++) {
		int64_t v = syscalls_read(fds[i]);

		sc = sc < 0 || v < 0 ? -1 : sc + v;
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
	f->syscalls = n ? sc : -1;
}
