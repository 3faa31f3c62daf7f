// SPDX-License-Identifier: MIT
/*
 * Bridge traffic on real rxe: SEND/RECV and RDMA WRITE with immediate at
 * queue depths 1 and 64, in event, hybrid and busy mode. Every callback is
 * counted exactly once per request and every payload is verified.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "bridge_pair.h"
#include "rdma_sync.h"
#include "require.h"

#define MSG   256
#define RECVS 128

struct traffic {
	struct bridge_pair p;
	uint32_t total, qd;
	uint8_t *sbuf, *rbuf, *wbuf;
	struct ibv_mr *smr, *rmr, *wmr;
	uint32_t posted, send_done, recv_done, errors;
	uint8_t *seen; /* per sequence number: times delivered */
	uint32_t bad_payload;
	int use_imm;
	uint32_t slots;
};

/* The callbacks need the traffic object: it lives in a global per test. */
static struct traffic *T;

static void check_seq(uint32_t seq, const uint8_t *payload)
{
	if (seq >= T->total) {
		T->bad_payload++;
		return;
	}
	T->seen[seq]++;
	if (rs_check(payload, MSG, seq) >= 0)
		T->bad_payload++;
}

static void post_next(void);

static void on_recv_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	uint32_t slot = (uint32_t)(uintptr_t)data;

	if (c->status) {
		/* Flushed at teardown: those are the spare receives. */
		if (c->status != -ECANCELED)
			T->errors++;
		return;
	}
	/* RC delivers in order: the n-th receive carries message n. */
	uint32_t seq = T->recv_done++;

	if (T->use_imm) {
		if (!c->has_imm || c->opcode != IBV_WC_RECV_RDMA_WITH_IMM || c->imm_data != seq)
			T->errors++;
		else
			check_seq(seq, T->wbuf + (size_t)(seq % T->slots) * MSG);
	} else {
		if (c->byte_len != MSG || c->opcode != IBV_WC_RECV)
			T->errors++;
		else
			check_seq(seq, T->rbuf + (size_t)slot * MSG);
	}
	if (rr_ep_post_recv(ep, T->rbuf + (size_t)slot * MSG, MSG, T->rmr, on_recv_done, data))
		T->errors++;
	post_next();
}

static void on_send_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (c->status)
		T->errors++;
	T->send_done++;
	post_next();
}

/* Keep qd messages in flight until total were posted. In flight counts
 * until the receiver handled a message (credits, as a real protocol does):
 * then the receiver always has a receive posted and never answers RNR. */
static void post_next(void)
{
	while (T->posted < T->total && T->posted - T->recv_done < T->qd &&
	       T->posted - T->send_done < T->qd) {
		uint32_t seq = T->posted;
		uint32_t slot = seq % T->slots;
		uint8_t *buf = T->sbuf + (size_t)slot * MSG;
		int rc;

		rs_fill(buf, MSG, seq);
		if (!T->use_imm) {
			rc = rr_ep_post_send(T->p.cli.ep, buf, MSG, T->smr, on_send_done, NULL);
		} else {
			uintptr_t raddr = (uintptr_t)T->wbuf + (uintptr_t)slot * MSG;

			rc = rr_ep_post_write_imm(T->p.cli.ep, buf, MSG, T->smr, raddr,
						  T->wmr->rkey, seq, on_send_done, NULL);
		}
		if (rc) {
			T->errors++;
			return;
		}
		T->posted++;
	}
}

static bool all_done(void *arg)
{
	return (T->send_done == T->total && T->recv_done == T->total) || T->errors;
}

