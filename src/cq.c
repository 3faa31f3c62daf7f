// SPDX-License-Identifier: MIT
/*
 * Completion channels and CQs.
 *
 * When a channel's poll fires: read CQ events until EAGAIN (the fd is
 * non-blocking) or until no CQ of the channel is left armed, count them per
 * CQ and acknowledge in batches; then for each CQ that had an event, poll it
 * in batches within the budget. Once a CQ is empty it is armed with
 * ibv_req_notify_cq() and polled once more: a completion that arrived
 * between the last poll and the arm raised no event and would otherwise be
 * stranded until the next one.
 *
 * Inside the built-in loop an event-mode CQ is armed only when the loop
 * could block (rr__cqs_settle()): drained after its event, it goes on the
 * lazy list and every pass polls it, so a pass that woke for any CQE (a
 * file read's, a timer's) hands out what landed meanwhile without an
 * event, an arm or a channel read. A pass that ends with a CQE waiting in
 * the ring cannot block next, and leaves the CQ unarmed; whoever reaps
 * that CQE (the next pass, or rr_bridge_handle_cqe() of an application's
 * loop) settles it first. So an unarmed event CQ is always covered by a
 * CQE the loop must reap before it can sleep.
 *
 * With RR_BRIDGE_RING_READ, where the provider needs no call per event
 * (its cq_event op is empty, as on rxe and siw) and the ring's task work
 * runs on our thread (not SQPOLL), the channel is read through the ring
 * instead: an IORING_OP_READ of one event at a time, so the CQE names the
 * CQ and no read(2) is made — a wake-up costs the io_uring_enter the loop
 * makes anyway and the arm. The kernel then polls the fd again and retries
 * the read on every wake-up, which costs more than the read(2) saves on
 * rxe under TCG (ringrdma(7)), so it is not the default.
 * The one subtlety: a READ may hold an event the kernel counts as read
 * before its CQE reaches us; a CQ's destroy settles the READ and counts
 * such an event, or ibv_destroy_cq() would wait for its ack forever.
 *
 * CQs that must be polled without an event — busy mode, hybrid mode inside
 * its spin window, CQs cut short by the budget and CQs of a channel whose
 * poll failed — sit on the active list and are polled once per loop pass.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/ib_user_verbs.h>

#include "cq.h"

#define SPIN_CLOCK_EVERY 8

static const bool nothing_held = false;

void rr__cqs_init(struct rr__cqs *set, struct rr__ring *ring, struct rr_bridge_stats *stats,
		  unsigned int cq_batch, unsigned int budget, unsigned int ack_batch)
{
	set->ring = ring;
	set->stats = stats;
	set->cq_batch = cq_batch;
	set->budget = budget;
	set->ack_batch = ack_batch;
	set->poll_want = budget < cq_batch ? budget : cq_batch;
	set->gen = 1;
	set->posts_held = &nothing_held;
	rr__list_init(&set->channels);
	rr__list_init(&set->cqs);
	rr__list_init(&set->active);
	rr__list_init(&set->lazy);
}

/* Off the lazy list: the first, or one of the others. */
static __attribute__((noinline)) void lazy_off(rr_cq *cq)
{
	struct rr__cqs *set = cq->set;

	if (set->lazy_one != cq) {
		rr__list_del(&cq->lazy_link);
	} else if (rr__list_empty(&set->lazy)) {
		set->lazy_one = NULL;
	} else {
		set->lazy_one = rr__container_of(set->lazy.next, rr_cq, lazy_link);
		rr__list_del(&set->lazy_one->lazy_link);
	}
	cq->lazy = false;
}

/* The first lazy CQ is set->lazy_one, the others (rarely any) on
 * set->lazy in order: mostly one CQ waits, with no list to keep. */
static inline __attribute__((always_inline)) void set_lazy(rr_cq *cq, bool on)
{
	struct rr__cqs *set = cq->set;

	if (on && !cq->lazy) {
		if (!set->lazy_one)
			set->lazy_one = cq;
		else
			rr__list_add_tail(&set->lazy, &cq->lazy_link);
		cq->lazy = true;
	} else if (!on && cq->lazy) {
		lazy_off(cq);
	}
}

static void set_active(rr_cq *cq, bool on)
{
	if (on)
		set_lazy(cq, false); /* polled every pass all the same */
	if (cq->evented)
		return; /* queued by the current channel drain: polled shortly */
	if (on && !cq->active) {
		rr__list_add_tail(&cq->set->active, &cq->active_link);
		cq->active = true;
	} else if (!on && cq->active) {
		rr__list_del(&cq->active_link);
		cq->active = false;
	}
}

static void ack(rr_cq *cq)
{
	if (cq->unacked) {
		ibv_ack_cq_events(cq->cq, cq->unacked);
		cq->unacked = 0;
		cq->set->stats->cq_acks++;
	}
}

/* Its event was read (or it is going away): no longer armed. */
static void disarm(rr_cq *cq)
{
	if (!cq->armed)
		return;
	cq->armed = false;
	cq->ch->narmed--;
	cq->ch->armed_xor ^= (uintptr_t)cq;
	cq->set->narmed--;
}

static void window_hit(rr_cq *cq);

/* cq's event was read: it is no longer armed; ack in batches. */
static inline void took_event(rr_cq *cq)
{
	struct rr__cqs *set = cq->set;
	unsigned int unacked = cq->unacked + 1;

	set->stats->cq_events++;
	cq->unacked = unacked;
	if (cq->armed) { /* disarm(), with what is at hand */
		rr_channel *ch = cq->ch;

		cq->armed = false;
		ch->narmed--;
		ch->armed_xor ^= (uintptr_t)cq;
		set->narmed--;
	}
	if (unacked >= set->ack_batch)
		ack(cq);
}

/*
 * on_wc_batch: hand out up to @max of the batch, from batch_head on, as
 * one array, in place. With the batch spent, the oldest stashed ones are
 * moved into its buffer first and go as a batch does: take_qp may grow
 * the stash under the callback, never the batch. Out of line: the
 * per-WC loop of hand_out_batch() keeps its registers.
 */
static __attribute__((noinline)) unsigned int hand_out_array(rr_cq *cq, unsigned int max)
{
	uint32_t h = cq->batch_head, n;

	if (h >= cq->nbatch) {
		if (cq->stash_head >= cq->nstash)
			return 0;
		n = cq->nstash - cq->stash_head;
		if (n > cq->set->cq_batch)
			n = cq->set->cq_batch;
		memcpy(cq->batch, &cq->stash[cq->stash_head], n * sizeof(*cq->batch));
		cq->stash_head += n;
		if (cq->stash_head == cq->nstash)
			cq->stash_head = cq->nstash = 0;
		h = cq->batch_head = 0;
		cq->nbatch = n;
	}
	n = cq->nbatch - h;
	if (n > max)
		n = max;
	cq->batch_head = h + n; /* handed out: take_qp leaves them alone */
	cq->on_wc_batch(cq, &cq->batch[h], (int)n, cq->data);
	return n;
}

/* hand_out_array() of a batch just polled, all of it. Out of line, as
 * that is: the per-WC loop of hand_out_batch() keeps its registers. The
 * callback is its tail call. */
