/* SPDX-License-Identifier: MIT */
/*
 * Stub verbs for host unit tests, linked with -Wl,--wrap: a completion
 * channel is a pipe (one byte per event, so the fd is readable exactly while
 * events are pending, like the real one), a CQ is a queue of fake work
 * completions that raises an event when it is armed, as hardware does.
 *
 * fake_ctx's provider has a cq_event op (as mlx5's), so the library reads
 * its channels with ibv_get_cq_event(). fake_ctx_rr's has none (as rxe's):
 * its channels carry what the kernel's do, one 8-byte CQ handle per event,
 * and the library may read them through the ring.
 */
#ifndef RR_TESTS_FAKE_VERBS_H
#define RR_TESTS_FAKE_VERBS_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define FAKE_MAX_WC 8192

struct fake_cq {
	struct ibv_cq cq; /* first: the library sees this */
	uint64_t wr_ids[FAKE_MAX_WC];
	unsigned int head, tail;
	bool armed;
	unsigned int arms;       /* ibv_req_notify_cq() calls */
	unsigned int events;     /* events raised */
	unsigned int delivered;  /* events read with ibv_get_cq_event() */
	unsigned int acked;
	unsigned int ack_calls;
	unsigned int polls;
	int inject_on_arm;       /* WCs to add, without event, just before an arm */
	bool late_event;         /* raise events only in fake_raise_late(), as
				  * rxe does from a tasklet after the WC is
				  * visible */
	unsigned int late_pending;
};

struct fake_channel {
	struct ibv_comp_channel ch; /* first */
	int wfd;
	int fail_errno; /* reads fail with this while events wait (0: no) */
	bool handles;	/* fake_ctx_rr's: the pipe carries CQ handles */
	struct fake_cq *fired[FAKE_MAX_WC];
	unsigned int head, tail;
};

/* The device contexts whose ops the fakes provide. */
extern struct ibv_context fake_ctx, fake_ctx_rr;

/* Unacknowledged events found by the last ibv_destroy_cq() (should be 0). */
extern unsigned int fake_unacked_at_destroy;
extern unsigned int fake_cqs_live, fake_channels_live;

static inline struct fake_cq *fake_cq_of(struct ibv_cq *cq)
{
	return (struct fake_cq *)cq;
}

/* n new work completions with wr_id first, first+1, ... (qp_num: the
 * wr_id's upper 32 bits); raises an event if the CQ is armed. */
void fake_complete(struct fake_cq *cq, unsigned int n, uint64_t first);
/* Raise the events a late_event CQ owes. */
void fake_raise_late(struct fake_cq *cq);
/* ibv_get_cq_event() calls, those that found nothing included: each is a
 * read() syscall on a real channel. */
extern unsigned int fake_event_reads;

/* Devices: PDs, and an async-event fd (a pipe) for fake_ctx. */
extern unsigned int fake_pds_live;
int fake_async_open(void);
void fake_async_close(void);
/* Queue an async event and make the async fd readable. */
void fake_async_event(enum ibv_event_type type);

/* clock_gettime() calls (wrapped) since the start of the process. */
extern unsigned int fake_clock_reads;
/* io_uring_submit_and_get_events() calls: a pass that does not wait
 * entering the kernel only to collect deferred completions. */
extern unsigned int fake_get_events;

#endif
