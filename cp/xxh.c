// SPDX-License-Identifier: MIT
/* ringrdma-cp: choose an XXH3-64 implementation by timing them (xxh.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xxh.h"

extern const struct cp_xxh cp_xxh_default, cp_xxh_scalar;
#ifdef CP_XXH_HAVE_AVX2
extern const struct cp_xxh cp_xxh_avx2;
#endif

#define PROBE_LEN    (64u << 10)
#define PROBE_ROUNDS 3
#define XXH_MAX	     4

static const struct cp_xxh *chosen = &cp_xxh_default;
static pthread_once_t once = PTHREAD_ONCE_INIT;

unsigned int cp_xxh_all(const struct cp_xxh **out, unsigned int max)
{
	const struct cp_xxh *c[XXH_MAX];
	unsigned int n = 0, i;

	c[n++] = &cp_xxh_default;
	/* Where the compiler's default is scalar code already, once is enough. */
	if (strcmp(cp_xxh_default.name, cp_xxh_scalar.name))
		c[n++] = &cp_xxh_scalar;
#ifdef CP_XXH_HAVE_AVX2
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2"))
		c[n++] = &cp_xxh_avx2;
#endif
	for (i = 0; i < n && i < max; i++)
		out[i] = c[i];
	return i;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void choose(void)
{
	const struct cp_xxh *c[XXH_MAX];
	unsigned int n = cp_xxh_all(c, XXH_MAX), i;
	const char *want = getenv("RINGRDMA_CP_XXH");
	uint64_t best = UINT64_MAX;
	volatile uint64_t sink = 0;
	unsigned char *buf;

	for (i = 0; want && i < n; i++)
		if (!strcmp(c[i]->name, want)) {
			chosen = c[i];
			return;
		}
	buf = malloc(PROBE_LEN);
	if (!buf)
		return; /* the compiler's default it is */
	for (i = 0; i < PROBE_LEN; i++)
		buf[i] = (unsigned char)(i * 131u + 7u);
	for (i = 0; i < n; i++) {
		uint64_t t = UINT64_MAX;

		/* The fastest of a few rounds: the first also pays for the
		 * emulator translating the code, any may be preempted. */
		for (unsigned int r = 0; r < PROBE_ROUNDS; r++) {
			uint64_t t0 = now_ns();

			sink ^= c[i]->hash(buf, PROBE_LEN);
			t0 = now_ns() - t0;
			if (t0 < t)
				t = t0;
		}
		if (t < best) {
			best = t;
			chosen = c[i];
		}
	}
	(void)sink;
	free(buf);
}

const struct cp_xxh *cp_xxh(void)
{
	pthread_once(&once, choose);
	return chosen;
}
