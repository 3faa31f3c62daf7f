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
 * Prints how many completions came in how many calls; exits 1 on any
 * failure, a completion in error or one that never comes.
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
#define IDLE_S 10 /* a round that gets no completion for this long failed */

struct app {
	unsigned long wcs, calls, errors;
	int largest;
};

/* The array is valid during the call only: use it (or copy it) here. */
static void on_wc_batch(rr_cq *cq, const struct ibv_wc *wc, int n, void *data)
{
	struct app *a = data;

	for (int i = 0; i < n; i++)
		if (wc[i].status != IBV_WC_SUCCESS && !a->errors++)
			fprintf(stderr, "batch_cq: completion %s\n",
				ibv_wc_status_str(wc[i].status));
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

/*
 * The port's own address for the GRH: on RoCE its RoCE v2 GID of an IPv4
 * address, which routes back to this host; on InfiniBand, GID 0.
 */
static int own_gid(struct ibv_context *ctx, union ibv_gid *gid)
{
	static const unsigned char v4mapped[12] = {[10] = 0xff, [11] = 0xff};
	struct ibv_port_attr pa;
	struct ibv_gid_entry e;

	if (ibv_query_port(ctx, 1, &pa))
		return -1;
	if (pa.link_layer != IBV_LINK_LAYER_ETHERNET)
		return ibv_query_gid(ctx, 1, 0, gid) ? -1 : 0;
	for (int i = 0; i < pa.gid_tbl_len; i++)
		if (!ibv_query_gid_ex(ctx, 1, i, &e, 0) && e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
		    !memcmp(e.gid.raw, v4mapped, sizeof(v4mapped))) {
			*gid = e.gid;
			return i;
		}
	return -1;
}

int main(int argc, char **argv)
{
	/* Receives land in rbuf, sends go out of sbuf: never the same bytes. */
	static struct {
		char rbuf[DEPTH][GRH + MSG];
		char sbuf[MSG];
	} buf;
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
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1};
	union ibv_gid gid;
	const char *why = NULL;
	int n = 0, gix;

	devs = ibv_get_device_list(&n);
	for (int i = 0; devs && i < n && !ctx; i++)
		if (argc < 2 || !strcmp(ibv_get_device_name(devs[i]), argv[1]))
			ctx = ibv_open_device(devs[i]);
	if (devs)
		ibv_free_device_list(devs);
	if (!ctx) {
		fprintf(stderr, "batch_cq: cannot open %s\n",
			argc < 2 ? "an RDMA device" : argv[1]);
		return 1;
	}
	if (io_uring_queue_init(64, &ring, 0)) {
		ibv_close_device(ctx);
		fprintf(stderr, "batch_cq: io_uring_queue_init failed\n");
		return 1;
	}
	why = "creating the bridge and its CQ";
	if (rr_bridge_create(&b, &ring, NULL, 0) ||
	    rr_cq_create(b, NULL, ctx, &co, sizeof(co), &cq))
		goto out;
	why = "creating the UD QP";
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, &buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
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
	if (!qp || ud_up(qp))
		goto out;
	/* The address of this very QP: a GRH to our own GID (RoCE needs one). */
	why = "finding the port's GID";
	gix = own_gid(ctx, &gid);
	if (gix < 0)
		goto out;
	why = "creating the address handle";
	aa.grh = (struct ibv_global_route){.dgid = gid, .sgid_index = (uint8_t)gix, .hop_limit = 1};
	ah = ibv_create_ah(pd, &aa);
	if (!ah)
		goto out;
	for (int r = 0; r < ROUNDS; r++) {
		struct ibv_send_wr swr[DEPTH], *bad_s;
		struct ibv_recv_wr rwr[DEPTH], *bad_r;
		struct ibv_sge rsge[DEPTH], ssge = {(uintptr_t)buf.sbuf, MSG, mr->lkey};
		unsigned long want = a.wcs + 2 * DEPTH;
		int idle = 0, got;

		for (int i = 0; i < DEPTH; i++) {
			rsge[i] = (struct ibv_sge){(uintptr_t)buf.rbuf[i], GRH + MSG, mr->lkey};
			rwr[i] = (struct ibv_recv_wr){.wr_id = (uint64_t)i,
						      .next = i + 1 < DEPTH ? &rwr[i + 1] : NULL,
						      .sg_list = &rsge[i],
						      .num_sge = 1};
			swr[i] = (struct ibv_send_wr){.wr_id = (uint64_t)i,
						      .next = i + 1 < DEPTH ? &swr[i + 1] : NULL,
						      .sg_list = &ssge,
						      .num_sge = 1,
						      .opcode = IBV_WR_SEND,
						      .send_flags = IBV_SEND_SIGNALED,
						      .wr.ud = {ah, qp->qp_num, QKEY}};
		}
		why = "posting";
		if (ibv_post_recv(qp, rwr, &bad_r) || ibv_post_send(qp, swr, &bad_s))
			goto out;
		why = "waiting for completions";
		while (a.wcs < want && !a.errors && idle < IDLE_S) {
			got = rr_bridge_run_once(b, 1000);
			if (got < 0)
				goto out;
			idle = got ? 0 : idle + 1;
		}
		if (a.errors || a.wcs != want)
			goto out;
	}
	why = NULL;
	printf("batch_cq: %lu completions in %lu calls (largest %d)\n", a.wcs, a.calls, a.largest);
out:
	if (why)
		fprintf(stderr, "batch_cq: failed %s: %lu of %d completions, %lu in error\n", why,
			a.wcs, ROUNDS * 2 * DEPTH, a.errors);
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
	return why ? 1 : 0;
}
