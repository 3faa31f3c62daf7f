// SPDX-License-Identifier: MIT
/*
 * Wake-ups per completion when several CQs' events arrive in a burst: what
 * rr_bridge_opts.min_wait_us (Linux 6.12's min-wait) saves. A thread
 * raises one completion on each of C CQs, each on its own channel, GAP_US
 * apart, then rests REST_US; the built-in loop (rr_bridge_run_once(), no
 * timeout) takes them. Timed, so not a test: tests/cost/cost.py gates
 * exact counts, this prints figures (docs/performance.md).
 *
 *   rr-burst MIN_WAIT_US WAIT_NR [CHANNELS GAP_US REST_US BURSTS]
 *
 * Prints one JSON object: the passes that returned (wake-ups), the waits
 * made (io_uring_enter()s that could sleep), the kernel's min-waits, the
 * completions, wake-ups per completion, and the median and 99th
 * percentile of the time from raising a completion to its callback (what
 * the batching costs).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <ringrdma.h>

#include "fake_verbs.h"

#define MAX_CH 64

static rr_cq *cqs[MAX_CH];
static unsigned int nch, gap_us, rest_us, bursts;
static unsigned long seen;
static uint64_t *raised, *lat; /* by wr_id: when raised, how long until taken */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_wc(rr_cq *cq, const struct ibv_wc *wc, void *data)
{
	lat[seen++] = now_ns() - __atomic_load_n(&raised[wc->wr_id], __ATOMIC_ACQUIRE);
}

static int by_value(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Spin, not sleep: a sleep's timer slack (50 us) would be the gap. */
static void spin_us(unsigned int us)
{
	uint64_t end = now_ns() + (uint64_t)us * 1000;

	while (now_ns() < end) {
	}
}

static void *producer(void *arg)
{
	uint64_t id = 1;

	for (unsigned int b = 0; b < bursts; b++) {
		for (unsigned int c = 0; c < nch; c++) {
			if (c)
				spin_us(gap_us);
			__atomic_store_n(&raised[id], now_ns(), __ATOMIC_RELEASE);
			fake_complete(fake_cq_of(rr_cq_ibv(cqs[c])), 1, id);
			id++;
		}
		struct timespec rest = {.tv_nsec = (long)rest_us * 1000};

		nanosleep(&rest, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct rr_bridge_opts bo = {0};
	struct rr_cq_opts co = {.cqe = 256, .mode = RR_WAIT_EVENT, .on_wc = on_wc};
	struct rr_bridge_stats st;
	struct io_uring ring;
	unsigned long passes = 0, total;
	unsigned int waits0;
	rr_bridge *b;
	pthread_t t;
	int rc;

	if (argc < 3) {
		fprintf(stderr, "usage: rr-burst MIN_WAIT_US WAIT_NR [CHANNELS GAP_US REST_US "
				"BURSTS]\n");
		return 2;
	}
	bo.min_wait_us = (unsigned int)atoi(argv[1]);
	bo.wait_nr = (unsigned int)atoi(argv[2]);
	nch = argc > 3 ? (unsigned int)atoi(argv[3]) : 8;
	gap_us = argc > 4 ? (unsigned int)atoi(argv[4]) : 5;
	rest_us = argc > 5 ? (unsigned int)atoi(argv[5]) : 1000;
	bursts = argc > 6 ? (unsigned int)atoi(argv[6]) : 2000;
	if (!nch || nch > MAX_CH || !bursts)
		return 2;
	total = (unsigned long)nch * bursts;
	raised = calloc(total + 1, sizeof(*raised));
	lat = calloc(total, sizeof(*lat));
	if (!raised || !lat)
		return 1;
	if (io_uring_queue_init(256, &ring, 0))
		return 1;
	rc = rr_bridge_create(&b, &ring, &bo, sizeof(bo));
	for (unsigned int c = 0; !rc && c < nch; c++) {
		rr_channel *ch;

		rc = rr_channel_create(b, &fake_ctx, &ch);
		if (!rc)
			rc = rr_cq_create(b, ch, &fake_ctx, &co, sizeof(co), &cqs[c]);
	}
	if (rc) {
		fprintf(stderr, "rr-burst: setup: %d\n", rc);
		return 1;
	}
	rr_bridge_run_once(b, 0); /* the channels' polls */
	waits0 = fake_waits;
	if (pthread_create(&t, NULL, producer, NULL))
		return 1;
	while (seen < total) {
		rc = rr_bridge_run_once(b, 2000);
		if (rc < 0 && rc != -EINTR) {
			fprintf(stderr, "rr-burst: pass: %d\n", rc);
			return 1;
		}
		passes++;
	}
	pthread_join(t, NULL);
	rr_bridge_get_stats(b, &st, sizeof(st));
	qsort(lat, total, sizeof(*lat), by_value);
	printf("{\"min_wait_us\":%u,\"wait_nr\":%u,\"channels\":%u,\"gap_us\":%u,\"bursts\":%u,"
	       "\"completions\":%lu,\"wakeups\":%lu,\"waits\":%u,\"min_waits\":%llu,"
	       "\"wakeups_per_completion\":%.3f,\"lat_p50_us\":%.1f,\"lat_p99_us\":%.1f}\n",
	       bo.min_wait_us, bo.wait_nr, nch, gap_us, bursts, seen, passes, fake_waits - waits0,
	       (unsigned long long)st.min_waits, (double)passes / (double)seen,
	       lat[total / 2] / 1e3, lat[total * 99 / 100] / 1e3);
	return 0;
}