static __attribute__((noinline)) void hand_out_whole(rr_cq *cq)
{
	uint32_t n = cq->nbatch;

	cq->batch_head = n; /* handed out: take_qp leaves them alone */
	cq->on_wc_batch(cq, cq->batch, (int)n, cq->data);
}

/* A stash entry goes as a copy: take_qp may grow the stash under the
 * callback. Out of line: the copy needs a frame the others do not. */
static __attribute__((noinline)) unsigned int hand_out_stashed(rr_cq *cq)
{
	struct ibv_wc w = cq->stash[cq->stash_head++];

	if (cq->stash_head == cq->nstash)
		cq->stash_head = cq->nstash = 0;
	cq->on_wc(cq, &w, cq->data);
	return 1;
}

/*
 * Hand out the oldest of what the CQ keeps, at most @max: the rest of the
 * batch being handed out, then what another QP's teardown took out of the
 * CQ; both are older than what is still in the CQ. 0 if none is kept.
 *
 * A batch entry goes to the callback in place: rr__cq_take_qp() moves only
 * the entries after it, and no poll of this CQ refills the batch while
 * one of its callbacks runs.
 */
static inline unsigned int hand_out_kept(rr_cq *cq, unsigned int max)
{
	if (cq->batch_head >= cq->nbatch && cq->stash_head >= cq->nstash)
		return 0;
	if (cq->on_wc_batch)
		return hand_out_array(cq, max);
	if (cq->batch_head < cq->nbatch) {
		cq->on_wc(cq, &cq->batch[cq->batch_head++], cq->data);
		return 1;
	}
	return hand_out_stashed(cq);
}

/*
 * A batch just polled, handed out in order from its first entry. A
 * callback may take another QP's completions out of the rest
 * (rr__cq_take_qp() moves those after batch_head down and lowers nbatch)
 * or destroy the CQ (rr_cq_destroy() lowers nbatch to batch_head): the
 * bound is read again after each call, so the loop goes on with what is
 * left, or ends. Returns how many went. With on_wc_batch the whole batch
 * goes in one call.
 */
static inline unsigned int hand_out_batch(rr_cq *cq)
{
	struct ibv_wc *wc = cq->batch;
	rr_wc_cb fn = cq->on_wc;
	void *data = cq->data;
	uint32_t n;

	if (cq->on_wc_batch) {
		hand_out_whole(cq);
		/* All of it went: nothing was left after batch_head for
		 * take_qp to take, nor for a destroy to cut. */
		return cq->nbatch;
	}
	/* Pointers, not indexes: one store and one comparison an entry. */
	cq->batch_end = wc + cq->nbatch;
	do {
		cq->batch_next = ++wc; /* where take_qp starts, if called */
		fn(cq, wc - 1, data);
	} while (wc < cq->batch_end);
	cq->batch_next = NULL;
	/* The loop ended at the bound: nbatch, which take_qp and a destroy
	 * lower no further than the entry after the one handed out. */
	n = cq->nbatch;
	cq->batch_head = n;
	return n;
}

/*
 * Adaptive re-poll. A short batch emptied the CQ when it was polled, but
 * what its callbacks caused (a peer's answer over loopback, a reply they
 * posted coming back) may be in it a moment later: worth one more poll
 * before the arm, which on rxe saves the arm's syscall and an event. Most
 * of the time that re-poll finds nothing, and costs a poll per wake-up.
 * So a short batch counts as empty once REPOLL_IDLE re-polls in a row
 * found nothing, on any CQ of the bridge (a CQ of one of many connections
 * fires too rarely to learn alone); every REPOLL_PROBE-th short batch is still re-polled to
 * see whether that changed, and a re-poll or a poll after the arm that
 * finds something turns re-polls back on. Only the poll after an arm
 * decides that nothing is stranded, and it always polls.
 *
 * set->repoll_idle below REPOLL_IDLE counts those re-polls; from there it
 * counts down the short batches to take as empty before the next probe
 * (at REPOLL_IDLE), so a short batch asks one word.
 */
#define REPOLL_IDLE  4
#define REPOLL_PROBE 16

static inline void repoll_learn(rr_cq *cq, int n)
{
	struct rr__cqs *set = cq->set;

	cq->repolling = false;
	if (n > 0)
		set->repoll_idle = 0;
	else if (set->repoll_idle < REPOLL_IDLE - 1)
		set->repoll_idle++;
	else if (set->repoll_idle == REPOLL_IDLE - 1)
		set->repoll_idle = REPOLL_IDLE + REPOLL_PROBE - 1;
}

/* One provider poll of up to @want into the CQ's batch, an empty CQ
 * remembered for this pass. The provider's count (< 0: its error). */
static inline __attribute__((always_inline)) int poll_plain(rr_cq *cq, int want)
{
	int n = ibv_poll_cq(cq->cq, want, cq->batch);

	if (n == 0) {
		struct rr__cqs *set = cq->set; /* read here: no register kept over the call */

		set->stats->empty_polls++;
		cq->empty_gen = set->gen;
	}
	return n;
}

/* poll_plain(), and what the adaptive re-poll learns from it. */
static inline __attribute__((always_inline)) int poll_batch(rr_cq *cq, int want)
{
	int n = poll_plain(cq, want);

	if (cq->repolling)
		repoll_learn(cq, n);
	return n;
}

/* A short batch: is a re-poll worth it? If not, the CQ counts as empty. */
static inline void repoll_after_short(rr_cq *cq)
{
	struct rr__cqs *set = cq->set;

	if (set->repoll_idle > REPOLL_IDLE) {
		set->repoll_idle--;
		cq->empty_gen = set->gen;
		return;
	}
	if (set->repoll_idle == REPOLL_IDLE) /* a probe: count from here */
		set->repoll_idle = REPOLL_IDLE + REPOLL_PROBE - 1;
	cq->repolling = true;
}

/*
 * Hand out up to `budget` work completions; *more when the budget ran out.
 *
 * A CQ that a poll found empty earlier in this call into the library
 * (set->gen unchanged, no arm and no callback of it since) is not polled
 * again; nor, mostly, one a short batch emptied (the adaptive re-poll
 * above). @n > 0: cq_poll() polled a batch of @n for @want already.
 */
static inline __attribute__((always_inline)) unsigned int
hand_out_from(rr_cq *cq, unsigned int budget, bool *more, int n, int want, bool drained)
{
	struct rr__cqs *set = cq->set;
	unsigned int total = 0, kept;

	*more = false;
	cq->dispatch_depth++;
	for (;;) {
		/* @n: a batch just polled, into the CQ's own buffer: a QP
		 * leaving during a callback takes its completions from the
		 * rest of the batch first. */
		if (n > 0) {
			if (cq->spin == RR__SPIN_WINDOW)
				window_hit(cq);
			cq->nbatch = (uint32_t)n;
			n = 0;
			drained = cq->nbatch < (uint32_t)want;
			if (drained)
				repoll_after_short(cq);
			total += hand_out_batch(cq);
			if (cq->destroy_deferred)
				goto out;
		}
		if (total >= budget)
			break;
		/* cq->kept: nothing is kept without it (the flag may stay
		 * set a while after the last kept one went). */
		kept = cq->kept ? hand_out_kept(cq, budget - total) : 0;
		if (kept) {
			total += kept;
			/* Destroyed from its own callback: the rest of the
			 * batch belonged to requests the destroy flushed. */
			if (cq->destroy_deferred)
				goto out;
			continue;
		}
		/* A short batch emptied the CQ (what a callback's teardown
		 * took out of it meanwhile was kept, and handed out above). */
		if (drained)
			break;
		want = (int)(budget - total < set->cq_batch ? budget - total : set->cq_batch);
		n = poll_batch(cq, want);
		if (n <= 0)
			break;
	}
	*more = total >= budget;
out:
	/* Only a batch the budget cut, or what was kept already (also by
	 * take_qp under a callback), can leave completions kept. */
	if (cq->kept || total >= budget)
		cq->kept = cq->batch_head < cq->nbatch || cq->stash_head < cq->nstash;
	set->stats->wcs += total;
	cq->dispatch_depth--;
	return total;
}

