/* SPDX-License-Identifier: MIT */
/*
 * Layer 5, the connection manager: the rdma_cm event channel is a slot of
 * the ring; its events drive endpoint and listener state machines. Uses
 * the ring, device and endpoint layers.
 */
#ifndef RR_CM_H
#define RR_CM_H

#include <stdatomic.h>

#include "device.h"
#include "ep.h"
#include "list.h"
#include "ring.h"

struct rr__handoff;

struct rr__cm {
	struct rr__ring *ring;
	struct rr__devices *devs;
	struct rr__eps *eps;
	struct rr_bridge_stats *stats;
	struct rdma_event_channel *ch; /* created on first use */
	uint32_t slot;
	bool closing;
	struct rr__list listeners;
	/* As a group: connection requests listeners on other threads placed
	 * here, pushed by them, taken by this thread when its bell rings. */
	bool group;
	rr__inbox inbox;   /* of struct rr__handoff */
	atomic_uint conns; /* placed here and not yet destroyed */
};

/* A group a listener places connection requests on. */
struct rr__group {
	struct rr__cm *cm;
	uint32_t peer; /* its bell, in the listener's ring */
	rr_accept_cb on_accept;
	void *data;
};

struct rr_listener {
	uint32_t type; /* RR__OBJ_LISTENER */
	struct rr__cm *cm;
	struct rdma_cm_id *id; /* NULL once its device is gone */
	struct rr_ep_opts ep_opts;
	rr_accept_cb on_accept;
	rr_listener_cb on_error;
	rr_request_cb on_request;
	bool in_request; /* its hook is running: it cannot be destroyed */
	/* Held by a walk of the library that calls back (listener_lost()):
	 * a destroy from a callback then leaves the free to the walk. */
	unsigned int busy;
	bool destroyed; /* rr_listener_destroy() ran: only the free is left */
	/* Listening when the rdma_cm poll was lost: cm_lost() stops it (and
	 * only those, not one a callback made meanwhile). */
	bool lost;
	void *data;
	uint8_t pdata[RR_PRIVATE_DATA_ACCEPT_MAX]; /* ep_opts.private_data points here */
	struct rr_listener_stats stats;
	struct rr__group *groups;
	unsigned int ngroups, next_group;
	struct rr__list pending; /* endpoints not yet established */
	struct rr__list link;	 /* cm->listeners */
};

void rr__cm_init(struct rr__cm *cm, struct rr__ring *ring, struct rr__devices *devs,
		 struct rr__eps *eps, struct rr_bridge_stats *stats);
/* Teardown, after the endpoints: listeners and the event channel. */
void rr__cm_fini(struct rr__cm *cm);

/* Let listeners on other threads place connection requests here. */
int rr__cm_group_open(struct rr__cm *cm);
/* Called on l's thread; @group's rr__cm_group_open() came before. */
int rr__cm_add_group(rr_listener *l, struct rr__cm *group, rr_accept_cb on_accept, void *data);
int rr__cm_remove_group(rr_listener *l, struct rr__cm *group);

int rr__cm_connect(struct rr__cm *cm, const char *host, uint16_t port,
		   const struct rr_ep_opts *opts, rr_ep_cb on_connect, rr_ep **out);
int rr__cm_listen(struct rr__cm *cm, const char *host, uint16_t port,
		  const struct rr_ep_opts *ep_opts, rr_accept_cb on_accept, void *data,
		  rr_listener **out);

#endif
