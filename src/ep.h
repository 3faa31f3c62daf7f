/* SPDX-License-Identifier: MIT */
/*
 * Layer 4, endpoints: an RC QP on a private CQ of its device's shared
 * channel, or on the CQ the bridge shares among its endpoints on that
 * device, plus the requests posted on it. Uses the ring, CQ and device
 * layers; the connection manager above drives its state through the
 * rr__ep_* functions and learns of dropped passive endpoints by a hook.
 */
#ifndef RR_EP_H
#define RR_EP_H

#include <stdatomic.h>

#include "cq.h"
#include "device.h"
#include "list.h"
#include "ring.h"

/* Endpoints on shared CQs by QP number: who a work completion is for. */
struct rr__qpmap {
	rr_ep **slots;
	uint32_t cap, n;
};

struct rr__eps {
	struct rr__ring *ring;
	struct rr_bridge_stats *stats;
	struct rr__cqs *cqs;
	struct rr__devices *devs;
	struct rr__list eps;
	struct rr__list srqs;	   /* rr_srq: at most one per device */
	struct rr__list shcqs;	   /* struct rr__shcq: one per device in use */
	struct rr__list lingering; /* destroyed endpoints whose SRQ QP waits */
	/* Ends a linger: the endpoints' lifecycle registers it, so an SRQ
	 * that goes (srq.c) ends those of its QPs without calling up. */
	void (*linger_end)(rr_ep *ep);
	struct rr__qpmap qps;
	bool closing; /* teardown: no QP lingers */
	/* Posts made while a pass is on hold their work requests, chained
	 * per queue, until it ends (see rr__eps_hold()). */
	unsigned int holding;	  /* depth of passes */
	struct rr__list held_eps; /* endpoints holding some */
	struct rr__list held_srqs;
	/* Set with either list non-empty; cleared by rr__eps_post_all_held()
	 * once it finds both empty: one test a check instead of two. */
	bool any_held;
};

/* Work requests held for one queue, in posting order, chained by their
 * own next pointers. */
struct rr__req;
struct rr__chain {
	struct rr__req *first, *last;
	unsigned int n;
};

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

struct rr_ep {
	uint32_t type; /* RR__OBJ_EP: cm_id->context points to ep or listener */
	struct rr__eps *set;
	struct rdma_cm_id *id;
	struct rr__device *dev; /* holds a reference */
	rr_cq *cq;
	struct rr__shcq *shared;	     /* cq is shared: this is it */
	struct rr_srq *srq;		     /* RR_EP_SRQ: receives come from it */
	struct ibv_qp *qp;		     /* once created; destroyed by the endpoint */
	uint32_t qp_num;		     /* its QP's; on a shared CQ its key in set->qps */
	struct rr__claim qp_claim, cq_claim; /* async events of its QP, CQ */
	bool last_wqe;			     /* an SRQ QP in error took its last receive */
	bool lingering;			     /* destroyed; its SRQ QP waits for its last receive */
	struct ibv_pd *own_pd;		     /* RR_EP_OWN_PD */
	atomic_uint *counter;		     /* decremented once when destroyed */
	struct rr__list down_link;	     /* shared->downs */
	enum rr__ep_state state;
	struct rr_ep_opts opts;
	rr_ep_cb on_connect;
	rr_ep_cb on_disconnect;
	void *data;
	bool data_set; /* by rr_ep_set_data() */
	struct rr__req *reqs;
	struct rr__list free_reqs;
	struct rr__list outstanding;
	unsigned int nsend, nrecv;	   /* outstanding per queue */
	unsigned int unsignalled;	   /* sends since the last signalled one */
	struct rr__chain held_sq, held_rq; /* a pass's, not posted yet */
	struct rr__list held_link;	   /* set->held_eps while it holds some */
	unsigned int in_callback;	   /* depth of our callbacks on the stack */
	bool destroy_pending;		   /* rr_ep_destroy() called from a callback */
	bool notified_down;		   /* on_disconnect already delivered */
	int down_pending;		   /* a WC error: on_disconnect after the batch */
	uint32_t timer_slot;		   /* connect timeout, or RR__NO_SLOT */
	bool pdata_sent;		   /* our request or answer went out */
	bool pdata_set;			   /* by rr_ep_set_private_data() */
	uint8_t pdata_len, peer_pdata_len;
	uint8_t pdata[RR_PRIVATE_DATA_ACCEPT_MAX];	/* ours, to send */
	uint8_t peer_pdata[RR_PRIVATE_DATA_ACCEPT_MAX]; /* the peer's */
	struct rr__list link;				/* set->eps */
	/* Set by the connection manager, whose own fields stand beside the
	 * endpoint (see rr__ep_alloc()): a passive endpoint not yet
	 * established sits on its listener's list; dropping it (instead of
	 * reporting an error nobody could receive) goes through the hook.
	 * These two stay here: a destroy unlinks the one and clears the
	 * other, and the error path calls the hook. */
	struct rr__list pending_link;
	void (*on_drop)(rr_ep *ep);
	/* Set by the connection manager on a passive endpoint it accepted:
	 * a receive that completes before ESTABLISHED runs it first (see
	 * rr__ep_on_wc()). */
	void (*on_early_recv)(rr_ep *ep);
};

