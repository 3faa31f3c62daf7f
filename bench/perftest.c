// SPDX-License-Identifier: MIT
/*
 * --with-perftest: perftest's ib_send_lat, polling and with completion
 * events (-e), on the same device and message size, as reference rows.
 * ib_send_lat reports one-way latency (half the round trip), so its figures
 * are doubled to compare with the round trips measured here.
 */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define PERFTEST_PORT "18521"
/* timeout(1) ends a perftest that hangs; the bench goes on without it. */

/* The netdev that has `addr`, then the RDMA device over that netdev. */
static int device_of(const char *addr, char *dev, size_t len)
{
	struct ifaddrs *ifa, *i;
	char ifname[64] = "", path[512], line[64];
	struct in_addr want;
	DIR *d;
	struct dirent *e;
	int found = 0;

	if (inet_pton(AF_INET, addr, &want) != 1 || getifaddrs(&ifa))
		return -EINVAL;
	for (i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == want.s_addr)
			snprintf(ifname, sizeof(ifname), "%s", i->ifa_name);
	freeifaddrs(ifa);
	d = opendir("/sys/class/infiniband");
	if (!ifname[0] || !d) {
		if (d)
			closedir(d);
		return -ENODEV;
	}
	while (!found && (e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gid_attrs/ndevs/0",
			 e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\n")] = 0;
			if (!strcmp(line, ifname)) {
				found = (size_t)snprintf(dev, len, "%s", e->d_name) < len;
			}
		}
		fclose(f);
	}
	closedir(d);
	return found ? 0 : -ENODEV;
}

static pid_t spawn(char *const argv[], int out_fd)
{
	pid_t pid = fork();

	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		/* Its complaints while retrying would only be noise. */
		dup2(out_fd >= 0 ? out_fd : null, 1);
		dup2(null, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* The result line: "bytes iters t_min t_max t_typical t_avg t_stdev p99 p99.9". */
static int parse(FILE *f, uint32_t size, double v[9])
{
	char line[512];

	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lf %lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3],
			   &v[4], &v[5], &v[6], &v[7], &v[8]) == 9 &&
		    (uint32_t)v[0] == size)
			return 0;
	}
	return -EPROTO;
}

static int one(const char *dev, const char *addr, uint32_t size, long iters, bool events,
	       struct result *r)
{
	char s_size[16], s_iters[16];
	char *srv[] = {"timeout", "120", "ib_send_lat", "-d", (char *)dev,   "-s",
		       s_size,	  "-n",	 s_iters,	"-p", PERFTEST_PORT, events ? "-e" : NULL,
		       NULL};
	char *cli[] = {"timeout",
		       "120",
		       "ib_send_lat",
		       "-d",
		       (char *)dev,
		       "-s",
		       s_size,
		       "-n",
		       s_iters,
		       "-p",
		       PERFTEST_PORT,
		       events ? "-e" : (char *)addr,
		       events ? (char *)addr : NULL,
		       NULL};
	double v[9];
	int p[2], status, rc;
	pid_t s, c;
	FILE *f;

	snprintf(s_size, sizeof(s_size), "%u", size);
	snprintf(s_iters, sizeof(s_iters), "%ld", iters);
	fflush(NULL);
	s = spawn(srv, -1);
	/* The client fails while the server's exchange socket is not yet
	 * listening: try again while the server waits. */
	rc = -ECONNREFUSED;
	for (int attempt = 0; rc && attempt < 20 && s > 0; attempt++) {
		usleep(300000);
		if (waitpid(s, &status, WNOHANG) != 0) {
			s = -1; /* the server gave up */
			break;
		}
		if (pipe(p))
			break;
		c = spawn(cli, p[1]);
		close(p[1]);
		f = fdopen(p[0], "r");
		rc = f ? parse(f, size, v) : -errno;
		if (f)
			fclose(f);
		else
			close(p[0]);
		if (c > 0)
			waitpid(c, &status, 0);
	}
	if (s > 0) {
		kill(s, SIGTERM);
		waitpid(s, NULL, 0);
	}
	if (rc)
		return rc;
	/* Its clock comes from the CPU's MHz, which a VM may report oddly. */
	for (int i = 2; i < 9; i++)
		if (!isfinite(v[i]) || v[i] <= 0)
			return -ERANGE;
	memset(r, 0, sizeof(*r));
	r->name = events ? "perftest-e" : "perftest";
	r->reference = r->has_latency = true;
	r->cfg.wl = W_PINGPONG;
	r->cfg.op = OP_SEND;
	r->cfg.msg_size = size;
	r->cfg.qd = r->cfg.conns = 1;
	r->cfg.iters = iters;
	r->repeat = 1;
	r->sys_cpu_us_per_op = r->verbs_syscalls_per_op = r->crossings_per_op = -1;
	r->p50 = 2 * v[4];
	r->p99 = 2 * v[7];
	r->p999 = 2 * v[8];
	r->max = 2 * v[3];
	for (int q = 0; q <= BENCH_CDF_POINTS; q++)
		r->cdf[q] = r->p50; /* no distribution from perftest */
	return 0;
}

int perftest_rows(const char *addr, uint32_t msg_size, long iters, struct result *r, int max)
{
	char dev[NAME_MAX + 1];
	int rc = device_of(addr, dev, sizeof(dev)), n = 0;

	if (rc) {
		fprintf(stderr, "ringrdma-bench: no RDMA device found for %s\n", addr);
		return rc;
	}
	for (int e = 0; e < 2 && n < max; e++) {
		/* In the lab about one run in 13 prints inf for every figure. */
		for (int attempt = 0; attempt < 8; attempt++) {
			rc = one(dev, addr, msg_size, iters, e, &r[n]);
			if (rc != -ERANGE)
				break;
		}
		if (rc) {
			fprintf(stderr, "ringrdma-bench: ib_send_lat%s on %s failed: %s\n",
				e ? " -e" : "", dev, strerror(-rc));
			return rc;
		}
		n++;
	}
	return n;
}

/* The rows of a run before the bench's and one after: figures the mean of
 * the two, each kept (rep_p50) so the drift between them shows. */
void perftest_merge(struct result *after, const struct result *before, int n)
{
	for (int i = 0; i < n; i++) {
		struct result *a = &after[i];
		const struct result *b = &before[i];

		a->repeat = 2;
		a->rep_p50[0] = b->p50;
		a->rep_p50[1] = a->p50;
		a->rep_ops[0] = a->rep_ops[1] = NAN;
		a->rep_cpu[0] = a->rep_cpu[1] = NAN;
		a->p50 = (a->p50 + b->p50) / 2;
		a->p99 = (a->p99 + b->p99) / 2;
		a->p999 = (a->p999 + b->p999) / 2;
		a->max = a->max > b->max ? a->max : b->max;
		for (int q = 0; q <= BENCH_CDF_POINTS; q++)
			a->cdf[q] = a->p50;
	}
}
