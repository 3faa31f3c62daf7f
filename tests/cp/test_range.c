// SPDX-License-Identifier: MIT
/*
 * cp/range.c on the host: a big file's layout in ranges, the checks of a
 * declared range, the whole-file checksum folded in range order whatever
 * the order of arrival, and the receiver's calls on a partial: a range
 * claimed by one connection at a time, what a cut range holds, never a
 * range into a committed file, and the commit's reread of the partial.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "hash.h"
#include "loop.h"
#include "range.h"
#include "scratch.h"

#define MiB (1ull << 20)

Test(range, layout_covers_the_file_once)
{
	const uint64_t sizes[] = {64 * MiB + 1, 200 * MiB, 192 * MiB, 1ull << 40, (1ull << 42) + 7};

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint64_t size = sizes[k], stripe = cp_stripe_for(size, 64 * MiB, 1 << 20);
		uint64_t next = 0, off, len;
		uint32_t n;

		cr_assert(stripe >= 64 * MiB && stripe % (1 << 20) == 0, "stripe %llu",
			  (unsigned long long)stripe);
		n = cp_range_count(size, stripe);
		cr_assert(n >= 2 && n <= CP_RANGES_MAX, "%u ranges of %llu", n,
			  (unsigned long long)size);
		for (uint32_t i = 0; i < n; i++) {
			cp_range_at(size, stripe, i, &off, &len);
			cr_assert_eq(off, next, "range %u at %llu", i, (unsigned long long)off);
			cr_assert(len && len <= stripe);
			cr_assert_eq(cp_range_check(size, off, len, 1 << 20, NULL, 0), 0);
			next = off + len;
		}
		cr_assert_eq(next, size, "ranges end at %llu of %llu", (unsigned long long)next,
			     (unsigned long long)size);
	}
}

Test(range, small_files_and_off_go_whole)
{
	cr_assert_eq(cp_stripe_for(64 * MiB, 64 * MiB, 1 << 20), 0);
	cr_assert_eq(cp_stripe_for(1ull << 40, 0, 1 << 20), 0);
	cr_assert_eq(cp_stripe_for(10, 4096, 4096), 0);
	/* A stripe that is no whole number of chunks is rounded up to one. */
	cr_assert_eq(cp_stripe_for(100 * MiB, 3 * MiB + 1, 1 << 20), 4 * MiB);
}

Test(range, refusals)
{
	char why[128];

	cr_assert_eq(cp_range_check(100, 0, 0, 4096, why, sizeof(why)), -ERANGE);
	cr_assert_eq(cp_range_check(8 * MiB, 8 * MiB, 4096, 4096, why, sizeof(why)), -ERANGE);
	cr_assert(strstr(why, "past the declared size"), "%s", why);
	cr_assert_eq(cp_range_check(8 * MiB, 4 * MiB, 4 * MiB + 4096, 4096, why, sizeof(why)),
		     -ERANGE);
	cr_assert(strstr(why, "past the declared size"), "%s", why);
	/* No wrap: an offset and a length that add past 2^64. */
	cr_assert_eq(cp_range_check(8 * MiB, 4096, UINT64_MAX, 4096, why, sizeof(why)), -ERANGE);
	cr_assert_eq(cp_range_check(8 * MiB, 4097, 4096, 4096, why, sizeof(why)), -ERANGE);
	cr_assert(strstr(why, "not on chunks"), "%s", why);
	cr_assert_eq(cp_range_check(8 * MiB, 0, 4097, 4096, why, sizeof(why)), -ERANGE);
	/* The last range ends with the file, on a chunk or not. */
	cr_assert_eq(cp_range_check(8 * MiB + 5, 8 * MiB, 5, 4096, why, sizeof(why)), 0);
}

