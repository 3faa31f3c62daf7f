// SPDX-License-Identifier: MIT
/*
 * The ring layer: every fd the bridge watches (completion channels, the
 * rdma_cm event channel, device async fds) and every timer is one slot with
 * a POLL_ADD (or TIMEOUT) in the application's ring.
 *
 * A read slot keeps one IORING_OP_READ of its fd in flight instead: the
 * kernel polls the fd and reads it, so readiness and data arrive in one
 * CQE and no read(2) is made. It is submitted again after each CQE.
 *
 * Multishot polls stay armed across CQEs; a CQE without IORING_CQE_F_MORE
 * means the kernel ended the poll (CQ overflow, cancellation, error) and the
 * slot is armed again unless it is closing. Single-shot polls (old kernels,
 * or RR_BRIDGE_SINGLESHOT) are simply that case every time.
 *
 * An fd that fails for good (POLLERR, POLLHUP: a disassociated device, a
 * pipe whose writer is gone) stays "ready" for ever: a single-shot poll of
 * it completes as soon as it is armed, a multishot one reports it once
 * and then says nothing. Each such result counts as a failed poll, and a
 * multishot poll that reports one is ended and polled single-shot, so a
 * failure that lasts is seen again; RR__MAX_ARM_ERRORS in a row and the
 * poll is given up, as one that cannot be armed.
 *
 * SQEs are owed, not lost: an arm, a cancel or a kick that cannot be
 * written now (the application is building an SQE chain the SQE would
 * join) waits on a queue and is written at the next chance. A full SQ
 * with no chain open is submitted to make room (see make_room()), so an
 * SQE is owed for that reason only when the submit fails; then the room
 * timer (room_timer()) brings a CQE back after the loop's own submit. A
 * chain's own completions bring the next rr_bridge_handle_cqe(), which
 * writes it.
 *
 * A slot is freed only when its terminal CQE arrived, so a late CQE never
 * reaches a reused slot; the generation catches the rest.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "ring.h"

enum { WANT_ARM = 1, WANT_CANCEL = 2 };

/*
 * Linux 6.12's min-wait (IORING_FEAT_MIN_TIMEOUT): the one place this uapi
 * is named. liburing 2.3's headers (and Debian 12's linux/io_uring.h)
 * predate it: min_wait_usec took the place of io_uring_getevents_arg's
 * pad, so the struct keeps its size and older kernels, which never see
 * the argument (no feature bit), are unaffected.
 */
#ifndef IORING_FEAT_MIN_TIMEOUT
#define IORING_FEAT_MIN_TIMEOUT (1U << 15)
#endif
struct rr__getevents_arg {
	__u64 sigmask;
	__u32 sigmask_sz;
	__u32 min_wait_usec;
	__u64 ts;
};
_Static_assert(sizeof(struct rr__getevents_arg) == sizeof(struct io_uring_getevents_arg),
	       "the 6.12 layout of io_uring_getevents_arg");

uint64_t rr__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int rr__set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

int rr__ring_init(struct rr__ring *r, struct io_uring *io, bool multishot,
		  struct rr_bridge_stats *stats)
{
	/* Tells bridges on one ring apart, so a late CQE of a destroyed
	 * bridge never matches a slot of the next one. */
	static atomic_uint instances;
	static atomic_ullong uids;

	*r = (struct rr__ring){.io = io,
			       .stats = stats,
			       .inst = atomic_fetch_add(&instances, 1) & 0xfff,
			       .uid = atomic_fetch_add(&uids, 1),
			       .multishot = multishot,
			       .free_slot = RR__NO_SLOT,
			       .pend_head = RR__NO_SLOT,
			       .pend_tail = RR__NO_SLOT,
			       .bell_ring_fd = -1,
			       .bell_efd = -1,
			       .bell_slot = RR__NO_SLOT,
			       .room_tfd = -1,
			       .room_slot = RR__NO_SLOT,
			       .msg_ring = -1,
			       .sync_cancel = -1};
	return 0;
}

/*
 * The rings of the process whose bells are open, by uid: a ring drops its
 * copies of a peer's descriptors once that peer is gone, so a bridge that
 * outlives many groups keeps neither their fds nor their rings alive.
 */
static pthread_mutex_t bells_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *live_bells;
static uint32_t nlive, live_cap;

static void bell_live(uint64_t uid, bool live)
{
	pthread_mutex_lock(&bells_lock);
	if (!live) {
		for (uint32_t i = 0; i < nlive; i++)
			if (live_bells[i] == uid)
				live_bells[i] = live_bells[--nlive];
	} else {
		if (nlive == live_cap) {
			uint32_t cap = live_cap * 2 + 16;
			uint64_t *l = realloc(live_bells, cap * sizeof(*l));

			if (l) {
				live_bells = l;
				live_cap = cap;
			}
		}
		/* Without room it counts as gone: its peers only reopen it. */
		if (nlive < live_cap)
			live_bells[nlive++] = uid;
	}
	pthread_mutex_unlock(&bells_lock);
}

static bool bell_is_live(uint64_t uid)
{
	bool live = false;

	pthread_mutex_lock(&bells_lock);
	for (uint32_t i = 0; i < nlive && !live; i++)
		live = live_bells[i] == uid;
	pthread_mutex_unlock(&bells_lock);
	return live;
}

/* Everyone listening to the bell; a handler may stop listening meanwhile. */
static void ring_bell_fns(struct rr__ring *r)
{
	for (int i = 0; i < RR__BELL_FNS; i++)
		if (r->bell_fns[i].fn)
			r->bell_fns[i].fn(r->bell_fns[i].ctx);
}