/* @drained: the CQ counts as empty once what it keeps went (see above). */
static inline __attribute__((always_inline)) unsigned int hand_out(rr_cq *cq, unsigned int budget,
								   bool *more, int n, int want)
{
	return hand_out_from(cq, budget, more, n, want, cq->empty_gen == cq->set->gen);
}

static __attribute__((noinline)) unsigned int cq_poll_slow(rr_cq *cq, unsigned int budget,
							   bool *more, int n, int want)
{
	return hand_out(cq, budget, more, n, want);
}

/*
 * The common calls stay out of the loop above: a CQ found empty earlier
 * in this call into the library, and a poll that finds nothing (most
 * polls after the first of a wake-up). Kept completions go first, there.
 */
static inline unsigned int cq_poll_as(rr_cq *cq, unsigned int budget, int want, bool *more)
{
	struct rr__cqs *set = cq->set;
	int n;

	if (cq->kept)
		return cq_poll_slow(cq, budget, more, 0, 0);
	*more = false;
	if (cq->empty_gen == set->gen)
		return 0;
	n = poll_batch(cq, want);
	return n > 0 ? cq_poll_slow(cq, budget, more, n, want) : 0;
}

static inline unsigned int cq_poll(rr_cq *cq, unsigned int budget, bool *more)
{
	struct rr__cqs *set = cq->set;

	return cq_poll_as(cq, budget, (int)(budget < set->cq_batch ? budget : set->cq_batch), more);
}

/* cq_poll_full() with the hand-out inline: for the channel drain's poll,
 * in a frame that is there anyway. */
static inline __attribute__((always_inline)) unsigned int cq_poll_here(rr_cq *cq, bool *more)
{
	struct rr__cqs *set = cq->set;
	int n, want = (int)set->poll_want;

	if (cq->kept)
		return cq_poll_slow(cq, set->budget, more, 0, 0);
	*more = false;
	if (cq->empty_gen == set->gen)
		return 0;
	n = poll_batch(cq, want);
	return n > 0 ? hand_out(cq, set->budget, more, n, want) : 0;
}

/* cq_poll() with the whole budget: the batch it asks for is known. */
static inline unsigned int cq_poll_full(rr_cq *cq, bool *more)
{
	struct rr__cqs *set = cq->set;

	return cq_poll_as(cq, set->budget, (int)set->poll_want, more);
}

/* poll_arrays() after a callback kept completions or destroyed the CQ,
 * @left of the budget unspent: the kept ones go through hand_out().
 * Out of line: the drain's frame keeps its registers for the common case. */
static __attribute__((noinline)) unsigned int arrays_kept(rr_cq *cq, unsigned int left,
							  bool drained)
{
	unsigned int n = cq->set->budget - left;
	bool more;

	cq->dispatch_depth--;
	cq->set->stats->wcs += n;
	if (cq->destroy_deferred || !left)
		return n;
	return n + hand_out_from(cq, left, &more, 0, 0, drained);
}

/*
 * cq_poll_here() of an on_wc_batch CQ: each batch polled goes whole, in
 * place, in one call, and the next poll follows as hand_out() would,
 * without the bookkeeping of its per-WC loop (a loop of its own, so that
 * loop keeps its registers where both are inlined). What a callback
 * leaves kept (another QP's teardown stashes what it polled) goes through
 * hand_out(), before anything newer; a destroy ends it. Whether the
 * budget ran out is not said: the channel's drain does not ask.
 *
 * A CQ that keeps completions, is owed a re-poll's lesson or spins goes
 * through hand_out() from the start. Then its polls here need neither
 * test: a re-poll is asked for by the short batch that ends the loop
 * (repoll_after_short()), and nothing opens a spin window under a
 * callback. batch_head and nbatch are left as they are: with nothing
 * kept, batch_head >= nbatch, so the batch in the callback's hands has no
 * entry after batch_head for take_qp to move, nor for a destroy to cut.
 */
static inline __attribute__((always_inline)) unsigned int poll_arrays(rr_cq *cq)
{
	struct rr__cqs *set = cq->set;
	unsigned int left = set->budget;
	int n, want = (int)set->poll_want;
	bool more;

	if (cq->kept || cq->poll_extra)
		return cq_poll_slow(cq, left, &more, 0, 0);
	if (cq->empty_gen == set->gen)
		return 0;
	cq->dispatch_depth++;
	for (;;) {
		n = poll_plain(cq, want);
		if (n <= 0)
			break;
		left -= (unsigned int)n;
		if (n < want)
			goto short_batch;
		cq->on_wc_batch(cq, cq->batch, n, cq->data);
		if (cq->destroy_deferred || cq->kept)
			return arrays_kept(cq, left, false);
		if (!left)
			break;
		/* want was all that was left, or cq_batch. */
		if (left < (unsigned int)want)
			want = (int)left;
	}
done:
	cq->dispatch_depth--;
	n = (int)(set->budget - left);
	set->stats->wcs += (unsigned int)n;
	return (unsigned int)n;
short_batch:
	/* The CQ was empty: the last of this drain, or a re-poll. */
	repoll_after_short(cq);
	cq->on_wc_batch(cq, cq->batch, n, cq->data);
	if (cq->destroy_deferred || cq->kept)
		return arrays_kept(cq, left, true);
	goto done;
}

/*
 * Posts that callbacks of this CQ held go out now, before the event read
 * or the arm the caller is about to make: a reply held behind those
 * syscalls leaves later by their length, and at one message in flight its
 * answer then comes after this side has armed and gone to sleep instead
 * of in the re-poll after the arm; a completion the post brings back at
 * once (rxe over loopback) would raise an event as well. Inside the CQ's
 * dispatch depth, so a callback of a refused request that destroys the
 * CQ leaves it to reap_deferred().
 */
static inline void posts_due(rr_cq *cq)
{
	struct rr__cqs *set = cq->set;

	if (!*set->posts_held)
		return;
	cq->dispatch_depth++;
	set->posts_due(set->posts_ctx);
	cq->dispatch_depth--;
}

/* arm() of a CQ known to be unarmed. */
static inline __attribute__((always_inline)) int arm_unarmed(rr_cq *cq)
{
	struct rr_bridge_stats *stats;
	struct rr__cqs *set;
	rr_channel *ch;
	int rc;

	rc = ibv_req_notify_cq(cq->cq, 0); /* returns the errno value */
	if (rc)
		return rc > 0 ? -rc : -EIO;
	/* Read before the stores, which could alias them (no strict
	 * aliasing): each pointer once. */
	ch = cq->ch;
	set = cq->set;
	stats = set->stats;
	cq->armed = true;
	cq->empty_gen = 0; /* the poll after the arm must look */
	ch->narmed++;
	ch->armed_xor ^= (uintptr_t)cq;
	set->narmed++;
	stats->notify_arms++;
	return 0;
}

