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
 *
 * The fake device (fake_device()) goes further: QPs, SRQs, MRs and memory
 * windows, with two QPs that rdma_cm (fake_cm.c) connected really moving
 * bytes between them, and a provider personality chosen at run time by
 * RR_FAKE_PROVIDER=rxe|mlx5 (default rxe), modelled on rdma-core:
 *
 *  rxe:  no cq_event op, channels carry CQ handles; ibv_destroy_qp()
 *        leaves the QP's completions in its CQs; one completion vector;
 *        SQ and SRQ slots free once the work request is done.
 *  mlx5: a cq_event op that ibv_get_cq_event() calls for every event, as
 *        libibverbs does; it advances the CQ's arm sequence number, and an
 *        arm made after an event whose op was not called is ignored (no
 *        event comes); arming a CQ that holds completions raises an event
 *        at once; ibv_destroy_qp() purges the QP's completions from its
 *        CQs and gives the SRQ receives those consumed back to the SRQ
 *        (the receive is then gone without a completion); a QP on an SRQ
 *        moved to error raises IBV_EVENT_QP_LAST_WQE_REACHED; four
 *        completion vectors; SQ and SRQ slots free when a completion
 *        after them is polled; fake_device_disassociate() models a hot
 *        unplug.
 *
 * Everything here is serialized by one recursive lock, so the library's
 * group threads may post, poll and call rdma_cm concurrently.
 */
#ifndef RR_TESTS_FAKE_VERBS_H
#define RR_TESTS_FAKE_VERBS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define FAKE_MAX_WC 8192

/* One queued work completion and what the provider knows about it. */
struct fake_cqe {
	struct ibv_wc wc;
	uint32_t sq_seq;      /* sends: the WQE's place in its SQ */
	bool send;	      /* from a send queue */
	struct fake_srq *srq; /* receives taken from an SRQ */
};

