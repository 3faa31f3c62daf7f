// SPDX-License-Identifier: MIT
/*
 * cp/sendq.c on the host: the one list of entries every sender
 * connection (of every --threads thread) takes from, and when each may
 * go: in order; in a directory only once its MKDIR was stored or went on
 * the same connection; DIR_META once everything beneath was stored, on
 * its MKDIR's connection; a striped file's FILE_COMMIT once every range was, with their sums
 * folded in range order; a store says whether anything may go now (the
 * other threads are woken then); a directory waiting for another
 * connection's MKDIR passed by the next ones; and, taken by four threads at once, each entry
 * exactly once by those rules, to the end.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "range.h"
#include "sendq.h"

#define SENDQ_TREE_CHECK(cond) cr_assert(cond)
#include "sendq_tree.h"

Test(sendq, files_go_in_order_then_none)
{
	struct cp_sendq q;

	cp_sendq_init(&q);
	file(&q, -1, "a");
	file(&q, -1, "b");
	cr_assert_eq(cp_sendq_take(&q, 0), 0);
	cr_assert_eq(cp_sendq_take(&q, 1), 1);
	cr_assert_eq(cp_sendq_take(&q, 0), -1, "every entry went");
	cp_sendq_stored(&q, 1, 0);
	cp_sendq_stored(&q, 0, 0);
	cr_assert_eq(cp_sendq_take(&q, 2), -1);
	cp_sendq_free(&q);
}

Test(sendq, an_entry_waits_for_its_mkdir_on_another_connection)
{
	struct cp_sendq q;
	int d, f, g;

	cp_sendq_init(&q);
	d = mkdir_(&q, -1, "d");
	f = file(&q, d, "d/f");
	g = file(&q, -1, "g");
	cr_assert_eq(cp_sendq_take(&q, 0), d);
	/* Not stored yet: another connection takes what comes after it in
	 * the list, outside d, then waits; the same one goes on. */
	cr_assert_eq(cp_sendq_take(&q, 1), g, "g is in no directory: it passes d/f");
	cr_assert_eq(cp_sendq_take(&q, 1), -2);
	cr_assert_eq(cp_sendq_take(&q, 1), -2, "asked again, still waits");
	cr_assert_eq(cp_sendq_take(&q, 0), f, "the MKDIR's own connection goes on");
	cr_assert_eq(cp_sendq_take(&q, 1), -1);
	cp_sendq_free(&q);

	cp_sendq_init(&q);
	d = mkdir_(&q, -1, "d");
	f = file(&q, d, "d/f");
	cr_assert_eq(cp_sendq_take(&q, 0), d);
	cr_assert_eq(cp_sendq_take(&q, 1), -2);
	cr_assert(cp_sendq_stored(&q, d, 0), "a MKDIR stored: others may go");
	cr_assert_eq(cp_sendq_take(&q, 1), f, "once stored, any connection");
	cp_sendq_free(&q);
}

/* A tree of small directories: while connection 0 has d1 (taken with
 * its MKDIR, not stored yet), connection 1 takes d2 and its files rather
 * than waiting, so that neither idles; behind a directory of more than
 * 256 waiting entries it waits, as a take must stay short. */
Test(sendq, small_directories_spread_over_connections)
{
	struct cp_sendq q;
	int d1, d2, big, after;

	cp_sendq_init(&q);
	d1 = mkdir_(&q, -1, "d1");
	file(&q, d1, "d1/a");
	file(&q, d1, "d1/b");
	d2 = mkdir_(&q, -1, "d2");
	file(&q, d2, "d2/a");
	cr_assert_eq(cp_sendq_take(&q, 0), d1);
	cr_assert_eq(cp_sendq_take(&q, 1), d2, "d2 passes d1's files");
	cr_assert_eq(cp_sendq_take(&q, 1), d2 + 1, "and its own file after it");
	cr_assert_eq(cp_sendq_take(&q, 0), d1 + 1);
	cr_assert_eq(cp_sendq_take(&q, 0), d1 + 2);
	cr_assert_eq(cp_sendq_take(&q, 0), -1);
	cp_sendq_free(&q);

	cp_sendq_init(&q);
	big = mkdir_(&q, -1, "big");
	for (int i = 0; i < 300; i++) {
		char name[32];

		snprintf(name, sizeof(name), "big/%d", i);
		file(&q, big, name);
	}
	after = file(&q, -1, "after");
	cr_assert_eq(cp_sendq_take(&q, 0), big);
	cr_assert_eq(cp_sendq_take(&q, 1), -2, "300 waiting entries: not looked past");
	cp_sendq_stored(&q, big, 0);
	cr_assert_eq(cp_sendq_take(&q, 1), big + 1);
	cr_assert_neq(after, big + 1);
	cp_sendq_free(&q);
}

