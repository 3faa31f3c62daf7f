// SPDX-License-Identifier: MIT
/*
 * cp/ranks.c on the host, as ranks of one MPI job (mpirun -n 3, shared
 * memory): the list's rules across ranks, every entry taken exactly once
 * by two threads of each rank, connections numbered apart per rank, a
 * FILE_COMMIT's sum folded from ranges stored by other ranks; a rank
 * that fails stops every rank with its words; ranks that walked
 * different lists, or one whose walk failed, refuse before anything is
 * taken; serve's ranks refuse a --dir that is not one directory. TAP
 * from rank 0; every check is every rank's.
 *
 *   mpirun -n 3 test-cp-ranks SCRATCH_DIR
 */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "range.h"
#include "ranks.h"
#include "sendq.h"

static void die(const char *what)
{
	fprintf(stderr, "test-cp-ranks: %s\n", what);
	MPI_Abort(MPI_COMM_WORLD, 99);
}

#define SENDQ_TREE_CHECK(cond)                                                                     \
	do {                                                                                       \
		if (!(cond))                                                                       \
			die(#cond);                                                                \
	} while (0)
#include "sendq_tree.h"

#define THREADS 2
#define MAX_E	4096

static int me, nranks, tests;

/* One check of every rank: ok only where all of them hold it. */
static void ok(bool holds, const char *what, const char *why)
{
	int mine = holds, all = holds;

	MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (!me) {
		printf("%s %d - %s\n", all ? "ok" : "not ok", ++tests, what);
		if (!mine && why && *why)
			printf("# rank 0: %s\n", why);
	} else if (!mine && why && *why) {
		fprintf(stderr, "# rank %d: %s: %s\n", me, what, why);
	}
	fflush(stdout);
}

static uint64_t sum_of(int i)
{
	return (uint64_t)i * 0x9e3779b97f4a7c15ull + 1;
}

/* What rank 0 saw, checked as cp-sendq checks one process's takes. */
struct seen {
	struct cp_sendq *q;
	pthread_mutex_t mu;
	char why[200];
	int fails;
	char fail_msg[200];
};

static void on_take(void *data, int conn, int i)
{
	struct seen *w = data;
	struct cp_sendq *q = w->q;
	const struct cp_sendq_entry *e = &q->e[i];
	char why[200] = "";

	pthread_mutex_lock(&q->mu);
	if (e->conn != conn)
		snprintf(why, sizeof(why), "%d not marked as on connection %d", i, conn);
	else if (e->dir >= 0 && !q->e[e->dir].done && q->e[e->dir].conn != conn)
		snprintf(why, sizeof(why), "%d on connection %d before its MKDIR %d was stored", i,
			 conn, e->dir);
	else if (e->kind == CP_DIR_META && q->e[e->own].left)
		snprintf(why, sizeof(why), "DIR_META %d before all beneath was stored", i);
	else if (e->kind == CP_FILE_COMMIT && e->left)
		snprintf(why, sizeof(why), "FILE_COMMIT %d before its ranges", i);
	pthread_mutex_unlock(&q->mu);
	pthread_mutex_lock(&w->mu);
	if (why[0] && !w->why[0])
		snprintf(w->why, sizeof(w->why), "%s", why);
	pthread_mutex_unlock(&w->mu);
}

static void on_fail(void *data, int result, const char *msg)
{
	struct seen *w = data;

	pthread_mutex_lock(&w->mu);
	if (!w->fails++)
		snprintf(w->fail_msg, sizeof(w->fail_msg), "%d %s", result, msg);
	pthread_mutex_unlock(&w->mu);
}

struct taker {
	struct cp_mpiq *m;
	int conn, taken, last;
	bool fail_now; /* fails before taking anything */
	bool no_store; /* stores nothing: the list can never be done */
	bool idle;     /* takes nothing (rank 0, when only the others ask) */
	int *times;    /* per entry, this rank's */
	int *owner;
	char why[200];
};

static void *take_all(void *arg)
{
	struct taker *k = arg;
	const struct cp_sendq *q = k->m->q;
	unsigned int seed = (unsigned int)(me * 31 + k->conn) * 7919u + 1;

	if (k->idle)
		return NULL;
	if (k->fail_now) {
		cp_mpiq_fail(k->m, 5, "rank 2: a planted failure");
		k->last = -3;
		return NULL;
	}
	for (;;) {
		uint64_t sum = 0;
		int i = cp_mpiq_take(k->m, k->conn, &sum);

		k->last = i;
		if (i == -1 || i == -3)
			break;
		if (i == -2) {
			sched_yield();
			continue;
		}
		if (i < 0 || i >= q->ne) {
			snprintf(k->why, sizeof(k->why), "take answered %d", i);
			break;
		}
		/* Counted, and marked as this rank's (rank + 1, summed over
		 * the ranks at rank 0: one rank's when taken once). */
		__atomic_fetch_add(&k->times[i], 1, __ATOMIC_RELAXED);
		__atomic_store_n(&k->owner[i], me + 1, __ATOMIC_RELAXED);
		k->taken++;
		if (q->e[i].kind == CP_FILE_COMMIT) {
			/* Its ranges were stored, here or by other ranks: the
			 * fold of their sums in range order. */
			struct cp_range_fold f;
			uint32_t n = cp_range_count(q->e[i].size, q->e[i].stripe);

			if (cp_range_fold_init(&f))
				die("out of memory");
			for (uint32_t r = 0; r < n; r++)
				cp_range_fold_add(&f, sum_of(i - (int)n + (int)r));
			if (cp_range_fold_sum(&f) != sum && !k->why[0])
				snprintf(k->why, sizeof(k->why), "FILE_COMMIT %d: sum %016llx", i,
					 (unsigned long long)sum);
			cp_range_fold_free(&f);
		}
		if (rand_r(&seed) % 4 == 0)
			sched_yield();
		if (!k->no_store)
			cp_mpiq_stored(k->m, i, sum_of(i));
	}
	return NULL;
}

static void build(struct cp_sendq *q, int round, bool one_more)
{
	cp_sendq_init(q);
	file(q, -1, "first");
	tree(q, -1, "top", 4, 1 + round % 3);
	striped(q, -1, "alone", 5);
	if (one_more)
		file(q, -1, "only-here");
	if (q->ne > MAX_E)
		die("list too long");
}

/* Rank 0 builds the list of @round (with @one_more: a file more) and
 * shares it; @walk_ret: this rank's walk. What cp_mpi_share_list()
 * returned; in @why what went wrong, "" when each rank's list is the one
 * rank 0 built and its bytes came with it. */
static int share(struct cp_sendq *q, int round, bool one_more, int walk_ret, char *why, size_t len)
{
	struct cp_sendq ref;
	uint64_t total = me ? 0 : 12345;
	int rc;

	why[0] = 0;
	if (me)
		cp_sendq_init(q);
	else
		build(q, round, one_more);
	rc = cp_mpi_share_list(q, walk_ret, &total, why, len);
	if (rc)
		return rc;
	build(&ref, round, one_more);
	if (!same_list(q, &ref) || total != 12345)
		snprintf(why, len, "rank %d: %d entries, %llu bytes, not rank 0's %d", me, q->ne,
			 (unsigned long long)total, ref.ne);
	cp_sendq_free(&ref);
	return 0;
}

/* Every rank's threads take the whole list; or with @fail, storing
 * nothing (so the list never ends), until rank 2's first thread, which
 * fails at once, has stopped them: what each rank saw in @why, the
 * takes that did not end with "stop" in *unstopped. */
static int owner[MAX_E];

static void run(struct cp_mpiq *m, struct seen *w, int *times, bool fail, int *unstopped, char *why,
		size_t len, int *taken)
{
	/* With @taken, rank 0 only answers: every entry goes to a rank that
	 * asks for it. */
	struct taker k[THREADS];
	pthread_t th[THREADS];

	memset(times, 0, MAX_E * sizeof(*times));
	memset(owner, 0, sizeof(owner));
	m->on_take = on_take;
	m->on_fail = on_fail;
	m->data = w;
	if (cp_mpiq_start(m, w->q, true))
		die("cp_mpiq_start");
	for (int t = 0; t < THREADS; t++) {
		k[t] = (struct taker){.m = m, .conn = t, .times = times, .owner = owner};
		if (me == 2 && t == 0)
			k[t].fail_now = fail;
		k[t].no_store = fail;
		k[t].idle = taken && !me;
		if (pthread_create(&th[t], NULL, take_all, &k[t]))
			die("pthread_create");
	}
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		if (unstopped && k[t].last != -3)
			++*unstopped;
		if (taken)
			*taken += k[t].taken;
		if (k[t].why[0] && !why[0])
			snprintf(why, len, "connection %d: %s", t, k[t].why);
	}
	cp_mpiq_finish(m, 0, "");
}