static inline __attribute__((always_inline)) int arm(rr_cq *cq)
{
	if (cq->armed)
		return 0;
	return arm_unarmed(cq);
}

/*
 * Hybrid: keep polling for a window after the last completion, then arm.
 *
 * Where the clock is a syscall (VMs without a usable TSC, such as the lab)
 * reading it in every window would cost about what the arm saves, so only
 * every SPIN_TIME_EVERY-th window (and every window until the first
 * measurement, and the one after a window that found nothing) is timed
 * with the clock, read when it opens and every
 * SPIN_CLOCK_EVERY empty polls. Those readings measure how long an empty
 * poll takes, work completions' callbacks excluded; the windows in between
 * count empty polls.
 *
 * RR_WAIT_HYBRID adapts the window to the gaps it sees: twice the expected
 * gap (an average of the gaps found inside windows) plus SPIN_MARGIN_NS,
 * at most spin_us. A window that ends empty doubles the next one. It also
 * keeps a running share of windows that found a completion (about the
 * last 16); while a full-length window ends empty with that share under
 * 1/8, spinning costs more than it brings, so the next 1, 3, 7 ... 63 windows are skipped
 * (armed at once). Backing off only then matters: when both ends of a
 * ping-pong back off at the first miss, each sees the other's wake-up
 * latency as the gap and neither spins again.
 * RR_WAIT_HYBRID_FIXED always spins spin_us.
 */
#define SPIN_TIME_EVERY	 16
#define SPIN_MARGIN_NS	 2000u
#define SPIN_MAX_BACKOFF 6
#define SPIN_HITS_ONE	 256 /* hit_share of a window that always hits */

/* The longest window: spin_us. */
static uint64_t window_cap_ns(const rr_cq *cq)
{
	return (uint64_t)cq->spin_us * 1000u;
}

static uint64_t window_ns(const rr_cq *cq)
{
	uint64_t cap = window_cap_ns(cq), w;

	if (cq->mode == RR_WAIT_HYBRID_FIXED || !cq->gap_ns)
		return cap;
	w = 2 * cq->gap_ns + SPIN_MARGIN_NS;
	return w < cap ? w : cap;
}

/* @polls polls took @ns: learn what an empty poll costs. */
static void poll_cost(rr_cq *cq, uint64_t ns, unsigned int polls)
{
	uint64_t s = ns * 16 / polls;

	if (s > UINT32_MAX)
		s = UINT32_MAX;
	if (!s)
		s = 1;
	cq->poll_ns16 = cq->poll_ns16 ? (uint32_t)((3ull * cq->poll_ns16 + s) / 4) : (uint32_t)s;
}

/*
 * A poll inside the window found completions: called before they are
 * handed out, so what their callbacks do is not counted as waiting. The
 * gap is the window's empty polls and this one.
 */
static void window_hit(rr_cq *cq)
{
	unsigned int polls = cq->spin_empty + 1;
	uint64_t gap;

	cq->spin = RR__SPIN_BUSY;
	if (cq->spin_timed) {
		uint64_t now = rr__now_ns();

		/* Polls since the last reading, this one included. */
		poll_cost(cq, now - cq->spin_t, cq->spin_empty % SPIN_CLOCK_EVERY + 1);
		gap = now - cq->spin_t0;
	} else {
		gap = (uint64_t)polls * cq->poll_ns16 / 16;
	}
	if (cq->mode != RR_WAIT_HYBRID)
		return;
	cq->gap_ns = cq->gap_ns ? (3 * cq->gap_ns + gap) / 4 : gap;
	if (!cq->gap_ns)
		cq->gap_ns = 1;
	cq->hit_share += (SPIN_HITS_ONE - cq->hit_share) / 16;
	cq->misses = 0;
}

/* The window ended without a completion: the gap is longer than it. */
static void window_miss(rr_cq *cq)
{
	cq->spin = RR__SPIN_IDLE;
	/* Maybe counted too few polls: time the next window. A miss costs
	 * an arm and a wake-up anyway, the clock reads are little beside. */
	cq->spin_retime = true;
	if (cq->mode != RR_WAIT_HYBRID)
		return;
	if (cq->gap_ns < cq->spin_ns)
		cq->gap_ns = cq->spin_ns;
	cq->hit_share -= cq->hit_share / 16;
	if (cq->spin_ns >= window_cap_ns(cq) && cq->hit_share < SPIN_HITS_ONE / 8) {
		unsigned int k = cq->misses < SPIN_MAX_BACKOFF ? ++cq->misses : SPIN_MAX_BACKOFF;

		cq->skip = (1u << k) - 1;
	}
}

/* The first empty poll after activity: open a window, or arm at once. */
static bool window_open(rr_cq *cq)
{
	if (cq->mode == RR_WAIT_HYBRID && cq->skip) {
		cq->skip--;
		cq->spin = RR__SPIN_IDLE;
		return false;
	}
	cq->spin = RR__SPIN_WINDOW;
	cq->spin_empty = 0;
	cq->spin_ns = window_ns(cq);
	cq->spin_timed = !cq->poll_ns16 || cq->spin_retime || ++cq->windows % SPIN_TIME_EVERY == 0;
	cq->spin_retime = false;
	if (cq->spin_timed) {
		cq->spin_t0 = rr__now_ns();
		cq->spin_t = cq->spin_t0;
	} else {
		uint64_t l = cq->spin_ns * 16 / cq->poll_ns16;

		cq->spin_limit = l > UINT_MAX ? UINT_MAX : l ? (unsigned int)l : 1;
	}
	return true;
}

static inline __attribute__((always_inline)) bool window_over(rr_cq *cq)
{
	uint64_t now;

	if (!cq->spin_timed)
		return cq->spin_empty >= cq->spin_limit;
	if (cq->spin_empty % SPIN_CLOCK_EVERY)
		return false;
	now = rr__now_ns();
	poll_cost(cq, now - cq->spin_t, SPIN_CLOCK_EVERY);
	cq->spin_t = now;
	return now - cq->spin_t0 >= cq->spin_ns;
}

/* Hybrid: after a poll that found @n completions, keep polling? */
static inline __attribute__((always_inline)) bool keep_spinning(rr_cq *cq, unsigned int n)
{
	if (n) {
		cq->spin = RR__SPIN_BUSY; /* a window that found them closed in cq_poll() */
		return true;
	}
	switch (cq->spin) {
	case RR__SPIN_BUSY:
		return window_open(cq);
	case RR__SPIN_WINDOW:
		++cq->spin_empty;
		if (!window_over(cq))
			return true;
		window_miss(cq);
		return false;
	default:
		return false;
	}
}

static bool is_hybrid(const rr_cq *cq)
{
	return cq->mode == RR_WAIT_HYBRID || cq->mode == RR_WAIT_HYBRID_FIXED;
}

static void cq_free(rr_cq *cq)
{
	free(cq->batch);
	free(cq->stash);
	free(cq);
}

