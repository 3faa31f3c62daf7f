// SPDX-License-Identifier: MIT
/*
 * cp/hash.c on the host: a file's hash computed on the hashing thread, fed
 * in order with chunks big and small while the loop's ring hears of its
 * progress, must equal one pass of XXH3-64 over the whole file.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "hash.h"
#include "loop.h"

static struct cp_loop lp;
static struct cp_hasher h;
static int progress_calls;

static void on_progress(struct cp_hasher *hs)
{
	cr_assert_eq(hs, &h);
	progress_calls++;
}

static void setup(void)
{
	cr_assert_eq(cp_loop_init(&lp, 64), 0);
	cr_assert_eq(cp_hasher_init(&h, &lp, on_progress), 0);
	progress_calls = 0;
}

static void teardown(void)
{
	cr_assert(cp_hasher_idle(&h));
	cp_hasher_destroy(&h);
	cp_loop_fini(&lp);
}

/* Run the loop until everything given was hashed and heard of. */
static void await_idle(void)
{
	for (int i = 0; i < 600 && !cp_hasher_idle(&h); i++) {
		cr_assert_geq(cp_loop_pass(&lp, 100), 0);
		cp_hasher_kick(&h);
	}
	cr_assert(cp_hasher_idle(&h), "the hashing thread never caught up");
}

static uint8_t *random_bytes(size_t len)
{
	uint8_t *p = malloc(len);

	cr_assert_not_null(p);
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(rand() >> 7);
	return p;
}

/* Feed @len bytes of @p in pieces of @sizes (cycled); the job numbers
 * count up from @first. */
static void feed(const uint8_t *p, size_t len, const size_t *sizes, size_t nsizes, int64_t first)
{
	size_t off = 0;

	for (size_t i = 0; off < len; i++) {
		size_t n = sizes[i % nsizes];

		if (n > len - off)
			n = len - off;
		cr_assert_eq(cp_hasher_add(&h, p + off, n), first + (int64_t)i);
		off += n;
	}
}

Test(hash, big_and_small_chunks_in_order_equal_one_pass, .init = setup, .fini = teardown)
{
	/* Small pieces behind big ones must queue behind them, not be
	 * hashed at once out of order. */
	static const size_t sizes[] = {1 << 20, 100, 4096, 3 << 20, (64 << 10) + 1, 64 << 10, 7};
	size_t len = 24 << 20;
	uint8_t *p = random_bytes(len);

	cp_hasher_reset(&h);
	feed(p, len, sizes, sizeof(sizes) / sizeof(sizes[0]), 0);
	await_idle();
	cr_assert(cp_hasher_caught_up(&h));
	cr_assert_eq(cp_hasher_digest(&h), XXH3_64bits(p, len));
	cr_assert_gt(progress_calls, 0, "the loop never heard of the thread's progress");
	free(p);
}

Test(hash, reset_starts_the_next_file, .init = setup, .fini = teardown)
{
	static const size_t sizes[] = {2 << 20};
	size_t len = 5 << 20;
	uint8_t *a = random_bytes(len), *b = random_bytes(len);

	feed(a, len, sizes, 1, 0);
	await_idle();
	cr_assert_eq(cp_hasher_digest(&h), XXH3_64bits(a, len));
	cp_hasher_reset(&h);
	feed(b, len, sizes, 1, 3);
	await_idle();
	cr_assert_eq(cp_hasher_digest(&h), XXH3_64bits(b, len));
	free(a);
	free(b);
}

Test(hash, small_chunks_alone_are_hashed_at_once, .init = setup, .fini = teardown)
{
	uint8_t *p = random_bytes(CP_HASH_INLINE);

	cr_assert_eq(cp_hasher_add(&h, p, CP_HASH_INLINE), 0);
	/* Nothing queued before it: done on the loop thread, no ring read. */
	cr_assert(cp_hasher_idle(&h));
	cr_assert_eq(cp_hasher_done(&h), 1);
	cr_assert_eq(cp_hasher_digest(&h), XXH3_64bits(p, CP_HASH_INLINE));
	free(p);
}

