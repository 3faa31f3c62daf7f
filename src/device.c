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

/* The process's PDs, one per context, counted over the bridges using it. */
struct shared_pd {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	unsigned int refs;
	struct shared_pd *next;
};

static pthread_mutex_t pds_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared_pd *pds;

static struct ibv_pd *pd_get(struct ibv_context *ctx)
{
	struct shared_pd *s;
	struct ibv_pd *pd = NULL;

	pthread_mutex_lock(&pds_lock);
	for (s = pds; s && s->ctx != ctx; s = s->next) {
	}
	if (!s && (s = calloc(1, sizeof(*s)))) {
		s->ctx = ctx;
		s->pd = ibv_alloc_pd(ctx);
		if (s->pd) {
			s->next = pds;
			pds = s;
		} else {
			free(s);
			s = NULL;
		}
	} else if (!s) {
		errno = ENOMEM;
	}
	if (s) {
		s->refs++;
		pd = s->pd;
	}
	pthread_mutex_unlock(&pds_lock);
	return pd;
}

static void pd_put(struct ibv_pd *pd)
{
	struct shared_pd **p, *s;

	pthread_mutex_lock(&pds_lock);
	for (p = &pds; (s = *p) && s->pd != pd; p = &s->next) {
	}
	if (s && !--s->refs) {
		*p = s->next;
		/* Fails (EBUSY) only while the application still holds MRs
		 * in this PD; verbs then frees it with the context. */
		ibv_dealloc_pd(pd);
		free(s);
	}
	pthread_mutex_unlock(&pds_lock);
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
	rr__list_del(&dev->link);
	rr__poll_close(dev->set->ring, dev->async_slot);
	dev->channel->ncqs = 0;
	rr_channel_destroy(dev->channel);
	pd_put(dev->pd);
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
		dev->set->stats->async_events++;
		if (copy.event_type == IBV_EVENT_DEVICE_FATAL)
			dev->dead = true;
		if (dev->set->on_async)
			dev->set->on_async(dev->set->hook_ctx, dev, &copy);
	}
	rr__device_put(dev);
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
	dev->pd = pd_get(ctx);
	if (!dev->pd) {
		rc = errno ? -errno : -ENOMEM;
		goto err_free;
	}
	rc = rr__channel_create(set->cqs, ctx, &dev->channel);
	if (rc)
		goto err_pd;
	rc = rr__set_nonblock(ctx->async_fd);
	if (!rc)
		rc = rr__poll_add(set->ring, ctx->async_fd, async_ready, dev, &dev->async_slot);
	if (rc)
		goto err_channel;
	rr__list_add_tail(&set->devices, &dev->link);
	dev->refs = 1;
	*out = dev;
	return 0;

err_channel:
	rr_channel_destroy(dev->channel);
err_pd:
	pd_put(dev->pd);
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