/* Free a CQ destroyed during its own dispatch, once that unwound. */
static bool reap_deferred(rr_cq *cq)
{
	if (!cq->destroy_deferred)
		return false;
	if (!cq->dispatch_depth)
		cq_free(cq);
	return true;
}

/*
 * May the CQ wait unarmed on the lazy list, to be armed when the loop
 * could block (see rr__cqs_settle())? An event CQ on a live channel, not
 * armed and not being destroyed, whose completions are all handed out
 * (then it leaves the active list, if on it). What poll_and_place() asks
 * of a CQ it just polled, and service() of one polled empty earlier in
 * this call into the library.
 */
static inline bool may_wait_lazy(const rr_cq *cq)
{
	return cq->mode == RR_WAIT_EVENT && !cq->armed && !cq->kept && !cq->destroy_deferred &&
	       !cq->ch->deaf;
}

/* may_wait_lazy() of a CQ not on the active list, asked as one word. */
static inline bool lazy_ok(const rr_cq *cq)
{
	return !cq->unsettled && cq->mode == RR_WAIT_EVENT && !cq->ch->deaf;
}

/*
 * The poll after an arm found @n2 (*@more: the budget cut it). What came
 * after the arm raised an event, and the wake-up it brings costs the same
 * whatever it finds: in event mode take what keeps arriving until a poll
 * finds nothing, as a loop on epoll that polls until the CQ is empty
 * does, so the wake-ups are fewer. The replies those callbacks hold go
 * out on the way. What was handed out in all.
 */
static inline __attribute__((always_inline)) unsigned int stream(rr_cq *cq, unsigned int n2,
								 bool *more)
{
	for (unsigned int got = n2;
	     got && !*more && cq->mode == RR_WAIT_EVENT && !cq->destroy_deferred;) {
		posts_due(cq);
		if (cq->destroy_deferred)
			break;
		/* n2 < budget: a poll that reached it set more. */
		got = cq_poll(cq, cq->set->budget - n2, more);
		n2 += got;
	}
	return n2;
}

/*
 * Poll a CQ and decide whether it stays on the active list or is armed;
 * an event CQ found empty and unarmed may go on the lazy list instead
 * (@when), to be armed when the loop could block.
 */
static inline __attribute__((always_inline)) unsigned int place(rr_cq *cq, enum rr__arm when,
								unsigned int n, bool more)
{
	struct rr__cqs *set = cq->set;
	unsigned int n2;

	if (cq->destroy_deferred)
		return n;
	if (more) {
		set->stats->budget_yields++;
		set_active(cq, true);
		return n;
	}
	/* Asked after the poll: its callbacks may have queued a CQE. */
	if ((when == RR__ARM_LATER ||
	     (when == RR__ARM_IF_IDLE && rr__ring_cqe_waiting(set->ring))) &&
	    may_wait_lazy(cq)) {
		if (cq->active) /* mostly not: spare the call */
			set_active(cq, false);
		set_lazy(cq, true);
		return n;
	}
	/* Mostly an event CQ on a live channel: one test for the others. */
	if (cq->mode != RR_WAIT_EVENT || cq->ch->deaf) {
		if (cq->mode == RR_WAIT_BUSY || cq->ch->deaf) {
			set_active(cq, true);
			return n;
		}
		if (is_hybrid(cq) && keep_spinning(cq, n)) {
			set_active(cq, true);
			return n;
		}
	}
	if (cq->active) /* mostly not: spare the call */
		set_active(cq, false);
	posts_due(cq);
	if (cq->destroy_deferred)
		return n;
	if (arm(cq)) {
		set_active(cq, true); /* cannot sleep on it: keep polling */
		return n;
	}
	/* Poll again: see the comment at the top of the file. */
	n2 = cq_poll_full(cq, &more);
	if (n2)
		set->repoll_idle = 0; /* a re-poll would have saved this arm */
	n2 = stream(cq, n2, &more);
	if (cq->destroy_deferred)
		return n + n2;
	if (more || (n2 && is_hybrid(cq))) {
		if (is_hybrid(cq))
			cq->spin = RR__SPIN_BUSY;
		set_active(cq, true);
	}
	return n + n2;
}

static inline unsigned int poll_and_place(rr_cq *cq, enum rr__arm when)
{
	unsigned int n;
	bool more;

	n = cq_poll_full(cq, &more);
	return place(cq, when, n, more);
}

static unsigned int service_as(rr_cq *cq, enum rr__arm when)
{
	unsigned int n = poll_and_place(cq, when);

	if (reap_deferred(cq))
		return n;
	/* Last: the hook may destroy the CQ. */
	if (cq->hooks.after_dispatch)
		cq->hooks.after_dispatch(cq->hooks.ctx);
	return n;
}

/* After the arm, the poll found @n2 (@more: the budget cut it): take
 * what keeps arriving, as place() does; then what service_as() does. */
static __attribute__((noinline)) unsigned int stream_after_arm(rr_cq *cq, unsigned int n2,
							       bool more)
{
	cq->set->repoll_idle = 0; /* a re-poll would have saved this arm */
	n2 = stream(cq, n2, &more);
	if (!cq->destroy_deferred && more)
		set_active(cq, true);
	if (reap_deferred(cq))
		return n2;
	if (cq->hooks.after_dispatch)
		cq->hooks.after_dispatch(cq->hooks.ctx);
	return n2;
}

/* The poll after settle_lone()'s arm found @n: hand them out (a batch
 * of poll_want polled), then take what keeps arriving. */
static __attribute__((noinline)) unsigned int after_arm_found(rr_cq *cq, int n)
{
	struct rr__cqs *set = cq->set;
	unsigned int n2;
	bool more;

	n2 = cq_poll_slow(cq, set->budget, &more, n, (int)set->poll_want);
	return stream_after_arm(cq, n2, more);
}

/*
 * The settle's lone lazy CQ, mostly polled empty in this call already (a
 * short batch counted as empty) with no CQE waiting in the ring: what
 * service_as() does then (the held posts, the arm, the poll after it),
 * with nothing else to keep. Anything else goes through service_as().
 * A lazy CQ is an event CQ on a live channel, neither armed nor active
 * (set_active() and channel_lost() take it off the list).
 */
static __attribute__((noinline)) unsigned int settle_lone(rr_cq *cq, enum rr__arm when)
{
	struct rr__cqs *set = cq->set;
	int n;

	/* Held posts go before the arm, and their callbacks may do
	 * anything: then the general way, as for the rest. */
	if (cq->empty_gen != set->gen || cq->unsettled || *set->posts_held ||
	    when == RR__ARM_LATER || (when == RR__ARM_IF_IDLE && rr__ring_cqe_waiting(set->ring)))
		return service_as(cq, when);
	/* Unarmed (unsettled is 0), keeping nothing, and nothing called
	 * back since: arm, then poll what came before the arm. */
	if (arm_unarmed(cq)) {
		set_active(cq, true); /* cannot sleep on it: keep polling */
	} else {
		n = poll_batch(cq, (int)set->poll_want);
		if (n > 0)
			return after_arm_found(cq, n);
	}
	/* Last: the hook may destroy the CQ. */
	if (cq->hooks.after_dispatch)
		cq->hooks.after_dispatch(cq->hooks.ctx);
	return 0;
}

