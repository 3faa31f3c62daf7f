// SPDX-License-Identifier: MIT
/*
 * Devices: for each ibv_context the bridge uses, the context's async-event
 * fd polled in the ring, and once something needs them (an endpoint, an
 * SRQ, a CQ on the shared channel) one shared completion channel and the
 * one protection domain per context for the whole process, so memory
 * registered once serves endpoints on every bridge (every thread).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include "device.h"

/*
 * What the process keeps per context, counted over the bridges using it:
 * the PD, and every bridge's device on it, so an async event one bridge
 * reads reaches the groups too (all of them read the one async fd).
 */
struct shared_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd; /* NULL until a bridge equips a device of ctx */
	unsigned int refs;
	struct rr__list devs;	/* rr__device.peer_link */
	struct rr__list claims; /* struct rr__claim, newest first */
	uint64_t claim_gen;
	struct shared_dev *next;
};

/* An async event on its way to another bridge's device; obj and gen: the
 * claim it was read for (obj NULL: an event of the whole device). */
struct rr__async_msg {
	struct rr__inbox_node node; /* on the device's inbox */
	struct ibv_async_event ev;
	void *obj;
	uint64_t gen;
};

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared_dev *shared_devs;

static struct shared_dev *shared_get(struct ibv_context *ctx)
{
	struct shared_dev *s;

	pthread_mutex_lock(&shared_lock);
	for (s = shared_devs; s && s->ctx != ctx; s = s->next) {
	}
	if (!s && (s = calloc(1, sizeof(*s)))) {
		s->ctx = ctx;
		rr__list_init(&s->devs);
		rr__list_init(&s->claims);
		s->next = shared_devs;
		shared_devs = s;
	}
	if (s)
		s->refs++;
	pthread_mutex_unlock(&shared_lock);
	return s;
}

/* The process's PD of the context, allocated by its first user. */
static int shared_pd(struct shared_dev *s, struct ibv_pd **out)
{
	int rc = 0;

	pthread_mutex_lock(&shared_lock);
	if (!s->pd) {
		s->pd = ibv_alloc_pd(s->ctx);
		if (!s->pd)
			rc = errno ? -errno : -ENOMEM;
	}
	*out = s->pd;
	pthread_mutex_unlock(&shared_lock);
	return rc;
}

static void shared_put(struct shared_dev *s)
{
	struct shared_dev **p;

	pthread_mutex_lock(&shared_lock);
	if (!--s->refs) {
		for (p = &shared_devs; *p != s; p = &(*p)->next) {
		}
		*p = s->next;
		/* Fails (EBUSY) only while the application still holds MRs
		 * in this PD; verbs then frees it with the context. */
		if (s->pd)
			ibv_dealloc_pd(s->pd);
		free(s);
	}
	pthread_mutex_unlock(&shared_lock);
}

/* Each event left in the inbox, oldest first, to fn (if any), then freed. */
static void take_msgs(struct rr__device *dev,
		      void (*fn)(struct rr__device *dev, const struct rr__async_msg *m))
{
	struct rr__inbox_node *n = rr__inbox_take(&dev->inbox);

	while (n) {
		struct rr__async_msg *m = rr__container_of(n, struct rr__async_msg, node);

		n = n->next;
		if (fn)
			fn(dev, m);
		free(m);
	}
}

/* The newest claim of obj on the context; under shared_lock. */
static struct rr__claim *claim_find(struct shared_dev *s, const void *obj)
{
	for (struct rr__list *l = s->claims.next; l != &s->claims; l = l->next) {
		struct rr__claim *c = rr__container_of(l, struct rr__claim, link);

		if (c->obj == obj)
			return c;
	}
	return NULL;
}

void rr__device_claim(struct rr__device *dev, struct rr__claim *c, void *obj, void *owner,
		      unsigned int kind)
{
	c->obj = obj;
	c->dev = dev;
	c->owner = owner;
	c->kind = kind;
	pthread_mutex_lock(&shared_lock);
	c->gen = ++dev->shared->claim_gen;
	rr__list_add(&dev->shared->claims, &c->link);
	pthread_mutex_unlock(&shared_lock);
}

