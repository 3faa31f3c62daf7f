/* SPDX-License-Identifier: MIT */
/*
 * Layer 6, the bridge: the public facade. Holds one of each layer below,
 * wires their upward hooks, routes CQEs, runs the built-in loop and tears
 * everything down in an order verbs accepts.
 *
 *   bridge  (bridge.c)  rr_bridge_*, and the calls that need a bridge
 *     cm    (cm.c)      rdma_cm events, listeners, connect
 *     ep    (ep.h)      endpoints, their requests, SRQs, MRs (files: ep_internal.h)
 *     device(device.c)  PD, shared channel, async events per ibv_context
 *     cq    (cq.c)      channels, CQs, dispatch and arming
 *     ring  (ring.c)    slots, owed SQEs, kicks, clock
 *
 * Each layer calls only the layers below it; news travels up through
 * hooks a layer above registers (device async events, CQ dispatch ends,
 * dropped passive endpoints).
 */
#ifndef RR_BRIDGE_H
#define RR_BRIDGE_H

#include "cm.h"
#include "cq.h"
#include "device.h"
#include "ep.h"
#include "ring.h"

struct rr_bridge {
	struct io_uring *io;
	struct rr_bridge_opts opts;
	bool stop;
	bool closing;
	enum rr__arm at_end;	   /* how the built-in loop's pass settles its CQs */
	unsigned int quiet_passes; /* passes that did not wait, for events_need_enter() */
	struct rr__ring ring;
	struct rr__cqs cqs;
	struct rr__devices devs;
	struct rr__eps eps;
	struct rr__cm cm;
	struct rr_bridge_stats stats;
};

#endif
