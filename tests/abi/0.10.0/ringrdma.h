/* SPDX-License-Identifier: MIT */
/*
 * ringrdma: RDMA completions, connection events and device events delivered
 * through one io_uring.
 *
 * This is the only header an application includes. It compiles on its own
 * as C (gnu11 or later) and C++. See ringrdma(7) (docs/ringrdma.7.md) for the
 * overview: how the pieces fit, the user_data contract, the re-arm reasoning
 * and the lifetime rules.
 *
 * Conventions:
 *  - Public names start with rr_ / RR_. Fields and arguments named `data`
 *    belong to the application; the library never reads or writes them.
 *  - Every function that can fail returns 0 (or a count) on success and a
 *    negative errno value on failure. When a call fails, the callback it was
 *    given is never called.
 *  - Structs cross the ABI with their size. Every options or stats struct
 *    the application allocates is passed together with sizeof that struct
 *    as the application was compiled. Members are only ever added at the
 *    end: the library reads only what the size covers and takes the
 *    default (zero) for members the caller does not have, fills only what
 *    the size covers, and refuses with -E2BIG a struct from a newer header
 *    whose members unknown to it are not zero (and any size over 4096).
 *    A flag the library does not know is refused with -EINVAL: asking for
 *    a feature it lacks is an error, never silently ignored. NULL options mean all
 *    defaults, whatever the size. Structs the library passes to callbacks
 *    (struct rr_completion) also only grow at their end. A change that
 *    cannot keep these rules changes the soname (libringrdma.so.1 since
 *    0.8.0).
 *  - Every accepted request gets exactly one completion callback: on success,
 *    on error, on flush after a disconnect or device loss, and on teardown.
 *    No callback runs after the object it belongs to was destroyed.
 *  - Threads: a bridge and everything created from it belong to the thread
 *    that drives its ring. No function is safe to call concurrently on the
 *    same bridge; different bridges (one per ring, one ring per thread) are
 *    independent. Every bridge on a device polls the context's one async
 *    fd; an event goes to the bridge that created what it names, on that
 *    bridge's thread (see rr_async_event_cb), whichever bridge read it.
 *    Process-wide, under a lock, the library keeps per device context its
 *    PD, its bridges and the QPs, CQs and SRQs they created; and counters
 *    that tell bridges on one ring apart and number groups. It sets the
 *    device context's async fd non-blocking.
 *  - Callbacks run from rr_bridge_handle_cqe(), rr_bridge_run_once() and the
 *    destroy functions; they may post new work and may destroy their own
 *    endpoint or another endpoint of the same bridge, but not the bridge.
 *  - Posting is coalesced: a request posted while the bridge is
 *    dispatching (from a callback, in a pass of rr_bridge_handle_cqe() or
 *    rr_bridge_run_once()) is checked and accepted at once, but its work
 *    request is held, chained behind the others of its queue, and each
 *    queue's chain goes to the provider with one ibv_post_send() /
 *    ibv_post_recv() / ibv_post_srq_recv(), in posting order, once the
 *    pass has handed out the completions it polled: before it reads a
 *    completion event or arms a CQ, so a reply leaves as early as if it
 *    had been posted at once, and a completion back at once is polled,
 *    not an event that wakes the loop once more (rr_bridge_run_once():
 *    in any case before it waits; receives
 *    posted in on_qp_ready go before the connection is requested or
 *    accepted, and rr_ep_disconnect() posts what its endpoint holds
 *    first). A post outside any pass goes at once. A post call's own
 *    checks (-ENOTCONN, -ENOBUFS for a full queue, -EINVAL) fail it
 *    synchronously, held or not; if the provider then refuses a chain at
 *    one request, that request and those after it in the chain fail in
 *    their one callback with the provider's errno (wc_status
 *    IBV_WC_GENERAL_ERR): they were accepted when the post returned 0, so
 *    the callback is the only way to tell. Those before it are posted.
 *    RR_EP_POST_NOW turns coalescing off for an endpoint.
 *  - SQEs: any rr_ call may need an SQE in the ring (a poll, a cancel, a
 *    kick). It is written to the SQ at once; the application's next
 *    io_uring_submit*() submits it. When the SQ is full, the bridge first
 *    submits what is in it (io_uring_submit(); on SQPOLL it also waits, at
 *    most a second, for the kernel's thread to make room), as liburing
 *    users do. If that submit fails (-EBUSY, -EAGAIN) or the SQPOLL
 *    thread makes no room, the SQE is owed, and the bridge sets a timer
 *    whose poll it keeps armed (a timerfd), so a CQE of the bridge's
 *    comes back once the loop's own submit made room, even when nothing
 *    else of the bridge's is in flight. It never writes an SQE into a linked
 *    chain the application is building, nor submits one: while the last
 *    SQE the application prepared carries IOSQE_IO_LINK or
 *    IOSQE_IO_HARDLINK, an SQE of the bridge stays owed and is written at
 *    the next chance: rr_bridge_handle_cqe() of any CQE (the chain's own),
 *    rr_bridge_flush(), rr_bridge_run_once(), rr_bridge_destroy(). None is
 *    ever dropped. So: prepare an SQE (and set its flags) right after
 *    io_uring_get_sqe(), never leave one got and unprepared across an rr_
 *    call, and expect your own prepared SQEs to be submitted early when
 *    the SQ fills. A loop that never calls rr_bridge_flush() works; calling
 *    it before io_uring_submit*() writes what a chain held back.
 */
#ifndef RINGRDMA_H
#define RINGRDMA_H

/* liburing.h first: it sets the feature macro it needs for sigset_t, which
 * a system header included before it (stddef.h, stdint.h) would fix
 * too early under -std=c11. */
#include <liburing.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stddef.h>
#include <stdint.h>

#include <ringrdma_version.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */

/**
 * rr_version() - version of the library loaded at run time.
 *
 * Return: a static "MAJOR.MINOR.PATCH" string; compare with
 * RR_VERSION_STRING to detect a header/library mismatch.
 */
const char *rr_version(void);

/**
 * rr_version_check() - is the loaded library compatible with a header version?
 * @major: RR_VERSION_MAJOR the caller was compiled against.
 * @minor: RR_VERSION_MINOR the caller was compiled against.
 *
 * Answers whether a program built against that header may use this
 * library: the header must belong to the same ABI (libringrdma.so.1 began
 * with 0.8.0; a program built against 0.7 or older needs
 * libringrdma.so.0) and must not be newer than the library.
 *
 * Return: 0 when the header version is at least 0.8 and at most the
 * library's version, -ENOTSUP otherwise.
 */
int rr_version_check(int major, int minor);

/* ------------------------------------------------------------------------ */
/* The bridge and the user_data contract                                     */

/**
 * RR_USER_DATA_MASK, RR_USER_DATA_TAG - the user_data values the bridge owns.
 *
 * Every SQE the bridge submits carries a user_data whose top 16 bits equal
 * RR_USER_DATA_TAG; the rest encodes a slot and a generation, never a
 * pointer. The application must never submit an SQE whose user_data has
 * those top bits (no user-space pointer and no small integer does: the tag
 * is a non-canonical address on every 64-bit Linux platform). In return the
 * bridge never consumes or misroutes an application CQE, and recognizes its
 * own without dereferencing anything.
 */
#define RR_USER_DATA_MASK 0xffff000000000000ULL
#define RR_USER_DATA_TAG  0x7272000000000000ULL

/**
 * rr_is_bridge_user_data() - does a CQE's user_data belong to a bridge?
 * @user_data: cqe->user_data.
 *
 * Return: non-zero for bridge CQEs. Needs no bridge: an application can drop
 * late bridge CQEs even after it destroyed its bridge.
 */
