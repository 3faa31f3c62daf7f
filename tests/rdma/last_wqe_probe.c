// SPDX-License-Identifier: MIT
/*
 * Does this kernel's provider raise IBV_EVENT_QP_LAST_WQE_REACHED for a QP
 * on an SRQ that is moved to the error state? The library's SRQ linger
 * (src/ep_lifecycle.c) ends on that event, or after 2 s without it.
 * Prints "last-wqe: event after N ms" or "last-wqe: none in 3000 ms".
 * Not a test: docs/performance.md quotes what each lab kernel answers.
 *   last-wqe-probe [DEVICE]     (default: the first device)
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static int to_state(struct ibv_qp *qp, enum ibv_qp_state s)
{
	struct ibv_qp_attr a = {.qp_state = s, .port_num = 1};
	int mask = IBV_QP_STATE;

	if (s == IBV_QPS_INIT)
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	return ibv_modify_qp(qp, &a, mask);
}

int main(int argc, char **argv)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_srq *srq = NULL;
	struct ibv_qp *qp = NULL;
	struct ibv_async_event ev;
	struct timespec t0;
	int rc = 1;

	for (int i = 0; list && list[i]; i++)
		if (argc < 2 || !strcmp(ibv_get_device_name(list[i]), argv[1])) {
			ctx = ibv_open_device(list[i]);
			break;
		}
	if (!ctx) {
		fprintf(stderr, "last-wqe-probe: no device%s%s\n", argc > 1 ? " " : "",
			argc > 1 ? argv[1] : "");
		goto out;
	}
	pd = ibv_alloc_pd(ctx);
	cq = pd ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	srq = cq ? ibv_create_srq(pd,
				  &(struct ibv_srq_init_attr){.attr = {.max_wr = 4, .max_sge = 1}})
		 : NULL;
	if (srq) {
		struct ibv_qp_init_attr qa = {.send_cq = cq,
					      .recv_cq = cq,
					      .srq = srq,
					      .qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = 1, .max_send_sge = 1}};

		qp = ibv_create_qp(pd, &qa);
	}
	if (!qp || to_state(qp, IBV_QPS_INIT)) {
		fprintf(stderr, "last-wqe-probe: cannot set up a QP on an SRQ: %s\n",
			strerror(errno));
		goto out;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (to_state(qp, IBV_QPS_ERR)) {
		fprintf(stderr, "last-wqe-probe: modify to ERR: %s\n", strerror(errno));
		goto out;
	}
	for (;;) {
		struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
		long left = 3000 - ms_since(&t0);

		if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
			printf("last-wqe: none in 3000 ms\n");
			break;
		}
		if (ibv_get_async_event(ctx, &ev))
			break;
		ibv_ack_async_event(&ev);
		if (ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED) {
			printf("last-wqe: event after %ld ms\n", ms_since(&t0));
			break;
		}
		printf("last-wqe: other event %s\n", ibv_event_type_str(ev.event_type));
	}
	rc = 0;
out:
	if (qp)
		ibv_destroy_qp(qp);
	if (srq)
		ibv_destroy_srq(srq);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	if (ctx)
		ibv_close_device(ctx);
	if (list)
		ibv_free_device_list(list);
	return rc;
}
