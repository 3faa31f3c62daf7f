/* SPDX-License-Identifier: MIT */
/*
 * XXH3-64 through the fastest implementation this build carries, picked
 * once per process by timing each on the same buffer, as the kernel picks
 * its xor and raid6 routines. Every one gives the same values (they cross
 * the wire); only their speed differs, and not the same way everywhere:
 * natively SSE2 or AVX2 hash about twice as fast as scalar code, while
 * under an emulator (QEMU's TCG, the lab) the emulated vector instructions
 * make scalar code twice as fast as SSE2 and five times Debian's
 * libxxhash (docs/ringrdma-cp-figures.md). RINGRDMA_CP_XXH=NAME forces one.
 */
#ifndef CP_XXH_H
#define CP_XXH_H

#include <stddef.h>
#include <stdint.h>

struct cp_xxh {
	const char *name;
	void *(*create)(void); /* a reset state, or NULL */
	void (*destroy)(void *st);
	void (*reset)(void *st);
	void (*update)(void *st, const void *buf, size_t len);
	uint64_t (*digest)(const void *st);
	uint64_t (*hash)(const void *buf, size_t len);
};

/* cp_xxh() - the implementation this process uses; never NULL. */
const struct cp_xxh *cp_xxh(void);
/* cp_xxh_all() - every implementation of this build and this CPU, up to
 * @max of them into @out; returns how many. */
unsigned int cp_xxh_all(const struct cp_xxh **out, unsigned int max);

#endif
