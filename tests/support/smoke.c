// SPDX-License-Identifier: MIT
/* Both halves of the lab smoke exchange; see smoke.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_sync.h"
#include "smoke.h"

#define SMOKE_MAGIC 0x72727331u
#define PAYLOAD	    1000

enum { MSG_OFFER = 1, MSG_DONE, MSG_RESULT };
enum { WR_RECV0 = 1, WR_RECV1, WR_SEND, WR_WRITE };

struct msg {
	uint32_t magic;
	uint32_t kind;
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
	uint32_t seed;
	int32_t status; /* RESULT: 0, or 1 + index of the first bad byte, negated */
	uint8_t payload[PAYLOAD];
};

struct bufs {
	struct msg msgs[3]; /* recv0, recv1, send */
	struct ibv_mr *msg_mr;
	uint8_t *data;
	struct ibv_mr *data_mr;
};

static int setup_bufs(struct rs_conn *c, struct bufs *b, int remote_write)
{
	b->msg_mr = rs_reg(c, b->msgs, sizeof(b->msgs), 0);
	b->data = calloc(1, SMOKE_WRITE_LEN);
	if (!b->msg_mr || !b->data)
		return -ENOMEM;
	b->data_mr =
		rs_reg(c, b->data, SMOKE_WRITE_LEN, remote_write ? IBV_ACCESS_REMOTE_WRITE : 0);
	return b->data_mr ? 0 : -ENOMEM;
}

static void free_bufs(struct bufs *b)
{
	if (b->data_mr)
		ibv_dereg_mr(b->data_mr);
	if (b->msg_mr)
		ibv_dereg_mr(b->msg_mr);
	free(b->data);
	memset(b, 0, sizeof(*b));
}

static int check_msg(struct rs_conn *c, const struct ibv_wc *wc, const struct msg *m, uint32_t kind)
{
	if (wc->opcode != IBV_WC_RECV || wc->byte_len != sizeof(*m) || m->magic != SMOKE_MAGIC ||
	    m->kind != kind) {
		snprintf(c->err, sizeof(c->err), "bad message: opcode %d len %u magic %#x kind %u",
			 wc->opcode, wc->byte_len, m->magic, m->kind);
		return -EPROTO;
	}
	return 0;
}

static int serve_one(struct rs_conn *c, struct bufs *b)
{
	struct msg *in = &b->msgs[0], *out = &b->msgs[2];
	struct ibv_wc wc;
	long bad;
	int rc;

	rc = rs_post_recv(c, b->msg_mr, in, sizeof(*in), WR_RECV0);
	if (!rc)
		rc = rs_accept(c, SMOKE_TIMEOUT_MS);
	if (rc)
		return rc;

	memset(b->data, 0, SMOKE_WRITE_LEN);
	*out = (struct msg){.magic = SMOKE_MAGIC,
			    .kind = MSG_OFFER,
			    .addr = (uintptr_t)b->data,
			    .rkey = b->data_mr->rkey,
			    .len = SMOKE_WRITE_LEN};
	rc = rs_post_send(c, b->msg_mr, out, sizeof(*out), WR_SEND);
	/* The OFFER's send completion and the client's DONE, in any order. */
	for (int sent = 0, got = 0; !rc && !(sent && got);) {
		rc = rs_wait_wc(c, &wc, SMOKE_TIMEOUT_MS);
		if (rc)
			return rc;
		if (wc.wr_id == WR_SEND)
			sent = 1;
		else if (wc.wr_id == WR_RECV0 && (rc = check_msg(c, &wc, in, MSG_DONE)) == 0)
			got = 1;
	}
	if (rc)
		return rc;

	/* SEND is ordered after the WRITE on the same QP: the data is there. */
	out->kind = MSG_RESULT;
	out->status = 0;
	bad = rs_check(b->data, in->len, in->seed);
	if (in->len != SMOKE_WRITE_LEN)
		out->status = -1;
	else if (bad >= 0)
		out->status = (int32_t)(-1 - bad);
	else if ((bad = rs_check(in->payload, PAYLOAD, in->seed + 1)) >= 0)
		out->status = (int32_t)(-1 - bad);
	rc = rs_post_send(c, b->msg_mr, out, sizeof(*out), WR_SEND);
	if (!rc)
		rc = rs_wait_wc(c, &wc, SMOKE_TIMEOUT_MS);
	if (!rc && out->status)
		snprintf(c->err, sizeof(c->err), "data mismatch (status %d)", out->status);
	return rc ? rc : out->status ? -EBADMSG : 0;
}