Test(sendq, dir_meta_waits_for_everything_beneath)
{
	struct cp_sendq q;
	int d, f, s, sf, sm, m, after;

	cp_sendq_init(&q);
	d = mkdir_(&q, -1, "d");
	f = file(&q, d, "d/f");
	s = mkdir_(&q, d, "d/s");
	sf = file(&q, s, "d/s/f");
	sm = dir_meta(&q, d, s, "d/s");
	m = dir_meta(&q, -1, d, "d");
	after = file(&q, -1, "after");
	cr_assert_eq(cp_sendq_take(&q, 0), d);
	cr_assert_eq(cp_sendq_take(&q, 0), f);
	cr_assert_eq(cp_sendq_take(&q, 0), s);
	cr_assert_eq(cp_sendq_take(&q, 0), sf);
	/* Everything went on connection 0, nothing stored: both DIR_METAs
	 * wait, and the file after them passes them. */
	cr_assert_eq(cp_sendq_take(&q, 0), after);
	cr_assert_eq(cp_sendq_take(&q, 0), -2);
	cp_sendq_stored(&q, d, 0);
	cp_sendq_stored(&q, s, 0);
	cr_assert(!cp_sendq_stored(&q, f, 0), "d/f stored: nothing more may go");
	cr_assert_eq(cp_sendq_take(&q, 1), -2, "d/s/f not stored: neither goes");
	cr_assert(cp_sendq_stored(&q, sf, 0), "the last beneath d/s: its DIR_META may go");
	/* ... on the connection that made d/s: another serve rank, not
	 * having made it, would leave its mode and time. */
	cr_assert_eq(cp_sendq_take(&q, 1), -2, "d/s's DIR_META is connection 0's");
	cr_assert_eq(cp_sendq_take(&q, 0), sm);
	/* d/s's DIR_META is beneath d: d's waits for it. */
	cr_assert_eq(cp_sendq_take(&q, 0), -2);
	cp_sendq_stored(&q, sm, 0);
	cr_assert_eq(cp_sendq_take(&q, 1), -2);
	cr_assert_eq(cp_sendq_take(&q, 0), m);
	cr_assert_eq(cp_sendq_take(&q, 1), -1);
	cp_sendq_free(&q);
}

Test(sendq, commit_waits_for_every_range_and_folds_in_order)
{
	const uint64_t sums[] = {0x1111, 0x2222, 0x3333, 0x4444};
	struct cp_range_fold f;
	struct cp_sendq q;
	uint64_t sum = 0;
	int r, c, next;

	cp_sendq_init(&q);
	r = striped(&q, -1, "big", 4);
	c = r + 4;
	next = file(&q, -1, "next");
	cr_assert(q.e[c].kind == CP_FILE_COMMIT && q.e[c].left == 4);
	for (int i = 0; i < 4; i++) {
		cr_assert(q.e[r + i].range && q.e[r + i].commit == c &&
			  q.e[r + i].index == (uint32_t)i);
		cr_assert_eq(q.e[r + i].range_off, (uint64_t)i << 20);
		cr_assert_eq(cp_sendq_take(&q, i), r + i);
	}
	/* The commit waits; the next file passes it. */
	cr_assert_eq(cp_sendq_take(&q, 0), next);
	cr_assert_eq(cp_sendq_take(&q, 0), -2);
	/* Stored out of order: still not before the last one. */
	cp_sendq_stored(&q, r + 2, sums[2]);
	cp_sendq_stored(&q, r + 0, sums[0]);
	cr_assert(!cp_sendq_stored(&q, r + 3, sums[3]), "a range before the last");
	cr_assert_eq(cp_sendq_take(&q, 1), -2, "range 1 not stored");
	cr_assert(cp_sendq_stored(&q, r + 1, sums[1]), "the last range: the commit may go");
	cr_assert_eq(cp_sendq_take(&q, 1), c);
	cr_assert_eq(cp_sendq_commit_sum(&q, c, &sum), 0);
	cr_assert_eq(cp_range_fold_init(&f), 0);
	for (int i = 0; i < 4; i++)
		cp_range_fold_add(&f, sums[i]);
	cr_assert_eq(sum, cp_range_fold_sum(&f), "folded in range order");
	cp_range_fold_free(&f);
	cr_assert_eq(cp_sendq_take(&q, 1), -1);
	cp_sendq_free(&q);
}

