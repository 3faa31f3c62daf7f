/* SPDX-License-Identifier: MIT */
/*
 * Blocking rdma_cm + verbs helpers for the rdma test suite and the ping-pong
 * demo. Deliberately independent of libringrdma, so that the lab and the
 * verbs stack can be checked on their own.
 *
 * All functions return 0 or a negative errno and leave a message in c->err.
 */
#ifndef RR_TESTS_RDMA_SYNC_H
#define RR_TESTS_RDMA_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define RS_MAX_PRE 8

struct rs_recv {
	struct ibv_mr *mr;
	void *buf;
	uint32_t len;
	uint64_t wr_id;
};

struct rs_conn {
	struct rdma_event_channel *ec;
	struct rdma_cm_id *listen_id;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	int ec_borrowed;      /* ec belongs to another rs_conn (a listener) */
	int use_events;	      /* wait on the completion channel, not busy polling */
	unsigned int unacked; /* CQ events read but not yet acknowledged */
	uint32_t qp_depth;
	int connected;
	int npre; /* receives posted before connecting */
	struct rs_recv pre[RS_MAX_PRE];
	char err[256];
};

/* The address to test against: RR_TEST_ADDR, else the lab's, else NULL. */
const char *rs_test_addr(void);

void rs_init(struct rs_conn *c, uint32_t qp_depth, int use_events);

/* Server: bind and listen; *port 0 picks one and returns it. */
int rs_listen(struct rs_conn *c, const char *addr, uint16_t *port);
/* Server: wait for a connect request and build PD/CQ/QP for it. */
int rs_get_request(struct rs_conn *c, int timeout_ms);
/* Server: accept the pending request and wait until it is established. */
int rs_accept(struct rs_conn *c, int timeout_ms);

/* Client: resolve address and route, build PD/CQ/QP. */
int rs_resolve(struct rs_conn *c, const char *addr, uint16_t port, int timeout_ms);
/* Client: connect and wait until established. While the server is not
 * listening yet (REJECTED/UNREACHABLE) it retries on a fresh id and QP until
 * the timeout, reposting the receives posted before connecting. */
int rs_connect(struct rs_conn *c, const char *addr, uint16_t port, int timeout_ms);

struct ibv_mr *rs_reg(struct rs_conn *c, void *buf, size_t len, int access);
int rs_post_recv(struct rs_conn *c, struct ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id);
int rs_post_send(struct rs_conn *c, struct ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id);
int rs_post_write(struct rs_conn *c, struct ibv_mr *mr, void *buf, uint32_t len, uint64_t raddr,
		  uint32_t rkey, uint64_t wr_id);

/* Wait for one work completion; a failed completion status is an error. */
int rs_wait_wc(struct rs_conn *c, struct ibv_wc *wc, int timeout_ms);

/* Disconnect and wait for DISCONNECTED (best effort), then free everything. */
void rs_close(struct rs_conn *c);

/* Deterministic test pattern: byte i of stream `seed`. */
void rs_fill(void *buf, size_t len, uint32_t seed);
/* Index of the first byte that differs from the pattern, or -1. */
long rs_check(const void *buf, size_t len, uint32_t seed);

#endif
