/* SPDX-License-Identifier: MIT */
/*
 * Lists of entries as send -r's walk makes them, for the tests of
 * cp/sendq.c (cp-sendq) and of its rules across MPI ranks (cp-ranks).
 * The includer defines SENDQ_TREE_CHECK(cond): what a failed add does.
 */
#ifndef CP_TEST_SENDQ_TREE_H
#define CP_TEST_SENDQ_TREE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sendq.h"

static inline int add(struct cp_sendq *q, uint8_t kind, int dir, int own, const char *name)
{
	int i = cp_sendq_add(
		q, (struct cp_sendq_entry){.kind = kind,
					   .path = strdup(name),
					   .name = strdup(name),
					   .target = kind == CP_SYMLINK ? strdup("t") : NULL,
					   .dir = dir,
					   .own = own});

	SENDQ_TREE_CHECK(i >= 0);
	return i;
}

static inline int mkdir_(struct cp_sendq *q, int dir, const char *name)
{
	return add(q, CP_MKDIR, dir, -1, name);
}

static inline int file(struct cp_sendq *q, int dir, const char *name)
{
	return add(q, 0, dir, -1, name);
}

static inline int dir_meta(struct cp_sendq *q, int dir, int own, const char *name)
{
	return add(q, CP_DIR_META, dir, own, name);
}

/* The ranges and FILE_COMMIT of a file of @n stripes of 1 MiB in @dir:
 * the first range's index. */
static inline int striped(struct cp_sendq *q, int dir, const char *name, uint32_t n)
{
	int first = q->ne;

	SENDQ_TREE_CHECK(!cp_sendq_add_striped(
		q,
		(struct cp_sendq_entry){
			.path = strdup(name), .name = strdup(name), .dir = dir, .mode = 0644},
		(uint64_t)n << 20, 1 << 20));
	SENDQ_TREE_CHECK(q->ne == first + (int)n + 1);
	return first;
}

/* A directory @name with @files files, a link, a striped file and @depth
 * levels of two subdirectories each, as send -r's walk lists them. */
static inline void tree(struct cp_sendq *q, int dir, const char *name, int depth, int files)
{
	char sub[256];
	int me = mkdir_(q, dir, name);

	for (int i = 0; i < files; i++) {
		snprintf(sub, sizeof(sub), "%s/f%d", name, i);
		file(q, me, sub);
	}
	snprintf(sub, sizeof(sub), "%s/link", name);
	add(q, CP_SYMLINK, me, -1, sub);
	snprintf(sub, sizeof(sub), "%s/big", name);
	striped(q, me, sub, 3);
	for (int i = 0; depth > 0 && i < 2; i++) {
		snprintf(sub, sizeof(sub), "%s/s%d", name, i);
		tree(q, me, sub, depth - 1, files);
	}
	dir_meta(q, dir, me, name);
}

/* Whether @a and @b are the same list, entry by entry (the sums apart:
 * only whether each has them). */
static inline bool same_list(const struct cp_sendq *a, const struct cp_sendq *b)
{
	if (a->ne != b->ne)
		return false;
	for (int i = 0; i < a->ne; i++) {
		struct cp_sendq_entry x = a->e[i], y = b->e[i];

		if (strcmp(x.path, y.path) || strcmp(x.name, y.name) || !x.target != !y.target ||
		    (x.target && strcmp(x.target, y.target)) || !x.sums != !y.sums)
			return false;
		x.path = x.name = x.target = y.path = y.name = y.target = NULL;
		x.sums = y.sums = NULL;
		if (memcmp(&x, &y, sizeof(x)))
			return false;
	}
	return true;
}

#endif
