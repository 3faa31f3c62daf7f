/* SPDX-License-Identifier: MIT */
/*
 * Layer 1, the ring: poll and timer slots on the application's io_uring,
 * the SQEs the bridge owes the ring, kicks, and the clock. Knows nothing
 * of verbs; the layers above register a function per slot.
 */
#ifndef RR_RING_H
#define RR_RING_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#include "ringrdma.h"

/*
 * user_data of a bridge SQE: tag(16) | kind(4) | generation(12) |
 * ring instance(12) | slot(20). The instance tells this bridge's CQEs from
 * those of an earlier bridge on the same ring; the generation tells a
 * slot's current use from its earlier ones.
 */
enum rr__ud_kind {
	RR__UD_POLL = 1,     /* a slot's POLL_ADD, TIMEOUT or READ */
	RR__UD_CANCEL = 2,   /* the POLL_REMOVE / TIMEOUT_REMOVE / ASYNC_CANCEL of a slot */
	RR__UD_KICK = 3,     /* NOP: come back for busy/hybrid/backlogged CQs */
	RR__UD_MSG = 4,	     /* another thread rang this ring's bell (MSG_RING) */
	RR__UD_MSG_SENT = 5, /* our MSG_RING SQE completed; slot = the peer */
};

#define RR__SLOT_BITS 20
#define RR__MAX_SLOTS (1u << RR__SLOT_BITS)
#define RR__NO_SLOT   UINT32_MAX

static inline uint64_t rr__ud(enum rr__ud_kind kind, uint32_t inst, uint32_t gen, uint32_t slot)
{
	return RR_USER_DATA_TAG | ((uint64_t)(kind & 0xf) << 44) | ((uint64_t)(gen & 0xfff) << 32) |
	       ((uint64_t)(inst & 0xfff) << RR__SLOT_BITS) | (slot & (RR__MAX_SLOTS - 1));
}

static inline enum rr__ud_kind rr__ud_kind(uint64_t ud)
{
	return (enum rr__ud_kind)((ud >> 44) & 0xf);
}

static inline uint32_t rr__ud_gen(uint64_t ud)
{
	return (uint32_t)(ud >> 32) & 0xfff;
}

static inline uint32_t rr__ud_inst(uint64_t ud)
{
	return (uint32_t)(ud >> RR__SLOT_BITS) & 0xfff;
}

static inline uint32_t rr__ud_slot(uint64_t ud)
{
	return (uint32_t)ud & (RR__MAX_SLOTS - 1);
}

/*
 * Called with the poll result (revents >= 0); -ETIME when a timer expired;
 * or once with another negative errno when the poll could not be kept
 * alive (the slot is then gone: its owner forgets it, the ring layer lets
 * the kernel's poll go). Must drain the fd: polls may be edge-like.
 *
 * A poll fails when it cannot be armed or reports POLLERR, POLLHUP or
 * POLLNVAL (a disassociated device's fds report POLLERR for ever, a pipe
 * whose writer is gone POLLHUP): such a revents reaches fn only together
 * with POLLIN, so the data is drained, and a multishot poll that reports
 * one is ended and polled single-shot until a clean result. After
 * RR__MAX_ARM_ERRORS failures in a row (a clean result starts the count
 * again) the poll is given up, counted in stats.poll_failures, and fn gets
 * -EBADF (POLLNVAL), -EIO (POLLERR), -EPIPE (POLLHUP alone), or the
 * error the poll itself failed with.
 */
typedef void (*rr__poll_fn)(void *ctx, int revents);
#define RR__MAX_ARM_ERRORS 8
/* A read slot's result: res bytes of data (res >= 0), or a negative errno
 * after which the slot is gone (data NULL). data is valid during the call. */
typedef void (*rr__read_fn)(void *ctx, int res, void *data);

struct rr__poll;

#define RR__BELL_FNS 2

/* How this ring reaches another ring's bell: duplicates of its ring fd and
 * eventfd, so a descriptor we write to is always ours to write to; both
 * -1 once that ring is gone and let go of (its place may be reused). */
struct rr__peer {
	int ring_fd;
	int efd;
	uint32_t inst;
	uint64_t uid;
	unsigned int inflight; /* its MSG_RINGs whose CQE has not come */
};

