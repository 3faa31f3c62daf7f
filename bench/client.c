// SPDX-License-Identifier: MIT
/*
 * The client side of a run: keeps cfg.qd messages in flight on each of
 * cfg.conns connections, checks every echo against what was sent, and
 * times each round trip from post to echo. The echo says the message
 * arrived, so its slot is free again without waiting for the send's own
 * completion, as in perftest. When the last echo is in, it sends STOP and
 * waits for the server's figures (FIN).
 *
 * idle: nothing is sent; a timer thread posts STOP after cfg.idle_ms, so
 * both sides spend that time waiting in their strategy.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

struct slot {
	double t0;
	bool busy;
};

struct client {
	struct client_out *out;
	struct slot *slots; /* conns * qd */
	long warm, total, issued, completed;
	struct side_figures f;
	int sc;
	double start_us;
	bool measuring, fin;
	struct bside *s;
};

static long warmup_of(const struct bench_cfg *cfg)
{
	long w = cfg->iters / 10;

	return w < 10 ? 10 : w;
}

static void fail(struct bside *s, int err, const char *what)
{
	struct client *c = s->role;

	if (s->err)
		return;
	s->err = err;
	snprintf(c->out->err, sizeof(c->out->err), "%s", what);
}

static int issue(struct client *c, uint32_t conn, uint32_t slot)
{
	struct bside *s = c->s;
	uint8_t *buf = side_send_slot(s, conn, slot);
	struct msg_hdr h = {.slot = slot, .seq = (uint32_t)c->issued};
	struct slot *sl = &c->slots[conn * s->cfg.qd + slot];

	memset(buf, (int)(c->issued & 0xff), s->cfg.msg_size);
	memcpy(buf, &h, sizeof(h));
	*sl = (struct slot){.t0 = tick_us(), .busy = true};
	c->issued++;
	return side_post(s, conn, wr_id_of(conn, WR_MSG, slot), buf, s->cfg.msg_size,
			 s->cfg.op == OP_WRITE_IMM ? (int)slot : -1);
}

static void send_stop(struct client *c)
{
	struct bside *s = c->s;
	uint8_t *buf = side_send_slot(s, 0, s->cfg.qd);
	struct msg_hdr h = {.slot = HDR_STOP};
	int rc;

	memcpy(buf, &h, sizeof(h));
	side_phase(PH_FINISH);
	rc = side_post(s, 0, wr_id_of(0, WR_CTRL, 0), buf, sizeof(h), -1);
	if (rc)
		fail(s, rc, "post STOP");
}

static void slot_done(struct client *c, uint32_t conn, uint32_t slot)
{
	struct bside *s = c->s;
	struct slot *sl = &c->slots[conn * s->cfg.qd + slot];
	double t = tick_us();

	if (c->completed >= c->warm)
		c->out->rtt[c->completed - c->warm] = t - sl->t0;
	sl->busy = false;
	c->completed++;
	if (c->completed == c->warm) {
		side_begin(&c->f, &c->sc);
		c->start_us = t;
		c->measuring = true;
		if (s->filer)
			s->filer->bytes = 0;
	}
	if (c->completed == c->total) {
		side_end(&c->f, c->sc);
		c->measuring = false;
		if (s->filer)
			c->out->file_bytes = s->filer->bytes;
		s->filer = NULL; /* the reads stop with the measurement */
		send_stop(c);
		return;
	}
	if (c->issued < c->total) {
		int rc = issue(c, conn, slot);

		if (rc)
			fail(s, rc, "post message");
	}
}

static void on_fin(struct client *c, const uint8_t *buf)
{
	memcpy(&c->out->srv, buf + sizeof(struct msg_hdr), sizeof(c->out->srv));
	c->fin = true;
	c->s->done = true;
}