/* service_as() of a CQ polled already: @n handed out, @more as it said. */
static __attribute__((noinline)) void service_polled(rr_cq *cq, enum rr__arm when, unsigned int n,
						     bool more)
{
	place(cq, when, n, more);
	if (reap_deferred(cq))
		return;
	if (cq->hooks.after_dispatch)
		cq->hooks.after_dispatch(cq->hooks.ctx);
}

/* Inside the built-in loop, arming waits until the loop could block; in
 * a pass of the application's loop, until the pass ends (its posts gone).
 * Mostly the CQ was polled empty just before its event was read (see
 * channel_ready()): what poll_and_place() would do then, put it on the
 * lazy list, is done here without it. */
static inline unsigned int service(rr_cq *cq)
{
	struct rr__cqs *set = cq->set;
	const struct rr__ring *r = set->ring;

	if (!(r->loop_owned || r->arm_at_end))
		return service_as(cq, RR__ARM_NOW);
	if (cq->empty_gen != set->gen || !lazy_ok(cq))
		return service_as(cq, RR__ARM_LATER);
	set_lazy(cq, true);
	/* Last: the hook may destroy the CQ. */
	if (cq->hooks.after_dispatch)
		cq->hooks.after_dispatch(cq->hooks.ctx);
	return 0;
}

/*
 * An event CQ whose event was just read, not polled yet in this call: what
 * service() does, with the poll here instead of in poll_and_place() (the
 * first CQ of a channel drain, mostly the only one). Other modes, and a
 * CQ the budget cut, go the general way.
 */
static inline __attribute__((always_inline)) void serve_event(rr_cq *cq)
{
	struct rr__cqs *set = cq->set;
	const struct rr__ring *r = set->ring;
	unsigned int n;
	bool more;

	if (!(r->loop_owned || r->arm_at_end) || cq->mode != RR_WAIT_EVENT ||
	    cq->empty_gen == set->gen) {
		service(cq);
		return;
	}
	n = cq_poll_here(cq, &more);
	/* Its mode was asked before the poll: a callback that changed it
	 * (rr_cq_set_mode()) made it active, which unsettled says. */
	if (more || cq->unsettled || cq->ch->deaf) { /* not active: see the callers */
		service_polled(cq, RR__ARM_LATER, n, more);
		return;
	}
	set_lazy(cq, true);
	/* Last: the hook may destroy the CQ. */
	if (cq->hooks.after_dispatch)
		cq->hooks.after_dispatch(cq->hooks.ctx);
}

/* Poll an armed event CQ without touching its arm: what it hands out
 * raised (or will raise) an event all the same, read as usual, which
 * then finds the CQ empty. */
static unsigned int free_poll(rr_cq *cq)
{
	unsigned int n;
	bool more;

	n = cq_poll_full(cq, &more);
	if (reap_deferred(cq))
		return n;
	if (more) {
		cq->set->stats->budget_yields++;
		set_active(cq, true);
	}
	if (n && cq->hooks.after_dispatch)
		cq->hooks.after_dispatch(cq->hooks.ctx);
	return n;
}

/* One CQ of the set, in turn, polled if it is an armed event CQ: a pass
 * costs one poll at most however many CQs and channels the bridge has,
 * and arming costs no list of its own. */
static unsigned int poll_armed(struct rr__cqs *set)
{
	rr_cq *cq;

	if (!set->narmed)
		return 0;
	cq = rr__container_of(set->cqs.next, rr_cq, link);
	rr__list_del(&cq->link);
	rr__list_add_tail(&set->cqs, &cq->link);
	if (!cq->armed || cq->ch->deaf || cq->mode != RR_WAIT_EVENT || cq->active || cq->evented)
		return 0;
	return free_poll(cq);
}

/* The general settle: an armed CQ polled first, or several lazy CQs. */
static __attribute__((noinline)) unsigned int settle_all(struct rr__cqs *set, enum rr__arm when,
							 bool armed_too)
{
	struct rr__list pass;
	unsigned int n = 0;

	rr_cq *first;

	if (armed_too)
		n += poll_armed(set);
	first = set->lazy_one;
	if (!first)
		return n;
	/* Take them, as rr__cq_poll_active() does: a CQ left unarmed goes
	 * back to set->lazy_one or set->lazy, not on `pass`. */
	rr__list_init(&pass);
	if (!rr__list_empty(&set->lazy)) {
		pass.next = set->lazy.next;
		pass.prev = set->lazy.prev;
		pass.next->prev = &pass;
		pass.prev->next = &pass;
		rr__list_init(&set->lazy);
	}
	set->lazy_one = NULL;
	first->lazy = false;
	n += service_as(first, when);
	while (!rr__list_empty(&pass)) {
		rr_cq *cq = rr__container_of(pass.next, rr_cq, lazy_link);

		rr__list_del(&cq->lazy_link);
		cq->lazy = false;
		n += service_as(cq, when);
	}
	return n;
}

unsigned int rr__cqs_settle(struct rr__cqs *set, enum rr__arm when, bool armed_too)
{
	rr_cq *cq;

	/* Mostly no armed CQ to poll and one lazy CQ, or none: taken alone,
	 * no list, no frame (the rest is out of line). */
	if (armed_too || !rr__list_empty(&set->lazy))
		return settle_all(set, when, armed_too);
	cq = set->lazy_one;
	if (!cq)
		return 0;
	set->lazy_one = NULL;
	cq->lazy = false;
	return settle_lone(cq, when); /* a tail call */
}

unsigned int rr__cq_poll_active(struct rr__cqs *set)
{
	struct rr__list pass;
	unsigned int n = 0;

	/* Take the list: service() re-adds what must stay, and a CQ
	 * destroyed meanwhile unlinks itself from `pass`. */
	rr__list_init(&pass);
	if (rr__list_empty(&set->active))
		return 0;
	pass.next = set->active.next;
	pass.prev = set->active.prev;
	pass.next->prev = &pass;
	pass.prev->next = &pass;
	rr__list_init(&set->active);
	while (!rr__list_empty(&pass)) {
		rr_cq *cq = rr__container_of(pass.next, rr_cq, active_link);

		rr__list_del(&cq->active_link);
		cq->active = false;
		n += service(cq);
	}
	return n;
}

static int keep(struct ibv_wc **arr, uint32_t *n, uint32_t *cap, const struct ibv_wc *wc)
{
	if (*n == *cap) {
		uint32_t c = *cap ? *cap * 2 : 64;
		struct ibv_wc *a = realloc(*arr, c * sizeof(*a));

		if (!a)
			return -ENOMEM;
		*arr = a;
		*cap = c;
	}
	(*arr)[(*n)++] = *wc;
	return 0;
}