static inline int rr_is_bridge_user_data(uint64_t user_data)
{
	return (user_data & RR_USER_DATA_MASK) == RR_USER_DATA_TAG;
}

/** struct rr_bridge - opaque; one per io_uring, owned by one thread. */
typedef struct rr_bridge rr_bridge;

/**
 * rr_app_cqe_cb - receives application CQEs reaped by the library itself
 * (in rr_bridge_run_once() and rr_bridge_destroy()).
 * @b:    the bridge.
 * @cqe:  the CQE; valid only during the call. The library marks it seen.
 * @data: rr_bridge_opts.data.
 */
typedef void (*rr_app_cqe_cb)(rr_bridge *b, const struct io_uring_cqe *cqe, void *data);

/**
 * rr_async_event_cb - a device async event (ibv_get_async_event()).
 * @b:    the bridge.
 * @ev:   the event; valid during the call only; the library acknowledges it.
 * @data: rr_bridge_opts.data.
 *
 * Who hears what: an event naming a QP, CQ or SRQ the library created (an
 * endpoint's QP or CQ, a shared CQ, an SRQ) is handed only to the bridge
 * that created it, on that bridge's thread, and only while the object
 * exists, so ev->element is valid during the call: for a QP,
 * ev->element.qp->qp_context is its rr_ep; for a CQ,
 * ev->element.cq->cq_context is its rr_cq. Stale events (the object was
 * destroyed before its owner got to them) are dropped. An event of the
 * whole device (DEVICE_FATAL, PORT_*, ...) reaches every bridge using the
 * device, once each. A bridge uses a device from its first endpoint, SRQ
 * or CQ on it, whichever channel the CQ is on (the device's shared one or
 * one of rr_channel_create()), until the bridge is destroyed; a CQ on a
 * channel of the application's has the device's async fd polled for its
 * bridge, without the PD or shared channel a NULL channel sets up. An
 * event naming an object the application created itself reaches the
 * bridge that read it; what its element points to is the application's
 * to judge. A failed async fd (a hot-unplugged mlx5 device reports
 * POLLERR and fails every read) is reported as a DEVICE_FATAL with port
 * 0. Once a bridge heard a device die, its rr_cq_create() on that device
 * fails with -ENODEV, on any channel.
 *
 * The callback may destroy the endpoint, CQ or SRQ the event names (it is
 * held until the callback returns), and post or destroy other objects of
 * @b; not @b itself. Fatal events then move the affected endpoints to the
 * error state (their requests are flushed and their on_disconnect callback
 * runs).
 */
typedef void (*rr_async_event_cb)(rr_bridge *b, const struct ibv_async_event *ev, void *data);

/** Flags for rr_bridge_opts.flags. */
enum rr_bridge_flags {
	/** Use single-shot polls re-armed after every CQE, even where the
	 *  kernel supports multishot poll (5.13+). */
	RR_BRIDGE_SINGLESHOT = 1u << 0,
	/** A group: listeners on other threads may place connection
	 *  requests on this bridge (rr_listener_add_group()). Opens an
	 *  eventfd polled in the ring, the group's bell. */
	RR_BRIDGE_GROUP = 1u << 1,
	/** Ring groups' bells through their eventfd only, never with
	 *  IORING_OP_MSG_RING (used where the kernel has it, 5.18+). */
	RR_BRIDGE_NO_MSG_RING = 1u << 2,
	/** Read completion channels through the ring (IORING_OP_READ)
	 *  instead of polling them and reading with read(2): one syscall
	 *  fewer per wake-up, more kernel work. Only where the provider
	 *  needs no call per event (rxe, siw) and the ring is not SQPOLL;
	 *  elsewhere ignored. See ringrdma(7), CQ DISPATCH AND RE-ARMING. */
	RR_BRIDGE_RING_READ = 1u << 3,
	/** The application waits on the ring only in rr_bridge_run_once()
	 *  (or rr_bridge_run()), never by other means: a pass then returns
	 *  with the event CQs it drained unarmed, and the next pass arms
	 *  them only when it would block, after submitting what the
	 *  application queued in between and finding nothing it completed
	 *  at once. An answer that arrives while the application's own
	 *  I/O runs (a file read between passes) is polled, not an event
	 *  that wakes the loop again. rr_bridge_flush() and
	 *  rr_bridge_handle_cqe() arm them at once. A pass that hands out
	 *  completions from them before it would wait returns without
	 *  waiting, so the application sees what they did first. See
	 *  ringrdma(7). */
	RR_BRIDGE_LOOP_WAITS = 1u << 4,
};

/**
 * struct rr_bridge_opts - options for rr_bridge_create(); zero means default.
 * Passed with its size (see "Structs" at the top of this header).
 * @cq_batch:  work completions fetched per ibv_poll_cq() call (default 32).
 * @budget:    work completions one CQ may hand out per poll before other
 *             I/O gets a turn (default 256); the rest is handled on the next
 *             loop pass. A dispatch polls twice (before and after arming),
 *             so it hands out at most twice the budget.
 * @ack_batch: CQ events acknowledged per ibv_ack_cq_events() call (default
 *             32); all are acknowledged before a CQ is destroyed.
 * @flags:     enum rr_bridge_flags.
 * @on_app_cqe: application CQEs reaped by the library (see rr_app_cqe_cb);
 *             required to use rr_bridge_run_once() with application I/O.
 * @on_async_event: device async events; may be NULL. Bridges of one
 *             process on one device read its one async fd; each event
 *             reaches the bridge it is for (see rr_async_event_cb).
 * @data:      application data passed to the callbacks above.
 * @min_wait_us: rr_bridge_run_once() only, where the kernel has min-wait
 *             (Linux 6.12+, IORING_FEAT_MIN_TIMEOUT): a pass that waits
 *             asks for @wait_nr CQEs, but returns once @min_wait_us has
 *             passed with at least one there (or at its timeout), so CQEs
 *             that arrive close together are handled by one wake-up.
 *             Trades up to @min_wait_us of latency for fewer wake-ups
 *             under load. 0 (default) or an older kernel: the pass wakes
 *             at its first CQE, as before (since 0.10).
 * @wait_nr:   CQEs a min-wait pass waits for (default 16; with
 *             @min_wait_us only).
 */
struct rr_bridge_opts {
	unsigned int cq_batch;
	unsigned int budget;
	unsigned int ack_batch;
	unsigned int flags;
	rr_app_cqe_cb on_app_cqe;
	rr_async_event_cb on_async_event;
	void *data;
	unsigned int min_wait_us;
	unsigned int wait_nr;
};

/**
 * rr_bridge_create() - attach a bridge to a ring the application owns.
 * @out:  the new bridge.
 * @ring: an initialized io_uring; it must outlive the bridge.
 * @opts: options, or NULL for defaults.
 * @opts_size: sizeof(*opts) as the caller was compiled.
 *
 * The bridge writes SQEs to the ring (see "SQEs" at the top of this header)
 * and submits only inside its own loop functions or when the SQ is full:
 * an embedding application calls io_uring_submit*() in its loop as usual.
 *
 * Any ring the kernel accepts works, with these notes: on a
 * IORING_SETUP_DEFER_TASKRUN ring (recommended, with
 * IORING_SETUP_SINGLE_ISSUER, for a ring one thread drives) completions
 * of polls appear only when the loop enters the kernel with
 * IORING_ENTER_GETEVENTS (io_uring_submit_and_wait*(),
 * io_uring_get_events()); rr_bridge_run_once() does so, and a pass that
 * does not wait (busy or hybrid CQs) enters only when
 * IORING_SETUP_TASKRUN_FLAG says work waits (every 16th pass without that
 * flag, so set it on DEFER_TASKRUN and COOP_TASKRUN rings). IORING_SETUP_SQPOLL
 * works. An IORING_SETUP_IOPOLL ring cannot poll fds and is refused, as is
 * a ring whose SQ array is not the identity (set up by liburing < 2.2;
 * 2.3 is the oldest supported).
 *
 * The rdma_cm event channel is created on the first rr_connect() or
 * rr_listen(), so a bridge that only dispatches CQs needs no rdma_cm.
 *
 * Return: 0, -EINVAL (bad argument, @opts_size smaller than the 0.8.0
 * struct, a flag this library does not know, an IORING_SETUP_IOPOLL
 * ring or one of liburing < 2.2), -E2BIG (@opts sets members this library does not know, or
 * @opts_size is over 4096) or -ENOMEM.
 */