/*
 * Only after the object is destroyed: an event of it read elsewhere is
 * acknowledged only after its owner was looked up, and verbs' destroy
 * waits for that acknowledgement, so no event of a library object is ever
 * taken for the application's.
 */
void rr__device_unclaim(struct rr__claim *c)
{
	if (!c->obj)
		return;
	pthread_mutex_lock(&shared_lock);
	rr__list_del(&c->link);
	pthread_mutex_unlock(&shared_lock);
	c->obj = NULL;
}

/* The verbs object an async event names, if any. */
static void *event_obj(const struct ibv_async_event *ev)
{
	switch (ev->event_type) {
	case IBV_EVENT_CQ_ERR:
		return ev->element.cq;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return ev->element.qp;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return ev->element.srq;
	default:
		return NULL;
	}
}

void rr__devices_init(struct rr__devices *set, struct rr__ring *ring, struct rr__cqs *cqs,
		      struct rr_bridge_stats *stats, rr__async_hook on_async, void *hook_ctx)
{
	set->ring = ring;
	set->cqs = cqs;
	set->stats = stats;
	set->on_async = on_async;
	set->hook_ctx = hook_ctx;
	rr__list_init(&set->devices);
}

static void device_free(struct rr__device *dev)
{
	pthread_mutex_lock(&shared_lock);
	rr__list_del(&dev->peer_link);
	pthread_mutex_unlock(&shared_lock);
	take_msgs(dev, NULL);
	rr__list_del(&dev->link);
	rr__poll_close(dev->set->ring, dev->async_slot);
	if (dev->channel) {
		dev->channel->ncqs = 0;
		rr_channel_destroy(dev->channel);
	}
	shared_put(dev->shared);
	free(dev);
}

/* A removed device is gone for good: once nothing uses it, let go of its
 * PD, channel and async fd, so the kernel can finish the removal. */
static void release_if_unused(struct rr__device *dev)
{
	if (dev->dead && !dev->refs && !(dev->channel && dev->channel->ncqs))
		device_free(dev);
}

void rr__device_put(struct rr__device *dev)
{
	if (dev->refs)
		dev->refs--;
	release_if_unused(dev);
}

void rr__device_kill(struct rr__device *dev)
{
	dev->dead = true;
	release_if_unused(dev);
}

static void handle_async(struct rr__device *dev, const struct ibv_async_event *ev,
			 struct rr__claim *c)
{
	dev->set->stats->async_events++;
	if (ev->event_type == IBV_EVENT_DEVICE_FATAL)
		dev->dead = true;
	if (dev->set->on_async)
		dev->set->on_async(dev->set->hook_ctx, dev, ev, c);
}

/* On the owner's thread: the claim an event was read for, if it still
 * stands (the object lives: only this thread destroys it). */
static void handle_msg(struct rr__device *dev, const struct rr__async_msg *m)
{
	struct rr__claim *c = NULL;

	if (m->obj) {
		pthread_mutex_lock(&shared_lock);
		c = claim_find(dev->shared, m->obj);
		pthread_mutex_unlock(&shared_lock);
		if (!c || c->gen != m->gen || c->dev != dev)
			return; /* destroyed since, perhaps reborn at that address */
	}
	handle_async(dev, &m->ev, c);
}

/* Queue ev for @to's thread and ring its bell; under shared_lock. */
static void send_msg(struct rr__device *dev, struct rr__device *to,
		     const struct ibv_async_event *ev, void *obj, uint64_t gen)
{
	struct rr__async_msg *m;
	uint32_t peer;

	if (!to->set->hears || rr__ring_peer_add(dev->set->ring, to->set->ring, &peer))
		return;
	m = malloc(sizeof(*m));
	if (!m)
		return; /* that bridge misses it: no worse than a lost interrupt */
	m->ev = *ev;
	m->obj = obj;
	m->gen = gen;
	rr__inbox_push(&to->inbox, &m->node);
	/* Only owed: route() writes it once the lock is let go. */
	rr__ring_peer_queue(dev->set->ring, peer);
}

/*
 * One event read from the context's async fd, not yet acknowledged. An
 * event naming a claimed object goes to its owner alone; one of the whole
 * device to every bridge on the context; one naming an object nobody
 * claimed (the application's own) to this bridge.
 */
