// SPDX-License-Identifier: MIT
/*
 * MPI across the lab's VMs: every rank says which host it runs on and
 * which RDMA device that host has; ranks pass a buffer round a ring and
 * sum their numbers, and rank 0 checks that it heard from every rank,
 * that the ranks ran on enough different hosts, that the data arrived
 * whole, and that MPI's own traffic left the RDMA device alone (the
 * device's packet counters did not move while MPI talked: MPI must run
 * over TCP or shared memory, never over the device a copy measures).
 *
 *   lab_ranks RANKS MIN_HOSTS
 *
 * Exit status 0 when every check holds; rank 0 prints what failed.
 */
#include <dirent.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RING_BYTES (256 * 1024)

struct rank_info {
	char host[64];
	char dev[32];
	char addr[48];
	/* Packets the device sent and received while MPI ran; -1: unknown. */
	long long dev_pkts;
};

static long long read_counter(const char *path)
{
	FILE *f = fopen(path, "r");
	long long v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%lld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* The first RDMA device's name and its port 1 packets, sent + received. */
static long long device_pkts(char *dev, size_t len)
{
	char path[PATH_MAX];
	struct dirent *de;
	long long sent, rcvd;
	DIR *d = opendir("/sys/class/infiniband");

	dev[0] = '\0';
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		if (de->d_name[0] != '.') {
			snprintf(dev, len, "%.*s", (int)len - 1, de->d_name);
			break;
		}
	}
	closedir(d);
	if (!dev[0])
		return -1;
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters/sent_pkts", dev);
	sent = read_counter(path);
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters/rcvd_pkts", dev);
	rcvd = read_counter(path);
	return sent < 0 || rcvd < 0 ? -1 : sent + rcvd;
}

static void fill(unsigned char *buf, int seed)
{
	for (size_t i = 0; i < RING_BYTES; i++)
		buf[i] = (unsigned char)(i * 31 + (size_t)seed * 7);
}

int main(int argc, char **argv)
{
	struct rank_info me, *all = NULL;
	unsigned char *out, *in, *want;
	long long before, after, sum, expect;
	int rank, size, ranks, min_hosts, ring_ok, all_ring_ok;
	int failed = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: lab_ranks RANKS MIN_HOSTS\n");
		return 2;
	}
	ranks = atoi(argv[1]);
	min_hosts = atoi(argv[2]);
	memset(&me, 0, sizeof(me));
	/* Before MPI starts: its own start-up must not touch the device. */
	before = device_pkts(me.dev, sizeof(me.dev));

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	gethostname(me.host, sizeof(me.host) - 1);
	snprintf(me.addr, sizeof(me.addr), "%s",
		 getenv("RDMA_LAB_ADDR") ? getenv("RDMA_LAB_ADDR") : "-");

	/* A buffer round the ring, so that bytes cross between hosts. */
	out = malloc(RING_BYTES);
	in = malloc(RING_BYTES);
	want = malloc(RING_BYTES);
	if (!out || !in || !want)
		MPI_Abort(MPI_COMM_WORLD, 1);
	fill(out, rank);
	fill(want, (rank + size - 1) % size);
	MPI_Sendrecv(out, RING_BYTES, MPI_BYTE, (rank + 1) % size, 1, in, RING_BYTES, MPI_BYTE,
		     (rank + size - 1) % size, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	ring_ok = memcmp(in, want, RING_BYTES) == 0;
	MPI_Allreduce(&ring_ok, &all_ring_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	sum = rank + 1;
	MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	after = device_pkts(me.dev, sizeof(me.dev));
	me.dev_pkts = before < 0 || after < 0 ? -1 : after - before;

	if (rank == 0)
		all = calloc((size_t)size, sizeof(*all));
	if (rank == 0 && !all)
		MPI_Abort(MPI_COMM_WORLD, 1);
	MPI_Gather(&me, sizeof(me), MPI_BYTE, all, sizeof(me), MPI_BYTE, 0, MPI_COMM_WORLD);

	if (rank == 0) {
		int hosts = 0;

		for (int r = 0; r < size; r++) {
			int seen = 0;

			printf("rank %d on %s (%s): device %s, device packets while MPI ran: "
			       "%lld\n",
			       r, all[r].host, all[r].addr, all[r].dev[0] ? all[r].dev : "none",
			       all[r].dev_pkts);
			for (int q = 0; q < r; q++)
				seen |= strcmp(all[q].host, all[r].host) == 0;
			hosts += !seen;
			if (!all[r].dev[0]) {
				printf("FAIL: rank %d's host has no RDMA device\n", r);
				failed = 1;
			} else if (all[r].dev_pkts != 0) {
				printf("FAIL: rank %d: %s's packet counters %s while MPI ran\n", r,
				       all[r].dev,
				       all[r].dev_pkts < 0 ? "cannot be read" : "moved");
				failed = 1;
			}
		}
		expect = (long long)size * (size + 1) / 2;
		if (size != ranks) {
			printf("FAIL: %d ranks, expected %d\n", size, ranks);
			failed = 1;
		}
		if (hosts < min_hosts) {
			printf("FAIL: ranks on %d hosts, expected at least %d\n", hosts, min_hosts);
			failed = 1;
		}
		if (sum != expect) {
			printf("FAIL: the ranks' sum is %lld, expected %lld\n", sum, expect);
			failed = 1;
		}
		if (!all_ring_ok) {
			printf("FAIL: a buffer passed round the ring arrived changed\n");
			failed = 1;
		}
		if (!failed)
			printf("ok: %d ranks on %d hosts, ring of %d KiB and sum checked, device "
			       "untouched by MPI\n",
			       size, hosts, RING_BYTES / 1024);
		fflush(stdout);
		free(all);
	}
	free(out);
	free(in);
	free(want);
	MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
	MPI_Finalize();
	return failed;
}
