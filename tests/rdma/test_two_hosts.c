// SPDX-License-Identifier: MIT
/*
 * The smoke exchange across two lab VMs (tools/rdma-lab --hosts 2): the peer
 * VM runs smoke-peer, this test is the client on the first VM.
 */
#include <stdlib.h>

#include <criterion/criterion.h>

#include "require.h"
#include "smoke.h"

#define PEER_PORT 7471

Test(two_hosts, smoke_across_vms, .timeout = 180)
{
	const char *peer = getenv("RDMA_LAB_PEER_ADDR");
	char err[300] = "";
	int rc;

	rr_test_require_rdma();
	if (!peer || !*peer) {
		if (rr_test_rdma_required())
			cr_assert_fail("RDMA_LAB_PEER_ADDR is not set: run with tools/rdma-lab run "
				       "--hosts 2");
		cr_skip_test("needs a second host (tools/rdma-lab run --hosts 2)");
	}
	for (uint32_t i = 0; i < 2; i++) {
		rc = smoke_client(peer, PEER_PORT, 900 + i, (int)i, 60000, err, sizeof(err));
		cr_assert_eq(rc, 0, "round %u: %s (%d)", i, err, rc);
	}
}