int rr_bridge_create(rr_bridge **out, struct io_uring *ring, const struct rr_bridge_opts *opts,
		     size_t opts_size);

/**
 * rr_bridge_handle_cqe() - offer a reaped CQE to the bridge.
 * @b:   the bridge.
 * @cqe: a CQE the application reaped from the bridge's ring.
 *
 * Call it for every CQE; the caller still marks each CQE seen. Bridge CQEs
 * are dispatched (callbacks run from here); application CQEs are left alone.
 * SQEs the bridge owes are written here (see "SQEs").
 *
 * Return: 1 if the CQE was the bridge's, 0 if it is the application's.
 */
int rr_bridge_handle_cqe(rr_bridge *b, const struct io_uring_cqe *cqe);

/**
 * rr_bridge_flush() - write the SQEs the bridge owes the ring.
 * @b: the bridge.
 *
 * Call it in an application-owned loop before io_uring_submit*(), with no
 * linked chain left open, to write the SQEs a chain held back (without
 * it they are written with the next rr_bridge_handle_cqe()). Writes to
 * the SQ; when
 * the SQ is full it submits first (see "SQEs"). SQEs that cannot be
 * written stay owed and are written at the next chance.
 *
 * Return: the number of SQEs still owed (0: none), or -EINVAL.
 */
int rr_bridge_flush(rr_bridge *b);

/**
 * rr_bridge_run_once() - one pass of the built-in loop.
 * @b:          the bridge.
 * @timeout_ms: longest wait for a CQE; 0 does not block, -1 waits forever.
 *
 * Writes the SQEs the bridge owes, submits, waits for CQEs (never longer
 * than busy or hybrid CQs allow; a pass that does not wait still enters the
 * kernel for completions where the ring defers them), dispatches bridge
 * CQEs and hands application CQEs to on_app_cqe.
 *
 * Use either this loop or the application's own (rr_bridge_handle_cqe()),
 * not both at once.
 *
 * Return: the number of CQEs handled plus the work completions of busy or
 * hybrid CQs polled at the start of the pass (0 on timeout), or a negative
 * errno from io_uring; -EPROTO if an application CQE arrived and no
 * on_app_cqe was set: that CQE is left in the ring, not consumed, and the
 * pass ends before it; reap it (io_uring_peek_cqe(), io_uring_cqe_seen())
 * before the next pass. -EDEADLK, doing nothing, from a callback of a pass
 * (of rr_bridge_run_once() or rr_bridge_handle_cqe()).
 */
int rr_bridge_run_once(rr_bridge *b, int timeout_ms);

/**
 * rr_bridge_run() - run the built-in loop until rr_bridge_stop().
 * @b: the bridge.
 *
 * Return: 0 when stopped, or the first negative errno of rr_bridge_run_once().
 */
int rr_bridge_run(rr_bridge *b);

/**
 * rr_bridge_stop() - make rr_bridge_run() return after the current pass.
 * @b: the bridge; may be called from any callback.
 */
void rr_bridge_stop(rr_bridge *b);

/**
 * rr_bridge_destroy() - tear the bridge and everything on it down.
 * @b: the bridge, or NULL.
 *
 * Destroys every listener and endpoint (their outstanding requests complete
 * with -ECANCELED), CQ and channel still open, cancels the bridge's polls
 * and reaps the ring until their last CQEs arrived, handing any application
 * CQE met on the way to on_app_cqe. Safe in any state: mid-connect, with
 * events pending, with polls in flight.
 *
 * Return: 0; -EBUSY if an application CQE had to be reaped and no
 * on_app_cqe was set: then nothing was consumed and the bridge is still
 * closing; hand CQEs to rr_bridge_handle_cqe() and call this again.
 */
int rr_bridge_destroy(rr_bridge *b);

/**
 * rr_bridge_set_comp_vector() - the completion vector of the CQs the
 * bridge creates from now on (its shared CQs and its endpoints' CQs
 * included), taken modulo the device's num_comp_vectors.
 * @b:      the bridge.
 * @vector: the vector; each vector is an interrupt of the device (mlx5:
 *          the IRQs named mlx5_compN@... in /proc/interrupts), which can
 *          be pinned to the core that runs the bridge's thread by writing
 *          that core to /proc/irq/IRQ/smp_affinity_list.
 *
 * By default a bridge's CQs use vector 0, and the k-th bridge created with
 * RR_BRIDGE_GROUP in the process uses vector k: groups on a device with n
 * vectors spread their interrupts over n cores.
 *
 * Return: 0, or -EINVAL.
 */
int rr_bridge_set_comp_vector(rr_bridge *b, unsigned int vector);

/** rr_bridge_ring() - the ring the bridge was created on. */
struct io_uring *rr_bridge_ring(rr_bridge *b);

/**
 * struct rr_bridge_stats - counters since rr_bridge_create().
 * @cqes:        bridge CQEs handled.
 * @rearms:      polls re-armed after a CQE without IORING_CQE_F_MORE.
 * @cq_events:   completion events read from channels.
 * @cq_acks:     ibv_ack_cq_events() calls.
 * @notify_arms: ibv_req_notify_cq() calls.
 * @wcs:         work completions polled from the bridge's CQs and
 *               handed to their on_wc (the endpoint layer's included);
 *               not the requests an endpoint completes without one of
 *               its own (unsignalled sends, flushes on teardown).
 * @empty_polls: ibv_poll_cq() calls of the dispatcher that found nothing
 *               (wasted polls of busy, hybrid and lazy CQs); not those
 *               that take a leaving QP's completions out of its CQ in
 *               rr_ep_destroy(), which always end on an empty poll.
 * @budget_yields: dispatches cut short by the budget.
 * @kicks:       NOP SQEs used to come back to busy, hybrid or backlogged CQs.
 * @cm_events:   rdma_cm events handled.
 * @async_events: device async events handled.
 * @cancel_retries: poll cancels asked again after -EALREADY.
 * @sq_full:     times an SQE the bridge had to write found the SQ full;
 *               with no chain open it then submitted the SQ to make room
 *               (so this also counts its own submits).
 * @poll_failures: polls that kept failing and were given up: eight in a
 *               row that could not be armed or that reported POLLERR,
 *               POLLHUP or POLLNVAL (a device gone after a hot unplug, an
 *               fd that was closed). The CQs of such a channel are polled
 *               on every pass instead, rdma_cm waiters fail with the
 *               error, listeners get on_error, a device's async fd counts
 *               as DEVICE_FATAL.
 * @posts:       requests the endpoints and SRQs accepted (post calls that
 *               returned 0).
 * @chains:      ibv_post_send(), ibv_post_recv() and ibv_post_srq_recv()
 *               calls made for them: one per queue per pass for the
 *               requests a pass held, one per request posted at once.
 * @wrs:         work requests in those calls; wrs / chains is the mean
 *               chain length. (posts - wrs: requests never posted, held
 *               and then cancelled by a destroy, or not yet posted.)
 * @placed_dropped: connection requests a listener placed on this bridge
 *               (a group, rr_listener_add_group()) that it could not take
 *               to ESTABLISHED: it was being destroyed, the QP or
 *               rdma_accept() failed, or the peer left first. The
 *               listener counted them placed (since 0.10).
 * @min_waits:   waits of rr_bridge_run_once() made with the kernel's
 *               min-wait (rr_bridge_opts.min_wait_us; 0 where the kernel
 *               lacks it) (since 0.10).
 */