int smoke_server(const char *addr, uint16_t port, int rounds, int use_events, smoke_ready_fn ready,
		 void *arg, char *err, size_t errlen)
{
	struct rs_conn lc, c;
	struct bufs b = {0};
	int rc;

	rs_init(&lc, 16, use_events);
	rc = rs_listen(&lc, addr, &port);
	if (rc)
		goto out;
	if (ready)
		ready(port, arg);
	for (int i = 0; i < rounds && !rc; i++) {
		/* Each connection gets its own PD/CQ in a per-connection rs_conn
		 * that borrows the listener's event channel. */
		rs_init(&c, 16, use_events);
		c.ec = lc.ec;
		c.ec_borrowed = 1;
		rc = rs_get_request(&c, SMOKE_TIMEOUT_MS * 3);
		if (!rc)
			rc = setup_bufs(&c, &b, 1);
		if (!rc)
			rc = serve_one(&c, &b);
		if (rc)
			snprintf(lc.err, sizeof(lc.err), "%s", c.err);
		free_bufs(&b);
		rs_close(&c);
	}
out:
	if (rc && err)
		snprintf(err, errlen, "server: %s", lc.err);
	rs_close(&lc);
	return rc;
}

int smoke_client(const char *addr, uint16_t port, uint32_t seed, int use_events, int connect_ms,
		 char *err, size_t errlen)
{
	struct rs_conn c;
	struct bufs b = {0};
	struct msg *offer = &b.msgs[0], *result = &b.msgs[1], *out = &b.msgs[2];
	struct ibv_wc wc;
	int rc, got_offer = 0, got_result = 0, sends = 0;

	rs_init(&c, 16, use_events);
	rc = rs_resolve(&c, addr, port, SMOKE_TIMEOUT_MS);
	if (!rc)
		rc = setup_bufs(&c, &b, 0);
	if (!rc)
		rc = rs_post_recv(&c, b.msg_mr, offer, sizeof(*offer), WR_RECV0);
	if (!rc)
		rc = rs_post_recv(&c, b.msg_mr, result, sizeof(*result), WR_RECV1);
	if (!rc)
		rc = rs_connect(&c, addr, port, connect_ms);
	if (!rc)
		rc = rs_wait_wc(&c, &wc, SMOKE_TIMEOUT_MS);
	if (!rc && wc.wr_id != WR_RECV0)
		rc = -EPROTO;
	if (!rc)
		rc = check_msg(&c, &wc, offer, MSG_OFFER);
	got_offer = !rc;
	if (got_offer && offer->len < SMOKE_WRITE_LEN) {
		snprintf(c.err, sizeof(c.err), "window too small: %u", offer->len);
		rc = -EPROTO;
	}
	if (!rc) {
		rs_fill(b.data, SMOKE_WRITE_LEN, seed);
		*out = (struct msg){.magic = SMOKE_MAGIC,
				    .kind = MSG_DONE,
				    .len = SMOKE_WRITE_LEN,
				    .seed = seed};
		rs_fill(out->payload, PAYLOAD, seed + 1);
		rc = rs_post_write(&c, b.data_mr, b.data, SMOKE_WRITE_LEN, offer->addr, offer->rkey,
				   WR_WRITE);
	}
	if (!rc)
		rc = rs_post_send(&c, b.msg_mr, out, sizeof(*out), WR_SEND);
	while (!rc && (sends < 2 || !got_result)) {
		rc = rs_wait_wc(&c, &wc, SMOKE_TIMEOUT_MS);
		if (rc)
			break;
		if (wc.wr_id == WR_RECV1) {
			rc = check_msg(&c, &wc, result, MSG_RESULT);
			got_result = 1;
		} else if (wc.wr_id == WR_WRITE || wc.wr_id == WR_SEND) {
			sends++;
		} else {
			rc = -EPROTO;
		}
	}
	if (!rc && result->status) {
		snprintf(c.err, sizeof(c.err), "server found a mismatch (status %d)",
			 result->status);
		rc = -EBADMSG;
	}
	if (rc && err)
		snprintf(err, errlen, "client: %s", c.err[0] ? c.err : strerror(-rc));
	free_bufs(&b);
	rs_close(&c);
	return rc;
}
