/* SPDX-License-Identifier: MIT */
/*
 * Layer 2, CQs and completion channels: a channel is a slot of the ring;
 * when it fires, its CQs' events are read and acknowledged and the CQs are
 * polled, armed and polled again. Uses the ring layer only.
 */
#ifndef RR_CQ_H
#define RR_CQ_H

#include "list.h"
#include "ring.h"

/* The CQs and channels of one bridge. */
struct rr__cqs {
	struct rr__ring *ring;
	struct rr_bridge_stats *stats;
	unsigned int cq_batch, budget, ack_batch;
	unsigned int poll_want; /* a poll with the whole budget asks for this */
	bool ring_reads;	/* channels may be read through the ring (see cq.c) */
	/* Bumped by the layer above at each call into the library and after
	 * each wait: a CQ found empty since is not polled again before its
	 * arm (see cq_poll()). Odd (1 and up by 2), so never 0, which a
	 * CQ's empty_gen is after an arm, with no test for the wrap. */
	unsigned int gen;
	unsigned int comp_vector; /* its CQs' vector, modulo the device's count */
	struct rr__list channels;
	struct rr__list cqs;	/* in the order poll_armed() takes them */
	struct rr__list active; /* CQs polled every pass */
	/* Event CQs drained by the loop, armed before it blocks: the
	 * first, then the others in order (see set_lazy() in cq.c). */
	struct rr_cq *lazy_one;
	struct rr__list lazy;
	unsigned int narmed; /* CQs armed, all channels: none, no poll_armed() */
	/* Adaptive re-poll (see cq.c), learnt over all CQs, so that many CQs
	 * that each fire rarely learn as one does: re-polls after a short
	 * batch that found nothing, in a row, then short batches to skip. */
	unsigned int repoll_idle;
	/* CQEs of channels handled (polls fired, events read through the
	 * ring) since the built-in loop's pass began reaping: a pass that
	 * reaped only those polls no armed CQ. */
	unsigned int chan_cqes;
	/* Registered by the layer above: send what its callbacks hold. Called
	 * before the event read and every arm (see posts_due() in cq.c). */
	void (*posts_due)(void *ctx);
	void *posts_ctx;
	/* Its flag that anything is held, set with posts_due (until then a
	 * false of rr__cqs_init()'s): while false the call, which would
	 * find nothing, is spared. */
	const bool *posts_held;
};

struct rr_channel {
	struct rr__cqs *set;
	struct ibv_comp_channel *ch;
	uint32_t slot;
	unsigned int ncqs;
	unsigned int narmed; /* its CQs armed: the most events it can hold */
	/* Those CQs' addresses XORed: with one armed, that one. No list
	 * to keep at each arm and event. */
	uintptr_t armed_xor;
	bool deaf;	 /* its poll failed for good: its CQs are polled */
	bool ring_reads; /* slot is an IORING_OP_READ of its events */
	struct rr__list link;
};

/* Upward hooks a layer above registers on a CQ. */
struct rr__cq_hooks {
	/* After a dispatch of this CQ's completions (not after destroy). */
	void (*after_dispatch)(void *ctx);
	/* Once, when the CQ is destroyed. */
	void (*destroyed)(void *ctx);
	void *ctx;
};

enum rr__spin { RR__SPIN_IDLE, RR__SPIN_BUSY, RR__SPIN_WINDOW };