struct rr_bridge_stats {
	uint64_t cqes;
	uint64_t rearms;
	uint64_t cq_events;
	uint64_t cq_acks;
	uint64_t notify_arms;
	uint64_t wcs;
	uint64_t empty_polls;
	uint64_t budget_yields;
	uint64_t kicks;
	uint64_t cm_events;
	uint64_t async_events;
	uint64_t cancel_retries;
	uint64_t sq_full;
	uint64_t poll_failures;
	uint64_t posts;
	uint64_t chains;
	uint64_t wrs;
	uint64_t placed_dropped;
	uint64_t min_waits;
};

/**
 * rr_bridge_get_stats() - copy the bridge's counters.
 * @b:    the bridge.
 * @out:  where to copy them.
 * @size: sizeof(*out) as the caller was compiled: a caller built against
 *        an older header gets the counters it knows, a newer one zeros for
 *        those this library lacks.
 *
 * Return: 0, -EINVAL (NULL argument) or -E2BIG (@size over 4096; nothing
 * written).
 */
int rr_bridge_get_stats(const rr_bridge *b, struct rr_bridge_stats *out, size_t size);

/* ------------------------------------------------------------------------ */
/* Completion channels and CQs                                               */

/** struct rr_channel - a completion channel polled through the ring. */
typedef struct rr_channel rr_channel;

/**
 * rr_channel_create() - create a completion channel and poll it in the ring.
 * @b:   the bridge.
 * @ctx: the device context.
 * @out: the new channel. One channel may serve many CQs.
 *
 * Return: 0, -EINVAL, -ENOMEM, -EBUSY (no SQE), or the errno of
 * ibv_create_comp_channel().
 */
int rr_channel_create(rr_bridge *b, struct ibv_context *ctx, rr_channel **out);

/**
 * rr_channel_destroy() - stop polling and destroy the channel.
 * @ch: the channel, or NULL.
 *
 * Return: 0; -EBUSY while CQs created on it still exist.
 */
int rr_channel_destroy(rr_channel *ch);

/** enum rr_wait_mode - how a CQ waits for work completions. */
enum rr_wait_mode {
	/** Pure notification: the CQ is armed and its channel polled in the
	 *  ring; no CPU is used while idle. */
	RR_WAIT_EVENT = 0,
	/** Poll the CQ on every loop pass (for comparison; burns a core). */
	RR_WAIT_BUSY = 1,
	/** After activity keep polling every pass for a window, then arm:
	 *  busy-poll latency while busy, no CPU while idle. The window adapts
	 *  per CQ to the gaps seen between completions (about twice the
	 *  expected gap, at most spin_us), and spinning stops for a while
	 *  when gaps outlast spin_us. */
	RR_WAIT_HYBRID = 2,
	/** Hybrid with a window of spin_us after every completion. */
	RR_WAIT_HYBRID_FIXED = 3,
};

/** struct rr_cq - a CQ dispatched by the bridge. */
typedef struct rr_cq rr_cq;

/**
 * rr_wc_cb - receives each work completion of a CQ.
 * @cq:   the CQ.
 * @wc:   the work completion, raw; valid during the call only.
 * @data: rr_cq_opts.data.
 */
typedef void (*rr_wc_cb)(rr_cq *cq, const struct ibv_wc *wc, void *data);

/**
 * rr_wc_batch_cb - receives a CQ's work completions a batch at a time.
 * @cq:   the CQ.
 * @wc:   @n work completions, raw, in the order polled; the array is
 *        valid during the call only.
 * @n:    how many; at least 1, at most rr_bridge_opts.cq_batch.
 * @data: rr_cq_opts.data.
 */
typedef void (*rr_wc_batch_cb)(rr_cq *cq, const struct ibv_wc *wc, int n, void *data);

/**
 * struct rr_cq_opts - options for rr_cq_create(); passed with its size.
 * @cqe:     minimum number of entries (default 256).
 * @mode:    enum rr_wait_mode.
 * @spin_us: hybrid: the longest spin window in microseconds (default 200).
 * @on_wc:   callback for every work completion; this or on_wc_batch is
 *           required, not both.
 * @data:    application data for on_wc or on_wc_batch.
 * @on_wc_batch: callback for the work completions of each poll, as one
 *           array, instead of one on_wc call each (since 0.10).
 */
struct rr_cq_opts {
	int cqe;
	enum rr_wait_mode mode;
	unsigned int spin_us;
	rr_wc_cb on_wc;
	void *data;
	rr_wc_batch_cb on_wc_batch;
};

/**
 * rr_cq_create() - create a CQ whose completions arrive through the ring.
 * @b:    the bridge.
 * @ch:   the channel to signal; NULL uses the bridge's shared channel for
 *        the device of @ctx. On either, the device's async events naming
 *        the CQ (CQ_ERR) reach this bridge alone, and those of the whole
 *        device (DEVICE_FATAL) reach it too (see rr_async_event_cb).
 * @ctx:  the device context (must match @ch's).
 * @opts: options; exactly one of on_wc and on_wc_batch is required.
 * @opts_size: sizeof(*opts) as the caller was compiled.
 * @out:  the new CQ.
 *
 * Return: 0, -EINVAL, -E2BIG (@opts sets members this library does not
 * know), -ENOMEM, -ENODEV (the bridge heard the device die), the errno
 * of ibv_create_cq() or ibv_req_notify_cq(), or of polling the device's
 * async fd; with @ch NULL also the errors of setting the device up
 * (ibv_alloc_pd(), the shared channel).
 */
int rr_cq_create(rr_bridge *b, rr_channel *ch, struct ibv_context *ctx,
		 const struct rr_cq_opts *opts, size_t opts_size, rr_cq **out);

/**
 * rr_cq_set_mode() - switch a CQ's wait mode at run time.
 * @cq:      the CQ.
 * @mode:    enum rr_wait_mode.
 * @spin_us: hybrid spin window (0 keeps the current one).
 *
 * The CQ is polled on the next loop pass and armed there if the new mode
 * wants it; if arming fails then, the CQ keeps being polled.
 *
 * Return: 0 or -EINVAL.
 */
int rr_cq_set_mode(rr_cq *cq, enum rr_wait_mode mode, unsigned int spin_us);

/** rr_cq_ibv() - the verbs CQ, to attach QPs to. */
struct ibv_cq *rr_cq_ibv(rr_cq *cq);

/**
 * rr_cq_destroy() - destroy a CQ; its pending events are acknowledged first,
 * so this never blocks in ibv_destroy_cq(). Destroy the QPs using it first.
 * @cq: the CQ, or NULL.
 *
 * Return: 0, or the errno of ibv_destroy_cq() (-EBUSY while QPs use it).
 */
int rr_cq_destroy(rr_cq *cq);

/* ------------------------------------------------------------------------ */
/* Endpoints: rdma_cm connections with posted work                           */

/** struct rr_ep - one RC connection: cm_id, QP, CQ and its posted work. */
typedef struct rr_ep rr_ep;
/** struct rr_listener - a listening rdma_cm id. */
typedef struct rr_listener rr_listener;