int rr__cq_take_qp(rr_cq *cq, uint32_t qp_num, void (*fn)(void *ctx, const struct ibv_wc *wc),
		   void *ctx)
{
	struct ibv_wc wc[32], *mine = NULL;
	uint32_t nmine = 0, cap = 0, k, i;
	int n, rc = 0;

	/*
	 * Take this QP's completions, oldest first: from the rest of the
	 * batch being handed out, from those kept earlier, from the CQ (the
	 * others stay, in order). All are taken before any goes to fn,
	 * whose callbacks may take another QP's from the same CQ.
	 */
	if (cq->batch_next) /* under a callback of hand_out_batch() */
		cq->batch_head = (uint32_t)(cq->batch_next - cq->batch);
	for (i = k = cq->batch_head; i < cq->nbatch; i++) {
		if (cq->batch[i].qp_num != qp_num)
			cq->batch[k++] = cq->batch[i];
		else if (keep(&mine, &nmine, &cap, &cq->batch[i]))
			rc = -ENOMEM; /* this one is lost: say so */
	}
	cq->nbatch = k;
	cq->batch_end = cq->batch + k;
	for (i = k = cq->stash_head; i < cq->nstash; i++) {
		if (cq->stash[i].qp_num != qp_num)
			cq->stash[k++] = cq->stash[i];
		else if (keep(&mine, &nmine, &cap, &cq->stash[i]))
			rc = -ENOMEM;
	}
	cq->nstash = k;
	if (cq->stash_head == cq->nstash)
		cq->stash_head = cq->nstash = 0;
	while ((n = ibv_poll_cq(cq->cq, 32, wc)) > 0) {
		for (int j = 0; j < n; j++) {
			int err;

			if (wc[j].qp_num != qp_num)
				err = keep(&cq->stash, &cq->nstash, &cq->stash_cap, &wc[j]);
			else
				err = keep(&mine, &nmine, &cap, &wc[j]);
			if (err)
				rc = -ENOMEM;
		}
	}
	cq->kept = cq->batch_head < cq->nbatch || cq->stash_head < cq->nstash;
	if (cq->stash_head < cq->nstash) {
		/* Their events may have been read already: poll it next pass. */
		set_active(cq, true);
		rr__ring_want_kick(cq->set->ring);
	}
	/* fn's callbacks may destroy the CQ: freed once this unwinds. */
	cq->dispatch_depth++;
	for (i = 0; i < nmine && !cq->destroy_deferred; i++)
		fn(ctx, &mine[i]);
	cq->dispatch_depth--;
	free(mine);
	reap_deferred(cq);
	return rc;
}

/* ---- channels ---- */

/* The channel's poll could not be kept alive: never leave its CQs deaf,
 * poll them on every pass instead (counted in stats.poll_failures). */
static void channel_lost(rr_channel *ch)
{
	struct rr__list *l;

	ch->deaf = true;
	ch->slot = RR__NO_SLOT;
	for (l = ch->set->cqs.next; l != &ch->set->cqs; l = l->next) {
		rr_cq *cq = rr__container_of(l, rr_cq, link);

		if (cq->ch == ch)
			set_active(cq, true);
	}
	rr__ring_want_kick(ch->set->ring);
}

/* The CQs of a channel drain after its first, in the order read. */
static __attribute__((noinline)) void serve_pending(struct rr__list *pending)
{
	while (!rr__list_empty(pending)) {
		rr_cq *cq = rr__container_of(pending->next, rr_cq, active_link);

		rr__list_del(&cq->active_link);
		cq->evented = false;
		service(cq);
	}
}

static void channel_ready(void *ctx, int revents)
{
	rr_channel *ch = ctx;
	struct rr__cqs *set = ch->set;
	struct rr__list pending;
	rr_cq *first = NULL, *polled = NULL;
	bool others = false;
	struct ibv_cq *icq;
	void *cctx;
	int err = 0;

	set->chan_cqes++;
	if (revents < 0) {
		channel_lost(ch);
		return;
	}
	/* One CQ armed: the event can only be its own. Hand out its
	 * completions before the read that fetches the event, so a reply
	 * posted from on_wc does not wait behind that syscall. */
	if (ch->narmed == 1) {
		rr_cq *only = (rr_cq *)ch->armed_xor;
		bool more;

		if (!only->active) {
			unsigned int n =
				only->on_wc_batch ? poll_arrays(only) : cq_poll_here(only, &more);

			posts_due(only);
			if (reap_deferred(only))
				return; /* destroyed: its events went with it */
			if (n && is_hybrid(only))
				only->spin = RR__SPIN_BUSY; /* activity: spin after this */
			polled = only;
		}
	}
	for (;;) {
		if (ibv_get_cq_event(ch->ch, &icq, &cctx)) {
			err = errno;
			break;
		}
		rr_cq *cq = cctx;

		took_event(cq);
		/* Mostly the CQ polled above, whose event is all the channel
		 * holds: served at once, without the drain's bookkeeping (an
		 * armed CQ is not lazy, nor queued by this drain). */
		if (cq == polled && !ch->narmed && !first) {
			if (!cq->active)
				service(cq);
			return;
		}
		/* Not lazy, as it was armed: set_lazy() puts only unarmed CQs
		 * on the list, and whatever arms one takes it off first.
		 * Queue it once; a CQ already on the active list is polled there.
		 * Mostly one event: the first needs no list, nor the evented
		 * flag (no callback runs before it is served). */
		if (!first) {
			if (!cq->active)
				first = cq;
		} else if (cq != first && !cq->evented && !cq->active) {
			cq->evented = true;
			if (!others)
				rr__list_init(&pending);
			others = true;
			rr__list_add_tail(&pending, &cq->active_link);
		}
		/* Each armed CQ raises one event at most: when none is left
		 * armed the channel is empty, and the read that would say
		 * EAGAIN is a syscall saved on every wake-up. */
		if (!ch->narmed)
			break;
	}
	/* EAGAIN: drained. A read that fails otherwise (the device is gone)
	 * would leave the channel's CQs deaf: poll them instead. */
	if (err && err != EAGAIN && err != EINTR) {
		rr__poll_close(set->ring, ch->slot);
		set->stats->poll_failures++;
		channel_lost(ch);
	}
	/* Served first, before any callback could destroy it. */
	/* Polled above or not: serve_event() leaves a CQ found empty in
	 * this call to service(), and polls one that was not. */
	if (first)
		serve_event(first);
	if (others)
		serve_pending(&pending);
}

/* One event read by the ring: its CQE names the CQ. */
static void channel_event(void *ctx, int res, void *data)
{
	rr_channel *ch = ctx;
	struct rr__cqs *set = ch->set;
	struct ib_uverbs_comp_event_desc ev;
	rr_cq *cq;

	set->chan_cqes++;
	if (res == -EAGAIN) {
		/* This kernel does not wait for the fd: poll and read it. */
		ch->ring_reads = false;
		ch->slot = RR__NO_SLOT;
		if (!rr__poll_add(set->ring, ch->ch->fd, channel_ready, ch, &ch->slot))
			return;
	}
	if (res == (int)sizeof(ev)) {
		memcpy(&ev, data, sizeof(ev));
		if (!ev.cq_handle)
			return; /* claimed by the destroy of its CQ */
		cq = ((struct ibv_cq *)(uintptr_t)ev.cq_handle)->cq_context;
		took_event(cq);
		if (!cq->active)
			serve_event(cq); /* an active CQ is polled on the pass */
		return;
	}
	/* The device is gone (-EIO) or the read makes no sense: poll the
	 * CQs instead, as for a failed read(2). */
	if (res >= 0)
		rr__poll_close(set->ring, ch->slot);
	set->stats->poll_failures++;
	channel_lost(ch);
}

/* A READ may hold cq's event, read by the kernel but not yet handed to us:
 * count it as read (and poll the CQ, should the destroy fail). */
