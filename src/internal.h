/* SPDX-License-Identifier: MIT */
/* Private structures and rr__ functions shared by the library's files. */
#ifndef RR_INTERNAL_H
#define RR_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "ringrdma.h"

/* ---- intrusive doubly linked list ---- */

struct rr__list {
	struct rr__list *next, *prev;
};

static inline void rr__list_init(struct rr__list *l)
{
	l->next = l->prev = l;
}

static inline bool rr__list_empty(const struct rr__list *l)
{
	return l->next == l;
}

static inline void rr__list_add_tail(struct rr__list *l, struct rr__list *n)
{
	n->prev = l->prev;
	n->next = l;
	l->prev->next = n;
	l->prev = n;
}

static inline void rr__list_del(struct rr__list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}

#define rr__container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

/* ---- user_data encoding: tag | kind | generation | slot ---- */

enum rr__ud_kind {
	RR__UD_POLL = 1,   /* a poll slot's POLL_ADD */
	RR__UD_CANCEL = 2, /* the POLL_REMOVE of a slot; nothing to do */
	RR__UD_KICK = 3,   /* NOP: come back for busy/hybrid/backlogged CQs */
};

static inline uint64_t rr__ud(enum rr__ud_kind kind, uint32_t gen, uint32_t slot)
{
	return RR_USER_DATA_TAG | ((uint64_t)kind << 40) | ((uint64_t)(gen & 0xff) << 32) | slot;
}

static inline enum rr__ud_kind rr__ud_kind(uint64_t ud)
{
	return (enum rr__ud_kind)((ud >> 40) & 0xff);
}

static inline uint32_t rr__ud_gen(uint64_t ud)
{
	return (uint32_t)(ud >> 32) & 0xff;
}

static inline uint32_t rr__ud_slot(uint64_t ud)
{
	return (uint32_t)ud;
}

/* ---- poll slots: one fd polled through the ring ---- */

/* Called with the poll result (revents >= 0) or an error (< 0) that ended
 * the poll for good. Must drain the fd: the poll may be edge-like. */
typedef void (*rr__poll_fn)(rr_bridge *b, void *ctx, int revents);

struct rr__poll {
	int fd;
	uint32_t gen;
	bool in_use;
	bool is_timer; /* an IORING_OP_TIMEOUT, not a poll: fires once */
	struct __kernel_timespec *ts; /* timers: read by the kernel at submit */
	bool armed;   /* a POLL_ADD is queued or active */
	bool closing; /* cancel requested; freed at the terminal CQE */
	unsigned int errors; /* consecutive failed arms */
	rr__poll_fn fn;
	void *ctx;
	uint32_t next_free;
};

#define RR__NO_SLOT UINT32_MAX

/* ---- devices: one per ibv_context in use ---- */

struct rr__device {
	struct rr__list link;
	rr_bridge *b;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	rr_channel *channel; /* shared completion channel */
	uint32_t async_slot;
	bool dead; /* DEVICE_FATAL or removal seen */
};

/* ---- channels and CQs ---- */

struct rr_channel {
	rr_bridge *b;
	struct ibv_comp_channel *ch;
	uint32_t slot;
	unsigned int ncqs;
	unsigned int narmed;  /* its CQs armed: the most events it can hold */
	struct rr__list link; /* b->channels */
};

struct rr_cq {
	rr_bridge *b;
	rr_channel *ch;
	struct ibv_cq *cq;
	enum rr_wait_mode mode;
	unsigned int spin_us;
	rr_wc_cb on_wc;
	void *data;
	unsigned int unacked; /* events read, not yet acknowledged */
	bool armed;           /* ibv_req_notify_cq() since the last event */
	bool active;          /* on b->active: polled every pass */
	bool evented;         /* on the pending list of the current drain */
	enum { RR__SPIN_IDLE, RR__SPIN_BUSY, RR__SPIN_WINDOW } spin; /* hybrid */
	uint64_t spin_until_ns;
	unsigned int spin_empty; /* empty polls in the window */
	struct rr__list active_link;
	struct rr__list link; /* b->cqs */
	struct rr_cq *pending_next;
	unsigned int dispatch_depth; /* >0 while handing out its WCs */
	bool destroy_deferred;
};

/* ---- endpoints ---- */

enum rr__obj_type { RR__OBJ_EP = 0x45504550, RR__OBJ_LISTENER = 0x4c53544e };

