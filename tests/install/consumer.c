// SPDX-License-Identifier: MIT
/*
 * A program outside the source tree, built against an installed ringrdma
 * with nothing but `pkg-config --cflags --libs ringrdma`: the installed
 * header and library agree on the version, and a bridge can be created and
 * destroyed on a plain ring (no RDMA device needed for that).
 *
 *   consumer EXPECTED_LIBRARY_PREFIX
 *
 * Exits 0 when every check passed; prints what failed otherwise.
 */
#define _GNU_SOURCE /* dladdr() */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <ringrdma.h>

static int failed;

static void check(int ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok" : "FAILED", what);
	if (!ok)
		failed = 1;
}

int main(int argc, char **argv)
{
	struct rr_bridge_stats st;
	struct io_uring ring;
	rr_bridge *b = NULL;
	Dl_info info;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: consumer EXPECTED_LIBRARY_PREFIX\n");
		return 2;
	}
	/* The library that was loaded must be the one just installed. */
	rc = dladdr((void *)rr_version, &info);
	check(rc && info.dli_fname && !strncmp(info.dli_fname, argv[1], strlen(argv[1])),
	      "libringrdma loaded from the install tree");
	if (rc && info.dli_fname)
		printf("  %s\n", info.dli_fname);

	check(!strcmp(rr_version(), RR_VERSION_STRING), "rr_version() matches RR_VERSION_STRING");
	check(rr_version_check(RR_VERSION_MAJOR, RR_VERSION_MINOR) == 0,
	      "rr_version_check() accepts the header's version");
	check(rr_version_check(RR_VERSION_MAJOR + 1, 0) == -ENOTSUP,
	      "rr_version_check() refuses the next major version");

	rc = io_uring_queue_init(8, &ring, 0);
	check(rc == 0, "io_uring_queue_init()");
	if (rc)
		return 1;
	rc = rr_bridge_create(&b, &ring, NULL, 0);
	check(rc == 0 && b, "rr_bridge_create() on a plain ring");
	if (!rc) {
		check(rr_bridge_ring(b) == &ring, "rr_bridge_ring() is that ring");
		rr_bridge_get_stats(b, &st, sizeof(st));
		check(st.cqes == 0 && st.cm_events == 0, "a new bridge has handled nothing");
		check(rr_bridge_run_once(b, 0) == 0, "rr_bridge_run_once() with nothing to do");
		check(rr_bridge_destroy(b) == 0, "rr_bridge_destroy()");
	}
	io_uring_queue_exit(&ring);
	return failed;
}