static void bell_write(int efd)
{
	uint64_t one = 1;

	/* Fails only if the counter would overflow: it is rung already. */
	if (write(efd, &one, sizeof(one)) < 0) {
	}
}

void rr__ring_fini(struct rr__ring *r)
{
	/* MSG_RINGs never written: their peers still hear of it. */
	for (uint32_t i = 0; i < r->nmsgs; i++)
		bell_write(r->peers[r->msgs[i]].efd);
	for (uint32_t i = 0; i < r->npeers; i++) {
		if (r->peers[i].ring_fd >= 0) {
			close(r->peers[i].ring_fd);
			close(r->peers[i].efd);
		}
	}
	free(r->peers);
	free(r->msgs);
	r->peers = NULL;
	r->msgs = NULL;
	r->npeers = r->nmsgs = 0;
	r->owing = r->pend_head != RR__NO_SLOT || r->kick_wanted;
	if (r->bell_efd >= 0) {
		bell_live(r->uid, false);
		close(r->bell_efd);
	}
	r->bell_efd = -1;
	if (r->room_tfd >= 0)
		close(r->room_tfd);
	r->room_tfd = -1;
	for (uint32_t i = 0; i < r->nslots; i++) {
		free(r->slots[i].ts);
		/* A READ the teardown gave up waiting for may still write
		 * its buffer: leave that one to the kernel. */
		if (!r->slots[i].armed)
			free(r->slots[i].buf);
	}
	free(r->slots);
	r->slots = NULL;
	r->nslots = 0;
}

