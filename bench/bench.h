/* SPDX-License-Identifier: MIT */
/* ringrdma-bench: shared definitions. */
#ifndef RR_BENCH_H
#define RR_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include <ringrdma.h>

#define BENCH_MAX_MSG 65536
#define BENCH_MAX_QD 128

/* How a side waits for its work completions. */
enum strategy { S_BUSY, S_THREAD, S_EPOLL, S_URING, S_HYBRID, S_COUNT };

struct bench_cfg {
	enum strategy strat;
	uint32_t msg_size;
	long iters;
	unsigned int spin_us;
	const char *addr;
	uint16_t port;
};

/* One side of a connection: the QP and whatever its strategy waits on. */
struct bconn {
	struct bench_cfg cfg;
	struct rdma_event_channel *ec;
	struct rdma_cm_id *listen_id, *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch; /* thread, epoll */
	struct ibv_cq *cq;
	int epfd;
	unsigned int unacked;
	/* uring, hybrid: the bridge owns the channel and the CQ */
	struct io_uring ring;
	rr_bridge *b;
	rr_cq *rcq;
	struct ibv_wc fifo[BENCH_MAX_QD * 2];
	unsigned int fifo_n;
	uint8_t *buf;
	struct ibv_mr *mr;
};

/* Figures of one side, measured over the timed loop. */
struct side_figures {
	double cpu_s;
	long ctx_switches;
	long syscalls; /* -1 when the kernel cannot count them */
};

const char *strategy_name(enum strategy s);
int strategy_parse(const char *name, enum strategy *out);

/* conn.c: rdma_cm connection with a QP on a CQ the strategy waits on. */
int bconn_listen(struct bconn *c, const struct bench_cfg *cfg, uint16_t *port);
int bconn_accept(struct bconn *c);
int bconn_connect(struct bconn *c, const struct bench_cfg *cfg);
int bconn_post_recv(struct bconn *c, uint32_t slot);
int bconn_post_send(struct bconn *c, uint32_t slot, uint32_t len);
void bconn_close(struct bconn *c);

/* wait.c: block (or spin) until at least one work completion; 0..n or -errno. */
int bconn_wait(struct bconn *c, struct ibv_wc *wc, int max);

/* figures.c */
int syscalls_open(void);
long syscalls_read(int fd);
void side_begin(struct side_figures *f, int *sc_fd);
void side_end(struct side_figures *f, int sc_fd);
double now_us(void);

#endif