struct rr__ring {
	struct io_uring *io;
	struct rr_bridge_stats *stats;
	uint32_t inst;
	uint64_t uid; /* never reused in the process: tells peers apart */
	bool multishot;
	bool no_multishot; /* the kernel refused a multishot poll */
	bool loop_owned;   /* inside the built-in loop: no kicks needed */
	bool arm_at_end;   /* a pass is on that settles event CQs as it ends */
	bool kick_wanted;  /* a kick NOP is owed */
	bool kick_pending; /* a kick NOP is in the SQ or the kernel */
	/* Any SQE owed (a slot queued, a MSG_RING, a kick): set with each,
	 * cleared by rr__ring_flush_owed() once none is left. */
	bool owing;
	/* Without NDEBUG: flushes that found owing other than what it stands
	 * for (see rr__ring_flush_owed()); the tests want none. */
	unsigned int owing_wrong;
	struct rr__poll *slots;
	uint32_t nslots, free_slot, live_slots;
	unsigned int cancels;	       /* cancel SQEs whose CQE has not arrived */
	uint32_t pend_head, pend_tail; /* slots owing an SQE, oldest first */
	/* SQEs this ring wrote since the application last submitted, when
	 * nothing of the application's was prepared before them. */
	unsigned int own_head, own_tail;
	bool own_valid;
	/* A submit to make room failed: not tried again until the kernel's
	 * SQ head moves past room_head (someone submitted), or every CQE
	 * would cost a failing io_uring_enter. */
	bool room_failed;
	unsigned int room_head;
	/* A timerfd polled from the first slot on, which make_room() sets
	 * when it fails: see rr__ring_room_timer(). */
	int room_tfd;
	uint32_t room_slot;
	unsigned int room_delay_ms;
	bool room_off;
	/* The bell other threads ring (rr__ring_bell_open()), and who
	 * listens to it: the layers above, one handler each. */
	int bell_ring_fd, bell_efd;
	uint32_t bell_slot;
	struct {
		void (*fn)(void *ctx);
		void *ctx;
	} bell_fns[RR__BELL_FNS];
	/* Bells of other rings this one rings, and MSG_RINGs owed to them. */
	int msg_ring;	 /* MSG_RING: -1 not probed yet, 0 absent or refused, 1 works */
	int sync_cancel; /* IORING_REGISTER_SYNC_CANCEL: -1 not probed, 0 no, 1 yes */
	struct rr__peer *peers;
	uint32_t npeers;
	uint32_t *msgs; /* peers owing a MSG_RING SQE, each once */
	uint32_t nmsgs;
	unsigned int msgs_inflight; /* MSG_RING SQEs whose CQE has not arrived */
};

/*
 * Can the ring layer drive this ring? It publishes SQEs by the tail
 * alone (see flush_sq()), as liburing >= 2.2 does, which sets the SQ
 * array to the identity at io_uring_queue_init() and never writes it
 * again; liburing < 2.2 wrote it at each submit, and a fresh ring of it
 * holds zeros. The oldest liburing supported is 2.3 (meson.build).
 */
bool rr__ring_drivable(const struct io_uring *io);
int rr__ring_init(struct rr__ring *r, struct io_uring *io, bool multishot,
		  struct rr_bridge_stats *stats);
void rr__ring_fini(struct rr__ring *r);

/* Watch fd (POLLIN) until rr__poll_close(). The SQE may be owed for a
 * while a chain is open (see rr__ring_flush()); only -ENOMEM/-ENOSPC fail. */
int rr__poll_add(struct rr__ring *r, int fd, rr__poll_fn fn, void *ctx, uint32_t *slot_out);
/* A one-shot timer: fn(ctx, -ETIME) after ms, never after rr__poll_close(). */
int rr__timer_add(struct rr__ring *r, unsigned int ms, rr__poll_fn fn, void *ctx,
		  uint32_t *slot_out);
/*
 * Read fd through the ring: an IORING_OP_READ of len bytes (at most
 * RR__READ_MAX) into a buffer the slot owns, submitted again after each
 * result, so a readable fd costs no read(2) of ours. The fd must be
 * pollable and O_NONBLOCK (io_uring then waits by polling it). Only for
 * rings whose task work runs on the owner's thread (not SQPOLL): see
 * rr__read_settle().
 */
#define RR__READ_MAX 16
int rr__read_add(struct rr__ring *r, int fd, uint32_t len, rr__read_fn fn, void *ctx,
		 uint32_t *slot_out);
/*
 * Make a read slot's buffer final: cancel its READ at once (a synchronous
 * cancel, one syscall) unless it completed already. Returns the buffer
 * holding what a completed READ read and whose CQE is not handled yet
 * (zero bytes if none), or NULL when nothing is in flight. The caller may
 * claim the data by zeroing it; the CQE then brings zeros. The READ is
 * submitted again after its CQE.
 */