Test(hash, a_big_chunk_is_not_idle_until_heard_of, .init = setup, .fini = teardown)
{
	size_t len = 8 << 20;
	uint8_t *p = random_bytes(len);

	cr_assert_eq(cp_hasher_add(&h, p, len), 0);
	/* Its eventfd read is in the ring until the loop reaps it. */
	cr_assert_not(cp_hasher_idle(&h));
	await_idle();
	cr_assert_eq(cp_hasher_done(&h), 1);
	cr_assert_eq(cp_hasher_digest(&h), XXH3_64bits(p, len));
	free(p);
}

/* The nice value of thread @tid (field 19 of its stat line). */
static int thread_nice(const char *tid)
{
	char path[300], line[1024], *p;
	int nice = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%s/stat", tid);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(line, sizeof(line), f));
	fclose(f);
	/* After the name's closing parenthesis: state is field 3, nice 19. */
	p = strrchr(line, ')');
	cr_assert_not_null(p);
	cr_assert_eq(sscanf(p + 2,
			    "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %d",
			    &nice),
		     1);
	return nice;
}

/* The threads of this process now: their tids, at most @max; the count. */
static int task_ids(long *ids, int max)
{
	struct dirent *d;
	DIR *dir = opendir("/proc/self/task");
	int n = 0;

	cr_assert_not_null(dir);
	while ((d = readdir(dir)))
		if (d->d_name[0] != '.' && n < max)
			ids[n++] = atol(d->d_name);
	closedir(dir);
	return n;
}

/* The hashing thread runs CP_HASH_NICE nicer than the loop, or at 19, the
 * nicest there is, when the loop is already within CP_HASH_NICE of it (a
 * suite run at nice 19: then it cannot give way, and must still hash). It
 * is told apart from the other threads as the one that was not there
 * before cp_hasher_init(), not by its nice value, which may be theirs. */
Test(hash, the_thread_gives_way_to_the_loop)
{
	size_t len = 1 << 20;
	uint8_t *p = random_bytes(len);
	int self = getpriority(PRIO_PROCESS, 0), want = self + CP_HASH_NICE;
	long before[64], after[64];
	int nb, na, fresh = 0;
	char tid[32];

	if (want > 19)
		want = 19;
	nb = task_ids(before, 64);
	setup();
	/* A job the thread hashed: it has set its priority by then. */
	cr_assert_eq(cp_hasher_add(&h, p, len), 0);
	await_idle();
	cr_assert_eq(cp_hasher_digest(&h), XXH3_64bits(p, len));
	na = task_ids(after, 64);
	for (int i = 0; i < na; i++) {
		bool old = false;

		for (int j = 0; j < nb; j++)
			old = old || after[i] == before[j];
		snprintf(tid, sizeof(tid), "%ld", after[i]);
		if (old) {
			cr_assert_eq(thread_nice(tid), self, "thread %s left nice %d for %d", tid,
				     self, thread_nice(tid));
			continue;
		}
		fresh++;
		cr_assert_eq(thread_nice(tid), want,
			     "the hashing thread at nice %d, expected %d (the loop at %d)",
			     thread_nice(tid), want, self);
	}
	cr_assert_eq(fresh, 1, "%d new threads, expected the hashing thread", fresh);
	cr_assert_eq(getpriority(PRIO_PROCESS, 0), self, "the loop thread's own priority changed");
	teardown();
	free(p);
}

/* A file's first bytes, read and hashed by the thread (to resume a cut
 * transfer), then chunks from memory: one hash over both. A file shorter
 * than asked for is an error, and reset forgets it. */
