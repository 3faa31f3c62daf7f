// SPDX-License-Identifier: MIT
/*
 * Devices: for each ibv_context the bridge uses, one shared completion
 * channel and the context's async-event fd polled in the ring; and one
 * protection domain per context for the whole process, so memory
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
	struct ibv_pd *pd;
	unsigned int refs;
	struct rr__list devs; /* rr__device.peer_link */
	struct shared_dev *next;
};

/* An async event on its way to another bridge's device. */
struct rr__async_msg {
	struct rr__inbox_node node; /* on the device's inbox */
	struct ibv_async_event ev;
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
		s->pd = ibv_alloc_pd(ctx);
		if (s->pd) {
			s->next = shared_devs;
			shared_devs = s;
		} else {
			free(s);
			s = NULL;
		}
	} else if (!s) {
		errno = ENOMEM;
	}
	if (s)
		s->refs++;
	pthread_mutex_unlock(&shared_lock);
	return s;
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
		ibv_dealloc_pd(s->pd);
		free(s);
	}
	pthread_mutex_unlock(&shared_lock);
}

/* Each event left in the inbox, oldest first, to fn (if any), then freed. */
static void take_msgs(struct rr__device *dev,
		      void (*fn)(struct rr__device *dev, const struct ibv_async_event *ev))
{
	struct rr__inbox_node *n = rr__inbox_take(&dev->inbox);

	while (n) {
		struct rr__async_msg *m = rr__container_of(n, struct rr__async_msg, node);

		n = n->next;
		if (fn)
			fn(dev, &m->ev);
		free(m);
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
	dev->channel->ncqs = 0;
	rr_channel_destroy(dev->channel);
	shared_put(dev->shared);
	free(dev);
}

/* A removed device is gone for good: once nothing uses it, let go of its
 * PD, channel and async fd, so the kernel can finish the removal. */
static void release_if_unused(struct rr__device *dev)
{
	if (dev->dead && !dev->refs && !dev->channel->ncqs)
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

static void handle_async(struct rr__device *dev, const struct ibv_async_event *ev)
{
	dev->set->stats->async_events++;
	if (ev->event_type == IBV_EVENT_DEVICE_FATAL)
		dev->dead = true;
	if (dev->set->on_async)
		dev->set->on_async(dev->set->hook_ctx, dev, ev);
}

/* The groups on the same context hear it too: each one looks for what
 * it names among its own objects. */
static void forward(struct rr__device *dev, const struct ibv_async_event *ev)
{
	struct rr__list *l;
	uint32_t peer;

	pthread_mutex_lock(&shared_lock);
	for (l = dev->shared->devs.next; l != &dev->shared->devs; l = l->next) {
		struct rr__device *to = rr__container_of(l, struct rr__device, peer_link);
		struct rr__async_msg *m;

		if (to == dev || !to->set->hears ||
		    rr__ring_peer_add(dev->set->ring, to->set->ring, &peer))
			continue;
		m = malloc(sizeof(*m));
		if (!m)
			continue; /* that group misses it: no worse than before */
		m->ev = *ev;
		rr__inbox_push(&to->inbox, &m->node);
		rr__ring_peer_ring(dev->set->ring, peer);
	}
	pthread_mutex_unlock(&shared_lock);
}

static void async_ready(void *ctx, int revents)
{
	struct rr__device *dev = ctx;
	struct ibv_async_event ev;

	if (revents < 0) {
		dev->async_slot = RR__NO_SLOT; /* counted in stats.poll_failures */
		return;
	}
	/* Held across the hook: a callback may put the last reference of
	 * its users, and this loop still reads the device. */
	dev->refs++;
	while (ibv_get_async_event(dev->ctx, &ev) == 0) {
		struct ibv_async_event copy = ev;

		/* Acknowledge first: destroying the QP or CQ named in the
		 * event waits for its acknowledgement, and the hook may well
		 * destroy it. */
		ibv_ack_async_event(&ev);
		forward(dev, &copy);
		handle_async(dev, &copy);
	}
	rr__device_put(dev);
}

/* The bell: events other bridges read for this one's devices. */
static void devices_bell(void *ctx)
{
	struct rr__devices *set = ctx;
	struct rr__list *l = set->devices.next;

	while (l != &set->devices) {
		struct rr__device *dev = rr__container_of(l, struct rr__device, link);

		dev->refs++;
		take_msgs(dev, handle_async);
		l = l->next;
		rr__device_put(dev); /* may free it: l is read first */
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

int rr__device_get(struct rr__devices *set, struct ibv_context *ctx, struct rr__device **out)
{
	struct rr__device *dev = device_find(set, ctx);
	int rc;

	if (dev) {
		if (dev->dead)
			return -ENODEV;
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
		rc = errno ? -errno : -ENOMEM;
		goto err_free;
	}
	dev->pd = dev->shared->pd;
	rc = rr__channel_create(set->cqs, ctx, &dev->channel);
	if (rc)
		goto err_pd;
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
	rr_channel_destroy(dev->channel);
err_pd:
	shared_put(dev->shared);
err_free:
	free(dev);
	return rc;
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