struct fake_cq {
	struct ibv_cq cq;   /* first: the library sees this */
	struct fake_cqe *q; /* FAKE_MAX_WC entries */
	unsigned int head, tail;
	bool armed;
	unsigned int arms;	     /* ibv_req_notify_cq() calls */
	unsigned int events;	     /* events raised */
	unsigned int delivered;	     /* events read with ibv_get_cq_event() */
	unsigned int delivered_step; /* when the last was (see fake_posts) */
	unsigned int acked;
	unsigned int ack_calls;
	unsigned int polls;
	int inject_on_arm; /* WCs to add, without event, just before an arm */
	bool late_event;   /* raise events only in fake_raise_late(), as
			    * rxe does from a tasklet after the WC is
			    * visible */
	unsigned int late_pending;
	/* The fake device's CQs. */
	int comp_vector;
	unsigned int nqps;	     /* QPs using it */
	unsigned int cq_event_calls; /* the provider's cq_event op */
	unsigned int arm_sn;	     /* mlx5: advanced by cq_event */
	unsigned int fired_sn;	     /* mlx5: the arm_sn of the last event */
	bool fired;
	unsigned int ignored_arms; /* mlx5: arms with a used-up sequence number */
	unsigned int overruns;	   /* completions beyond cq.cqe */
	unsigned int purged;	   /* completions removed by ibv_destroy_qp() */
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

/* Devices: PDs, and an async-event fd (a pipe) for each of fake_ctx and
 * fake_ctx_rr, open from the start. */
extern unsigned int fake_pds_live;
/* Empty fake_ctx's async queue (both: the fd stays open). */
int fake_async_open(void);
void fake_async_close(void);
/* Queue an async event and make the async fd readable: on fake_ctx, and
 * on @ctx (fake_ctx or fake_ctx_rr). */
void fake_async_event(enum ibv_event_type type);
void fake_async_event_on(struct ibv_context *ctx, enum ibv_event_type type);

/* clock_gettime() calls (wrapped) since the start of the process. */
extern unsigned int fake_clock_reads;
/* Time passes at once: every CLOCK_MONOTONIC reading (wrapped) from now
 * on is @ns later. Only forward, so every deadline still comes. */
void fake_clock_advance(uint64_t ns);
/* io_uring_submit_and_get_events() calls: a pass that does not wait
 * entering the kernel only to collect deferred completions. */
extern unsigned int fake_get_events;
/* io_uring_submit_and_wait() and _wait_timeout() calls, and the library's
 * min-wait io_uring_enter2(): passes that may sleep. */
extern unsigned int fake_waits;
/* Called by those two just before they enter the kernel: what happens
 * there happens while the loop sleeps (tests/cost injects completions). */
extern void (*fake_before_wait)(void);

/* ---- the fake device and its provider personalities ---- */

enum fake_provider { FAKE_RXE, FAKE_MLX5 };

/* The device rdma_cm hands out (id->verbs), set up on first use from
 * RR_FAKE_PROVIDER; its async fd is a pipe. */
struct ibv_context *fake_device(void);
enum fake_provider fake_provider(void);
const char *fake_provider_name(void);

/* Hot unplug, as mlx5 sees it: IBV_EVENT_DEVICE_FATAL is queued, then the
 * async fd reports POLLHUP for good and ibv_get_async_event() fails with
 * EIO once that event was read. */
void fake_device_disassociate(void);
/* Queue an async event on the fake device (element: a QP, CQ or SRQ). */
void fake_device_async_event(enum ibv_event_type type, void *element);
/* Async events queued on the fake device and not read yet. */
unsigned int fake_device_async_queued(void);

/* While on, a receive a QP takes completes later, as hardware may deliver
 * its CQE after the QP consumed the WQE: its completion waits until
 * fake_release_recvs(), which drops those of QPs destroyed meanwhile. */
void fake_hold_recvs(bool on);
void fake_release_recvs(void);

/* Fault switches. */
void fake_set_mw_supported(bool on); /* off: ibv_alloc_mw() fails EOPNOTSUPP */

/* Counters since the start of the process; read them with fake_stats_get()
 * (a consistent copy, taken under the fakes' lock). */
struct fake_stats {
	unsigned int cqes_purged;	/* mlx5: removed by ibv_destroy_qp() */
	unsigned int srq_wqes_returned; /* mlx5: SRQ receives those had consumed */
	unsigned int cq_event_calls;	/* the provider's cq_event op */
	unsigned int ignored_arms;	/* mlx5: arms that will raise nothing */
	unsigned int cq_overruns;	/* completions beyond a CQ's size */
	unsigned int last_wqe_events;	/* IBV_EVENT_QP_LAST_WQE_REACHED raised */
	unsigned int async_dropped;	/* unread async events of a destroyed QP */
	unsigned int qps_live, srqs_live, mrs_live, mws_live;
	unsigned int qps_created;
	unsigned int pd_busy;		    /* ibv_dealloc_pd() refused (EBUSY) */
	unsigned int ids_live;		    /* rdma_cm ids not destroyed */
	unsigned int cm_channels_live;	    /* rdma_cm event channels */
	unsigned int cm_events_unacked;	    /* read and not acknowledged */
	unsigned int ids_with_qp_destroyed; /* rdma_destroy_id() with a QP left */
	unsigned int cq_events_delivered;   /* events ibv_get_cq_event() returned */
	unsigned int ids_orphaned;	    /* ids left on a destroyed event channel */
};
struct fake_stats fake_stats_get(void);

/* A CQ's completion vector, as given to ibv_create_cq(). */
int fake_cq_comp_vector(struct ibv_cq *cq);
/* Completions waiting in a CQ (not polled yet). */
unsigned int fake_cq_pending(struct ibv_cq *cq);
/* Receives posted on an SRQ and not consumed; and its slots free (not
 * posted, and under mlx5 not consumed by a completion still unpolled). */
unsigned int fake_srq_posted(struct ibv_srq *srq);
unsigned int fake_srq_room(struct ibv_srq *srq);
/* A QP's state (IBV_QPS_*), and its SQ WQEs not yet executed. */
enum ibv_qp_state fake_qp_state(struct ibv_qp *qp);
unsigned int fake_qp_sq_waiting(struct ibv_qp *qp);

/* What a queue's post op was handed since the queue was created: calls,
 * work requests taken, the longest chain, for send queues those taken
 * asking for a completion and the calls whose last work request asked
 * for none, and when the last call was. */
struct fake_posts {
	unsigned int calls, wrs, max_chain;
	unsigned int signalled, last_unsignalled;
	/* The last call's place among post calls and event reads, all
	 * queues and CQs numbered together (fake_cq's delivered_step). */
	unsigned int last_step;
};
struct fake_posts fake_qp_send_posts(struct ibv_qp *qp);
struct fake_posts fake_qp_recv_posts(struct ibv_qp *qp);
struct fake_posts fake_srq_posts(struct ibv_srq *srq);
/* The next post call on the queue (sends, receives, an SRQ) that reaches
 * its @at-th work request (0: the first) refuses it and the rest with
 * @err (a positive errno) and *bad_wr pointing at it, as a provider does;
 * those before it are taken. Once. */
void fake_refuse_send(struct ibv_qp *qp, unsigned int at, int err);
void fake_refuse_recv(struct ibv_qp *qp, unsigned int at, int err);
void fake_refuse_srq_recv(struct ibv_srq *srq, unsigned int at, int err);

/* ---- used by fake_cm.c ---- */

void fake_lock(void);
void fake_unlock(void);
/* Wait on @cv under the lock (held once) for at most @ms; false: timed out. */
bool fake_wait(pthread_cond_t *cv, int ms);
/* QPs for rdma_create_qp()/rdma_destroy_qp(): errno set on failure. */
struct ibv_qp *fake_qp_create(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int fake_qp_destroy(struct ibv_qp *qp);
/* Is @qp a QP not destroyed yet? (compares pointers only) */
bool fake_qp_alive(const struct ibv_qp *qp);
/* Connect two QPs (both to RTS); a QP to error, its work flushed. */
void fake_qp_connect(struct ibv_qp *a, struct ibv_qp *b);
void fake_qp_to_error(struct ibv_qp *qp);
bool fake_device_dead(void);
/* The counters themselves, to update under the lock. */
struct fake_stats *fake_stats_raw(void);

#endif