Test(hash, file_prefix_then_chunks, .init = setup, .fini = teardown)
{
	const size_t len = (3u << 20) + 777, head = (2u << 20) + 5;
	uint8_t *p = random_bytes(len);
	char path[] = "/tmp/rrcp-hash.XXXXXX";
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0);
	unlink(path);
	cr_assert_eq(write(fd, p, head), (ssize_t)head);
	cr_assert_eq(cp_hasher_add_fd(&h, fd, 0, head), 0);
	cr_assert_eq(cp_hasher_add(&h, p + head, len - head), 1);
	await_idle();
	cr_assert_eq(cp_hasher_error(&h), 0);
	cr_assert_eq(cp_hasher_digest(&h), XXH3_64bits(p, len));

	cp_hasher_reset(&h);
	cr_assert_eq(cp_hasher_add_fd(&h, fd, 1, head), 2); /* one byte past its end */
	await_idle();
	cr_assert_eq(cp_hasher_error(&h), -ENODATA);
	cp_hasher_reset(&h);
	cr_assert_eq(cp_hasher_error(&h), 0);
	cr_assert_eq(cp_hasher_add_fd(&h, fd, 5, 1000), 3);
	await_idle();
	cr_assert_eq(cp_hasher_digest(&h), XXH3_64bits(p + 5, 1000));
	close(fd);
	free(p);
}

/* Every XXH3-64 implementation the process may choose gives libxxhash's
 * values, one-shot and streamed in uneven pieces, over the lengths where
 * XXH3 changes code path (0, 1-3, 4-8, 9-16, 17-128, 129-240, a stripe, a
 * block of 1 KiB, more), and from unaligned addresses. */
Test(xxh, every_implementation_agrees)
{
	static const size_t lens[] = {
		0,   1,	  3,   4,    8,	   9,	 16,   17,   128,   129,      240,
		241, 255, 256, 1023, 1024, 1025, 4096, 4097, 65537, 1u << 20, (1u << 20) + 123};
	const struct cp_xxh *all[8];
	unsigned int n = cp_xxh_all(all, 8);
	size_t max = (1u << 20) + 130;
	uint8_t *p = random_bytes(max);

	cr_assert_geq(n, 1);
	cr_assert(cp_xxh() != NULL);
	for (unsigned int i = 0; i < n; i++) {
		for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
			for (size_t skew = 0; skew < 3; skew++) {
				const uint8_t *b = p + skew;
				uint64_t want = XXH3_64bits(b, lens[k]);
				void *st = all[i]->create();
				size_t at = 0, step = 1;

				cr_assert_eq(all[i]->hash(b, lens[k]), want,
					     "%s one-shot, %zu bytes", all[i]->name, lens[k]);
				cr_assert_not_null(st);
				while (at < lens[k]) {
					size_t m = lens[k] - at < step ? lens[k] - at : step;

					all[i]->update(st, b + at, m);
					at += m;
					step = step * 7 + 3;
				}
				cr_assert_eq(all[i]->digest(st), want, "%s streamed, %zu bytes",
					     all[i]->name, lens[k]);
				all[i]->reset(st);
				all[i]->update(st, b, lens[k]);
				cr_assert_eq(all[i]->digest(st), want, "%s after reset",
					     all[i]->name);
				all[i]->destroy(st);
			}
		}
	}
	free(p);
}

/* RINGRDMA_CP_XXH names the implementation to use; the choice is made
 * once per process, so it is checked in a child. */
Test(xxh, the_environment_forces_one)
{
	const struct cp_xxh *all[8];
	unsigned int n = cp_xxh_all(all, 8);

	for (unsigned int i = 0; i < n; i++) {
		pid_t pid = fork();
		int status;

		cr_assert_geq(pid, 0);
		if (!pid) {
			setenv("RINGRDMA_CP_XXH", all[i]->name, 1);
			_exit(strcmp(cp_xxh()->name, all[i]->name) ? 1 : 0);
		}
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s was not used",
			  all[i]->name);
	}
}