static void route(struct rr__device *dev, struct ibv_async_event *ev)
{
	struct ibv_async_event copy = *ev;
	void *obj = event_obj(ev);
	struct rr__device *owner = dev;
	struct rr__claim *c = NULL;
	uint64_t gen = 0;

	pthread_mutex_lock(&shared_lock);
	if (obj && (c = claim_find(dev->shared, obj))) {
		owner = c->dev;
		gen = c->gen;
		if (owner != dev)
			send_msg(dev, owner, &copy, obj, gen);
	} else if (!obj) {
		for (struct rr__list *l = dev->shared->devs.next; l != &dev->shared->devs;
		     l = l->next) {
			struct rr__device *to = rr__container_of(l, struct rr__device, peer_link);

			if (to != dev)
				send_msg(dev, to, &copy, NULL, 0);
		}
	}
	pthread_mutex_unlock(&shared_lock);
	/* The bells send_msg() owed: writing them may submit the SQ to make
	 * room, which must not stall every other thread's claims. */
	rr__ring_flush(dev->set->ring);
	/* Acknowledged before our hook runs: it may destroy the object,
	 * which waits for the acknowledgement. Our own claim cannot end in
	 * between: only this thread ends it. */
	ibv_ack_async_event(ev);
	if (owner == dev)
		handle_async(dev, &copy, c);
}

/* The async fd failed for good (a disassociated context reports POLLERR
 * and fails every read): as fatal as DEVICE_FATAL. */
static void device_lost(struct rr__device *dev)
{
	struct ibv_async_event ev = {.event_type = IBV_EVENT_DEVICE_FATAL};

	if (dev->dead)
		return;
	dev->refs++;
	handle_async(dev, &ev, NULL);
	rr__device_put(dev);
}

static void async_ready(void *ctx, int revents)
{
	struct rr__device *dev = ctx;
	struct ibv_async_event ev;

	if (revents < 0) {
		dev->async_slot = RR__NO_SLOT; /* counted in stats.poll_failures */
		device_lost(dev);
		return;
	}
	/* Held across the hook: a callback may put the last reference of
	 * its users, and this loop still reads the device. */
	dev->refs++;
	while (ibv_get_async_event(dev->ctx, &ev) == 0)
		route(dev, &ev);
	rr__device_put(dev);
}

/* The bell: events other bridges read for this one's devices. A hook may
 * put any device's last reference: all are held until every inbox is
 * taken, and the next one is read before each put. */
static void devices_bell(void *ctx)
{
	struct rr__devices *set = ctx;
	struct rr__list *l;

	for (l = set->devices.next; l != &set->devices; l = l->next) {
		struct rr__device *dev = rr__container_of(l, struct rr__device, link);

		dev->bell_held = true;
		dev->refs++;
	}
	for (l = set->devices.next; l != &set->devices; l = l->next)
		take_msgs(rr__container_of(l, struct rr__device, link), handle_msg);
	for (l = set->devices.next; l != &set->devices;) {
		struct rr__device *dev = rr__container_of(l, struct rr__device, link);

		l = l->next;
		if (dev->bell_held) { /* not one a hook set up meanwhile */
			dev->bell_held = false;
			rr__device_put(dev);
		}
	}
}

int rr__devices_hear_others(struct rr__devices *set)
{
	int rc = rr__ring_bell_open(set->ring, devices_bell, set);

	if (!rc) {
		pthread_mutex_lock(&shared_lock); /* read by forward() elsewhere */
		set->hears = true;
		pthread_mutex_unlock(&shared_lock);
	}
	return rc;
}

void rr__devices_stop_hearing(struct rr__devices *set)
{
	if (set->hears)
		rr__ring_bell_close(set->ring, devices_bell, set);
	pthread_mutex_lock(&shared_lock);
	set->hears = false;
	pthread_mutex_unlock(&shared_lock);
}

/* The device of ctx if it is set up, without a reference; NULL if not. */
static struct rr__device *device_find(struct rr__devices *set, struct ibv_context *ctx)
{
	struct rr__list *l;