/**
 * struct rr_completion - how a request ended; filled by the library, and
 * only ever grown at its end.
 * @status:    0, or a negative errno: -ECANCELED (flushed: disconnect,
 *             QP error, device loss or teardown), -ETIMEDOUT (transport or
 *             RNR retries exhausted), -EACCES (remote access error),
 *             -EINVAL (length or request error), -EIO (other).
 * @wc_status: the raw ibv_wc_status (IBV_WC_WR_FLUSH_ERR when the library
 *             flushed the request itself on teardown; IBV_WC_GENERAL_ERR
 *             with the provider's errno in @status when the provider
 *             refused the request in a coalesced chain).
 * @opcode:    the work completion opcode (valid when status is 0).
 * @byte_len:  as reported by the provider: bytes received for RECV; for
 *             RECV_RDMA_WITH_IMM, the bytes the peer wrote.
 * @imm_data:  immediate data in host order, when has_imm is set.
 * @has_imm:   the completion carried immediate data.
 */
struct rr_completion {
	int status;
	enum ibv_wc_status wc_status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len;
	uint32_t imm_data;
	int has_imm;
};

/**
 * rr_req_cb - completion of one posted request; called exactly once.
 * @ep:   the endpoint.
 * @c:    the outcome; valid during the call only.
 * @data: the data given when posting.
 */
typedef void (*rr_req_cb)(rr_ep *ep, const struct rr_completion *c, void *data);

/**
 * rr_ep_cb - an endpoint event: connected (status 0) or failed (client
 * side), or disconnected / moved to error (on_disconnect).
 * @ep:     the endpoint.
 * @status: 0, or a negative errno: -ECONNREFUSED (rejected), -EHOSTUNREACH
 *          (unreachable), -EADDRNOTAVAIL (address or route error),
 *          -ECONNABORTED (connect error), -ETIMEDOUT (connect_timeout_ms),
 *          -ECONNRESET (peer disconnected), -ENODEV (device removed), -EIO
 *          (fatal async event), the errno of a work completion error
 *          (-ETIMEDOUT, -EACCES, ...: see struct rr_completion), or the
 *          errno of setting up the QP or of rdma_resolve_route()/
 *          rdma_connect().
 * @data:   rr_ep_data(ep).
 */
typedef void (*rr_ep_cb)(rr_ep *ep, int status, void *data);

/**
 * rr_accept_cb - a new connection on a listener is established.
 * @l:    the listener; NULL when the listener placed the connection on a
 *        group (rr_listener_add_group()): the callback then runs on the
 *        group's thread, and the listener belongs to another.
 * @ep:   the new endpoint, owned by the application from now on.
 * @data: the listener's data, or the group's.
 */
typedef void (*rr_accept_cb)(rr_listener *l, rr_ep *ep, void *data);

/** Flags for rr_ep_opts.flags. */
enum rr_ep_flags {
	/** Put the QP on the CQ the bridge shares among all its endpoints
	 *  on the same device (created with the first, in that endpoint's
	 *  wait mode, grown as endpoints join; one channel event and one
	 *  poll serve them all), instead of a CQ of its own. Always so for
	 *  endpoints a listener places on a group. rr_ep_cq() is then
	 *  the shared CQ: its mode is every member's. */
	RR_EP_SHARED_CQ = 1u << 0,
	/** Give the endpoint a protection domain of its own (isolation: its
	 *  MRs and windows serve no other QP) instead of the PD the process
	 *  shares per device. Deregister its MRs and windows before
	 *  rr_ep_destroy(), which frees the PD. */
	RR_EP_OWN_PD = 1u << 1,
	/** Take receives from the bridge's shared receive queue on the
	 *  endpoint's device (rr_srq_create(), on this bridge, first; else
	 *  setting up the QP fails with -ENOENT and the connection with it)
	 *  instead of a receive queue of its own: rr_ep_post_recv() on it
	 *  fails with -EINVAL, max_recv_wr is ignored. */
	RR_EP_SRQ = 1u << 2,
	/** Post every request at once, with its own ibv_post_send() or
	 *  ibv_post_recv(), even from a callback, instead of chaining the
	 *  requests a pass posts (see "Posting" at the top): for latency
	 *  experiments. Each send is then a chain of one, so it asks for a
	 *  completion whatever signal_every says. */
	RR_EP_POST_NOW = 1u << 3,
};

/**
 * struct rr_ep_opts - endpoint options; zero means default. Passed with its
 * size (see "Structs" at the top of this header).
 * @max_send_wr:   send queue depth (default 64).
 * @max_recv_wr:   receive queue depth (default 64).
 * @max_inline:    inline data size requested for the QP (default 0).
 * @mode:          wait mode of the endpoint's CQ.
 * @spin_us:       hybrid spin window.
 * @signal_every:  selective signalling: only one send-queue request in N
 *                 of those posted together asks the NIC for a work
 *                 completion, and always the last request of every chain
 *                 the library posts (see "Posting" at the top: the
 *                 requests one pass posts on the endpoint; a request
 *                 posted outside a pass, or with RR_EP_POST_NOW, is a
 *                 chain of its own and so always signalled), the one that
 *                 takes the send queue's last free slot, and every RDMA
 *                 READ. So an endpoint that reposts from its callbacks
 *                 wakes up for what it receives and about once per pass
 *                 for its sends, not for each send. Every request still
 *                 gets exactly one callback, in posting order, with its
 *                 real outcome: a signalled completion completes the
 *                 unsignalled requests posted before it (with status 0,
 *                 or -ECANCELED if it was flushed); their byte_len is 0.
 *                 No send waits for a later post to learn its outcome,
 *                 and a clean hang-up cancels nothing the peer
 *                 acknowledged. (One exception: when the provider refuses
 *                 a chain partway, the unsignalled requests it took
 *                 before the refused one complete with the next
 *                 signalled completion, or -ECANCELED on disconnect or
 *                 destroy; the next send asks for a completion.) 0 or 1:
 *                 every request is signalled (the default).
 * @initiator_depth: RDMA READs (and atomics) the endpoint may have
 *                 outstanding at once as initiator (0: 1, the default).
 * @responder_resources: RDMA READs (and atomics) from the peer it serves
 *                 at once as responder (0: 1). Both are capped to the
 *                 device's limits (so a large value such as 255 means "as
 *                 many as the device allows") and, on the passive side, to
 *                 what the connecting peer offers: its responder_resources
 *                 bound our initiator_depth and its initiator_depth our
 *                 responder_resources. READs posted beyond the depth are
 *                 not refused; the QP issues them as earlier ones complete.
 *                 The values in force are the QP's max_rd_atomic and
 *                 max_dest_rd_atomic (ibv_query_qp() on rr_ep_qp()).
 * @private_data: bytes sent with the connection request (rr_connect(): at
 *                 most RR_PRIVATE_DATA_CONNECT_MAX) or with the acceptance
 *                 of every connection a listener accepts (rr_listen(): at
 *                 most RR_PRIVATE_DATA_ACCEPT_MAX); copied by the call, so
 *                 it need not outlive it. Longer: -EINVAL. The peer reads
 *                 them with rr_ep_peer_private_data().
 * @private_data_len: their length (0: none).
 * @connect_timeout_ms: rr_connect() only: fail with -ETIMEDOUT if not
 *                 established in time (0: rdma_cm's own timeouts, which
 *                 for an unanswered request take a minute or more).
 * @on_qp_ready:   called once the QP exists and before the connection is
 *                 requested (active side) or accepted (passive side), with
 *                 status 0: the place to post the first receives, so the
 *                 peer's first SEND never meets an empty receive queue. May
 *                 be NULL.
 * @on_disconnect: called once when an established endpoint is
 *                 disconnected by the peer or moved to error — also by a
 *                 work completion error such as exhausted retries, whose
 *                 errno it then gets — after the work completions already
 *                 in its CQ (real outcomes and flushes alike) were handed
 *                 out; requests still outstanding then complete later with
 *                 -ECANCELED, at the latest in rr_ep_destroy(). May be NULL.
 * @data:          the endpoint's application data (rr_ep_data()).
 */
