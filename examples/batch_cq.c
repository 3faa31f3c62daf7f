// SPDX-License-Identifier: MIT
/*
 * A CQ that hands its work completions out a poll at a time: on_wc_batch
 * gets an array of them per call instead of one on_wc call each, as a
 * storage target or a poller that completes many I/Os at once wants.
 *
 * To have completions without a peer, a UD QP sends to itself: ROUNDS
 * times, DEPTH receives are posted and DEPTH sends go out as one chain,
 * and each round's 2 x DEPTH completions arrive on one CQ.
 *
 *   batch_cq [DEVICE]
 *
 * Prints how many completions came in how many calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ringrdma.h>

#define DEPTH  32
#define ROUNDS 100
#define MSG    64
#define GRH    40 /* a UD receive starts with the Global Routing Header */
#define QKEY   0x11111111

struct app {
	unsigned long wcs, calls, errors;
	int largest;
};

/* The array is valid during the call only: use it (or copy it) here. */
static void on_wc_batch(rr_cq *cq, const struct ibv_wc *wc, int n, void *data)
{
	struct app *a = data;

	for (int i = 0; i < n; i++)
		if (wc[i].status != IBV_WC_SUCCESS)
			a->errors++;
	a->wcs += (unsigned long)n;
	a->calls++;
	if (n > a->largest)
		a->largest = n;
}

/* RESET -> INIT -> RTR -> RTS: a UD QP needs no peer for that. */
static int ud_up(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) ? -1 : 0;
}

int main(int argc, char **argv)
{
	static char buf[DEPTH][GRH + MSG];
	struct app a = {0};
	struct rr_cq_opts co = {.cqe = 4 * DEPTH, .on_wc_batch = on_wc_batch, .data = &a};
	struct ibv_device **devs;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_qp *qp = NULL;
	struct ibv_ah *ah = NULL;
	struct io_uring ring;
	rr_bridge *b = NULL;
	rr_cq *cq = NULL;
	union ibv_gid gid;
	int n = 0, rc = 1;

	devs = ibv_get_device_list(&n);
	for (int i = 0; devs && i < n && !ctx; i++)
		if (argc < 2 || !strcmp(ibv_get_device_name(devs[i]), argv[1]))
			ctx = ibv_open_device(devs[i]);
	if (devs)
		ibv_free_device_list(devs);
	if (!ctx) {
		fprintf(stderr, "batch_cq: no RDMA device\n");
		return 1;
	}
	if (io_uring_queue_init(64, &ring, 0)) {
		ibv_close_device(ctx);
		return 1;
	}
	if (rr_bridge_create(&b, &ring, NULL, 0) ||
	    rr_cq_create(b, NULL, ctx, &co, sizeof(co), &cq))
		goto out;
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (mr) {
		struct ibv_qp_init_attr qa = {.send_cq = rr_cq_ibv(cq),
					      .recv_cq = rr_cq_ibv(cq),
					      .cap = {.max_send_wr = DEPTH,
						      .max_recv_wr = DEPTH,
						      .max_send_sge = 1,
						      .max_recv_sge = 1},
					      .qp_type = IBV_QPT_UD};

		qp = ibv_create_qp(pd, &qa);
	}
	/* The address of this very QP: a GRH to our own GID (RoCE needs one). */
	if (!qp || ud_up(qp) || ibv_query_gid(ctx, 1, 0, &gid))
		goto out;
	ah = ibv_create_ah(pd, &(struct ibv_ah_attr){.is_global = 1,
						     .grh = {.dgid = gid, .hop_limit = 1},
						     .port_num = 1});
	if (!ah)
		goto out;
	for (int r = 0; r < ROUNDS; r++) {
		struct ibv_send_wr swr[DEPTH], *bad_s;
		struct ibv_recv_wr rwr[DEPTH], *bad_r;
		struct ibv_sge rsge[DEPTH], ssge[DEPTH];
		unsigned long want = a.wcs + 2 * DEPTH;

		for (int i = 0; i < DEPTH; i++) {
			rsge[i] = (struct ibv_sge){(uintptr_t)buf[i], GRH + MSG, mr->lkey};
			rwr[i] = (struct ibv_recv_wr){.wr_id = (uint64_t)i,
						      .next = i + 1 < DEPTH ? &rwr[i + 1] : NULL,
						      .sg_list = &rsge[i],
						      .num_sge = 1};
			ssge[i] = (struct ibv_sge){(uintptr_t)buf[i] + GRH, MSG, mr->lkey};
			swr[i] = (struct ibv_send_wr){.wr_id = (uint64_t)i,
						      .next = i + 1 < DEPTH ? &swr[i + 1] : NULL,
						      .sg_list = &ssge[i],
						      .num_sge = 1,
						      .opcode = IBV_WR_SEND,
						      .send_flags = IBV_SEND_SIGNALED,
						      .wr.ud = {ah, qp->qp_num, QKEY}};
		}
		if (ibv_post_recv(qp, rwr, &bad_r) || ibv_post_send(qp, swr, &bad_s))
			goto out;
		while (a.wcs < want)
			if (rr_bridge_run_once(b, 1000) < 0)
				goto out;
	}
	printf("batch_cq: %lu completions in %lu calls (largest %d), %lu errors\n", a.wcs, a.calls,
	       a.largest, a.errors);
	rc = a.errors ? 1 : 0;
out:
	if (rc)
		fprintf(stderr, "batch_cq: failed after %lu completions\n", a.wcs);
	if (ah)
		ibv_destroy_ah(ah);
	if (qp)
		ibv_destroy_qp(qp);
	if (mr)
		ibv_dereg_mr(mr);
	rr_cq_destroy(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	rr_bridge_destroy(b);
	io_uring_queue_exit(&ring);
	ibv_close_device(ctx);
	return rc;
}
