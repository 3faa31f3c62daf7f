// SPDX-License-Identifier: MIT
/*
 * A hostile ringrdma-cp peer for the lab tests: N RDMA connections that
 * are established and then never say HELLO, held for SECS seconds.
 *
 *   cp-hostile idle ADDR PORT N SECS
 *
 * Prints "established E refused R" once every connect was tried, then
 * holds them; exits 0, or 2 on a usage error. Uses plain librdmacm, not
 * the library under test.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

struct conn {
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	char buf[2][512];
};

static struct rdma_cm_id *dial(struct rdma_addrinfo *ai, struct conn *c)
{
	struct ibv_qp_init_attr qa = {
		.cap = {.max_send_wr = 1, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};
	struct rdma_conn_param cp = {
		.responder_resources = 1,
		.initiator_depth = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	struct rdma_cm_id *id;

	if (rdma_create_ep(&id, ai, NULL, &qa))
		return NULL;
	/* Receives posted: whatever the receiver answers is taken, and ignored. */
	c->mr = rdma_reg_msgs(id, c->buf, sizeof(c->buf));
	if (!c->mr || rdma_post_recv(id, NULL, c->buf[0], sizeof(c->buf[0]), c->mr) ||
	    rdma_post_recv(id, NULL, c->buf[1], sizeof(c->buf[1]), c->mr) ||
	    rdma_connect(id, &cp)) {
		if (c->mr)
			rdma_dereg_mr(c->mr);
		c->mr = NULL;
		rdma_destroy_ep(id);
		return NULL;
	}
	return id;
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *ai;
	struct conn *conns;
	int n, secs, est = 0, refused = 0;

	if (argc != 6 || strcmp(argv[1], "idle")) {
		fprintf(stderr, "usage: cp-hostile idle ADDR PORT N SECS\n");
		return 2;
	}
	n = atoi(argv[4]);
	secs = atoi(argv[5]);
	if (n < 1 || n > 4096 || secs < 0) {
		fprintf(stderr, "cp-hostile: bad N or SECS\n");
		return 2;
	}
	if (rdma_getaddrinfo(argv[2], argv[3], &hints, &ai)) {
		fprintf(stderr, "cp-hostile: %s:%s: %s\n", argv[2], argv[3], strerror(errno));
		return 1;
	}
	conns = calloc((size_t)n, sizeof(*conns));
	if (!conns)
		return 1;
	for (int i = 0; i < n; i++) {
		conns[i].id = dial(ai, &conns[i]);
		if (conns[i].id)
			est++;
		else
			refused++;
	}
	printf("established %d refused %d\n", est, refused);
	fflush(stdout);
	sleep((unsigned int)secs);
	for (int i = 0; i < n; i++) {
		if (!conns[i].id)
			continue;
		rdma_disconnect(conns[i].id);
		rdma_dereg_mr(conns[i].mr);
		rdma_destroy_ep(conns[i].id);
	}
	free(conns);
	rdma_freeaddrinfo(ai);
	return 0;
}
