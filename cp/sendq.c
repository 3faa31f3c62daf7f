// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp send: the shared list of entries and when each may go
 * (see sendq.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "range.h"
#include "sendq.h"

void cp_sendq_init(struct cp_sendq *q)
{
	memset(q, 0, sizeof(*q));
	pthread_mutex_init(&q->mu, NULL);
}

void cp_sendq_free(struct cp_sendq *q)
{
	for (int i = 0; i < q->ne; i++) {
		free(q->e[i].path);
		free(q->e[i].name);
		free(q->e[i].target);
		free(q->e[i].sums);
	}
	free(q->e);
	q->e = NULL;
	q->ne = q->cap = q->first = 0;
	pthread_mutex_destroy(&q->mu);
}

int cp_sendq_add(struct cp_sendq *q, struct cp_sendq_entry e)
{
	if (!e.path || !e.name || (e.kind == CP_SYMLINK && !e.target))
		goto nomem;
	if (q->ne == q->cap) {
		int cap = q->cap ? 2 * q->cap : 64;
		struct cp_sendq_entry *n = realloc(q->e, (size_t)cap * sizeof(*n));

		if (!n)
			goto nomem;
		q->e = n;
		q->cap = cap;
	}
	e.conn = -1;
	for (int d = e.dir; d >= 0; d = q->e[d].dir)
		q->e[d].left++;
	q->e[q->ne] = e;
	return q->ne++;
nomem:
	free(e.path);
	free(e.name);
	free(e.target);
	free(e.sums);
	return -1;
}

int cp_sendq_add_striped(struct cp_sendq *q, struct cp_sendq_entry e, uint64_t size,
			 uint64_t stripe)
{
	uint32_t n = cp_range_count(size, stripe);
	int first = q->ne;

	for (uint32_t i = 0; i < n; i++) {
		struct cp_sendq_entry r = e;

		r.path = strdup(e.path);
		r.name = strdup(e.name);
		r.target = NULL;
		r.sums = NULL;
		r.range = true;
		r.index = i;
		r.commit = first + (int)n;
		r.size = size;
		r.stripe = stripe;
		cp_range_at(size, stripe, i, &r.range_off, &r.range_len);
		if (cp_sendq_add(q, r) < 0)
			goto nomem;
	}
	e.kind = CP_FILE_COMMIT;
	e.size = size;
	e.stripe = stripe;
	e.left = (int)n;
	e.sums = calloc(n, sizeof(*e.sums));
	if (!e.sums)
		goto nomem;
	return cp_sendq_add(q, e) < 0 ? -1 : 0;
nomem:
	free(e.path);
	free(e.name);
	free(e.target);
	return -1;
}

/* Can an entry in the directory of MKDIR @d go on connection @c now? */
static bool dir_ready(const struct cp_sendq *q, int d, int c)
{
	return d < 0 || q->e[d].done || q->e[d].conn == c;
}

static int pick(struct cp_sendq *q, int c)
{
	bool all_went = true;

	for (int i = q->first; i < q->ne; i++) {
		const struct cp_sendq_entry *e = &q->e[i];

		if (e->conn >= 0) {
			if (i == q->first)
				q->first++;
			continue;
		}
		if (e->kind == CP_DIR_META) {
			/* Later entries do not depend on it: they may pass. */
			if (!q->e[e->own].left && dir_ready(q, e->own, c) &&
			    dir_ready(q, e->dir, c))
				return i;
			all_went = false;
			continue;
		}
		if (e->kind == CP_FILE_COMMIT) {
			/* Once every range was stored; later entries may pass. */
			if (!e->left && dir_ready(q, e->dir, c))
				return i;
			all_went = false;
			continue;
		}
		return dir_ready(q, e->dir, c) ? i : -2;
	}
	return all_went ? -1 : -2;
}

int cp_sendq_take(struct cp_sendq *q, int conn)
{
	int i;

	pthread_mutex_lock(&q->mu);
	i = pick(q, conn);
	if (i >= 0)
		q->e[i].conn = conn;
	pthread_mutex_unlock(&q->mu);
	return i;
}

bool cp_sendq_stored(struct cp_sendq *q, int i, uint64_t sum)
{
	struct cp_sendq_entry *e = &q->e[i];
	bool ready = e->kind == CP_MKDIR;

	pthread_mutex_lock(&q->mu);
	e->done = true;
	for (int d = e->dir; d >= 0; d = q->e[d].dir)
		if (!--q->e[d].left)
			ready = true;
	if (e->range) {
		q->e[e->commit].sums[e->index] = sum;
		if (!--q->e[e->commit].left)
			ready = true;
	}
	pthread_mutex_unlock(&q->mu);
	return ready;
}

int cp_sendq_commit_sum(struct cp_sendq *q, int i, uint64_t *sum)
{
	struct cp_range_fold f;
	const struct cp_sendq_entry *e = &q->e[i];

	if (cp_range_fold_init(&f))
		return -ENOMEM;
	pthread_mutex_lock(&q->mu);
	for (uint32_t k = 0; k < cp_range_count(e->size, e->stripe); k++)
		cp_range_fold_add(&f, e->sums[k]);
	pthread_mutex_unlock(&q->mu);
	*sum = cp_range_fold_sum(&f);
	cp_range_fold_free(&f);
	return 0;
}