enum rr__ep_state {
	RR__EP_RESOLVING_ADDR,
	RR__EP_RESOLVING_ROUTE,
	RR__EP_CONNECTING,
	RR__EP_ACCEPTING, /* passive side, before ESTABLISHED */
	RR__EP_CONNECTED,
	RR__EP_DISCONNECTING,
	RR__EP_DISCONNECTED,
	RR__EP_ERROR,
};

struct rr__req {
	struct rr__list link; /* ep->outstanding or ep->free_reqs */
	rr_ep *ep;
	rr_req_cb cb;
	void *data;
	bool is_recv;
};

struct rr_ep {
	uint32_t type; /* RR__OBJ_EP: cm_id->context points to ep or listener */
	rr_bridge *b;
	struct rdma_cm_id *id;
	struct rr__device *dev;
	rr_cq *cq;
	rr_listener *listener; /* passive side until established */
	enum rr__ep_state state;
	struct rr_ep_opts opts;
	rr_ep_cb on_connect;
	rr_ep_cb on_disconnect;
	void *data;
	struct rr__req *reqs;
	struct rr__list free_reqs;
	struct rr__list outstanding;
	unsigned int nsend, nrecv; /* outstanding per queue */
	unsigned int in_callback;  /* depth of our callbacks on the stack */
	bool destroy_pending;      /* rr_ep_destroy() called from a callback */
	bool notified_down;        /* on_disconnect already delivered */
	uint32_t timer_slot;       /* connect timeout, or RR__NO_SLOT */
	struct rr__list link;      /* b->eps */
};

struct rr_listener {
	uint32_t type; /* RR__OBJ_LISTENER */
	rr_bridge *b;
	struct rdma_cm_id *id;
	struct rr_ep_opts ep_opts;
	rr_accept_cb on_accept;
	void *data;
	uint64_t dropped; /* requests that failed before being established */
	struct rr__list link; /* b->listeners */
};

/* ---- the bridge ---- */

struct rr_bridge {
	struct io_uring *ring;
	struct rr_bridge_opts opts;
	bool multishot;
	bool loop_owned; /* inside rr_bridge_run_once(): no kicks needed */
	bool stop;
	bool closing;
	bool kick_pending;

	struct rr__poll *slots;
	uint32_t nslots, free_slot, live_slots;

	struct rdma_event_channel *cm_ch;
	uint32_t cm_slot;

	struct rr__list devices;
	struct rr__list channels;
	struct rr__list cqs;
	struct rr__list active; /* CQs polled every pass */
	struct rr__list eps;
	struct rr__list listeners;

	struct rr_bridge_stats stats;
};

/* bridge.c */
struct io_uring_sqe *rr__get_sqe(rr_bridge *b);
void rr__want_kick(rr_bridge *b);
uint64_t rr__now_ns(void);

/* poll.c */
int rr__poll_add(rr_bridge *b, int fd, rr__poll_fn fn, void *ctx, uint32_t *slot_out);
/* A one-shot timer; fn(b, ctx, -ETIME) when it expires, never after
 * rr__poll_close(). */
int rr__timer_add(rr_bridge *b, unsigned int ms, rr__poll_fn fn, void *ctx, uint32_t *slot_out);
void rr__poll_close(rr_bridge *b, uint32_t slot);
void rr__poll_cqe(rr_bridge *b, const struct io_uring_cqe *cqe);
void rr__poll_cancel_cqe(rr_bridge *b, const struct io_uring_cqe *cqe);
int rr__poll_init(rr_bridge *b);
void rr__poll_fini(rr_bridge *b);
int rr__set_nonblock(int fd);

/* cq.c */
unsigned int rr__cq_poll_active(rr_bridge *b);
bool rr__cq_any_active(rr_bridge *b);

/* device.c */
int rr__device_get(rr_bridge *b, struct ibv_context *ctx, struct rr__device **out);
void rr__device_destroy_all(rr_bridge *b);
void rr__device_release_if_unused(struct rr__device *dev);

/* cm.c */
int rr__cm_init(rr_bridge *b);
void rr__cm_fini(rr_bridge *b);

/* ep.c */
int rr__ep_alloc(rr_bridge *b, struct rdma_cm_id *id, const struct rr_ep_opts *opts, rr_ep **out);
int rr__ep_setup_qp(rr_ep *ep);
void rr__ep_to_error(rr_ep *ep, int status);
void rr__ep_down(rr_ep *ep, int status);
void rr__ep_stop_timer(rr_ep *ep);
int rr__ep_qp_ready(rr_ep *ep);
void rr__ep_free(rr_ep *ep);
void rr__ep_flush_all(rr_ep *ep, int status);

#endif