	for (l = set->devices.next; l != &set->devices; l = l->next) {
		struct rr__device *dev = rr__container_of(l, struct rr__device, link);

		if (dev->ctx == ctx)
			return dev;
	}
	return NULL;
}

void rr__devices_kill(struct rr__devices *set, struct ibv_context *ctx)
{
	struct rr__device *dev = device_find(set, ctx);

	if (dev)
		rr__device_kill(dev);
}

/* The PD and the shared channel, for a device set up only to be heard. */
static int equip(struct rr__device *dev)
{
	struct ibv_pd *pd;
	int rc = shared_pd(dev->shared, &pd);

	if (!rc)
		rc = rr__channel_create(dev->set->cqs, dev->ctx, &dev->channel);
	if (!rc)
		dev->pd = pd;
	return rc;
}

/* @equipped: with the PD and the shared channel; without them the device
 * is only heard (its async fd polled, its events routed here). */
static int device_hold(struct rr__devices *set, struct ibv_context *ctx, bool equipped,
		       struct rr__device **out)
{
	struct rr__device *dev = device_find(set, ctx);
	int rc;

	if (dev) {
		if (dev->dead)
			return -ENODEV;
		if (equipped && !dev->channel) {
			rc = equip(dev);
			if (rc)
				return rc;
		}
		dev->refs++;
		*out = dev;
		return 0;
	}
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->set = set;
	dev->ctx = ctx;
	dev->async_slot = RR__NO_SLOT;
	dev->shared = shared_get(ctx);
	if (!dev->shared) {
		rc = -ENOMEM;
		goto err_free;
	}
	rc = equipped ? equip(dev) : 0;
	if (rc)
		goto err_shared;
	/* Events this bridge's objects get may be read by another bridge. */
	rc = set->hears ? 0 : rr__devices_hear_others(set);
	if (!rc)
		rc = rr__set_nonblock(ctx->async_fd);
	if (!rc)
		rc = rr__poll_add(set->ring, ctx->async_fd, async_ready, dev, &dev->async_slot);
	if (rc)
		goto err_channel;
	rr__list_add_tail(&set->devices, &dev->link);
	pthread_mutex_lock(&shared_lock);
	rr__list_add_tail(&dev->shared->devs, &dev->peer_link);
	pthread_mutex_unlock(&shared_lock);
	dev->refs = 1;
	*out = dev;
	return 0;

err_channel:
	if (dev->channel)
		rr_channel_destroy(dev->channel);
err_shared:
	shared_put(dev->shared);
err_free:
	free(dev);
	return rc;
}

int rr__device_get(struct rr__devices *set, struct ibv_context *ctx, struct rr__device **out)
{
	return device_hold(set, ctx, true, out);
}

int rr__device_hear(struct rr__devices *set, struct ibv_context *ctx, struct rr__device **out)
{
	return device_hold(set, ctx, false, out);
}

static uint8_t rd_limit(int v)
{
	return v < 1 ? 1 : v > UINT8_MAX ? UINT8_MAX : (uint8_t)v;
}

/* The device's limits, asked once; only rdma_cm endpoints need them, so
 * the unit suite's fake contexts never get here. */
static void query_limits(struct rr__device *dev)
{
	struct ibv_device_attr attr;

	if (dev->max_init_rd)
		return;
	if (ibv_query_device(dev->ctx, &attr)) {
		attr.max_qp_init_rd_atom = attr.max_qp_rd_atom = 1;
		attr.max_cqe = 0;
	}
	dev->max_init_rd = rd_limit(attr.max_qp_init_rd_atom);
	dev->max_resp_rd = rd_limit(attr.max_qp_rd_atom);
	dev->max_cqe = attr.max_cqe > 0 ? attr.max_cqe : INT_MAX;
}

void rr__device_rd_limits(struct rr__device *dev, unsigned int *init, unsigned int *resp)
{
	query_limits(dev);
	*init = dev->max_init_rd;
	*resp = dev->max_resp_rd;
}

int rr__device_max_cqe(struct rr__device *dev)
{
	query_limits(dev);
	return dev->max_cqe;
}

void rr__devices_fini(struct rr__devices *set)
{
	while (!rr__list_empty(&set->devices))
		device_free(rr__container_of(set->devices.next, struct rr__device, link));
}