static void claim_event(rr_cq *cq)
{
	struct ib_uverbs_comp_event_desc ev;
	void *buf;

	if (!cq->ch->ring_reads || !(buf = rr__read_settle(cq->set->ring, cq->ch->slot)))
		return;
	memcpy(&ev, buf, sizeof(ev));
	if (ev.cq_handle != (uintptr_t)cq->cq)
		return;
	memset(buf, 0, sizeof(ev));
	took_event(cq);
	set_active(cq, true);
	rr__ring_want_kick(cq->set->ring);
}

/*
 * Must the provider see each event through ibv_get_cq_event()? mlx4, mlx5
 * and others count arms in their cq_event op. libibverbs gives providers
 * without one its own empty op, and the compatibility pointer in
 * ibv_context_ops shows which: an op inside libibverbs.so itself (a shared
 * object of its own, so no provider is linked into it) is that empty one.
 */
static bool counts_events(struct ibv_context *ctx)
{
	void *op = (void *)ctx->ops._compat_cq_event;
	Dl_info mine, its;

	if (!op)
		return false;
	if (!dladdr((void *)ibv_get_cq_event, &mine) || !dladdr(op, &its) || !mine.dli_fname)
		return true;
	return its.dli_fbase != mine.dli_fbase || !strstr(mine.dli_fname, "libibverbs.so");
}

int rr__channel_create(struct rr__cqs *set, struct ibv_context *ctx, rr_channel **out)
{
	rr_channel *ch;
	int rc;

	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	ch->set = set;
	ch->slot = RR__NO_SLOT;
	ch->ch = ibv_create_comp_channel(ctx);
	if (!ch->ch) {
		rc = errno ? -errno : -ENOMEM;
		goto err_free;
	}
	rc = rr__set_nonblock(ch->ch->fd);
	if (rc)
		goto err_channel;
	ch->ring_reads = set->ring_reads && !counts_events(ctx) && rr__ring_can_settle(set->ring);
	if (ch->ring_reads)
		rc = rr__read_add(set->ring, ch->ch->fd, sizeof(struct ib_uverbs_comp_event_desc),
				  channel_event, ch, &ch->slot);
	else
		rc = rr__poll_add(set->ring, ch->ch->fd, channel_ready, ch, &ch->slot);
	if (rc)
		goto err_channel;
	rr__list_add_tail(&set->channels, &ch->link);
	*out = ch;
	return 0;

err_channel:
	ibv_destroy_comp_channel(ch->ch);
err_free:
	free(ch);
	return rc;
}

int rr_channel_destroy(rr_channel *ch)
{
	if (!ch)
		return 0;
	if (ch->ncqs)
		return -EBUSY;
	rr__poll_close(ch->set->ring, ch->slot);
	rr__list_del(&ch->link);
	ibv_destroy_comp_channel(ch->ch);
	free(ch);
	return 0;
}

/* ---- CQs ---- */

int rr__cq_create(struct rr__cqs *set, rr_channel *ch, struct ibv_context *ctx,
		  const struct rr_cq_opts *opts, rr_cq **out)
{
	rr_cq *cq;
	int rc, vector;

	if (ch->ch->context != ctx)
		return -EINVAL;
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->batch = calloc(set->cq_batch, sizeof(*cq->batch));
	if (!cq->batch) {
		free(cq);
		return -ENOMEM;
	}
	cq->set = set;
	cq->ch = ch;
	cq->mode = opts->mode;
	cq->spin_us = opts->spin_us ? opts->spin_us : 200;
	cq->hit_share = SPIN_HITS_ONE;
	cq->on_wc = opts->on_wc;
	cq->on_wc_batch = opts->on_wc_batch;
	cq->data = opts->data;
	rr__list_init(&cq->active_link);
	rr__list_init(&cq->lazy_link);
	/* Groups on other vectors take their interrupts on other cores. */
	vector = ctx->num_comp_vectors > 1 ? (int)(set->comp_vector % ctx->num_comp_vectors) : 0;
	cq->cq = ibv_create_cq(ctx, opts->cqe > 0 ? opts->cqe : 256, cq, ch->ch, vector);
	if (!cq->cq) {
		rc = errno ? -errno : -ENOMEM;
		cq_free(cq);
		return rc;
	}
	if (cq->mode == RR_WAIT_BUSY || ch->deaf) {
		set_active(cq, true);
		rr__ring_want_kick(set->ring);
	} else {
		rc = arm(cq);
		if (rc) {
			ibv_destroy_cq(cq->cq);
			cq_free(cq);
			return rc;
		}
	}
	ch->ncqs++;
	rr__list_add_tail(&set->cqs, &cq->link);
	*out = cq;
	return 0;
}

int rr_cq_set_mode(rr_cq *cq, enum rr_wait_mode mode, unsigned int spin_us)
{
	if (!cq || mode > RR_WAIT_HYBRID_FIXED)
		return -EINVAL;
	cq->mode = mode;
	if (spin_us)
		cq->spin_us = spin_us;
	/* Hybrid: a full window, then arm; what was learnt is forgotten. */
	cq->spin = RR__SPIN_BUSY;
	cq->gap_ns = 0;
	cq->hit_share = SPIN_HITS_ONE;
	cq->misses = 0;
	cq->skip = 0;
	/* Let the next pass poll it and arm it if the new mode wants that. */
	set_active(cq, true);
	rr__ring_want_kick(cq->set->ring);
	return 0;
}

struct ibv_cq *rr_cq_ibv(rr_cq *cq)
{
	return cq->cq;
}

int rr_cq_destroy(rr_cq *cq)
{
	struct rr__cq_hooks hooks;
	int rc;

	if (!cq || cq->destroy_deferred)
		return 0;
	/* Unacknowledged events would make ibv_destroy_cq() wait forever. */
	claim_event(cq);
	ack(cq);
	rc = ibv_destroy_cq(cq->cq); /* returns the errno value */
	if (rc)
		return rc > 0 ? -rc : -EBUSY;
	set_active(cq, false);
	set_lazy(cq, false);
	disarm(cq);
	if (cq->evented) {
		rr__list_del(&cq->active_link);
		cq->evented = false;
	}
	rr__list_del(&cq->link);
	cq->ch->ncqs--;
	hooks = cq->hooks;
	if (cq->dispatch_depth) {
		cq->destroy_deferred = true; /* freed when its dispatch unwinds */
		if (cq->batch_next)	     /* under a callback of hand_out_batch() */
			cq->batch_head = (uint32_t)(cq->batch_next - cq->batch);
		cq->nbatch = cq->batch_head; /* ends the loop handing it out */
		cq->batch_end = cq->batch_next;
	} else {
		cq_free(cq);
	}
	if (hooks.destroyed)
		hooks.destroyed(hooks.ctx);
	return 0;
}

void rr__cqs_destroy_cqs(struct rr__cqs *set)
{
	while (!rr__list_empty(&set->cqs)) {
		rr_cq *cq = rr__container_of(set->cqs.next, rr_cq, link);

		if (rr_cq_destroy(cq)) {
			/* A QP the application still holds: forget the CQ
			 * rather than hang; verbs frees it with the context. */
			rr__list_del(&cq->link);
			cq->ch->ncqs--;
		}
	}
}

void rr__cqs_fini(struct rr__cqs *set)
{
	while (!rr__list_empty(&set->channels)) {
		rr_channel *ch = rr__container_of(set->channels.next, rr_channel, link);

		ch->ncqs = 0;
		rr_channel_destroy(ch);
	}
}