int rr__srq_create(struct rr__eps *set, struct ibv_context *ctx, uint32_t max_wr, rr_srq **out);

/*
 * Coalesced posting. The bridge opens a pass around its dispatch
 * (rr__eps_hold()) and closes it (rr__eps_release()); posts made while
 * one is open (in callbacks) are accepted at once and held, chained per
 * queue, and the outermost rr__eps_release() posts each chain with one
 * ibv_post_send() / ibv_post_recv() / ibv_post_srq_recv(), receives
 * first. rr__eps_post_held() posts what is held now (before the loop
 * waits). A request the provider refuses in its chain fails in its one
 * callback, so these may call back.
 */
void rr__eps_posts_init(struct rr__eps *set, struct rr_bridge_stats *stats);
void rr__eps_post_all_held(struct rr__eps *set);
/* Inline: a pass calls these several times, and mostly nothing is held. */
static inline void rr__eps_post_held(struct rr__eps *set)
{
	if (set->any_held)
		rr__eps_post_all_held(set);
}

static inline void rr__eps_hold(struct rr__eps *set)
{
	set->holding++;
}

/* Is a pass (rr_bridge_run_once(), rr_bridge_handle_cqe()) on the stack? */
static inline bool rr__eps_holding(const struct rr__eps *set)
{
	return set->holding != 0;
}

static inline void rr__eps_release(struct rr__eps *set)
{
	if (!--set->holding)
		rr__eps_post_held(set);
}

void rr__eps_init(struct rr__eps *set, struct rr__ring *ring, struct rr__cqs *cqs,
		  struct rr__devices *devs);
/* Teardown: destroy every endpoint left. */
void rr__eps_fini(struct rr__eps *set);
/* A device async event, on the thread of the bridge that claimed what it
 * names (@c, or NULL): tell(ctx, ev) first, with that object held (not for
 * a destroyed endpoint's lingering QP), then the endpoints it names go to
 * error. */
void rr__eps_async(struct rr__eps *set, struct rr__device *dev, const struct ibv_async_event *ev,
		   struct rr__claim *c, void (*tell)(void *ctx, const struct ibv_async_event *ev),
		   void *ctx);

/* @size: of the caller's struct, which begins with the rr_ep (the endpoint
 * layer frees it as one); the caller's part starts zeroed. */
int rr__ep_alloc(struct rr__eps *set, struct rdma_cm_id *id, const struct rr_ep_opts *opts,
		 size_t size, rr_ep **out);
int rr__ep_setup_qp(rr_ep *ep);
/* Run a listener's request hook on @ep like one of its callbacks: 0 to
 * accept, 1 refused, -1 the application destroyed @ep in it (now gone). */
int rr__ep_request(rr_ep *ep, rr_request_cb hook, rr_listener *l, void *data);
/* The private data the peer sent (a rejection's is at most 148 bytes). */
void rr__ep_set_peer_pdata(rr_ep *ep, const void *data, size_t len);
/* on_qp_ready; non-zero if the application destroyed the endpoint there.
 * What it posted goes before the connection is requested or accepted. */
int rr__ep_qp_ready(rr_ep *ep);
/* Established: on_connect (or, passive, the given accept callback). */
void rr__ep_established(rr_ep *ep, void (*accept)(void *ctx, rr_ep *ep), void *ctx);
void rr__ep_to_error(rr_ep *ep, int status);
void rr__ep_down(rr_ep *ep, int status);
void rr__ep_stop_timer(rr_ep *ep);

#endif