/* Four threads, a connection each, take a tree of directories, files,
 * links and striped files until none is left. */
#define THREADS 4

struct taker {
	struct cp_sendq *q;
	int conn;
	int taken;
	char why[160]; /* the first rule seen broken */
};

static atomic_int times_taken[4096];

/* The rules, checked under the list's lock right after a take (what
 * was stored stays stored: a rule kept at the take still holds). */
static void check_taken(struct taker *k, int i)
{
	struct cp_sendq *q = k->q;
	const struct cp_sendq_entry *e = &q->e[i];

	pthread_mutex_lock(&q->mu);
	if (e->conn != k->conn)
		snprintf(k->why, sizeof(k->why), "%d not marked as on connection %d", i, k->conn);
	else if (e->dir >= 0 && !q->e[e->dir].done && q->e[e->dir].conn != k->conn)
		snprintf(k->why, sizeof(k->why), "%d before its MKDIR %d was stored", i, e->dir);
	else if (e->kind == CP_DIR_META && q->e[e->own].left)
		snprintf(k->why, sizeof(k->why), "DIR_META %d before all beneath was stored", i);
	else if (e->kind == CP_FILE_COMMIT && e->left)
		snprintf(k->why, sizeof(k->why), "FILE_COMMIT %d before its ranges", i);
	else if (e->kind == CP_FILE_COMMIT)
		for (int r = i - 1; r >= 0 && q->e[r].range && q->e[r].commit == i; r--)
			if (!q->e[r].done)
				snprintf(k->why, sizeof(k->why), "FILE_COMMIT %d before range %d",
					 i, r);
	pthread_mutex_unlock(&q->mu);
}

static void *take_all(void *arg)
{
	struct taker *k = arg;
	unsigned int seed = (unsigned int)k->conn * 7919u + 1;

	for (;;) {
		int i = cp_sendq_take(k->q, k->conn);

		if (i == -1)
			break;
		if (i == -2) {
			sched_yield();
			continue;
		}
		atomic_fetch_add(&times_taken[i], 1);
		check_taken(k, i);
		k->taken++;
		/* Stored a little later, now and then. */
		if (rand_r(&seed) % 4 == 0)
			sched_yield();
		cp_sendq_stored(k->q, i, (uint64_t)i);
	}
	return NULL;
}

Test(sendq, four_threads_take_each_entry_once_by_the_rules)
{
	for (int round = 0; round < 20; round++) {
		struct taker k[THREADS];
		pthread_t th[THREADS];
		struct cp_sendq q;
		int total = 0;

		cp_sendq_init(&q);
		file(&q, -1, "first");
		tree(&q, -1, "top", 4, 1 + round % 3);
		striped(&q, -1, "alone", 5);
		cr_assert(q.ne <= (int)(sizeof(times_taken) / sizeof(times_taken[0])));
		for (int i = 0; i < q.ne; i++)
			atomic_store(&times_taken[i], 0);
		for (int t = 0; t < THREADS; t++) {
			k[t] = (struct taker){.q = &q, .conn = t};
			cr_assert_eq(pthread_create(&th[t], NULL, take_all, &k[t]), 0);
		}
		for (int t = 0; t < THREADS; t++) {
			pthread_join(th[t], NULL);
			cr_assert_str_empty(k[t].why, "round %d, connection %d: %s", round, t,
					    k[t].why);
			total += k[t].taken;
		}
		cr_assert_eq(total, q.ne, "round %d: %d taken of %d", round, total, q.ne);
		for (int i = 0; i < q.ne; i++) {
			cr_assert_eq(atomic_load(&times_taken[i]), 1, "entry %d taken %d times", i,
				     atomic_load(&times_taken[i]));
			cr_assert(q.e[i].done);
			if (q.e[i].kind == CP_MKDIR)
				cr_assert_eq(q.e[i].left, 0, "MKDIR %d: %d left", i, q.e[i].left);
		}
		cp_sendq_free(&q);
	}
}