Test(range, held_counts_whole_chunks_to_the_first_hole)
{
	cr_assert_eq(cp_range_held(8192, 16384, 8192, 4096), 0);
	cr_assert_eq(cp_range_held(8192, 16384, 4096, 4096), 0);
	cr_assert_eq(cp_range_held(8192, 16384, 8192 + 6000, 4096), 4096);
	cr_assert_eq(cp_range_held(8192, 16384, 8192 + 16384, 4096), 16384);
	cr_assert_eq(cp_range_held(8192, 16384, 1 << 30, 4096), 16384);
	cr_assert_eq(cp_range_held(0, 10, 10, 4096), 10); /* a short last range, whole */
}

/* The ranges' own sums folded in range order, as the receiver checks them. */
static uint64_t fold(const uint64_t *sums, const unsigned int *order, unsigned int n)
{
	struct cp_range_fold f;
	uint64_t by_index[8], v;

	cr_assert_eq(cp_range_fold_init(&f), 0);
	/* Arrival in @order; the fold is always by index. */
	for (unsigned int i = 0; i < n; i++)
		by_index[order[i]] = sums[order[i]];
	for (unsigned int i = 0; i < n; i++)
		cp_range_fold_add(&f, by_index[i]);
	cr_assert_eq(f.n, n);
	v = cp_range_fold_sum(&f);
	cp_range_fold_free(&f);
	return v;
}

Test(range, fold_is_in_range_order_and_is_xxh3_of_the_list)
{
	const uint64_t sums[4] = {0x1111, 0x2222222222ull, 0x3, 0xfedcba9876543210ull};
	const unsigned int in_order[4] = {0, 1, 2, 3}, shuffled[4] = {2, 0, 3, 1};
	uint8_t le[32];
	struct cp_range_fold f;

	for (int i = 0; i < 4; i++)
		for (int b = 0; b < 8; b++)
			le[8 * i + b] = (uint8_t)(sums[i] >> (8 * b));
	cr_assert_eq(fold(sums, in_order, 4), XXH3_64bits(le, sizeof(le)));
	cr_assert_eq(fold(sums, shuffled, 4), fold(sums, in_order, 4));
	/* Two ranges' sums swapped is another file. */
	cr_assert_eq(cp_range_fold_init(&f), 0);
	cp_range_fold_add(&f, sums[1]);
	cp_range_fold_add(&f, sums[0]);
	cp_range_fold_add(&f, sums[2]);
	cp_range_fold_add(&f, sums[3]);
	cr_assert_neq(cp_range_fold_sum(&f), fold(sums, in_order, 4));
	cp_range_fold_free(&f);
}

static char dir[64];
static int dfd;

static void setup(void)
{
	scratch_make(dir, "range");
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(dfd, 0);
}

static void teardown(void)
{
	close(dfd);
	scratch_remove(dir);
}