struct rr_ep_opts {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_inline;
	enum rr_wait_mode mode;
	unsigned int spin_us;
	unsigned int signal_every;
	unsigned int connect_timeout_ms;
	rr_ep_cb on_qp_ready;
	rr_ep_cb on_disconnect;
	void *data;
	unsigned int initiator_depth;
	unsigned int responder_resources;
	const void *private_data;
	unsigned int private_data_len;
	unsigned int flags;
};

/*
 * What rdma_cm carries beside its own header on RoCE and InfiniBand: a
 * request, an acceptance, a rejection.
 */
#define RR_PRIVATE_DATA_CONNECT_MAX 56
#define RR_PRIVATE_DATA_ACCEPT_MAX  196
#define RR_PRIVATE_DATA_REJECT_MAX  148

/**
 * rr_connect() - connect to a listening peer, asynchronously.
 * @b:          the bridge.
 * @host:       IPv4/IPv6 address or name of the peer.
 * @port:       its port.
 * @opts:       endpoint options, or NULL.
 * @opts_size:  sizeof(*opts) as the caller was compiled.
 * @on_connect: called once: status 0 when established, or the error.
 * @out:        the endpoint, valid until rr_ep_destroy() whatever happens.
 *
 * Address resolution, route resolution and connection run through the ring.
 * Post the first receives in @opts->on_qp_ready, before the connection is
 * requested; the QP also retries on RNR, so a peer's early SEND waits for
 * receives posted later.
 *
 * Return: 0, -EINVAL (bad address or options, a flag this library does
 * not know), -E2BIG (@opts sets members this library does not know, or
 * @opts_size is over 4096), -ENOMEM, or the errno of
 * rdma_create_event_channel()/rdma_create_id()/rdma_resolve_addr(); then
 * @on_connect is never called.
 */
int rr_connect(rr_bridge *b, const char *host, uint16_t port, const struct rr_ep_opts *opts,
	       size_t opts_size, rr_ep_cb on_connect, rr_ep **out);

/**
 * rr_listen() - listen for connections.
 * @b:         the bridge.
 * @host:      local address to bind (NULL: any).
 * @port:      port; 0 picks one (see rr_listener_port()).
 * @ep_opts:   options for accepted endpoints, or NULL; their data is
 *             @ep_opts->data, or the listener's @data when that is NULL.
 * @opts_size: sizeof(*ep_opts) as the caller was compiled.
 * @on_accept: called for each established connection.
 * @data:      the listener's application data.
 * @out:       the listener.
 *
 * Incoming requests are accepted automatically; a request that fails before
 * being established is dropped, never reported as an endpoint.
 *
 * Return: 0, -EINVAL (also a flag this library does not know), -E2BIG
 * (@ep_opts sets members this library does not know, or @opts_size is over
 * 4096), -ENOMEM, or the errno of rdma_bind_addr()/rdma_listen().
 */
int rr_listen(rr_bridge *b, const char *host, uint16_t port, const struct rr_ep_opts *ep_opts,
	      size_t opts_size, rr_accept_cb on_accept, void *data, rr_listener **out);

/**
 * rr_listener_reg_mr() - register memory before any connection arrives, in
 * the PD of the device the listener is bound to (it must be bound to a
 * specific address); usable on all endpoints of that device.
 * @l:      the listener.
 * @buf:    start of the memory.
 * @len:    its length.
 * @access: IBV_ACCESS_* flags; IBV_ACCESS_LOCAL_WRITE is always added.
 * @out:    the memory region; release it with rr_mr_dereg().
 *
 * Return: 0, -EINVAL, -ENODEV (bound to a wildcard address: no device
 * yet), or the errno of setting the device up or of ibv_reg_mr().
 */
int rr_listener_reg_mr(rr_listener *l, void *buf, size_t len, int access, struct ibv_mr **out);

/**
 * rr_listener_cb - a listener can no longer accept connections.
 * @l:      the listener; it stays until rr_listener_destroy().
 * @status: -ENODEV (its device was removed) or the error that ended the
 *          bridge's rdma_cm event channel.
 * @data:   the listener's data.
 */
typedef void (*rr_listener_cb)(rr_listener *l, int status, void *data);

/**
 * rr_listener_set_on_error() - set the callback for a listener that stops
 * listening: its connections not yet established are dropped, its rdma_cm
 * id is destroyed (so a device removal can finish), and @on_error is called
 * once. NULL: no callback.
 */
void rr_listener_set_on_error(rr_listener *l, rr_listener_cb on_error);

/**
 * rr_request_cb - a connection request arrived, before any QP exists.
 * @l:     the listener.
 * @ep:    its endpoint; rr_ep_set_data() and rr_ep_set_private_data() may
 *         be called on it. rr_ep_destroy() on it refuses the request with
 *         no private data; rr_listener_destroy() on @l fails with -EBUSY.
 * @pdata: the peer's private data (rr_ep_peer_private_data()), or NULL.
 * @len:   its length.
 * @data:  the listener's data.
 *
 * Return: 0 to go on and accept it (on_qp_ready, then on_accept once
 * established); anything else refuses it, with the private data set on
 * @ep with rr_ep_set_private_data() (none otherwise: never the listener's
 * acceptance data), and @ep is then destroyed by the library: no callback
 * of it runs.
 */
typedef int (*rr_request_cb)(rr_listener *l, rr_ep *ep, const void *pdata, size_t len, void *data);

/**
 * rr_listener_set_on_request() - set the hook that sees each connection
 * request first and may refuse it. NULL (the default): accept every one.
 */
void rr_listener_set_on_request(rr_listener *l, rr_request_cb on_request);

/**
 * rr_listener_add_group() - spread the listener's connections over groups.
 * @l:         the listener, on its bridge's thread.
 * @group:     a bridge created with RR_BRIDGE_GROUP, usually on a ring
 *             and thread of its own (the listener's own bridge may be a
 *             group too).
 * @on_accept: called on @group's thread for each connection established
 *             there, with a NULL listener.
 * @data:      the group's data: @on_accept's, and the endpoints' unless
 *             the request hook set theirs (rr_ep_set_data()).
 *
 * Once a listener has groups, each request it accepts (after its request
 * hook, which still runs on the listener's thread) is placed on one of
 * them: the one with the fewest connections placed on it and not yet
 * destroyed, round robin on ties, unless the hook chose with
 * rr_ep_set_group(). The request's cm_id moves to the group's rdma_cm
 * channel (rdma_migrate_id()) at once, on the listener's thread, so the
 * listener's bridge may be destroyed while placed requests wait for
 * their group; the group's ring is woken with
 * IORING_OP_MSG_RING (an SQE of the listener's ring), or through the
 * group's eventfd where the kernel lacks it; the group's thread then
 * creates the QP on the group's shared CQ (RR_EP_SHARED_CQ), calls
 * on_qp_ready and accepts. From the handoff on, only the group's thread
 * touches the endpoint. The listener's ep_opts apply, with its
 * acceptance private data or what the hook set.
 *
 * Thread rules: call this on the listener's thread after @group was
 * created; destroy the listener, or remove @group from it
 * (rr_listener_remove_group()), before destroying @group.
 *
 * Return: 0, -EINVAL (bad argument, or @group not a group), -EEXIST
 * (added already), -ENODEV (the listener lost its device, or @group has
 * no rdma_cm event channel), -ENOMEM, or
 * the errno of duplicating the group's descriptors.
 */
int rr_listener_add_group(rr_listener *l, rr_bridge *group, rr_accept_cb on_accept, void *data);