struct rr_cq {
	struct rr__cqs *set;
	rr_channel *ch;
	struct ibv_cq *cq;
	enum rr_wait_mode mode;
	unsigned int spin_us;
	rr_wc_cb on_wc;
	rr_wc_batch_cb on_wc_batch; /* instead of on_wc: a batch per call */
	void *data;
	struct rr__cq_hooks hooks;
	unsigned int unacked;	/* events read, not yet acknowledged */
	unsigned int empty_gen; /* set->gen when a poll last found it empty; 0 after an arm */
	/* What keeps a polled event CQ from waiting on the lazy list: one
	 * word to ask, with its mode and channel (see lazy_ok() in cq.c). */
	union {
		struct {
			bool armed;  /* ibv_req_notify_cq() since the last event */
			bool active; /* on set->active: polled every pass */
			/* Completions kept: the rest of a batch or the stash
			 * below. One test for cq_poll(); set where they change
			 * (see cq.c). */
			bool kept;
			bool destroy_deferred;
		};
		uint32_t unsettled; /* any of the four */
	};
	bool evented; /* on the pending list of the current drain */
	bool lazy;    /* on set->lazy: unarmed until the loop would block */
	/* What a poll may have to do beside handing out what it found (a
	 * re-poll's lesson, a spin window's hit): one word to ask whether
	 * anything may (see poll_arrays() in cq.c). */
	union {
		struct {
			bool repolling; /* its next poll is a re-poll after a short batch */
			uint8_t spin;	/* hybrid: enum rr__spin, the spin window */
		};
		uint16_t poll_extra; /* 0: neither */
	};
	unsigned int spin_empty; /* empty polls in the current window */
	unsigned int spin_limit; /* its length in empty polls (untimed) */
	bool spin_timed;	 /* this window is timed with the clock */
	bool spin_retime;	 /* time the next one (the last found nothing) */
	uint64_t spin_t0;	 /* when a timed window opened */
	uint64_t spin_t;	 /* its last clock reading */
	uint64_t spin_ns;	 /* its length in ns */
	uint32_t poll_ns16;	 /* ns per empty poll x16; 0 = not measured */
	unsigned int windows;	 /* windows opened */
	uint64_t gap_ns;	 /* adaptive: expected gap between completions */
	unsigned int hit_share;	 /* adaptive: running share of windows that hit, /256 */
	unsigned int misses;	 /* adaptive: back-offs in a row */
	unsigned int skip;	 /* adaptive: windows still to skip (arm at once) */
	struct rr__list active_link;
	struct rr__list lazy_link;   /* set->lazy */
	struct rr__list link;	     /* set->cqs */
	unsigned int dispatch_depth; /* >0 while handing out its WCs */
	/* The batch being handed out (set->cq_batch entries). */
	struct ibv_wc *batch;
	uint32_t batch_head, nbatch;
	/* While hand_out_batch() runs: the entry after the one handed out
	 * and the bound, which take_qp and a destroy lower (NULL between). */
	struct ibv_wc *batch_next, *batch_end;
	/* Work completions taken out by rr__cq_take_qp() for other QPs. */
	struct ibv_wc *stash;
	uint32_t stash_head, nstash, stash_cap;
};

void rr__cqs_init(struct rr__cqs *set, struct rr__ring *ring, struct rr_bridge_stats *stats,
		  unsigned int cq_batch, unsigned int budget, unsigned int ack_batch);
/* Time may have passed: CQs found empty before are worth a poll again. */
static inline void rr__cqs_new_gen(struct rr__cqs *set)
{
	set->gen += 2;
}
/* Teardown, in this order: every CQ left (QPs must be gone), then, once
 * the devices let go of theirs, every channel left. */
void rr__cqs_destroy_cqs(struct rr__cqs *set);
void rr__cqs_fini(struct rr__cqs *set);

int rr__channel_create(struct rr__cqs *set, struct ibv_context *ctx, rr_channel **out);
int rr__cq_create(struct rr__cqs *set, rr_channel *ch, struct ibv_context *ctx,
		  const struct rr_cq_opts *opts, rr_cq **out);

/*
 * A CQ shared by several QPs, one of which is going: poll the CQ empty
 * now, hand that QP's work completions to fn in order (those left in the
 * batch a dispatch is handing out, then those kept earlier, then the
 * CQ's), and keep the others, in order, for the dispatch under way or the
 * next one. Afterwards no completion of that QP is left anywhere. -ENOMEM
 * if one could not be kept (it is then lost).
 */
int rr__cq_take_qp(rr_cq *cq, uint32_t qp_num, void (*fn)(void *ctx, const struct ibv_wc *wc),
		   void *ctx);

/* One pass over the CQs that must be polled without an event. */
unsigned int rr__cq_poll_active(struct rr__cqs *set);
static inline bool rr__cq_any_active(const struct rr__cqs *set)
{
	return !rr__list_empty(&set->active);
}

/*
 * Inside the built-in loop an event-mode CQ drained after its event is not
 * armed at once: it waits on the lazy list, polled by every pass, and is
 * armed (then polled again) only when the loop could block. Settle the
 * lazy CQs: poll each, then arm those found empty and poll them once
 * more, as @when says. With @armed_too, also poll one armed event CQ of
 * the set (in turn): a pass that woke for a CQE other than a channel's
 * finds what landed before its event came. Returns the work completions
 * handed out.
 */
enum rr__arm {
	RR__ARM_NOW,	 /* none is left unarmed */
	RR__ARM_IF_IDLE, /* unless a CQE waits in the ring: the loop cannot block */
	RR__ARM_LATER,	 /* none: the loop does not block next */
};
unsigned int rr__cqs_settle(struct rr__cqs *set, enum rr__arm when, bool armed_too);
static inline bool rr__cq_any_lazy(const struct rr__cqs *set)
{
	return set->lazy_one != NULL;
}

#endif