static void on_wc(struct bside *s, const struct ibv_wc *wc)
{
	struct client *c = s->role;
	uint32_t conn = wr_conn(wc->wr_id), idx = wr_idx(wc->wr_id), slot;
	const uint8_t *got;
	struct msg_hdr h;
	struct slot *sl;

	if (wc->status != IBV_WC_SUCCESS) {
		if (!s->done)
			fail(s, -rr_wc_status_errno(wc->status), ibv_wc_status_str(wc->status));
		return;
	}
	if (conn >= s->nqp)
		return fail(s, -EPROTO, "completion of an unknown connection");
	switch (wr_kind(wc->wr_id)) {
	case WR_CTRL:
		return;
	case WR_MSG:
		return; /* the echo is what counts */
	case WR_RECV:
		got = side_recv_slot(s, conn, idx);
		memcpy(&h, got, sizeof(h));
		if (wc->opcode == IBV_WC_RECV && h.slot == HDR_FIN &&
		    wc->byte_len >= sizeof(h) + sizeof(struct side_figures))
			return on_fin(c, got);
		if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
			slot = be32toh(wc->imm_data);
			if (slot >= s->cfg.qd)
				return fail(s, -EPROTO, "echo for an unknown slot");
			got = side_recv_slot(s, conn, slot);
		} else {
			slot = h.slot;
		}
		if (slot >= s->cfg.qd || wc->byte_len != s->cfg.msg_size ||
		    memcmp(got, side_send_slot(s, conn, slot), s->cfg.msg_size))
			return fail(s, -EBADMSG, "echo differs from the message sent");
		if (side_post_recv(s, conn, idx))
			return fail(s, -EIO, "post receive");
		break;
	default:
		return fail(s, -EPROTO, "completion of an unknown request");
	}
	sl = &c->slots[conn * s->cfg.qd + slot];
	if (!sl->busy)
		return fail(s, -EPROTO, "echo for an idle slot");
	slot_done(c, conn, slot);
}

static void *idle_timer(void *arg)
{
	struct client *c = arg;

	usleep(c->s->cfg.idle_ms * 1000u);
	send_stop(c);
	return NULL;
}

int client_run(const struct bench_cfg *cfg, struct client_out *out)
{
	struct bside s;
	struct client c = {.out = out, .sc = -1};
	struct filer file = {.fd = -1};
	pthread_t timer;
	int rc;

	c.s = &s;
	side_trace = &out->cli_at;
	side_phase(PH_CONNECT);
	c.warm = cfg->wl == W_IDLE ? 0 : warmup_of(cfg);
	c.total = cfg->wl == W_IDLE ? 0 : c.warm + cfg->iters;
	rc = side_connect(&s, cfg, 10);
	s.role = &c;
	s.on_wc = on_wc;
	if (rc) {
		snprintf(out->err, sizeof(out->err), "connect to %s:%u: %s", cfg->addr, cfg->port,
			 strerror(-rc));
		goto out;
	}
	tick_us(); /* calibrate before anything is timed */
	c.slots = calloc((size_t)cfg->conns * cfg->qd, sizeof(*c.slots));
	if (!c.slots) {
		rc = -ENOMEM;
		goto out;
	}
	if (cfg->wl == W_MIXED) {
		rc = filer_open(&file, cfg->file);
		if (rc) {
			snprintf(out->err, sizeof(out->err), "%s: %s", cfg->file, strerror(-rc));
			goto out;
		}
		s.filer = &file;
	}
	if (cfg->wl == W_IDLE) {
		side_phase(PH_RUN);
		side_begin(&c.f, &c.sc);
		rc = -pthread_create(&timer, NULL, idle_timer, &c);
		if (rc)
			goto out;
	} else {
		for (uint32_t q = 0; q < cfg->conns && !rc; q++)
			for (uint32_t k = 0; k < cfg->qd && !rc && c.issued < c.total; k++)
				rc = issue(&c, q, k);
		if (rc) {
			snprintf(out->err, sizeof(out->err), "post message: %s", strerror(-rc));
			goto out;
		}
	}
	if (cfg->wl != W_IDLE)
		side_phase(PH_RUN);
	rc = side_loop(&s);
	if (cfg->wl == W_IDLE) {
		pthread_join(timer, NULL);
		side_end(&c.f, c.sc);
	}
	if (rc && !out->err[0])
		snprintf(out->err, sizeof(out->err), "%s", strerror(-rc));
	else if (rc)
		snprintf(out->err + strlen(out->err), sizeof(out->err) - strlen(out->err), ": %s",
			 strerror(-rc));
out:
	if (c.measuring)
		side_end(&c.f, c.sc);
	out->cli = c.f;
	side_phase(PH_CLOSE);
	side_close(&s); /* first: the ring's reads are done once it is gone */
	filer_close(&file);
	free(c.slots);
	out->rc = rc;
	return rc;
}