/**
 * rr_listener_remove_group() - stop placing the listener's connections on
 * @group, so that @group may be destroyed while the listener lives.
 * @l:     the listener, on its bridge's thread.
 * @group: a group added with rr_listener_add_group().
 *
 * Requests placed on @group already stay with it (they are on its
 * channel): it accepts them, or refuses them when it is destroyed. The
 * groups added after @group move down one index (rr_ep_set_group()).
 *
 * Return: 0, -EINVAL (NULL argument) or -ENOENT (not a group of @l).
 */
int rr_listener_remove_group(rr_listener *l, rr_bridge *group);

/**
 * struct rr_listener_stats - a listener's counters since rr_listen().
 * @requests: connection requests that reached it.
 * @refused:  refused by its request hook.
 * @dropped:  accepted (by the hook, or without one) and lost before being
 *            established or placed: setup errors, a peer that left, the
 *            listener stopping, a placement that failed. A request its
 *            group cannot take is counted by the group's bridge
 *            (rr_bridge_stats.placed_dropped).
 * @placed:   placed on a group (rr_listener_add_group()).
 * @bells_msg_ring: groups woken with an IORING_OP_MSG_RING SQE of the
 *            listener's ring (one that fails falls back to the eventfd).
 * @bells_eventfd: groups woken by writing their eventfd.
 *
 * A bell may wake a group for several placed requests at once.
 */
struct rr_listener_stats {
	uint64_t requests;
	uint64_t refused;
	uint64_t dropped;
	uint64_t placed;
	uint64_t bells_msg_ring;
	uint64_t bells_eventfd;
};

/**
 * rr_listener_get_stats() - copy the listener's counters.
 * @l:    the listener.
 * @out:  where to copy them.
 * @size: sizeof(*out) as the caller was compiled: a later library with
 *        more counters copies only that much.
 *
 * Return: 0, -EINVAL (NULL argument) or -E2BIG (@size over 4096; nothing
 * written).
 */
int rr_listener_get_stats(const rr_listener *l, struct rr_listener_stats *out, size_t size);

/** struct rr_srq - a shared receive queue of one bridge on one device. */
typedef struct rr_srq rr_srq;

/**
 * rr_srq_create() - a shared receive queue: receives posted once serve
 * every endpoint of @b on @ctx created with RR_EP_SRQ, as a group's
 * connections share one pool of receive buffers instead of one per
 * connection.
 * @b:      the bridge; one SRQ per device.
 * @ctx:    the device (e.g. the context of an MR: mr->context).
 * @max_wr: receives it holds at once (the provider may allow more).
 * @out:    the SRQ.
 *
 * A receive completes on the CQ of the QP that took it; its callback gets
 * that endpoint. Its depth counts once in the size of the bridge's shared
 * CQ, or in each private CQ of an endpoint using it.
 *
 * Return: 0, -EINVAL, -EEXIST (the bridge has one on @ctx), -ENODEV, or
 * the errno of ibv_create_srq().
 */
int rr_srq_create(rr_bridge *b, struct ibv_context *ctx, uint32_t max_wr, rr_srq **out);

/**
 * rr_srq_post_recv() - post a receive on an SRQ; @cb is called exactly
 * once, with the endpoint whose QP took it; or with a NULL endpoint:
 * with -ECANCELED when the SRQ is destroyed first, or with its own status
 * when the endpoint whose QP took it was destroyed before the completion
 * was handed out.
 *
 * Return: 0, -EINVAL (bad argument, or buffer outside @mr), -ENOBUFS (it
 * holds max_wr already), -ENODEV, or the errno of ibv_post_srq_recv();
 * then @cb is never called.
 */
int rr_srq_post_recv(rr_srq *srq, void *buf, uint32_t len, struct ibv_mr *mr, rr_req_cb cb,
		     void *data);

/**
 * rr_srq_destroy() - destroy an SRQ no endpoint uses any more; receives
 * still posted complete first, with a NULL endpoint and -ECANCELED.
 * rr_bridge_destroy() destroys those left, after the endpoints.
 *
 * Return: 0, or -EBUSY while an endpoint uses it.
 */
int rr_srq_destroy(rr_srq *srq);

/** rr_ep_srq() - the SRQ the endpoint receives from, or NULL. */
rr_srq *rr_ep_srq(rr_ep *ep);

/**
 * rr_ep_set_group() - in the request hook: place this request on group
 * @index (the order of rr_listener_add_group() calls) instead of the
 * least loaded one.
 *
 * The index names the group at the time of the call: if the hook then
 * removes that group (rr_listener_remove_group()), the request goes to
 * the least loaded of those left, never to the removed one.
 *
 * Return: 0, or -EINVAL (not in a request hook of a listener with groups,
 * or no such group).
 */
int rr_ep_set_group(rr_ep *ep, unsigned int index);

/** rr_listener_port() - the port a listener is bound to (0 once it stopped). */
uint16_t rr_listener_port(const rr_listener *l);

/**
 * rr_listener_destroy() - stop listening; connections not yet established
 * are dropped; established endpoints are not affected.
 * @l: the listener, or NULL.
 *
 * May be called from any callback but the request hook; again on a
 * listener whose destroy is under way (from a flush of its dropped
 * connections), it does nothing.
 *
 * Return: 0, or -EBUSY from the listener's own request hook.
 */
int rr_listener_destroy(rr_listener *l);

/**
 * rr_ep_disconnect() - start a graceful disconnect; outstanding requests
 * are flushed (-ECANCELED) and on_disconnect runs with status 0.
 * @ep: the endpoint.
 *
 * Return: 0, -EINVAL (NULL or destroyed), -ENOTCONN if not established, or
 * the errno of rdma_disconnect().
 */
int rr_ep_disconnect(rr_ep *ep);

/**
 * rr_ep_destroy() - destroy an endpoint in any state.
 * @ep: the endpoint, or NULL.
 *
 * Every request still outstanding completes before this returns: those
 * whose work completion is already in the CQ with its real status, the
 * rest with -ECANCELED; no callback of @ep runs afterwards. Safe from @ep's
 * callbacks (a request whose completion was being handed out in the same
 * batch then also completes with -ECANCELED).
 *
 * Return: 0.
 */
int rr_ep_destroy(rr_ep *ep);

/** rr_ep_data() - the endpoint's application data. */
void *rr_ep_data(const rr_ep *ep);
/** rr_ep_set_data() - set the endpoint's application data. */
void rr_ep_set_data(rr_ep *ep, void *data);
/** rr_ep_set_on_disconnect() - set or replace the on_disconnect callback. */
void rr_ep_set_on_disconnect(rr_ep *ep, rr_ep_cb on_disconnect);
/** rr_ep_cm_id() - the endpoint's rdma_cm id (read-only use). */
struct rdma_cm_id *rr_ep_cm_id(rr_ep *ep);
/** rr_ep_qp() - the endpoint's QP, or NULL before route resolution. */
struct ibv_qp *rr_ep_qp(rr_ep *ep);
/** rr_ep_cq() - the endpoint's CQ, or NULL before route resolution. */
rr_cq *rr_ep_cq(rr_ep *ep);
/**
 * rr_ep_peer_private_data() - the private data the peer sent: with its
 * connection request (passive side, from the request hook on), with its
 * acceptance (active side, from on_connect with status 0) or with its
 * rejection (active side, in on_connect with -ECONNREFUSED).
 * @ep:   the endpoint.
 * @data: set to the bytes, valid as long as the endpoint; NULL if none.
 *
 * The transport pads private data to a fixed size, so the length is
 * usually that size (56, 196 or 148 bytes on RoCE): encode your own length.
 *
 * Return: the length (0: none came).
 */
int rr_ep_peer_private_data(rr_ep *ep, const void **data);

