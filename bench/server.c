// SPDX-License-Identifier: MIT
/*
 * The server side of a run: learns the run from the client's first
 * connection request, echoes every message (a SEND from the receive slot
 * it arrived in, or a WRITE_IMM back into the client's slot), and on STOP
 * sends its own figures (FIN).
 *
 * An echo goes out from a send slot (or, for WRITE_IMM, from the slot the
 * client wrote), so its receive is posted again at once.
 *
 * The run ends when FIN's send completes, or FIN_GRACE_S after it was
 * posted: a client that has its FIN closes at once, and the
 * acknowledgement of FIN may never come (the client's QP gone before its
 * RC ACK went out, or no receive posted for FIN, answered with RNR NAKs
 * that an rnr_retry of 7 repeats for ever). On 6.12's rxe a server waited
 * the whole watchdog (300 s) for one while its client had finished.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define FIN_GRACE_S 2

/* SIGALRM FIN_GRACE_S after FIN: the wait is interrupted and ends. */
static volatile sig_atomic_t fin_late;

static void on_fin_late(int sig)
{
	(void)sig;
	fin_late = 1;
}

struct server {
	long warm;
	struct side_counters sc;
	bool measuring;
	struct side_figures f;
};

static void send_fin(struct bside *s, uint32_t conn)
{
	struct server *sv = s->role;
	uint8_t *buf = side_send_slot(s, conn, s->cfg.qd);
	struct msg_hdr h = {.slot = HDR_FIN};
	int rc;

	if (sv->measuring) {
		side_sync_counts(s);
		side_end(&sv->f, &sv->sc);
		sv->measuring = false;
	}
	side_phase(PH_FINISH);
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), &sv->f, sizeof(sv->f));
	rc = side_post(s, conn, wr_id_of(conn, WR_CTRL, 0), buf, sizeof(h) + sizeof(sv->f), -1);
	if (rc) {
		s->err = rc;
		return;
	}
	/* No SA_RESTART: the loop's wait returns EINTR and sees fin_late. */
	sigaction(SIGALRM, &(struct sigaction){.sa_handler = on_fin_late}, NULL);
	alarm(FIN_GRACE_S);
}

static void on_recv(struct bside *s, const struct ibv_wc *wc, uint32_t conn, uint32_t idx)
{
	struct server *sv = s->role;
	uint8_t *buf = side_recv_slot(s, conn, idx);
	struct msg_hdr h;
	int rc, slot = -1;

	if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		slot = (int)be32toh(wc->imm_data);
		if ((uint32_t)slot >= s->cfg.qd) {
			s->err = -EPROTO;
			return;
		}
		buf = side_recv_slot(s, conn, (uint32_t)slot);
	}
	memcpy(&h, buf, sizeof(h));
	if (slot < 0 && h.slot == HDR_STOP) {
		rc = side_post_recv(s, conn, idx);
		if (rc)
			s->err = rc;
		send_fin(s, conn);
		return;
	}
	if (!sv->measuring && h.seq == (uint32_t)sv->warm) {
		side_sync_counts(s);
		side_begin(&sv->f, &sv->sc);
		sv->measuring = true;
	}
	if (slot < 0) {
		/* Echo from a send slot, so the receive can be posted again
		 * now. Slot k is reused qd echoes later, when the client has
		 * seen echo k. (Inline sends would spare the copy; on the
		 * lab's rxe they locked CPUs up in the kernel.) */
		uint8_t *out = side_send_slot(s, conn, s->qps[conn].echo_next++ % s->cfg.qd);

		memcpy(out, buf, wc->byte_len);
		buf = out;
	}
	rc = side_post(s, conn, wr_id_of(conn, WR_MSG, idx), buf, wc->byte_len, slot);
	if (!rc)
		rc = side_post_recv(s, conn, idx);
	if (rc)
		s->err = rc;
}

static void on_wc(struct bside *s, const struct ibv_wc *wc)
{
	uint32_t conn = wr_conn(wc->wr_id), idx = wr_idx(wc->wr_id);

	if (wc->status != IBV_WC_SUCCESS) {
		if (!s->done && !s->err)
			s->err = -rr_wc_status_errno(wc->status);
		return;
	}
	if (conn >= s->nqp) {
		s->err = -EPROTO;
		return;
	}
	if (!s->qps[conn].id)
		return; /* a half-made connection's flushed receive */
	switch (wr_kind(wc->wr_id)) {
	case WR_RECV:
		on_recv(s, wc, conn, idx);
		break;
	case WR_MSG:
		break; /* nothing waits for an echo's own completion */
	case WR_CTRL:
		s->done = true; /* FIN is out */
		break;
	default:
		s->err = -EPROTO;
	}
}

/*
 * Listen on addr:port (0: any), tell the bound port on port_fd (-1: no
 * one to tell), serve one run. The caller's side is closed on return.
 */
int server_run_one(struct bside *s, const char *addr, uint16_t port, int port_fd,
		   const struct bench_cfg *known)
{
	struct server sv = {.sc = {-1, -1}};
	struct bench_cfg cfg = {0};
	uint16_t bound = 0;
	int rc;

	/* Groups, and the -ep strategies' endpoints, are groups.c's. */
	if (known && (known->threads > 1 || strategy_ep(known->strat))) {
		memset(s, 0, sizeof(*s)); /* side_close() has nothing to do */
		s->epfd = -1;
		rc = group_server_run(known, addr, port_fd);
		s->listening = rc != -EADDRNOTAVAIL;
		return rc;
	}
	side_phase(PH_CONNECT);
	rc = side_listen(s, addr, port, &bound);
	if (port_fd >= 0 && write(port_fd, &bound, sizeof(bound)) != sizeof(bound) && !rc)
		rc = -EIO;
	if (rc)
		return rc;
	s->cfg.addr = addr;
	s->role = &sv;
	s->on_wc = on_wc;
	rc = side_accept(s, &cfg, 1);
	if (s->half_made)
		fprintf(stderr, "ringrdma-bench: server: %u half-made connections dropped\n",
			s->half_made);
	if (rc)
		return rc;
	sv.warm = cfg.wl == W_IDLE ? -1 : (cfg.iters / 10 < 10 ? 10 : cfg.iters / 10);
	if (cfg.wl == W_IDLE) {
		side_begin(&sv.f, &sv.sc);
		sv.measuring = true;
	}
	side_phase(PH_RUN);
	fin_late = 0;
	s->stop = &fin_late;
	rc = side_loop(s);
	alarm(0);
	if (fin_late && !s->done && !rc)
		fprintf(stderr,
			"ringrdma-bench: server: FIN not acknowledged within %d s; "
			"the run ends without it\n",
			FIN_GRACE_S);
	if (sv.measuring)
		side_end(&sv.f, &sv.sc);
	return rc;
}
