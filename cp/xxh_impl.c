// SPDX-License-Identifier: MIT
/*
 * One XXH3-64 implementation, compiled once per variant (cp/meson.build
 * sets XXH_VECTOR and the flags it needs) from xxHash's own header, so
 * that cp/xxh.c can choose among them at run time.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "xxh.h"

#ifndef CP_XXH_VARIANT
#error "cp/meson.build names the variant"
#endif

#define CAT_(a, b) a##b
#define CAT(a, b)  CAT_(a, b)

static void *create(void)
{
	XXH3_state_t *st = XXH3_createState();

	if (st)
		XXH3_64bits_reset(st);
	return st;
}

static void destroy(void *st)
{
	XXH3_freeState(st);
}

static void reset(void *st)
{
	XXH3_64bits_reset(st);
}

static void update(void *st, const void *buf, size_t len)
{
	XXH3_64bits_update(st, buf, len);
}

static uint64_t digest(const void *st)
{
	return XXH3_64bits_digest(st);
}

static uint64_t hash(const void *buf, size_t len)
{
	return XXH3_64bits(buf, len);
}

#if XXH_VECTOR == XXH_SCALAR
#define NAME "scalar"
#elif XXH_VECTOR == XXH_SSE2
#define NAME "sse2"
#elif XXH_VECTOR == XXH_AVX2
#define NAME "avx2"
#elif XXH_VECTOR == XXH_NEON
#define NAME "neon"
#else
#define NAME "vector"
#endif

const struct cp_xxh CAT(cp_xxh_, CP_XXH_VARIANT) = {
	.name = NAME,
	.create = create,
	.destroy = destroy,
	.reset = reset,
	.update = update,
	.digest = digest,
	.hash = hash,
};