void *rr__read_settle(struct rr__ring *r, uint32_t slot);
/* Can rr__read_settle() work on this ring (kernel 6.0+)? Probed once. */
bool rr__ring_can_settle(struct rr__ring *r);
/* Stop a poll, timer or read; its fn is never called again. RR__NO_SLOT is fine. */
void rr__poll_close(struct rr__ring *r, uint32_t slot);

/* A slot of the ring (ring.c keeps them; here for rr__ring_cqe()). */
struct rr__poll {
	/* Its POLL user_data (instance, generation, slot) while in use, 0
	 * while free: a CQE of its current use carries exactly this. */
	uint64_t ud;
	int fd;
	uint32_t gen;
	bool in_use;
	bool armed; /* its POLL_ADD/TIMEOUT is in the SQ or the kernel */
	/* What makes a CQE more than a poll's plain result: one word for
	 * rr__ring_cqe() to ask. */
	union {
		struct {
			bool is_timer;
			bool is_read;
			bool closing; /* freed at the terminal CQE */
		};
		uint32_t not_plain;
	};
	bool queued;		      /* on the owed queue (entries may be stale: see want) */
	bool oneshot;		      /* armed single-shot until a poll succeeds */
	bool retiring;		      /* its multishot poll is being ended, to be re-armed */
	bool multi;		      /* multishot wherever the kernel has it */
	uint8_t want;		      /* WANT_*: SQEs owed */
	unsigned int errors;	      /* consecutive failed polls */
	struct __kernel_timespec *ts; /* timers: heap, the table may move */
	rr__poll_fn fn;
	rr__read_fn rfn; /* read slots */
	uint8_t *buf;	 /* read slots: heap, the kernel writes it */
	uint32_t len;
	void *ctx;
	uint32_t next_free;
	uint32_t next_owed;
};

#define RR__POLL_FAILED (POLLERR | POLLHUP | POLLNVAL)

/* rr__ring_cqe() past its common case: a slot's other CQEs, any other. */
void rr__ring_slot_cqe(struct rr__ring *r, uint32_t idx, const struct io_uring_cqe *cqe);
enum rr__ud_kind rr__ring_cqe_other(struct rr__ring *r, const struct io_uring_cqe *cqe);

/*
 * Handle a CQE carrying this ring's tag: the kind handled, or 0 for a
 * stale CQE (another instance, an old generation). Inline: mostly a clean
 * result of a channel's multishot poll that stays armed (with no errors
 * to forget), whose handler is called from here; the rest is out of line.
 */
static inline enum rr__ud_kind rr__ring_cqe(struct rr__ring *r, const struct io_uring_cqe *cqe)
{
	uint64_t ud = cqe->user_data;
	uint32_t idx = rr__ud_slot(ud);
	const struct rr__poll *p = &r->slots[idx];
	int res = cqe->res;

	/* A slot's poll, timer or read: one comparison with the user_data
	 * of the slot's current use (this instance, this generation; 0 for
	 * a free slot). */
	if (idx < r->nslots && p->ud == ud) {
		if ((cqe->flags & IORING_CQE_F_MORE) && p->armed &&
		    !(p->not_plain | p->errors | ((uint32_t)res & (1u << 31 | RR__POLL_FAILED))))
			p->fn(p->ctx, res);
		else
			rr__ring_slot_cqe(r, idx, cqe);
		return RR__UD_POLL;
	}
	return rr__ring_cqe_other(r, cqe);
}

/*
 * A bell other threads may ring (through rr__ring_peer_ring()): every
 * fn(ctx) listening is called on this ring's thread, from a CQE, at least
 * once after each ring. An eventfd polled here, reached by MSG_RING where
 * the sender's kernel has it; opened with the first listener, its fd
 * closed by rr__ring_fini(). -EALREADY if fn(ctx) listens already.
 */
int rr__ring_bell_open(struct rr__ring *r, void (*fn)(void *ctx), void *ctx);
/* fn(ctx) stops listening; the poll ends with the last listener (before
 * teardown waits for the ring). */
void rr__ring_bell_close(struct rr__ring *r, void (*fn)(void *ctx), void *ctx);
/* Learn another ring's bell (opened before, immutable since): an index for
 * rr__ring_peer_ring(). Called on this ring's thread. */
int rr__ring_peer_add(struct rr__ring *r, const struct rr__ring *target, uint32_t *peer);
/* Ring a peer's bell: a MSG_RING SQE of this ring (owed like the others;
 * on failure, the eventfd), or the eventfd when MSG_RING is missing. */
