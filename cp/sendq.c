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

static void free_entries(struct cp_sendq *q)
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
}

void cp_sendq_free(struct cp_sendq *q)
{
	free_entries(q);
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

/* How many entries waiting for another connection's MKDIR a take looks
 * past: a tree of small directories keeps every connection busy (one
 * directory after another, each taken with its MKDIR), while a take
 * behind a big one stays short and waits for that MKDIR's store. */
#define PASS_WAITING 256

static int pick(struct cp_sendq *q, int c)
{
	bool all_went = true;
	int waiting = 0;

	for (int i = q->first; i < q->ne; i++) {
		const struct cp_sendq_entry *e = &q->e[i];

		if (e->conn >= 0) {
			if (i == q->first)
				q->first++;
			continue;
		}
		if (e->kind == CP_DIR_META) {
			/* On its MKDIR's connection: the receiver that made the
			 * directory sets its mode and time (another serve rank
			 * did not make it, and leaves them). Later entries do not
			 * depend on it: they may pass. */
			if (!q->e[e->own].left && q->e[e->own].conn == c && dir_ready(q, e->dir, c))
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
		if (dir_ready(q, e->dir, c))
			return i;
		/* Later entries in other directories do not depend on it. */
		if (++waiting > PASS_WAITING)
			return -2;
		all_went = false;
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

/* The packed list: this header, then per entry its struct with the
 * pointers cleared and path, name and target (a length each, 0: none;
 * else the bytes and their NUL). Every rank runs the same program, so
 * the struct's layout is checked rather than spelled out. */
struct packed_head {
	char magic[8];
	uint32_t entry_size;
	int32_t ne;
};

static const char pack_magic[8] = "rrcpq1";

static size_t str_room(const char *s)
{
	return sizeof(uint32_t) + (s ? strlen(s) + 1 : 0);
}

static char *put_str(char *p, const char *s)
{
	uint32_t len = s ? (uint32_t)strlen(s) + 1 : 0;

	memcpy(p, &len, sizeof(len));
	if (len)
		memcpy(p + sizeof(len), s, len);
	return p + sizeof(len) + len;
}

int cp_sendq_pack(const struct cp_sendq *q, char **buf, size_t *len)
{
	struct packed_head h = {.entry_size = sizeof(struct cp_sendq_entry), .ne = q->ne};
	size_t room = sizeof(h);
	char *p;

	for (int i = 0; i < q->ne; i++)
		room += sizeof(q->e[i]) + str_room(q->e[i].path) + str_room(q->e[i].name) +
			str_room(q->e[i].target);
	p = *buf = malloc(room);
	if (!p)
		return -ENOMEM;
	memcpy(h.magic, pack_magic, sizeof(h.magic));
	memcpy(p, &h, sizeof(h));
	p += sizeof(h);
	for (int i = 0; i < q->ne; i++) {
		struct cp_sendq_entry e = q->e[i];

		e.path = e.name = e.target = NULL;
		e.sums = NULL;
		memcpy(p, &e, sizeof(e));
		p = put_str(p + sizeof(e), q->e[i].path);
		p = put_str(p, q->e[i].name);
		p = put_str(p, q->e[i].target);
	}
	*len = room;
	return 0;
}

/* The next string of [*p, end) into *out (NULL for none): 0, or -EINVAL
 * when it runs past the end or lacks its NUL, -ENOMEM. */
static int get_str(const char **p, const char *end, char **out)
{
	uint32_t len;

	*out = NULL;
	if ((size_t)(end - *p) < sizeof(len))
		return -EINVAL;
	memcpy(&len, *p, sizeof(len));
	*p += sizeof(len);
	if (!len)
		return 0;
	if (len > (size_t)(end - *p) || (*p)[len - 1] || memchr(*p, 0, len - 1))
		return -EINVAL;
	*out = malloc(len);
	if (!*out)
		return -ENOMEM;
	memcpy(*out, *p, len);
	*p += len;
	return 0;
}

/* Whether entry @i's links to other entries point into the list, and
 * what the rules read of it is what cp_sendq_add() would have made. */
static bool entry_ok(const struct cp_sendq *q, int i)
{
	const struct cp_sendq_entry *e = &q->e[i];

	if (!e->path || !e->name || (e->kind == CP_SYMLINK) != !!e->target)
		return false;
	if (e->dir < -1 || e->dir >= i || (e->dir >= 0 && q->e[e->dir].kind != CP_MKDIR))
		return false;
	if (e->conn != -1 || e->done || e->left < 0)
		return false;
	switch (e->kind) {
	case 0:
		return !e->range || (e->commit > i && e->commit < q->ne &&
				     q->e[e->commit].kind == CP_FILE_COMMIT && e->stripe &&
				     e->index < cp_range_count(e->size, e->stripe));
	case CP_FILE_COMMIT:
		return e->stripe && (uint64_t)e->left == cp_range_count(e->size, e->stripe);
	case CP_DIR_META:
		return e->own >= 0 && e->own < i && q->e[e->own].kind == CP_MKDIR;
	case CP_MKDIR:
	case CP_SYMLINK:
		return true;
	default:
		return false;
	}
}

int cp_sendq_unpack(struct cp_sendq *q, const char *buf, size_t len)
{
	const char *p = buf, *end = buf + len;
	struct packed_head h;
	int ret = -EINVAL;

	if (len < sizeof(h))
		return -EINVAL;
	memcpy(&h, p, sizeof(h));
	p += sizeof(h);
	if (memcmp(h.magic, pack_magic, sizeof(h.magic)) ||
	    h.entry_size != sizeof(struct cp_sendq_entry) || h.ne < 0 || q->ne ||
	    (size_t)h.ne > (len - sizeof(h)) / (sizeof(struct cp_sendq_entry) + 3 * 4))
		return -EINVAL;
	q->e = calloc((size_t)h.ne ? (size_t)h.ne : 1, sizeof(*q->e));
	if (!q->e)
		return -ENOMEM;
	q->cap = h.ne;
	for (int i = 0; i < h.ne; i++) {
		struct cp_sendq_entry *e = &q->e[i];

		if ((size_t)(end - p) < sizeof(*e))
			goto bad;
		memcpy(e, p, sizeof(*e));
		p += sizeof(*e);
		e->path = e->name = e->target = NULL;
		e->sums = NULL;
		q->ne = i + 1; /* what cp_sendq_free() frees from here */
		if ((ret = get_str(&p, end, &e->path)) || (ret = get_str(&p, end, &e->name)) ||
		    (ret = get_str(&p, end, &e->target)))
			goto bad;
		ret = -EINVAL;
		if (e->kind == CP_FILE_COMMIT && e->left > 0 &&
		    !(e->sums = calloc((size_t)e->left, sizeof(*e->sums)))) {
			ret = -ENOMEM;
			goto bad;
		}
	}
	for (int i = 0; i < q->ne; i++)
		if (!entry_ok(q, i))
			goto bad;
	if (p != end)
		goto bad;
	return 0;
bad:
	free_entries(q);
	return ret;
}