/**
 * rr_ep_set_private_data() - the bytes to answer a connection request with,
 * whether accepted or refused; call it from the listener's request hook
 * (rr_listener_set_on_request()) or on_qp_ready. Copied. The last call
 * wins: on_qp_ready runs after the hook (on a group's thread for a
 * request placed on a group), so what it sets replaces the hook's; with
 * neither, an acceptance carries the listener's ep_opts.private_data.
 *
 * Return: 0; -EINVAL if @len exceeds RR_PRIVATE_DATA_REJECT_MAX (what both
 * an acceptance and a rejection carry), @data is NULL with @len non-zero,
 * or @ep is not a passive endpoint whose request is still unanswered.
 */
int rr_ep_set_private_data(rr_ep *ep, const void *data, size_t len);

/** rr_ep_pd() - the protection domain of the endpoint's device. */
struct ibv_pd *rr_ep_pd(rr_ep *ep);
/** rr_ep_outstanding() - requests posted on the endpoint and not yet
 * completed: its sends and its own receives. Receives posted on an SRQ
 * belong to the SRQ, not to the endpoint whose QP takes them, and are
 * not counted. */
unsigned int rr_ep_outstanding(const rr_ep *ep);

/**
 * rr_ep_reg_mr() - register memory in the PD of the endpoint's device.
 * @ep:     a connected endpoint (or one whose route is resolved).
 * @buf:    start of the memory.
 * @len:    its length.
 * @access: IBV_ACCESS_* flags; IBV_ACCESS_LOCAL_WRITE is always added.
 * @out:    the memory region; release it with rr_mr_dereg(). MRs of one
 *          device may be used on all its endpoints.
 *
 * Return: 0, -EINVAL, -ENOTCONN (no device yet), or the errno of ibv_reg_mr().
 */
int rr_ep_reg_mr(rr_ep *ep, void *buf, size_t len, int access, struct ibv_mr **out);

/**
 * rr_mr_dereg() - deregister a memory region.
 * @mr: the region, or NULL.
 *
 * Return: 0, or the errno of ibv_dereg_mr().
 */
int rr_mr_dereg(struct ibv_mr *mr);

/**
 * rr_ep_alloc_mw() - allocate a type 2 memory window in the PD of the
 * endpoint's device. Bound with rr_ep_post_bind_mw() on one endpoint, it
 * gives that endpoint's peer, and only that QP, remote access to part of a
 * memory region until it is invalidated; the region itself then needs no
 * remote access flag, only IBV_ACCESS_MW_BIND (see rr_ep_reg_mr()).
 * @ep:  an endpoint whose route is resolved.
 * @out: the window; release it with rr_mw_dealloc().
 *
 * Return: 0, -EINVAL, -ENOTCONN (no device yet), or the errno of
 * ibv_alloc_mw() (-EOPNOTSUPP on a device without memory windows).
 */
int rr_ep_alloc_mw(rr_ep *ep, struct ibv_mw **out);

/**
 * rr_mw_dealloc() - free a memory window (bound or not). Free a window
 * bound through an endpoint before destroying that endpoint: Soft-RoCE in
 * Linux 6.1 hangs freeing a type 2 window whose QP is already gone.
 * @mw: the window, or NULL.
 *
 * Return: 0, or the errno of ibv_dealloc_mw().
 */
int rr_mw_dealloc(struct ibv_mw *mw);

/**
 * rr_ep_post_bind_mw() - bind @mw to @len bytes at @addr inside @mr, for
 * the peer of @ep only, under the new key @rkey.
 * @ep:     an established endpoint: the only QP the window will serve.
 * @mw:     a window from rr_ep_alloc_mw() on the same device.
 * @rkey:   the key the peer must use: ibv_inc_rkey(mw->rkey) (the index
 *          part must be the window's, else -EINVAL). Once the bind
 *          succeeded the library stores it in mw->rkey, where the
 *          provider finds the window's current key when it is bound again
 *          after an invalidate; every key given out before is then dead.
 *          A bind still outstanding when rr_ep_destroy() begins leaves
 *          mw->rkey as it was (the window may be freed by then): free
 *          such a window rather than bind it again.
 * @mr:     a region registered with IBV_ACCESS_MW_BIND.
 * @addr:   start of the window, inside @mr.
 * @len:    its length.
 * @access: IBV_ACCESS_REMOTE_WRITE, _READ and/or _ATOMIC.
 * @cb:     completion callback (opcode IBV_WC_BIND_MW); the peer may use
 *          @rkey once it has succeeded.
 * @data:   passed to @cb.
 *
 * Return: as rr_ep_post_send(); -EINVAL also for a range outside @mr or
 * other access flags.
 */
int rr_ep_post_bind_mw(rr_ep *ep, struct ibv_mw *mw, uint32_t rkey, struct ibv_mr *mr, void *addr,
		       size_t len, int access, rr_req_cb cb, void *data);

/**
 * rr_ep_post_local_inv() - invalidate the memory window bound under @rkey
 * through @ep: once @cb runs with status 0 (opcode IBV_WC_LOCAL_INV), the
 * peer's accesses with @rkey fail with a remote access error.
 *
 * Return: as rr_ep_post_send().
 */
int rr_ep_post_local_inv(rr_ep *ep, uint32_t rkey, rr_req_cb cb, void *data);

/**
 * rr_ep_post_send() - post a SEND.
 * @ep:   an established endpoint.
 * @buf:  data inside @mr.
 * @len:  its length.
 * @mr:   the memory region holding @buf.
 * @cb:   completion callback.
 * @data: passed to @cb.
 *
 * Return: 0 (@cb will be called exactly once), -ENOTCONN, -ENOBUFS (send
 * queue full), -EINVAL (NULL argument, or @buf/@len not inside @mr), or the
 * errno of ibv_post_send().
 */
int rr_ep_post_send(rr_ep *ep, const void *buf, uint32_t len, struct ibv_mr *mr, rr_req_cb cb,
		    void *data);

/**
 * rr_ep_post_recv() - post a RECV buffer; it also receives RDMA WRITE with
 * immediate (imm_data set).
 * @ep: an endpoint whose QP exists: from on_qp_ready on (both sides) until
 *      it is in error or disconnected.
 *
 * Other arguments and return values as rr_ep_post_send(); -ENOBUFS when the
 * receive queue is full.
 */
int rr_ep_post_recv(rr_ep *ep, void *buf, uint32_t len, struct ibv_mr *mr, rr_req_cb cb,
		    void *data);

/**
 * rr_ep_post_write() - post an RDMA WRITE of @len bytes to @raddr/@rkey.
 *
 * Arguments and return values as rr_ep_post_send().
 */
int rr_ep_post_write(rr_ep *ep, const void *buf, uint32_t len, struct ibv_mr *mr, uint64_t raddr,
		     uint32_t rkey, rr_req_cb cb, void *data);

/**
 * rr_ep_post_write_imm() - post an RDMA WRITE with immediate data @imm
 * (host order); it consumes one receive on the peer.
 *
 * Arguments and return values as rr_ep_post_send().
 */
int rr_ep_post_write_imm(rr_ep *ep, const void *buf, uint32_t len, struct ibv_mr *mr,
			 uint64_t raddr, uint32_t rkey, uint32_t imm, rr_req_cb cb, void *data);

/**
 * rr_ep_post_read() - post an RDMA READ of @len bytes from @raddr/@rkey into
 * @buf.
 *
 * Arguments and return values as rr_ep_post_send().
 */
int rr_ep_post_read(rr_ep *ep, void *buf, uint32_t len, struct ibv_mr *mr, uint64_t raddr,
		    uint32_t rkey, rr_req_cb cb, void *data);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/**
 * rr_wc_status_errno() - the negative errno a work completion status maps to
 * (see struct rr_completion).
 */
int rr_wc_status_errno(enum ibv_wc_status status);

#ifdef __cplusplus
}
#endif

#endif /* RINGRDMA_H */
