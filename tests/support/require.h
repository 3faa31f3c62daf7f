/* SPDX-License-Identifier: MIT */
/*
 * Gate for tests that need an RDMA device. With no device they skip, which
 * is the "not supported" answer a plain `meson test` on a host without RDMA
 * gets. Under RR_REQUIRE_RDMA=1 (set by tools/test and by the lab) a missing
 * device is a failure instead: CI never passes the rdma suite by skipping.
 */
#ifndef RR_TESTS_REQUIRE_H
#define RR_TESTS_REQUIRE_H

#include <stdlib.h>

#include <criterion/criterion.h>
#include <infiniband/verbs.h>

#include "rdma_sync.h"

static inline int rr_test_rdma_required(void)
{
	const char *r = getenv("RR_REQUIRE_RDMA");

	return (r && *r == '1') || getenv("RDMA_LAB");
}

/* Returns the address to test on, or does not return. */
static inline const char *rr_test_require_rdma(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	const char *addr = rs_test_addr();

	if (l)
		ibv_free_device_list(l);
	if (n > 0 && addr)
		return addr;
	if (rr_test_rdma_required())
		cr_assert_fail("RDMA required but %s",
			       n ? "RR_TEST_ADDR is not set" : "no RDMA device found");
	cr_skip_test(
		"needs an RDMA device and RR_TEST_ADDR (run through tools/test or tools/rdma-lab)");
	return NULL;
}

#endif
