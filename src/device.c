// SPDX-License-Identifier: MIT
/*
 * Devices: for each ibv_context the bridge uses, one protection domain, one
 * shared completion channel, and the context's async-event fd polled in the
 * ring.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static rr_ep *ep_of_qp(rr_bridge *b, struct ibv_qp *qp)
{
	struct rr__list *l;

	for (l = b->eps.next; l != &b->eps; l = l->next) {
		rr_ep *ep = rr__container_of(l, rr_ep, link);

		if (ep->id && ep->id->qp == qp)
			return ep;
	}
	return NULL;
}

static rr_ep *ep_of_cq(rr_bridge *b, struct ibv_cq *cq)
{
	struct rr__list *l;

	for (l = b->eps.next; l != &b->eps; l = l->next) {
		rr_ep *ep = rr__container_of(l, rr_ep, link);

		if (ep->cq && ep->cq->cq == cq)
			return ep;
	}
	return NULL;
}

/* Fatal device: every endpoint on it goes to error. */
static void device_fatal(struct rr__device *dev, int status)
{
	rr_bridge *b = dev->b;
	struct rr__list *l;

	dev->dead = true;
	/* A callback may destroy any endpoint: start over after each one.
	 * Endpoints already in error are skipped, so this ends. */
again:
	for (l = b->eps.next; l != &b->eps; l = l->next) {
		rr_ep *ep = rr__container_of(l, rr_ep, link);

		if (ep->dev == dev && ep->state != RR__EP_ERROR &&
		    ep->state != RR__EP_DISCONNECTED) {
			rr__ep_to_error(ep, status);
			goto again;
		}
	}
}

static void async_ready(rr_bridge *b, void *ctx, int revents)
{
	struct rr__device *dev = ctx;
	struct ibv_async_event ev;

	if (revents < 0)
		return;
	while (ibv_get_async_event(dev->ctx, &ev) == 0) {
		struct ibv_async_event copy = ev;
		rr_ep *ep = NULL;

		/* Acknowledge first: destroying the QP or CQ named in the
		 * event waits for its acknowledgement, and a callback below
		 * may well destroy it. */
		ibv_ack_async_event(&ev);
		b->stats.async_events++;
		if (b->opts.on_async_event)
			b->opts.on_async_event(b, &copy, b->opts.data);
		switch (copy.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_PATH_MIG_ERR:
			ep = ep_of_qp(b, copy.element.qp);
			if (ep)
				rr__ep_to_error(ep, -EIO);
			break;
		case IBV_EVENT_CQ_ERR:
			ep = ep_of_cq(b, copy.element.cq);
			if (ep)
				rr__ep_to_error(ep, -EIO);
			break;
		case IBV_EVENT_DEVICE_FATAL:
			device_fatal(dev, -EIO);
			rr__device_release_if_unused(dev);
			return; /* dev may be gone */
		default:
			break;
		}
	}
}

int rr__device_get(rr_bridge *b, struct ibv_context *ctx, struct rr__device **out)
{
	struct rr__list *l;
	struct rr__device *dev;
	int rc;

	for (l = b->devices.next; l != &b->devices; l = l->next) {
		dev = rr__container_of(l, struct rr__device, link);
		if (dev->ctx == ctx) {
			*out = dev;
			return dev->dead ? -ENODEV : 0;
		}
	}
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->b = b;
	dev->ctx = ctx;
	dev->async_slot = RR__NO_SLOT;
	dev->pd = ibv_alloc_pd(ctx);
	if (!dev->pd) {
		rc = errno ? -errno : -ENOMEM;
		goto err_free;
	}
	rc = rr_channel_create(b, ctx, &dev->channel);
	if (rc)
		goto err_pd;
	rc = rr__set_nonblock(ctx->async_fd);
	if (!rc)
		rc = rr__poll_add(b, ctx->async_fd, async_ready, dev, &dev->async_slot);
	if (rc)
		goto err_channel;
	rr__list_add_tail(&b->devices, &dev->link);
	*out = dev;
	return 0;

err_channel:
	rr_channel_destroy(dev->channel);
err_pd:
	ibv_dealloc_pd(dev->pd);
err_free:
	free(dev);
	return rc;
}

static void device_free(struct rr__device *dev)
{
	rr__list_del(&dev->link);
	rr__poll_close(dev->b, dev->async_slot);
	dev->channel->ncqs = 0;
	rr_channel_destroy(dev->channel);
	/* Fails (EBUSY) only while the application still holds MRs in this
	 * PD; verbs then frees it with the context. */
	ibv_dealloc_pd(dev->pd);
	free(dev);
}

void rr__device_destroy_all(rr_bridge *b)
{
	while (!rr__list_empty(&b->devices))
		device_free(rr__container_of(b->devices.next, struct rr__device, link));
}

/* A removed device is gone for good: once nothing of ours uses it, let go
 * of its PD, channel and async fd, so the kernel can finish the removal. */
void rr__device_release_if_unused(struct rr__device *dev)
{
	rr_bridge *b = dev->b;
	struct rr__list *l;

	if (!dev->dead || dev->channel->ncqs)
		return;
	for (l = b->eps.next; l != &b->eps; l = l->next)
		if (rr__container_of(l, rr_ep, link)->dev == dev)
			return;
	device_free(dev);
}