Test(sendq, a_packed_list_unpacks_to_the_same_and_runs_by_the_rules)
{
	struct cp_sendq q, r;
	char *buf;
	size_t len;
	int n = 0;

	cp_sendq_init(&q);
	file(&q, -1, "first");
	tree(&q, -1, "top", 3, 2);
	striped(&q, -1, "alone", 4);
	for (int i = 0; i < q.ne; i++) /* the walk's figures travel too */
		q.e[i].ino = 1000 + (ino_t)i;
	cr_assert_eq(cp_sendq_pack(&q, &buf, &len), 0);
	cp_sendq_init(&r);
	cr_assert_eq(cp_sendq_unpack(&r, buf, len), 0);
	cr_assert(same_list(&q, &r));
	/* The unpacked list's rules run as the walked one's: every entry
	 * once, each directory's MKDIR counting down to 0. */
	for (int i; (i = cp_sendq_take(&r, 0)) != -1; n++) {
		cr_assert_geq(i, 0, "nothing waits on one connection storing at once");
		cp_sendq_stored(&r, i, (uint64_t)i);
	}
	cr_assert_eq(n, q.ne);
	for (int i = 0; i < r.ne; i++)
		if (r.e[i].kind == CP_MKDIR)
			cr_assert_eq(r.e[i].left, 0);
	cp_sendq_free(&r);
	free(buf);
	cp_sendq_free(&q);
}

Test(sendq, a_packed_list_cut_or_bent_is_refused_whole)
{
	struct cp_sendq q, r;
	struct cp_sendq_entry *e;
	char *buf;
	size_t len, at;

	cp_sendq_init(&q);
	tree(&q, -1, "top", 1, 2);
	cr_assert_eq(cp_sendq_pack(&q, &buf, &len), 0);
	cp_sendq_init(&r);
	for (size_t cut = 0; cut < len; cut += 7) {
		cr_assert_eq(cp_sendq_unpack(&r, buf, cut), -EINVAL, "cut at %zu of %zu", cut, len);
		cr_assert_eq(r.ne, 0);
	}
	/* An entry whose directory is itself, then one after it. */
	e = (struct cp_sendq_entry *)malloc(sizeof(*e));
	cr_assert(e);
	at = 16; /* the header, then the first entry (top's MKDIR) */
	memcpy(e, buf + at, sizeof(*e));
	e->dir = 0;
	memcpy(buf + at, e, sizeof(*e));
	cr_assert_eq(cp_sendq_unpack(&r, buf, len), -EINVAL);
	e->dir = 5;
	memcpy(buf + at, e, sizeof(*e));
	cr_assert_eq(cp_sendq_unpack(&r, buf, len), -EINVAL);
	e->dir = -1;
	memcpy(buf + at, e, sizeof(*e));
	cr_assert_eq(cp_sendq_unpack(&r, buf, len), 0, "mended, it is taken again");
	cp_sendq_free(&r);
	cp_sendq_init(&r);
	/* A string without its NUL; a longer list than the bytes hold. */
	buf[at + sizeof(*e) + 4 + strlen("top")] = 'x';
	cr_assert_eq(cp_sendq_unpack(&r, buf, len), -EINVAL);
	buf[at + sizeof(*e) + 4 + strlen("top")] = 0;
	buf[12] = 0x7f;
	cr_assert_eq(cp_sendq_unpack(&r, buf, len), -EINVAL);
	cr_assert_eq(r.ne, 0);
	free(e);
	free(buf);
	cp_sendq_free(&r);
	cp_sendq_free(&q);
}
