// SPDX-License-Identifier: MIT
/*
 * A ringrdma-bench client that never takes the server's FIN: it asks for
 * a run, sends STOP at once with no receive posted, and keeps its QP, so
 * the FIN that answers is refused with RNR NAKs, repeated for ever
 * (rnr_retry 7). The server must end its run anyway. Exit 0 when the
 * server disconnects within the seconds given, 1 when it does not, 2 on
 * any other failure.
 *   bench-stop-client ADDR PORT SECONDS
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cmsync.h"

static int fail(const char *what, const char *why)
{
	fprintf(stderr, "bench-stop-client: %s: %s\n", what, why);
	return 2;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ec;
	struct rdma_addrinfo *ai;
	struct rdma_cm_id *id;
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
	struct hello h = {.magic = HELLO_MAGIC,
			  .strat = S_URING,
			  .wl = W_PINGPONG,
			  .op = OP_SEND,
			  .signal_every = 1,
			  .qd = 1,
			  .conns = 1,
			  .msg_size = 64,
			  .iters = 100,
			  .timeout_s = 600};
	struct rdma_conn_param cp = {.private_data = &h,
				     .private_data_len = sizeof(h),
				     .responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	struct msg_hdr stop = {.slot = HDR_STOP};
	static uint8_t buf[64];
	struct ibv_send_wr wr = {.opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED,
				 .num_sge = 1},
			   *bad;
	struct ibv_sge sge;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	char err[160];
	int secs, rc, n = 0;
	time_t until;

	if (argc != 4)
		return fail("usage", "bench-stop-client ADDR PORT SECONDS");
	secs = atoi(argv[3]);
	ec = rdma_create_event_channel();
	if (!ec || rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		return fail("rdma_create_id", strerror(errno));
	if (cmsync_lookup(argv[1], (uint16_t)atoi(argv[2]), 0, &ai, err, sizeof(err)))
		return fail("lookup", err);
	if (rdma_resolve_addr(id, NULL, ai->ai_dst_addr, 2000) ||
	    cmsync_wait(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 10000, NULL, err, sizeof(err)) ||
	    rdma_resolve_route(id, 2000) ||
	    cmsync_wait(ec, RDMA_CM_EVENT_ROUTE_RESOLVED, 10000, NULL, err, sizeof(err)))
		return fail("resolve", err[0] ? err : strerror(errno));
	if (rdma_create_qp(id, NULL, &qa))
		return fail("rdma_create_qp", strerror(errno));
	mr = ibv_reg_mr(id->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return fail("ibv_reg_mr", strerror(errno));
	if (rdma_connect(id, &cp) ||
	    cmsync_wait(ec, RDMA_CM_EVENT_ESTABLISHED, 10000, NULL, err, sizeof(err)))
		return fail("connect", err[0] ? err : strerror(errno));
	/* STOP, and no receive for what answers it. */
	memcpy(buf, &stop, sizeof(stop));
	sge = (struct ibv_sge){.addr = (uintptr_t)buf, .length = sizeof(buf), .lkey = mr->lkey};
	wr.sg_list = &sge;
	if (ibv_post_send(id->qp, &wr, &bad))
		return fail("post STOP", strerror(errno));
	until = time(NULL) + 10;
	while (n == 0 && time(NULL) < until)
		n = ibv_poll_cq(id->send_cq, 1, &wc);
	if (n != 1 || wc.status != IBV_WC_SUCCESS)
		return fail("STOP", n == 1 ? ibv_wc_status_str(wc.status) : "no completion");
	rc = cmsync_wait(ec, RDMA_CM_EVENT_DISCONNECTED, secs * 1000, NULL, err, sizeof(err));
	printf("bench-stop-client: %s\n", rc ? err : "the server disconnected");
	rdma_destroy_qp(id);
	ibv_dereg_mr(mr);
	rdma_destroy_id(id);
	rdma_freeaddrinfo(ai);
	rdma_destroy_event_channel(ec);
	return rc ? 1 : 0;
}