int main(int argc, char **argv)
{
	static int times[MAX_E], all[MAX_E], owners[MAX_E];
	char why[512] = "", *dir = argc > 1 ? argv[1] : NULL;
	struct cp_sendq q;
	struct seen w = {.mu = PTHREAD_MUTEX_INITIALIZER};
	int good;

	alarm(60); /* a rank that hangs fails the test, never the CI */
	if (!dir)
		die("usage: test-cp-ranks SCRATCH_DIR");
	if (cp_mpi_init(&argc, &argv))
		return 1;
	me = cp_mpi_rank();
	nranks = cp_mpi_size();
	if (!me)
		printf("1..%d\n", 9);
	if (nranks < 3)
		die("run it with mpirun -n 3 or more");

	/* 1-2: the whole list, five rounds, each entry once by the rules. */
	good = true;
	for (int round = 0; round < 5 && good; round++) {
		struct cp_mpiq m = {0};
		int mine;

		share(&q, round, false, 0, why, sizeof(why));
		if (why[0])
			die(why);
		w.q = &q;
		run(&m, &w, times, false, NULL, why, sizeof(why), NULL);
		MPI_Reduce(times, all, q.ne, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
		MPI_Reduce(owner, owners, q.ne, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
		for (int i = 0; !me && !why[0] && i < q.ne; i++)
			if (all[i] != 1 || !q.e[i].done)
				snprintf(why, sizeof(why), "round %d: entry %d taken %d times%s",
					 round, i, all[i], q.e[i].done ? "" : ", not stored");
			else if (q.e[i].conn / CP_SEND_CONNS_MAX != owners[i] - 1)
				snprintf(why, sizeof(why),
					 "round %d: entry %d went to rank %d, marked as on "
					 "connection %d",
					 round, i, owners[i] - 1, q.e[i].conn);
		mine = !why[0];
		MPI_Allreduce(&mine, &good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
		cp_sendq_free(&q);
	}
	ok(good, "three ranks x two threads, five rounds: every entry taken once, stored once",
	   why);
	ok(!w.why[0],
	   "the rules held on rank 0 for every take of every rank (MKDIR, DIR_META, "
	   "FILE_COMMIT with the ranges' folded sums)",
	   w.why);

	/* 3-4: rank 2 fails while nothing is stored (the others could take
	 * for ever): every rank stops with its status and words. */
	{
		struct cp_mpiq m = {0};
		int unstopped = 0, all_unstopped = 0;

		share(&q, 0, false, 0, why, sizeof(why));
		if (why[0])
			die(why);
		w.q = &q;
		w.fails = 0;
		run(&m, &w, times, true, &unstopped, why, sizeof(why), NULL);
		MPI_Allreduce(&unstopped, &all_unstopped, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		good = atomic_load(&m.stop) == 5 && strstr(m.stop_msg, "planted");
		if (!me)
			good = good && w.fails >= 1 && strstr(w.fail_msg, "5 rank 2:");
		snprintf(why, sizeof(why), "stop %d (%s), rank 0 heard %d: %s",
			 atomic_load(&m.stop), m.stop_msg, w.fails, w.fail_msg);
		ok(good, "a rank that fails stops every rank with its status and words", why);
		snprintf(why, sizeof(why), "%d of %d threads ended otherwise", all_unstopped,
			 nranks * THREADS);
		ok(!all_unstopped, "after the failure every thread's next take is answered: stop",
		   why);
		cp_sendq_free(&q);
	}

	/* 5-6: rank 0's walk reaches every rank whole; a walk or a check of
	 * the operands that failed on one rank stops every rank. */
	{
		int rc, mine, every;

		rc = share(&q, 1, true, 0, why, sizeof(why));
		mine = !rc && !why[0];
		MPI_Allreduce(&mine, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
		ok(every, "rank 0's walked list (a tree, links, striped files) is every rank's",
		   why[0] ? why : "another rank's differs");
		cp_sendq_free(&q);
		rc = share(&q, 1, false, me == 2 ? CP_EXIT_LOCAL_IO : 0, why, sizeof(why));
		mine = rc == CP_EXIT_LOCAL_IO && (!me || !q.ne) &&
		       (me == 2 || strstr(why, "another rank could not walk"));
		MPI_Allreduce(&mine, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
		ok(every, "a walk that failed on one rank stops every rank, none takes a list",
		   why);
		cp_sendq_free(&q);
	}

	/* 7-8: serve's --dir: one directory every rank sees, or refused. */
	{
		char mine[4096];
		int fd, rc;

		fd = open(dir, O_RDONLY | O_DIRECTORY);
		why[0] = 0;
		rc = fd < 0 ? -1 : cp_mpi_same_dir(fd, why, sizeof(why));
		ok(rc == 0, "serve ranks on one host, one --dir: taken", why);
		if (fd >= 0)
			close(fd);
		snprintf(mine, sizeof(mine), "%s/rank%d", dir, me);
		mkdir(mine, 0700);
		fd = open(mine, O_RDONLY | O_DIRECTORY);
		why[0] = 0;
		rc = fd < 0 ? -1 : cp_mpi_same_dir(fd, why, sizeof(why));
		ok(rc == CP_EXIT_LOCAL_IO && strstr(why, "not one directory"),
		   "serve ranks given different directories refuse, every one", why);
		if (fd >= 0)
			close(fd);
		rmdir(mine);
	}
	/* 9: many small files: the asking ranks take and tell their stores
	 * in batches, so that MPI's messages per file stay few. */
	{
		struct cp_mpiq m = {0};
		int taken = 0, all_taken = 0, mine;
		char name[32];

		cp_sendq_init(&q);
		for (int i = 0; i < 3000; i++) {
			snprintf(name, sizeof(name), "small%d", i);
			file(&q, -1, name);
		}
		w.q = &q;
		why[0] = 0;
		run(&m, &w, times, false, NULL, why, sizeof(why), &taken);
		MPI_Allreduce(&taken, &all_taken, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		/* a take and a store per file would be 2 a file */
		mine = !me || !why[0] || taken < 64 ? 1 : 0;
		if (me && taken >= 64 && m.requests * 8 > (uint64_t)taken) {
			snprintf(why, sizeof(why), "rank %d: %llu requests for %d files", me,
				 (unsigned long long)m.requests, taken);
			mine = 0;
		}
		if (all_taken != q.ne && !why[0]) {
			snprintf(why, sizeof(why), "%d of %d files taken", all_taken, q.ne);
			mine = 0;
		}
		ok(mine && !why[0],
		   "3,000 small files: every one taken once, the asking ranks sending fewer than "
		   "one request to rank 0 per 8 files",
		   why);
		cp_sendq_free(&q);
	}
	cp_mpi_fini();
	return 0;
}
