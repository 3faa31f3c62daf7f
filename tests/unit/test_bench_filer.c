// SPDX-License-Identifier: MIT
/*
 * ringrdma-bench's epoll-aio file reads (bench/filer.c) on a host file:
 * Linux AIO completes a buffered read inside io_submit(), so the order of
 * the eventfd's count and the completion ring can be laid out by hand.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "bench.h"

/* figures.c (now_us()) counts into the loop's counters, wait.c's. */
__thread struct side_counts side_counts;

#ifdef BENCH_HAVE_LIBAIO
static char path[256];
static struct filer f;
static struct bside s;

static void setup(void)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

	cr_assert_eq(filer_make_file(dir, 1 << 20, path, sizeof(path)), 0);
	cr_assert_eq(filer_open(&f, path, false, 2), 0);
	s.epfd = epoll_create1(EPOLL_CLOEXEC);
	cr_assert_geq(s.epfd, 0);
	s.filer = &f;
	cr_assert_eq(filer_aio_attach(&s), 0);
}

static void teardown(void)
{
	filer_close(&f);
	close(s.epfd);
	unlink(path);
}

/* The eventfd read between two completions: the first read of the count
 * sees one, io_getevents() takes both, and the second completion's count
 * is still there when nothing is in flight. Reaping it must not wait for a
 * completion that will never come (before: io_getevents() with min_nr 1
 * blocked the loop for good, the RDMA traffic behind it). */
Test(filer_aio, a_count_already_reaped_does_not_block, .init = setup, .fini = teardown,
     .timeout = 20)
{
	uint64_t one = 1, two;

	f.want = true;
	cr_assert_eq(filer_aio_kick(&f), 0);
	cr_assert_eq(f.inflight, 2);
	/* Both done in io_submit(); the count says 2: make it say 1. */
	cr_assert_eq(read(filer_aio_efd(&f), &two, sizeof(two)), (ssize_t)sizeof(two));
	cr_assert_eq(two, 2);
	cr_assert_eq(write(filer_aio_efd(&f), &one, sizeof(one)), (ssize_t)sizeof(one));
	cr_assert_eq(filer_aio_reap(&f), 0);
	cr_assert_eq(f.inflight, 0);
	cr_assert_eq(f.reads, 2);
	/* The second completion's count, late. */
	cr_assert_eq(write(filer_aio_efd(&f), &one, sizeof(one)), (ssize_t)sizeof(one));
	cr_assert_eq(filer_aio_reap(&f), 0);
	cr_assert_eq(f.inflight, 0);
	cr_assert_eq(f.reads, 2);
	/* And the reads go on. */
	f.want = true;
	cr_assert_eq(filer_aio_kick(&f), 0);
	cr_assert_eq(filer_aio_reap(&f), 0);
	cr_assert_eq(f.reads, 4);
	cr_assert_eq(f.bytes, 4 * 64 * 1024);
}
#else
Test(filer_aio, no_libaio)
{
	cr_skip("ringrdma-bench built without libaio");
}
#endif
