/* SPDX-License-Identifier: MIT */
/*
 * Layer 3, devices: for each ibv_context in use, the context's async-event
 * fd polled in the ring; and, once something needs them, one shared
 * completion channel and the process-wide protection domain of the
 * context (one for all bridges). Reference counted: a dead device (fatal
 * event, removal) is let go of once its last user put it. Async events
 * travel up through a hook.
 */
#ifndef RR_DEVICE_H
#define RR_DEVICE_H

#include <stdatomic.h>

#include "cq.h"
#include "list.h"
#include "ring.h"

struct rr__device;

/*
 * A verbs object (QP, CQ, SRQ) a layer above created on a device: an async
 * event naming it goes to the bridge that claimed it, on that bridge's
 * thread, and only while the claim stands. The claimer fills owner and
 * kind for itself; the device layer keys on obj and tells a later claim of
 * the same address apart by gen.
 */
struct rr__claim {
	struct rr__list link; /* shared device's claims */
	void *obj;
	struct rr__device *dev; /* the claimer's, held while claimed */
	uint64_t gen;
	void *owner;	   /* the layer above's */
	unsigned int kind; /* the layer above's */
};

/* Called for every async event, acknowledged already, on the thread of the
 * bridge it is for; the device is held for the call, so the hook may drop
 * the last reference of its users. @c: the claim of the object the event
 * names, standing for the call (the hook may end it); NULL for an event of
 * the whole device, or one naming an object nobody claimed. */
typedef void (*rr__async_hook)(void *ctx, struct rr__device *dev, const struct ibv_async_event *ev,
			       struct rr__claim *c);

struct rr__devices {
	struct rr__ring *ring;
	struct rr__cqs *cqs;
	struct rr_bridge_stats *stats;
	rr__async_hook on_async;
	void *hook_ctx;
	struct rr__list devices;
	bool hears; /* others forward async events here through the bell */
};

struct shared_dev;

struct rr__device {
	struct rr__list link;
	struct rr__devices *set;
	struct ibv_context *ctx;
	struct ibv_pd *pd;   /* the process's PD of ctx, counted; NULL if only heard */
	rr_channel *channel; /* shared completion channel; NULL if only heard */
	struct shared_dev *shared;
	struct rr__list peer_link; /* shared->devs */
	rr__inbox inbox;	   /* events others read for us (struct rr__async_msg) */
	uint32_t async_slot;
	unsigned int refs;
	bool dead;			  /* DEVICE_FATAL or removal seen */
	bool bell_held;			  /* held by devices_bell() */
	uint8_t max_init_rd, max_resp_rd; /* RDMA READ depths; 0 until queried */
	int max_cqe;			  /* entries a CQ may have (INT_MAX: not known) */
};

void rr__devices_init(struct rr__devices *set, struct rr__ring *ring, struct rr__cqs *cqs,
		      struct rr_bridge_stats *stats, rr__async_hook on_async, void *hook_ctx);
/* Teardown: free every device, whatever its references. */
void rr__devices_fini(struct rr__devices *set);

/* Async events other bridges of the process read on a context this one
 * uses are forwarded here through the ring's bell (every bridge reads the
 * one async fd of a context; without this, whichever reads first keeps
 * the event). Opened with a bridge's first device. */
int rr__devices_hear_others(struct rr__devices *set);
void rr__devices_stop_hearing(struct rr__devices *set);

/* Route the async events naming @obj to this bridge (see struct
 * rr__claim); end the claim before destroying @obj. */
void rr__device_claim(struct rr__device *dev, struct rr__claim *c, void *obj, void *owner,
		      unsigned int kind);
void rr__device_unclaim(struct rr__claim *c);

/* The device of ctx, set up on first use, with a reference taken;
 * -ENODEV (and no reference) once it is dead. With its PD and shared
 * channel. */
int rr__device_get(struct rr__devices *set, struct ibv_context *ctx, struct rr__device **out);
/* The same, heard only: its async events reach this bridge, without a PD
 * or shared channel set up for it (a CQ on a channel of the
 * application's); a later rr__device_get() adds them. */
int rr__device_hear(struct rr__devices *set, struct ibv_context *ctx, struct rr__device **out);
void rr__device_put(struct rr__device *dev);
/* Mark dead: new users are refused, and it goes with its last reference. */
void rr__device_kill(struct rr__device *dev);
/* The same for ctx's device, if this bridge set one up. */
void rr__devices_kill(struct rr__devices *set, struct ibv_context *ctx);
/* The most RDMA READs/atomics a QP may have outstanding as initiator and
 * accept as responder (ibv_query_device(), asked once; 1 if it fails). */
void rr__device_rd_limits(struct rr__device *dev, unsigned int *init, unsigned int *resp);
/* The most entries a CQ of the device may have. */
int rr__device_max_cqe(struct rr__device *dev);

#endif
