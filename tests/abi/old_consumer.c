// SPDX-License-Identifier: MIT
/*
 * An application built against a previous release's header (tests/abi/
 * <version>/), run by old_releases.sh on today's library. It uses the
 * public structs the library reads (rr_bridge_opts) and writes
 * (rr_bridge_stats) and checks that both still mean what the old header
 * says: a layout the library changed under the same soname shows up as a
 * wrong callback argument, a clobbered canary, or an ASan report.
 *
 * Needs no RDMA device. Prints "rr_version=X.Y.Z" (the loaded library's);
 * exits 0 when all is well, 1 with a message otherwise.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ringrdma.h>

/* The calls whose form changed between releases, one branch per API. */
#if RR_VERSION_MAJOR == 0 && RR_VERSION_MINOR < 8
#define BRIDGE_CREATE(b, ring, o) rr_bridge_create(b, ring, o)
#define GET_STATS(b, st)	  (rr_bridge_get_stats(b, st), 0)
#else
#define BRIDGE_CREATE(b, ring, o) rr_bridge_create(b, ring, o, sizeof(*(o)))
#define GET_STATS(b, st)	  rr_bridge_get_stats(b, st, sizeof(*(st)))
#endif

#define APP_USER_DATA 0x1234abcdULL
#define CANARY	      0xa5

static int app_cqes;
static int bad_cb;

static void on_app_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	if (data != &app_cqes || cqe->user_data != APP_USER_DATA)
		bad_cb = 1;
	app_cqes++;
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "old_consumer: %s: %d (%s)\n", what, rc, strerror(rc < 0 ? -rc : rc));
	return 1;
}

int main(void)
{
	struct io_uring ring;
	struct rr_bridge_opts *opts;
	struct rr_bridge_stats *st;
	unsigned char *buf;
	rr_bridge *b;
	size_t i;
	int rc;

	printf("rr_version=%s\n", rr_version());
	rc = rr_version_check(RR_VERSION_MAJOR, RR_VERSION_MINOR);
	if (rc)
		return fail("rr_version_check", rc);

	rc = io_uring_queue_init(16, &ring, 0);
	if (rc)
		return fail("io_uring_queue_init", rc);

	/* Exactly the old size on the heap: ASan sees a read past it. */
	opts = calloc(1, sizeof(*opts));
	if (!opts)
		return fail("calloc", -ENOMEM);
	opts->cq_batch = 7;
	opts->budget = 100;
	opts->ack_batch = 3;
	opts->flags = RR_BRIDGE_SINGLESHOT | RR_BRIDGE_NO_MSG_RING;
	opts->on_app_cqe = on_app_cqe;
	opts->data = &app_cqes;
	rc = BRIDGE_CREATE(&b, &ring, opts);
	if (rc)
		return fail("rr_bridge_create", rc);
	free(opts);

	/* An application CQE reaped by the library reaches on_app_cqe with
	 * opts.data: the library read both at the old header's offsets. */
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

	if (!sqe)
		return fail("io_uring_get_sqe", -EBUSY);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, APP_USER_DATA);
	for (i = 0; i < 10 && !app_cqes; i++) {
		rc = rr_bridge_run_once(b, 100);
		if (rc < 0)
			return fail("rr_bridge_run_once", rc);
	}
	if (app_cqes != 1 || bad_cb)
		return fail("on_app_cqe: calls, or wrong cqe or data", app_cqes);

	/* Stats poisoned, then a canary after them: the library must write
	 * the whole old struct and nothing past it. */
	buf = malloc(sizeof(*st) + 64);
	if (!buf)
		return fail("malloc", -ENOMEM);
	memset(buf, CANARY, sizeof(*st) + 64);
	st = (struct rr_bridge_stats *)buf;
	rc = GET_STATS(b, st);
	if (rc)
		return fail("rr_bridge_get_stats", rc);
	for (i = sizeof(*st); i < sizeof(*st) + 64; i++)
		if (buf[i] != CANARY)
			return fail("rr_bridge_get_stats wrote past the old struct at byte",
				    (int)i);
	for (i = 0; i < sizeof(*st) / sizeof(uint64_t); i++)
		if (((uint64_t *)st)[i] == 0xa5a5a5a5a5a5a5a5ULL)
			return fail("rr_bridge_get_stats left a counter unwritten: index", (int)i);
	free(buf);

	rc = rr_bridge_destroy(b);
	if (rc)
		return fail("rr_bridge_destroy", rc);
	io_uring_queue_exit(&ring);
	return 0;
}