enum { RR__BELL_NONE, RR__BELL_MSG_RING, RR__BELL_EVENTFD };
/* Returns how: RR__BELL_MSG_RING (an SQE owed or written), _EVENTFD, or
 * _NONE (a MSG_RING to that peer is owed already, or it is gone). */
int rr__ring_peer_ring(struct rr__ring *r, uint32_t peer);
/* The same, but the MSG_RING SQE is only owed: the caller flushes the
 * ring (rr__ring_flush()) once it holds no lock, since writing it may
 * submit the SQ to make room (and on SQPOLL wait up to a second). */
int rr__ring_peer_queue(struct rr__ring *r, uint32_t peer);
/*
 * Poll a timerfd of the ring's own, which it sets when an SQE is owed for
 * want of room: its CQE reaches a loop that never calls rr_bridge_flush()
 * and has nothing else of ours in flight, after that loop's own submit
 * made room, and its hand-off writes what is owed. Opened with the first
 * slot (its poll needs room once); closed before teardown waits for the
 * ring, and not opened again.
 */
int rr__ring_room_timer(struct rr__ring *r);
void rr__ring_room_timer_close(struct rr__ring *r);
/* Force the eventfd path (tests, and kernels where MSG_RING misbehaves). */
void rr__ring_no_msg_ring(struct rr__ring *r);

/*
 * Submit the SQ and wait for a CQE, at most timeout_ms (< 0: no limit).
 * With wait_nr > 1 and min_wait_us, where the kernel has min-wait (6.12,
 * IORING_FEAT_MIN_TIMEOUT): wait for wait_nr CQEs, but return once
 * min_wait_us has passed with one there; else exactly
 * io_uring_submit_and_wait(_timeout)() for one. Returns >= 0, or a
 * negative errno (a timeout is 0).
 */
int rr__ring_wait_timed(struct rr__ring *r, unsigned int wait_nr, unsigned int min_wait_us,
			int timeout_ms);
/* Inline: the built-in loop's wait is mostly for ever, without min-wait. */
static inline int rr__ring_wait(struct rr__ring *r, unsigned int wait_nr, unsigned int min_wait_us,
				int timeout_ms)
{
	if (timeout_ms < 0 && !min_wait_us)
		return io_uring_submit_and_wait(r->io, 1);
	return rr__ring_wait_timed(r, wait_nr, min_wait_us, timeout_ms);
}

/* Ask for a NOP kick so an embedding loop comes back to the bridge. */
void rr__ring_want_kick(struct rr__ring *r);

/*
 * Write the SQEs the ring owes, unless the last SQE the application
 * prepared opens a link chain. A full SQ is submitted to make room (on
 * SQPOLL, waiting a bounded time for the kernel's thread); only a chain
 * or a failed submit leaves SQEs owed. Returns how many are still owed.
 */
unsigned int rr__ring_flush_owed(struct rr__ring *r);

/* Are SQEs owed? Cheap: for callers that flush only when needed. */
static inline bool rr__ring_owes(const struct rr__ring *r)
{
	return r->owing;
}

/* Inline: called several times a pass, and mostly nothing is owed. */
static inline unsigned int rr__ring_flush(struct rr__ring *r)
{
	return rr__ring_owes(r) ? rr__ring_flush_owed(r) : 0;
}

/* Has the application prepared SQEs since it last submitted? The ring's
 * own (a re-armed poll or READ) are no reason to enter the kernel before
 * a wait that submits them anyway. */
static inline bool rr__ring_app_sqes(const struct rr__ring *r)
{
	const struct io_uring_sq *sq = &r->io->sq;

	if (sq->sqe_tail == sq->sqe_head)
		return false;
	return !r->own_valid || sq->sqe_head != r->own_head || sq->sqe_tail != r->own_tail;
}

/* Does a CQE wait in the ring? Then the next wait returns at once. */
static inline bool rr__ring_cqe_waiting(const struct rr__ring *r)
{
	return io_uring_cq_ready(r->io) > 0;
}

/* No poll, timer or kick of this ring is left in the kernel. */
bool rr__ring_idle(const struct rr__ring *r);

/* For tests and diagnostics: a slot's poll user_data, and whether its
 * poll is in the SQ or the kernel. */
uint64_t rr__ring_poll_ud(const struct rr__ring *r, uint32_t slot);
bool rr__ring_slot_armed(const struct rr__ring *r, uint32_t slot);

uint64_t rr__now_ns(void);
int rr__set_nonblock(int fd);

#endif