static void run(uint32_t total, uint32_t qd, int use_imm, enum rr_wait_mode mode)
{
	const char *addr = rr_test_require_rdma();
	struct rr_ep_opts o = {
		.max_send_wr = 64, .max_recv_wr = RECVS, .mode = mode, .spin_us = 100};
	struct traffic t = {.total = total, .qd = qd, .use_imm = use_imm};
	size_t srv_slots;
	int rc;

	T = &t;
	t.slots = use_imm ? 4096 : RECVS;
	srv_slots = use_imm ? t.slots : RECVS;
	rc = bp_open(&t.p, addr, &o);
	cr_assert_eq(rc, 0, "bp_open: %s", strerror(-rc));
	t.sbuf = calloc(t.slots, MSG);
	t.rbuf = calloc(RECVS, MSG);
	t.wbuf = calloc(srv_slots, MSG);
	t.seen = calloc(total, 1);
	cr_assert(t.sbuf && t.rbuf && t.wbuf && t.seen);
	cr_assert_eq(rr_ep_reg_mr(t.p.cli.ep, t.sbuf, (size_t)t.slots * MSG, 0, &t.smr), 0);
	cr_assert_eq(rr_ep_reg_mr(t.p.srv.ep, t.rbuf, (size_t)RECVS * MSG, 0, &t.rmr), 0);
	cr_assert_eq(
		rr_ep_reg_mr(t.p.srv.ep, t.wbuf, srv_slots * MSG, IBV_ACCESS_REMOTE_WRITE, &t.wmr),
		0);
	for (uint32_t i = 0; i < RECVS; i++)
		cr_assert_eq(rr_ep_post_recv(t.p.srv.ep, t.rbuf + (size_t)i * MSG, MSG, t.rmr,
					     on_recv_done, (void *)(uintptr_t)i),
			     0);
	post_next();
	rc = bp_run_pred(t.p.b, all_done, NULL,
			 getenv("RR_STALL_MS") ? atoi(getenv("RR_STALL_MS")) : 240000);
	if (rc) {
		struct rr_bridge_stats st;

		rr_bridge_get_stats(t.p.b, &st, sizeof(st));
		uint32_t before = t.recv_done;
		rr_cq_set_mode(rr_ep_cq(t.p.cli.ep), RR_WAIT_BUSY, 0);
		rr_cq_set_mode(rr_ep_cq(t.p.srv.ep), RR_WAIT_BUSY, 0);
		for (int i = 0; i < 200; i++)
			rr_bridge_run_once(t.p.b, 10);
		cr_assert_fail("traffic stalled (busy polling then got %u more): posted %u sent %u "
			       "received %u; down: cli %d srv %d; "
			       "cqes %llu cq_events %llu arms %llu wcs %llu empty %llu rearms %llu "
			       "async %llu",
			       t.recv_done - before, t.posted, t.send_done, before,
			       t.p.cli.down_status, t.p.srv.down_status,
			       (unsigned long long)st.cqes, (unsigned long long)st.cq_events,
			       (unsigned long long)st.notify_arms, (unsigned long long)st.wcs,
			       (unsigned long long)st.empty_polls, (unsigned long long)st.rearms,
			       (unsigned long long)st.async_events);
	}
	cr_assert_eq(t.errors, 0, "%u errors", t.errors);
	cr_assert_eq(t.bad_payload, 0, "%u payloads differ", t.bad_payload);
	for (uint32_t i = 0; i < total; i++)
		cr_assert_eq(t.seen[i], 1, "message %u delivered %u times", i, t.seen[i]);
	/* Teardown flushes the spare receives, each exactly once. */
	cr_assert_eq(rr_ep_outstanding(t.p.srv.ep), RECVS);
	rr_ep_destroy(t.p.srv.ep);
	rr_ep_destroy(t.p.cli.ep);
	rr_mr_dereg(t.smr);
	rr_mr_dereg(t.rmr);
	rr_mr_dereg(t.wmr);
	bp_close(&t.p);
	free(t.sbuf);
	free(t.rbuf);
	free(t.wbuf);
	free(t.seen);
}

TestSuite(traffic, .timeout = 300);

Test(traffic, send_recv_qd1_event)
{
	run(50000, 1, 0, RR_WAIT_EVENT);
}

Test(traffic, send_recv_qd64_event)
{
	run(100000, 64, 0, RR_WAIT_EVENT);
}

Test(traffic, write_imm_qd1_event)
{
	run(50000, 1, 1, RR_WAIT_EVENT);
}

Test(traffic, write_imm_qd64_event)
{
	run(100000, 64, 1, RR_WAIT_EVENT);
}

Test(traffic, send_recv_qd64_hybrid)
{
	run(50000, 64, 0, RR_WAIT_HYBRID);
}

/* qd 1: the adaptive window opens and closes around every message. */
Test(traffic, send_recv_qd1_hybrid)
{
	run(20000, 1, 0, RR_WAIT_HYBRID);
}

Test(traffic, send_recv_qd1_hybrid_fixed)
{
	run(20000, 1, 0, RR_WAIT_HYBRID_FIXED);
}

Test(traffic, send_recv_qd1_busy)
{
	run(20000, 1, 0, RR_WAIT_BUSY);
}