/* A connection's own open of the partial: one open file description. */
static int open_part(void)
{
	int fd = openat(dfd, ".big.rrcp-partial", O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	cr_assert_geq(fd, 0);
	return fd;
}

TestSuite(range_fd, .init = setup, .fini = teardown);

Test(range_fd, a_range_is_claimed_by_one_connection_at_a_time)
{
	int a = open_part(), b = open_part();

	cr_assert_eq(cp_range_claim(a, 0, 8 * MiB), 0);
	cr_assert_eq(cp_range_claim(b, 0, 8 * MiB), -EBUSY, "the same range claimed twice");
	cr_assert_eq(cp_range_claim(b, 4 * MiB, 8 * MiB), -EBUSY, "an overlapping range");
	cr_assert_eq(cp_range_claim(b, 8 * MiB, 8 * MiB), 0, "the next range is free");
	/* A connection that dies gives its range back with its descriptor. */
	close(a);
	a = open_part();
	cr_assert_eq(cp_range_claim(a, 0, 8 * MiB), 0);
	cr_assert_eq(cp_range_unclaim(a, 0, 8 * MiB), 0);
	cr_assert_eq(cp_range_unclaim(b, 8 * MiB, 8 * MiB), 0);
	cr_assert_eq(cp_range_claim(b, 0, 16 * MiB), 0, "every range given back");
	close(a);
	close(b);
}

static void write_at(int fd, uint64_t off, uint64_t len, uint8_t fill)
{
	static uint8_t buf[1 << 16];

	memset(buf, fill, sizeof(buf));
	for (uint64_t done = 0; done < len;) {
		size_t n = len - done < sizeof(buf) ? (size_t)(len - done) : sizeof(buf);

		cr_assert_eq(pwrite(fd, buf, n, (off_t)(off + done)), (ssize_t)n);
		done += n;
	}
}

Test(range_fd, a_cut_range_holds_its_chunks_up_to_the_first_hole)
{
	const uint64_t stripe = 4 * MiB, chunk = 1 << 20;
	int fd = open_part();
	uint64_t held;

	/* Range 2 complete, range 0 cut after 3 chunks, range 1 never came:
	 * arrival out of order, into one sparse partial. */
	write_at(fd, 2 * stripe, stripe, 0xcc);
	write_at(fd, 0, 3 * chunk, 0xaa);
	cr_assert_eq(cp_range_have(fd, 0, stripe, chunk, &held), 0);
	if (held == stripe)
		cr_skip_test("this file system reports no holes (the hashes decide there)");
	cr_assert_eq(held, 3 * chunk, "range 0 holds %llu", (unsigned long long)held);
	cr_assert_eq(cp_range_have(fd, stripe, stripe, chunk, &held), 0);
	cr_assert_eq(held, 0, "range 1 holds %llu", (unsigned long long)held);
	cr_assert_eq(cp_range_have(fd, 2 * stripe, stripe, chunk, &held), 0);
	cr_assert_eq(held, stripe, "range 2 is complete: nothing of it to send again");
	cr_assert_eq(cp_range_have(fd, 3 * stripe, stripe, chunk, &held), 0);
	cr_assert_eq(held, 0, "past the end of the partial");
	close(fd);
}

Test(range_fd, no_range_into_a_committed_file)
{
	int a = open_part(), c = open_part();
	char path[64];

	cr_assert_eq(cp_range_still_partial(a, dfd, ".big.rrcp-partial"), 0);
	/* The commit (which has the partial alone: cp-store) names it and
	 * removes the partial's name. A connection that opened the partial
	 * before claims its range after: it learns it is not the partial. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", c);
	cr_assert_eq(linkat(AT_FDCWD, path, dfd, "big", AT_SYMLINK_FOLLOW), 0);
	cr_assert_eq(unlinkat(dfd, ".big.rrcp-partial", 0), 0);
	close(c);
	cr_assert_eq(cp_range_claim(a, 0, 4096), 0);
	cr_assert_eq(cp_range_still_partial(a, dfd, ".big.rrcp-partial"), -ESTALE);
	/* A new partial of the name is another file. */
	c = open_part();
	cr_assert_eq(cp_range_still_partial(a, dfd, ".big.rrcp-partial"), -ESTALE);
	cr_assert_eq(cp_range_still_partial(c, dfd, ".big.rrcp-partial"), 0);
	close(a);
	close(c);
}

/* The commit's reread: a partial written range by range, in any order. */
static struct cp_loop lp;
static struct cp_hasher hs;
static struct cp_range_verify ver;
static int ver_rc;
static uint64_t ver_sum;

static void on_hashed(struct cp_hasher *h)
{
	cr_assert_eq(h, &hs);
	if (ver_rc == 1)
		ver_rc = cp_range_verify_step(&ver, &ver_sum);
}

static void commit_setup(void)
{
	setup();
	cr_assert_eq(cp_loop_init(&lp, 64), 0);
	cr_assert_eq(cp_hasher_init(&hs, &lp, on_hashed), 0);
}

static void commit_teardown(void)
{
	for (int i = 0; i < 100 && !cp_hasher_idle(&hs); i++)
		cp_loop_pass(&lp, 100);
	cp_hasher_destroy(&hs);
	cp_loop_fini(&lp);
	teardown();
}

TestSuite(range_commit, .init = commit_setup, .fini = commit_teardown);

#define STRIPE (64u << 10)
#define CHUNK  4096u
#define SIZE   (4 * STRIPE + 3 * CHUNK + 17) /* 5 ranges, the last short */

static uint8_t src[SIZE];

/* The sender's side: each range's XXH3 from FILE_DONE, folded in order. */
static uint64_t sender_sum(void)
{
	struct cp_range_fold f;
	uint64_t off, len, v;
	uint32_t n = cp_range_count(SIZE, STRIPE);

	cr_assert_eq(cp_range_fold_init(&f), 0);
	for (uint32_t i = 0; i < n; i++) {
		cp_range_at(SIZE, STRIPE, i, &off, &len);
		cp_range_fold_add(&f, XXH3_64bits(src + off, len));
	}
	v = cp_range_fold_sum(&f);
	cp_range_fold_free(&f);
	return v;
}

/* Ranges of the source into the partial, in @order, @n of them. */
static int partial_of(const unsigned int *order, unsigned int n)
{
	int fd = open_part();
	uint64_t off, len;

	for (unsigned int i = 0; i < n; i++) {
		cp_range_at(SIZE, STRIPE, order[i], &off, &len);
		/* A range's chunks in order, as its stages write them. */
		for (uint64_t c = 0; c < len; c += CHUNK) {
			size_t k = len - c < CHUNK ? (size_t)(len - c) : CHUNK;

			cr_assert_eq(pwrite(fd, src + off + c, k, (off_t)(off + c)), (ssize_t)k);
		}
	}
	return fd;
}

/* The commit's check of @fd; its rc (0: *sum set). */
static int verify(int fd, uint64_t *sum)
{
	ver_rc = cp_range_verify_start(&ver, &hs, fd, SIZE, STRIPE);
	cr_assert_eq(ver_rc, 0);
	ver_rc = 1;
	for (int i = 0; i < 600 && ver_rc == 1; i++) {
		cr_assert_geq(cp_loop_pass(&lp, 100), 0);
		cp_hasher_kick(&hs);
	}
	cr_assert_neq(ver_rc, 1, "the commit's check never ended");
	*sum = ver_sum;
	return ver_rc;
}

static void fill_src(void)
{
	srand(47);
	for (size_t i = 0; i < SIZE; i++)
		src[i] = (uint8_t)(rand() >> 7);
	cr_assert_eq(cp_range_count(SIZE, STRIPE), 5);
}

Test(range_commit, ranges_out_of_order_make_the_sender_s_file)
{
	const unsigned int order[] = {3, 0, 4, 2, 1};
	uint64_t sum = 0;
	int fd;

	fill_src();
	fd = partial_of(order, 5);
	cr_assert_eq(verify(fd, &sum), 0);
	cr_assert_eq(sum, sender_sum(), "the partial's folded sum is not the sender's");
	close(fd);
}

Test(range_commit, a_missing_range_fails_the_commit)
{
	const unsigned int order[] = {4, 0, 1, 3}; /* range 2 never came: a hole */
	uint64_t sum = 0;
	int fd;

	fill_src();
	fd = partial_of(order, 4);
	cr_assert_eq(verify(fd, &sum), 0);
	cr_assert_neq(sum, sender_sum(), "a partial with a hole passed the commit");
	close(fd);
}

Test(range_commit, a_changed_range_fails_the_commit)
{
	const unsigned int order[] = {0, 1, 2, 3, 4};
	uint64_t sum = 0;
	uint8_t b;
	int fd;

	fill_src();
	fd = partial_of(order, 5);
	/* Changed behind the receiver's back between two runs. */
	cr_assert_eq(pread(fd, &b, 1, STRIPE + 100), 1);
	b ^= 1;
	cr_assert_eq(pwrite(fd, &b, 1, STRIPE + 100), 1);
	cr_assert_eq(verify(fd, &sum), 0);
	cr_assert_neq(sum, sender_sum());
	close(fd);
}

Test(range_commit, a_partial_short_of_the_size_fails_the_commit)
{
	const unsigned int order[] = {0, 1, 2, 3}; /* the last range never came */
	uint64_t sum = 0;
	int fd;

	fill_src();
	fd = partial_of(order, 4);
	cr_assert_eq(verify(fd, &sum), -ENODATA);
	close(fd);
}