static int grow(struct rr__ring *r)
{
	uint32_t n = r->nslots ? r->nslots * 2 : 16;
	struct rr__poll *s;

	if (r->nslots >= RR__MAX_SLOTS)
		return -ENOSPC;
	if (n > RR__MAX_SLOTS)
		n = RR__MAX_SLOTS;
	s = realloc(r->slots, n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	for (uint32_t i = r->nslots; i < n; i++)
		s[i] = (struct rr__poll){.fd = -1,
					 .not_plain = 0, /* its spare byte too */
					 .next_free = i + 1 < n ? i + 1 : r->free_slot,
					 .next_owed = RR__NO_SLOT};
	r->free_slot = r->nslots;
	r->slots = s;
	r->nslots = n;
	return 0;
}

static void owe(struct rr__ring *r, uint32_t idx, uint8_t what)
{
	struct rr__poll *p = &r->slots[idx];

	p->want |= what;
	r->owing = true;
	if (p->queued)
		return;
	p->queued = true;
	p->next_owed = RR__NO_SLOT;
	if (r->pend_tail == RR__NO_SLOT)
		r->pend_head = idx;
	else
		r->slots[r->pend_tail].next_owed = idx;
	r->pend_tail = idx;
}

static uint32_t take_slot(struct rr__ring *r, rr__poll_fn fn, void *ctx, int fd)
{
	uint32_t idx = r->free_slot;
	struct rr__poll *p = &r->slots[idx];

	r->free_slot = p->next_free;
	p->fd = fd;
	p->fn = fn;
	p->ctx = ctx;
	p->closing = false;
	p->oneshot = false;
	p->retiring = false;
	p->multi = false;
	p->errors = 0;
	p->in_use = true;
	p->ud = rr__ud(RR__UD_POLL, r->inst, p->gen, idx);
	r->live_slots++;
	return idx;
}

static void release(struct rr__ring *r, uint32_t idx)
{
	struct rr__poll *p = &r->slots[idx];

	free(p->ts);
	p->ts = NULL;
	free(p->buf);
	p->buf = NULL;
	p->is_read = false;
	p->rfn = NULL;
	p->is_timer = false;
	p->in_use = false;
	p->armed = false;
	p->want = 0; /* a stale queue entry is skipped */
	p->fd = -1;
	p->fn = NULL;
	p->ctx = NULL;
	p->gen++; /* late CQEs of this use no longer match */
	p->ud = 0;
	p->next_free = r->free_slot;
	r->free_slot = idx;
	r->live_slots--;
}

static int poll_add(struct rr__ring *r, int fd, rr__poll_fn fn, void *ctx, bool multi,
		    uint32_t *slot_out)
{
	uint32_t idx;
	int rc;

	if (r->free_slot == RR__NO_SLOT && (rc = grow(r)))
		return rc;
	idx = take_slot(r, fn, ctx, fd);
	r->slots[idx].multi = multi;
	owe(r, idx, WANT_ARM);
	*slot_out = idx;
	rr__ring_flush(r);
	return 0;
}

int rr__poll_add(struct rr__ring *r, int fd, rr__poll_fn fn, void *ctx, uint32_t *slot_out)
{
	/* With the first fd watched, while the SQ has room: best effort. */
	if (r->room_tfd < 0 && !r->room_off)
		rr__ring_room_timer(r);
	return poll_add(r, fd, fn, ctx, false, slot_out);
}

int rr__timer_add(struct rr__ring *r, unsigned int ms, rr__poll_fn fn, void *ctx,
		  uint32_t *slot_out)
{
	struct __kernel_timespec *ts = malloc(sizeof(*ts));
	uint32_t idx;
	int rc;

	if (!ts)
		return -ENOMEM;
	if (r->free_slot == RR__NO_SLOT && (rc = grow(r))) {
		free(ts);
		return rc;
	}
	ts->tv_sec = ms / 1000;
	ts->tv_nsec = (long long)(ms % 1000) * 1000000;
	idx = take_slot(r, fn, ctx, -1);
	r->slots[idx].ts = ts;
	r->slots[idx].is_timer = true;
	owe(r, idx, WANT_ARM);
	*slot_out = idx;
	rr__ring_flush(r);
	return 0;
}

int rr__read_add(struct rr__ring *r, int fd, uint32_t len, rr__read_fn fn, void *ctx,
		 uint32_t *slot_out)
{
	uint8_t *buf;
	uint32_t idx;
	int rc;

	if (!len || len > RR__READ_MAX)
		return -EINVAL;
	if (r->room_tfd < 0 && !r->room_off)
		rr__ring_room_timer(r);
	buf = calloc(1, RR__READ_MAX);
	if (!buf)
		return -ENOMEM;
	if (r->free_slot == RR__NO_SLOT && (rc = grow(r))) {
		free(buf);
		return rc;
	}
	idx = take_slot(r, NULL, ctx, fd);
	r->slots[idx].is_read = true;
	r->slots[idx].rfn = fn;
	r->slots[idx].buf = buf;
	r->slots[idx].len = len;
	owe(r, idx, WANT_ARM);
	*slot_out = idx;
	rr__ring_flush(r);
	return 0;
}

static int sync_cancel(struct rr__ring *r, uint64_t ud)
{
	struct io_uring_sync_cancel_reg reg = {.addr = ud, .fd = -1};

	/* Generous: it waits only for task work already queued to run. */
	reg.timeout.tv_sec = 2;
	return io_uring_register_sync_cancel(r->io, &reg);
}

bool rr__ring_can_settle(struct rr__ring *r)
{
	if (r->sync_cancel < 0) {
		/* Nothing carries this user_data: a kernel that has the
		 * call says -ENOENT. */
		uint64_t none = rr__ud(RR__UD_CANCEL, r->inst, 0, RR__MAX_SLOTS - 1);

		r->sync_cancel = sync_cancel(r, none) == -ENOENT;
	}
	return r->sync_cancel > 0;
}

void *rr__read_settle(struct rr__ring *r, uint32_t idx)
{
	struct rr__poll *p;

	if (idx >= r->nslots || !r->slots[idx].in_use || !r->slots[idx].is_read)
		return NULL;
	p = &r->slots[idx];
	if (!p->armed)
		return NULL; /* its last CQE was handled: nothing in flight */
	/* Cancelled, not found (completed, or not submitted yet: it then
	 * reads only after the caller's next syscalls), or it gave up: in
	 * every case the READ cannot complete before the caller's next
	 * syscall, on this thread, runs its task work. */
	/* 0: cancelled; -ENOENT: completed or not submitted. Anything else
	 * (a signal, a READ busy elsewhere) is asked again. */
	for (int tries = 0; tries < 8; tries++) {
		int rc = sync_cancel(r, rr__ud(RR__UD_POLL, r->inst, p->gen, idx));

		if (!rc || rc == -ENOENT)
			break;
	}
	return p->buf;
}

void rr__poll_close(struct rr__ring *r, uint32_t idx)
{
	struct rr__poll *p;

	if (idx >= r->nslots || !r->slots[idx].in_use)
		return;
	p = &r->slots[idx];
	if (p->closing)
		return;
	p->closing = true;
	p->fn = NULL;
	if (!p->armed) {
		release(r, idx); /* its arm was still owed: nothing in the kernel */
		return;
	}
	if (p->retiring)
		return; /* its cancel is owed or on its way already */
	/* The io_uring poll holds its own reference to the file, so the fd
	 * may be closed right after this; the slot waits for the terminal
	 * CQE. */
	p->want = WANT_CANCEL;
	owe(r, idx, WANT_CANCEL);
	rr__ring_flush(r);
}

void rr__ring_want_kick(struct rr__ring *r)
{
	if (r->loop_owned || r->kick_pending)
		return;
	r->kick_wanted = true;
	r->owing = true;
	rr__ring_flush(r);
}

/*
 * May an SQE of ours go into the SQ now? Not into a chain the application
 * is building: when the last SQE it prepared carries a link flag, ours
 * would become the chain's next member. (An SQE got but not yet prepared
 * cannot be judged; the header asks applications to prepare at once.)
 */
static bool may_write(struct rr__ring *r)
{
	struct io_uring_sq *sq = &r->io->sq;
	unsigned int shift = r->io->flags & IORING_SETUP_SQE128 ? 1 : 0;
	const struct io_uring_sqe *last;

	if (sq->sqe_tail == sq->sqe_head)
		return true; /* nothing prepared */
	if (r->own_valid && sq->sqe_head == r->own_head && sq->sqe_tail == r->own_tail)
		return true; /* only our own SQEs are prepared */
	last = &sq->sqes[((sq->sqe_tail - 1) & sq->ring_mask) << shift];
	return !(last->flags & (IOSQE_IO_LINK | IOSQE_IO_HARDLINK));
}

static void prep(struct rr__ring *r, struct io_uring_sqe *sqe, uint32_t idx, uint8_t what)
{
	struct rr__poll *p = &r->slots[idx];
	uint64_t self = rr__ud(RR__UD_POLL, r->inst, p->gen, idx);

	if (what == WANT_CANCEL) {
		if (p->is_timer)
			io_uring_prep_timeout_remove(sqe, self, 0);
		else if (p->is_read)
			io_uring_prep_cancel64(sqe, self, 0);
		else
			io_uring_prep_poll_remove(sqe, self);
		io_uring_sqe_set_data64(sqe, rr__ud(RR__UD_CANCEL, r->inst, p->gen, idx));
		r->cancels++;
		return;
	}
	if (p->is_timer) {
		io_uring_prep_timeout(sqe, p->ts, 0, 0);
	} else if (p->is_read) {
		/* Zero: what a settle finds there was read by this READ. */
		memset(p->buf, 0, RR__READ_MAX);
		io_uring_prep_read(sqe, p->fd, p->buf, p->len, (uint64_t)-1);
	} else if ((r->multishot || (p->multi && !r->no_multishot)) && !p->oneshot)
		io_uring_prep_poll_multishot(sqe, p->fd, POLLIN);
	else
		io_uring_prep_poll_add(sqe, p->fd, POLLIN);
	io_uring_sqe_set_data64(sqe, self);
	p->armed = true;
}

/*
 * An SQE is owed for want of room, and a loop that never calls
 * rr_bridge_flush() may have nothing of ours in flight to bring it back
 * once its own submit made room. The room timer's poll is armed already
 * (rr__ring_room_timer()), so its CQE needs no SQE: a timerfd set to
 * fire shortly, after the loop's next submit, whose hand-off writes what
 * is owed. A timerfd rather than an eventfd: an eventfd's CQE is posted
 * at once, and would be handed out in the same batch, before the loop
 * submitted.
 */
#define ROOM_DELAY_MAX_MS 64

static void room_timer(struct rr__ring *r)
{
	struct itimerspec its = {.it_value = {.tv_sec = r->room_delay_ms / 1000,
					      .tv_nsec = (r->room_delay_ms % 1000) * 1000000L}};

	if (r->room_slot != RR__NO_SLOT && r->slots[r->room_slot].armed)
		timerfd_settime(r->room_tfd, 0, &its, NULL);
}

/* Empties a non-blocking eventfd or timerfd whose poll fired. */
static void drain_counter(int fd)
{
	uint64_t n;

	while (read(fd, &n, sizeof(n)) > 0) {
	}
}

static void room_ready(void *ctx, int revents)
{
	struct rr__ring *r = ctx;

	if (revents < 0) {
		r->room_slot = RR__NO_SLOT; /* counted in stats.poll_failures */
		return;
	}
	drain_counter(r->room_tfd);
	/* Nobody submitted yet: come back later, less often each time.
	 * Otherwise the hand-off of this CQE writes what is owed. */
	if (r->room_failed && rr__ring_owes(r) &&
	    io_uring_smp_load_acquire(r->io->sq.khead) == r->room_head) {
		if (r->room_delay_ms < ROOM_DELAY_MAX_MS)
			r->room_delay_ms *= 2;
		room_timer(r);
	}
}

int rr__ring_room_timer(struct rr__ring *r)
{
	int rc;

	if (r->room_tfd >= 0 || r->room_off)
		return 0;
	r->room_tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (r->room_tfd < 0)
		return -errno;
	/*
	 * Multishot even on a single-shot bridge: a timer that fired before
	 * the loop's submit (its CQE handed over while the SQ is still full)
	 * must be able to fire again, and a single-shot poll would need an
	 * SQE to re-arm, which is what is missing.
	 */
	rc = poll_add(r, r->room_tfd, room_ready, r, true, &r->room_slot);
	if (rc) {
		close(r->room_tfd);
		r->room_tfd = -1;
	}
	return rc;
}

void rr__ring_room_timer_close(struct rr__ring *r)
{
	r->room_off = true; /* teardown: not opened again */
	rr__poll_close(r, r->room_slot);
	r->room_slot = RR__NO_SLOT;
}

/*
 * SQPOLL: a submit only hands the SQ to the kernel's thread, so room
 * appears as that thread consumes. Wait for it, but not for ever (a
 * thread that makes no progress must not hang the caller): the SQE then
 * stays owed. Yield first; sleep only if the thread is slow to run.
 */
#define SQPOLL_ROOM_WAIT_NS (1000 * 1000000ull)

static bool sqpoll_room(struct rr__ring *r)
{
	uint64_t deadline = rr__now_ns() + SQPOLL_ROOM_WAIT_NS;
	struct timespec nap = {.tv_nsec = 20000};

	for (unsigned int i = 0; !io_uring_sq_space_left(r->io); i++) {
		if (rr__now_ns() > deadline)
			return false;
		if (i < 64)
			sched_yield();
		else
			nanosleep(&nap, NULL);
	}
	return true;
}

/*
 * The SQ is full and no chain is open: submit it, as liburing users do,
 * so that an SQE of ours is never owed to a loop that may not come back
 * (one that calls no rr_bridge_flush() and waits for a CQE that only our
 * SQE would bring). Legal wherever the bridge runs: on the ring's owner
 * thread, which with SINGLE_ISSUER is the only submitter; and it leaves
 * the CQ alone, so a caller inside io_uring_for_each_cqe() is undisturbed.
 * On failure (-EBUSY, -EAGAIN, -EINTR...) the SQE stays owed, and no
 * submit is tried again until the SQ head moves: the loop's own submit
 * (or the application's) does that, and writes what is owed.
 */
static bool make_room(struct rr__ring *r)
{
	unsigned int head = io_uring_smp_load_acquire(r->io->sq.khead);
	bool room;
	int rc;

	if (r->room_failed && head == r->room_head)
		return false;
	rc = io_uring_submit(r->io);
	room = rc >= 0 && (io_uring_sq_space_left(r->io) ||
			   ((r->io->flags & IORING_SETUP_SQPOLL) && sqpoll_room(r)));
	/* SQPOLL: a thread that made no progress is not waited for again
	 * until it does (the head moves), as a failed submit is not tried
	 * again. */
	r->room_failed = !room;
	r->room_head = head;
	if (!room) {
		r->room_delay_ms = 1;
		room_timer(r);
	}
	return room;
}

/* The SQ is full: make room, then take an SQE (NULL if none). Out of
 * line, so that our_sqe() needs no frame for it. */
static __attribute__((noinline)) struct io_uring_sqe *sqe_after_room(struct rr__ring *r)
{
	r->stats->sq_full++;
	if (!make_room(r))
		return NULL;
	return io_uring_get_sqe(r->io);
}

static struct io_uring_sqe *our_sqe(struct rr__ring *r)
{
	struct io_uring_sq *sq = &r->io->sq;
	struct io_uring_sqe *sqe;
	bool first;

	if (!may_write(r))
		return NULL;
	/* io_uring_get_sqe() fails only on a full SQ. */
	first = sq->sqe_tail == sq->sqe_head;
	sqe = io_uring_get_sqe(r->io);
	if (!sqe) {
		sqe = sqe_after_room(r);
		if (!sqe)
			return NULL;
		first = sq->sqe_tail - 1 == sq->sqe_head;
	}
	if (first) {
		r->own_valid = true;
		r->own_head = sq->sqe_head;
	} else if (!r->own_valid || sq->sqe_head != r->own_head ||
		   sq->sqe_tail - 1 != r->own_tail) {
		r->own_valid = false; /* after the application's SQEs */
	}
	r->own_tail = sq->sqe_tail;
	return sqe;
}

/* Does this ring's kernel have min-wait (and may we enter it ourselves)? */
static bool has_min_wait(const struct rr__ring *r)
{
	return (r->io->features & IORING_FEAT_MIN_TIMEOUT) && r->io->ring_fd >= 0;
}

#ifndef IORING_SETUP_NO_SQARRAY
#define IORING_SETUP_NO_SQARRAY (1U << 16) /* 6.6; newer than liburing 2.3 */
#endif

bool rr__ring_drivable(const struct io_uring *io)
{
	const struct io_uring_sq *sq = &io->sq;

	if ((io->flags & IORING_SETUP_NO_SQARRAY) || !sq->array)
		return true; /* the kernel takes SQE i at tail i */
	for (unsigned int i = 0; i < *sq->kring_entries; i++)
		if (sq->array[i] != i)
			return false;
	return true;
}

/*
 * io_uring_submit()'s flush of the SQ (liburing 2.3's __io_uring_flush_sq(),
 * not exported): the SQEs prepared are published by the tail, and what the
 * kernel has not consumed is to be submitted. sqe_head then equals
 * sqe_tail, as after any submit, which may_write() and our_sqe() rely on.
 */
static unsigned int flush_sq(struct io_uring *io)
{
	struct io_uring_sq *sq = &io->sq;

	if (sq->sqe_head != sq->sqe_tail) {
		sq->sqe_head = sq->sqe_tail;
		io_uring_smp_store_release(sq->ktail, sq->sqe_tail);
	}
	return sq->sqe_tail - io_uring_smp_load_acquire(sq->khead);
}

/*
 * An io_uring_enter() that submits and waits for wait_nr CQEs, but returns
 * once min_wait_us has passed with at least one CQE posted (6.12). Waits
 * without a timeout get a very long one: with none, the kernel ends the
 * whole wait when min_wait_us expires, CQE or not, and an idle loop would
 * wake every min_wait_us.
 */
#define FOREVER_S (1ll << 30)

static int enter_min_wait(struct rr__ring *r, unsigned int wait_nr, unsigned int min_wait_us,
			  int timeout_ms)
{
	struct io_uring *io = r->io;
	unsigned int flags = IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG;
	unsigned int submit = flush_sq(io);
	struct __kernel_timespec ts = {.tv_sec = FOREVER_S};
	struct rr__getevents_arg arg = {.min_wait_usec = min_wait_us};

	if (timeout_ms >= 0) {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (timeout_ms % 1000) * 1000000LL;
		/* Not past the pass's own timeout. */
		if ((uint64_t)timeout_ms * 1000 < min_wait_us)
			arg.min_wait_usec = (unsigned int)timeout_ms * 1000;
	}
	arg.ts = (uint64_t)(uintptr_t)&ts;
	/* SQPOLL: the thread consumes the SQ; wake it if it sleeps, as
	 * liburing does (the store of the tail comes before the load). */
	if (submit && (io->flags & IORING_SETUP_SQPOLL)) {
		io_uring_smp_mb();
		if (IO_URING_READ_ONCE(*io->sq.kflags) & IORING_SQ_NEED_WAKEUP)
			flags |= IORING_ENTER_SQ_WAKEUP;
	}
	r->stats->min_waits++;
	return io_uring_enter2((unsigned int)io->ring_fd, submit, wait_nr, flags, (sigset_t *)&arg,
			       sizeof(arg));
}

int rr__ring_wait_timed(struct rr__ring *r, unsigned int wait_nr, unsigned int min_wait_us,
			int timeout_ms)
{
	struct io_uring_cqe *cqe;
	int rc;

	if (wait_nr > 1 && min_wait_us && has_min_wait(r)) {
		rc = enter_min_wait(r, wait_nr, min_wait_us, timeout_ms);
	} else if (timeout_ms < 0) {
		rc = io_uring_submit_and_wait(r->io, 1);
	} else {
		struct __kernel_timespec ts = {.tv_sec = timeout_ms / 1000,
					       .tv_nsec = (timeout_ms % 1000) * 1000000LL};

		rc = io_uring_submit_and_wait_timeout(r->io, &cqe, 1, &ts, NULL);
	}
	return rc == -ETIME ? 0 : rc;
}

static unsigned int owed(const struct rr__ring *r)
{
	unsigned int n = r->kick_wanted ? 1 : 0;

	for (uint32_t i = r->pend_head; i != RR__NO_SLOT; i = r->slots[i].next_owed)
		n += r->slots[i].want ? 1 : 0;
	return n + r->nmsgs;
}

static void flush_msgs(struct rr__ring *r)
{
	uint32_t done = 0;

	while (done < r->nmsgs) {
		uint32_t idx = r->msgs[done];
		const struct rr__peer *p = &r->peers[idx];
		struct io_uring_sqe *sqe = our_sqe(r);

		if (!sqe)
			break;
		io_uring_prep_msg_ring(sqe, p->ring_fd, 0, rr__ud(RR__UD_MSG, p->inst, 0, 0), 0);
		io_uring_sqe_set_data64(sqe, rr__ud(RR__UD_MSG_SENT, r->inst, 0, idx));
		r->msgs_inflight++;
		r->peers[idx].inflight++;
		done++;
	}
	if (done) {
		r->nmsgs -= done;
		for (uint32_t i = 0; i < r->nmsgs; i++)
			r->msgs[i] = r->msgs[i + done];
	}
}

/* What owing stands for: a slot queued, a MSG_RING or a kick owed. */
static inline bool owing_derived(const struct rr__ring *r)
{
	return r->pend_head != RR__NO_SLOT || r->nmsgs || r->kick_wanted;
}

unsigned int rr__ring_flush_owed(struct rr__ring *r)
{
	struct io_uring_sqe *sqe;

#ifndef NDEBUG
	/* owing is derived state, kept by hand where its parts change: a
	 * debug build checks it at every flush. Counted, not aborted on
	 * (library code never aborts); the unit tests assert the count. */
	if (r->owing != owing_derived(r))
		r->owing_wrong++;
#endif

	while (r->pend_head != RR__NO_SLOT) {
		uint32_t idx = r->pend_head;
		struct rr__poll *p = &r->slots[idx];
		uint8_t what = p->want & WANT_CANCEL ? WANT_CANCEL : p->want;

		if (what) {
			sqe = our_sqe(r);
			if (!sqe)
				break;
			prep(r, sqe, idx, what);
			p->want &= (uint8_t)~what;
			if (p->want)
				continue; /* the slot owes another SQE */
		}
		r->pend_head = p->next_owed;
		if (r->pend_head == RR__NO_SLOT)
			r->pend_tail = RR__NO_SLOT;
		p->queued = false;
	}
	if (r->pend_head == RR__NO_SLOT)
		flush_msgs(r);
	if (r->kick_wanted && !r->kick_pending && !r->loop_owned) {
		sqe = our_sqe(r);
		if (sqe) {
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data64(sqe, rr__ud(RR__UD_KICK, r->inst, 0, 0));
			r->kick_wanted = false;
			r->kick_pending = true;
			r->stats->kicks++;
		}
	} else if (r->loop_owned) {
		r->kick_wanted = false; /* the loop comes back by itself */
	}
	r->owing = owing_derived(r);
	return owed(r);
}

bool rr__ring_idle(const struct rr__ring *r)
{
	return !r->live_slots && !r->kick_pending && !r->cancels && !r->msgs_inflight;
}

/*
 * -EALREADY: the poll was firing when the cancel came (with
 * IORING_SETUP_DEFER_TASKRUN its task work waits for the next
 * io_uring_enter()), and a multishot poll stays armed after that. Ask
 * again, or the slot would never see its terminal CQE.
 */
static void cancel_cqe(struct rr__ring *r, uint32_t idx, const struct io_uring_cqe *cqe)
{
	struct rr__poll *p = &r->slots[idx];

	if (cqe->res != -EALREADY || !p->in_use || !(p->closing || p->retiring) || !p->armed)
		return;
	r->stats->cancel_retries++;
	owe(r, idx, WANT_CANCEL);
}

/* A read slot's CQE (a READ is never multishot: it has ended), unless
 * the slot is closing. */
static __attribute__((noinline)) void read_cqe(struct rr__ring *r, uint32_t idx,
					       const struct io_uring_cqe *cqe)
{
	struct rr__poll *p = &r->slots[idx];
	rr__read_fn fn = p->rfn;
	void *ctx = p->ctx;

	p->armed = false;
	p->retiring = false;
	p->want &= (uint8_t)~WANT_CANCEL;

	if (cqe->res >= 0) {
		/* Handed out: no settle reads the buffer before prep()
		 * zeroes it for the next READ (rr__read_settle() of a slot
		 * not armed returns NULL). */
		fn(ctx, cqe->res, p->buf);
		p = &r->slots[idx]; /* the handler may have moved the table */
	} else if (cqe->res != -ECANCELED && cqe->res != -EINTR) {
		/* -EAGAIN here means this kernel does not wait for the fd:
		 * re-submitting would spin. The owner picks another way. */
		release(r, idx);
		fn(ctx, cqe->res, NULL);
		return;
	}
	if (!p->in_use || p->armed || (p->want & WANT_ARM))
		return;
	if (p->closing) {
		release(r, idx);
		return;
	}
	r->stats->rearms++;
	/* Nothing owed before it: written now, as the flush that follows
	 * every CQE would, without queueing it for that flush. */
	if (r->pend_head == RR__NO_SLOT) {
		struct io_uring_sqe *sqe = our_sqe(r);

		if (sqe) {
			prep(r, sqe, idx, WANT_ARM);
			return;
		}
	}
	owe(r, idx, WANT_ARM);
}

/* The errno a failed poll's result means: what the owner is told. */
static int poll_errno(int res)
{
	if (res < 0)
		return res;
	if (res & POLLNVAL)
		return -EBADF;
	if (res & POLLERR)
		return -EIO;
	return -EPIPE; /* POLLHUP: the other end is gone */
}

/* The fd keeps failing: tell the owner once and stop. The kernel's poll,
 * if still armed, is cancelled; no CQE of it reaches the owner again. */
static void give_up(struct rr__ring *r, uint32_t idx, int err)
{
	struct rr__poll *p = &r->slots[idx];
	rr__poll_fn fn = p->fn;
	void *ctx = p->ctx;

	r->stats->poll_failures++;
	rr__poll_close(r, idx);
	fn(ctx, err);
}

static __attribute__((noinline)) void poll_cqe(struct rr__ring *r, uint32_t idx,
					       const struct io_uring_cqe *cqe)
{
	struct rr__poll *p = &r->slots[idx];
	bool more = cqe->flags & IORING_CQE_F_MORE;
	uint32_t gen = p->gen;
	bool failed = false;
	rr__poll_fn fn;
	void *ctx;

	if (!more) {
		p->armed = false;
		/* Ended: a cancel not written yet is owed no more. */
		p->retiring = false;
		p->want &= (uint8_t)~WANT_CANCEL;
	}
	if (p->closing) {
		if (!more)
			release(r, idx);
		return;
	}
	if (p->is_timer) {
		fn = p->fn;
		ctx = p->ctx;
		release(r, idx);
		fn(ctx, cqe->res == -ETIME ? -ETIME : cqe->res);
		return;
	}
	if (p->is_read) {
		read_cqe(r, idx, cqe);
		return;
	}
	/* Mostly a clean result of a multishot poll that stays armed: once
	 * the handler ran, nothing is owed whatever it did to the slot (a
	 * close owes its cancel itself, a slot released or reused is not
	 * this one's). oneshot goes only with errors. */
	if (more && p->armed && cqe->res >= 0 && !(cqe->res & RR__POLL_FAILED)) {
		if (p->errors) {
			p->errors = 0;
			p->oneshot = false;
		}
		p->fn(p->ctx, cqe->res);
		return;
	}
	if (cqe->res >= 0) {
		failed = cqe->res & RR__POLL_FAILED;
		if (!failed) {
			p->errors = 0;
			p->oneshot = false;
		}
		/* Data that came with a failure is drained all the same. */
		if (!failed || (cqe->res & POLLIN)) {
			p->fn(p->ctx, cqe->res);
			p = &r->slots[idx]; /* the handler may have moved the table */
		}
	} else if (cqe->res == -EINVAL && !r->no_multishot && (r->multishot || p->multi)) {
		/* no multishot poll: single-shot from now on */
		r->multishot = false;
		r->no_multishot = true;
	} else if (cqe->res != -ECANCELED && cqe->res != -EAGAIN && cqe->res != -EINTR) {
		failed = true;
	}
	/* The handler may have closed the slot, or given it a new use. */
	if (!p->in_use || p->gen != gen)
		return;
	if (p->closing) {
		if (!p->armed)
			release(r, idx);
		return;
	}
	if (failed) {
		p->errors++;
		p->oneshot = true;
	}
	/* Reached only by a failure: this one says what the fd's trouble is. */
	if (p->errors >= RR__MAX_ARM_ERRORS) {
		give_up(r, idx, poll_errno(cqe->res));
		return;
	}
	if (p->armed) {
		/* A multishot poll reports a lasting failure once: end it, and
		 * poll single-shot (at its last CQE) to see whether it lasts. */
		if (failed && !p->retiring) {
			p->retiring = true;
			owe(r, idx, WANT_CANCEL);
		}
		return;
	}
	if (p->want & WANT_ARM)
		return;
	r->stats->rearms++;
	owe(r, idx, WANT_ARM);
}

/* Every CQE but a slot's poll, timer or read (see rr__ring_cqe()). */
enum rr__ud_kind rr__ring_cqe_other(struct rr__ring *r, const struct io_uring_cqe *cqe)
{
	uint64_t ud = cqe->user_data;
	enum rr__ud_kind kind;
	uint32_t idx = rr__ud_slot(ud);

	kind = rr__ud_kind(ud);
	if (rr__ud_inst(ud) != r->inst)
		return 0; /* an earlier bridge's */
	if (kind == RR__UD_POLL)
		return 0; /* stale: from an earlier use of the slot */
	if (kind == RR__UD_KICK) {
		r->kick_pending = false;
		return kind;
	}
	if (kind == RR__UD_MSG) {
		ring_bell_fns(r);
		return kind;
	}
	if (kind == RR__UD_MSG_SENT) {
		if (r->msgs_inflight)
			r->msgs_inflight--;
		if (idx < r->npeers && r->peers[idx].inflight)
			r->peers[idx].inflight--;
		if (cqe->res < 0 && idx < r->npeers && r->peers[idx].efd >= 0) {
			/* Not delivered: ring the peer's eventfd instead. */
			if (cqe->res == -EINVAL || cqe->res == -EOPNOTSUPP)
				r->msg_ring = 0;
			bell_write(r->peers[idx].efd);
		}
		return kind;
	}
	if (kind == RR__UD_CANCEL && r->cancels)
		r->cancels--; /* whatever became of its slot */
	if (idx >= r->nslots || !r->slots[idx].in_use ||
	    (r->slots[idx].gen & 0xfff) != rr__ud_gen(ud))
		return 0; /* stale: from an earlier use of the slot */
	if (kind != RR__UD_CANCEL)
		return 0;
	cancel_cqe(r, idx, cqe);
	return kind;
}

void rr__ring_slot_cqe(struct rr__ring *r, uint32_t idx, const struct io_uring_cqe *cqe)
{
	if (r->slots[idx].is_read && !r->slots[idx].closing)
		read_cqe(r, idx, cqe); /* a channel's event, read by the ring */
	else
		poll_cqe(r, idx, cqe);
}

uint64_t rr__ring_poll_ud(const struct rr__ring *r, uint32_t idx)
{
	return r->slots[idx].in_use ? r->slots[idx].ud
				    : rr__ud(RR__UD_POLL, r->inst, r->slots[idx].gen, idx);
}

bool rr__ring_slot_armed(const struct rr__ring *r, uint32_t idx)
{
	return idx < r->nslots && r->slots[idx].in_use && r->slots[idx].armed;
}

/* ---- bells: other threads wake this ring ---- */

static void bell_ready(void *ctx, int revents)
{
	struct rr__ring *r = ctx;

	if (revents < 0) {
		r->bell_slot = RR__NO_SLOT; /* counted in stats.poll_failures */
		return;
	}
	drain_counter(r->bell_efd);
	ring_bell_fns(r);
}

int rr__ring_bell_open(struct rr__ring *r, void (*fn)(void *ctx), void *ctx)
{
	int free_fn = -1, rc;

	for (int i = 0; i < RR__BELL_FNS; i++) {
		if (r->bell_fns[i].fn == fn && r->bell_fns[i].ctx == ctx)
			return -EALREADY;
		if (!r->bell_fns[i].fn && free_fn < 0)
			free_fn = i;
	}
	if (free_fn < 0)
		return -ENOSPC;
	if (r->bell_efd < 0) {
		r->bell_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (r->bell_efd < 0)
			return -errno;
		r->bell_ring_fd = r->io->ring_fd;
		bell_live(r->uid, true);
	}
	if (r->bell_slot == RR__NO_SLOT) {
		rc = rr__poll_add(r, r->bell_efd, bell_ready, r, &r->bell_slot);
		if (rc)
			return rc;
	}
	r->bell_fns[free_fn].fn = fn;
	r->bell_fns[free_fn].ctx = ctx;
	return 0;
}

void rr__ring_bell_close(struct rr__ring *r, void (*fn)(void *ctx), void *ctx)
{
	bool left = false;

	for (int i = 0; i < RR__BELL_FNS; i++) {
		if (r->bell_fns[i].fn == fn && r->bell_fns[i].ctx == ctx)
			r->bell_fns[i].fn = NULL;
		left |= r->bell_fns[i].fn != NULL;
	}
	if (left)
		return;
	rr__poll_close(r, r->bell_slot);
	r->bell_slot = RR__NO_SLOT;
}

/* Let go of peers whose ring is gone and to which nothing is on its way. */
static void prune_peers(struct rr__ring *r)
{
	for (uint32_t i = 0; i < r->npeers; i++) {
		struct rr__peer *p = &r->peers[i];
		bool owed = false;

		for (uint32_t k = 0; k < r->nmsgs; k++)
			owed |= r->msgs[k] == i;
		if (p->ring_fd < 0 || owed || p->inflight || bell_is_live(p->uid))
			continue;
		close(p->ring_fd);
		close(p->efd);
		p->ring_fd = p->efd = -1;
	}
}

int rr__ring_peer_add(struct rr__ring *r, const struct rr__ring *target, uint32_t *peer)
{
	struct rr__peer p = {.inst = target->inst, .uid = target->uid};
	struct rr__peer *peers;
	uint32_t *msgs, slot = r->npeers;
	int rc;

	if (target->bell_efd < 0)
		return -EINVAL;
	for (uint32_t i = 0; i < r->npeers; i++) {
		if (r->peers[i].uid == target->uid && r->peers[i].ring_fd >= 0) {
			*peer = i;
			return 0;
		}
	}
	prune_peers(r);
	for (uint32_t i = 0; i < r->npeers && slot == r->npeers; i++)
		if (r->peers[i].ring_fd < 0)
			slot = i; /* a gone peer's place */
	if (slot == r->npeers) {
		peers = realloc(r->peers, (r->npeers + 1) * sizeof(*peers));
		if (!peers)
			return -ENOMEM;
		r->peers = peers;
		msgs = realloc(r->msgs, (r->npeers + 1) * sizeof(*msgs));
		if (!msgs)
			return -ENOMEM;
		r->msgs = msgs;
	}
	p.ring_fd = fcntl(target->bell_ring_fd, F_DUPFD_CLOEXEC, 0);
	if (p.ring_fd < 0)
		return -errno;
	p.efd = fcntl(target->bell_efd, F_DUPFD_CLOEXEC, 0);
	if (p.efd < 0) {
		rc = -errno;
		close(p.ring_fd);
		return rc;
	}
	r->peers[slot] = p;
	if (slot == r->npeers)
		r->npeers++;
	*peer = slot;
	return 0;
}

void rr__ring_no_msg_ring(struct rr__ring *r)
{
	r->msg_ring = 0;
}

static bool msg_ring_works(struct rr__ring *r)
{
	struct io_uring_probe *probe;

	if (r->msg_ring < 0) {
		/* MSG_RING came with 5.18. */
		probe = io_uring_get_probe_ring(r->io);
		r->msg_ring = probe && io_uring_opcode_supported(probe, IORING_OP_MSG_RING);
		if (probe)
			io_uring_free_probe(probe);
	}
	return r->msg_ring > 0;
}

int rr__ring_peer_queue(struct rr__ring *r, uint32_t peer)
{
	if (peer >= r->npeers || r->peers[peer].ring_fd < 0)
		return RR__BELL_NONE;
	if (!msg_ring_works(r)) {
		bell_write(r->peers[peer].efd);
		return RR__BELL_EVENTFD;
	}
	/* One owed MSG_RING per peer is enough: its bell drains everything. */
	for (uint32_t i = 0; i < r->nmsgs; i++)
		if (r->msgs[i] == peer)
			return RR__BELL_NONE;
	r->msgs[r->nmsgs++] = peer;
	r->owing = true;
	return RR__BELL_MSG_RING;
}

int rr__ring_peer_ring(struct rr__ring *r, uint32_t peer)
{
	int how = rr__ring_peer_queue(r, peer);

	if (how == RR__BELL_MSG_RING)
		rr__ring_flush(r);
	return how;
}
