/* SPDX-License-Identifier: MIT */
/* A tiny public API for tests/abi/selftest.sh: each TOY_* macro makes one
 * kind of change to it, as a later release might. */
#ifndef TOY_H
#define TOY_H
#include <stddef.h>
#include <stdint.h>

enum toy_mode {
	TOY_MODE_A,
#ifdef TOY_RENUMBER
	TOY_MODE_B = 5,
#else
	TOY_MODE_B,
#endif
#ifdef TOY_ADD_ENUMERATOR
	TOY_MODE_C,
#endif
};

struct toy_opts {
	uint32_t a;
#ifdef TOY_INSERT
	uint32_t inserted;
#endif
#ifdef TOY_RESIZE
	uint64_t b;
#else
	uint32_t b;
#endif
	void *data;
#ifdef TOY_TAIL
	uint64_t tail;
#endif
};

/* Passed with its size (selftest.sh lists it as such). */
struct toy_stats {
	uint64_t count;
	uint32_t errors;
#ifdef TOY_STATS_PAD
	uint32_t in_padding;
#endif
#ifdef TOY_STATS_TAIL
	uint64_t more;
#endif
};

/* Opaque: its layout is the library's own business. */
struct toy;

int toy_create(struct toy **out, const struct toy_opts *opts);
void toy_destroy(struct toy *t);
int toy_set_mode(struct toy *t, enum toy_mode mode);
int toy_get_stats(struct toy *t, struct toy_stats *out, size_t size);
#ifdef TOY_CHANGE_FN
int toy_get(struct toy *t, long *v);
#else
int toy_get(struct toy *t, int *v);
#endif
#ifdef TOY_ADD_FN
int toy_extra(struct toy *t);
#endif
#endif
