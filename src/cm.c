// SPDX-License-Identifier: MIT
/*
 * rdma_cm through the ring: the bridge's event channel is polled like any
 * other fd; each event drives an endpoint or listener state machine:
 *
 *   active:  RESOLVING_ADDR -> RESOLVING_ROUTE -> CONNECTING -> CONNECTED
 *   passive: CONNECT_REQUEST -> ACCEPTING -> CONNECTED (then on_accept)
 *   both:    CONNECTED -> DISCONNECTING -> DISCONNECTED, or -> ERROR
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define RESOLVE_TIMEOUT_MS 5000

static int event_errno(enum rdma_cm_event_type t)
{
	switch (t) {
	case RDMA_CM_EVENT_REJECTED:
		return -ECONNREFUSED;
	case RDMA_CM_EVENT_UNREACHABLE:
		return -EHOSTUNREACH;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return -EADDRNOTAVAIL;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return -ENODEV;
	case RDMA_CM_EVENT_CONNECT_ERROR:
	default:
		return -ECONNABORTED;
	}
}

static void conn_param(struct rdma_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7; /* infinite: a SEND waits for its RECV */
}

/* An active connect failed: report it once; the endpoint stays until
 * rr_ep_destroy(). A passive one is simply dropped (see rr__ep_to_error). */
static void connect_failed(rr_ep *ep, int status)
{
	rr__ep_to_error(ep, status);
}

static void on_connect_request(rr_bridge *b, rr_listener *l, struct rdma_cm_id *id)
{
	struct rdma_conn_param p;
	rr_ep *ep;

	if (rr__ep_alloc(b, id, &l->ep_opts, &ep)) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		l->dropped++;
		return;
	}
	ep->listener = l;
	ep->state = RR__EP_ACCEPTING;
	if (!ep->data)
		ep->data = l->data;
	conn_param(&p);
	if (rr__ep_setup_qp(ep))
		goto drop;
	if (rr__ep_qp_ready(ep))
		return; /* destroyed (and freed) in on_qp_ready: nothing to touch */
	if (rdma_accept(id, &p))
		goto drop;
	return;
drop:
	rdma_reject(id, NULL, 0);
	l->dropped++;
	rr_ep_destroy(ep);
}

static void ep_event(rr_ep *ep, enum rdma_cm_event_type type)
{
	struct rdma_conn_param p;
	rr_listener *l;

	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (ep->state != RR__EP_RESOLVING_ADDR)
			break;
		ep->state = RR__EP_RESOLVING_ROUTE;
		if (rdma_resolve_route(ep->id, RESOLVE_TIMEOUT_MS))
			connect_failed(ep, errno ? -errno : -EADDRNOTAVAIL);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED: {
		int rc;

		if (ep->state != RR__EP_RESOLVING_ROUTE)
			break;
		ep->state = RR__EP_CONNECTING;
		rc = rr__ep_setup_qp(ep);
		if (!rc && rr__ep_qp_ready(ep))
			break; /* destroyed in on_qp_ready */
		conn_param(&p);
		if (!rc && rdma_connect(ep->id, &p))
			rc = errno ? -errno : -ECONNABORTED;
		if (rc)
			connect_failed(ep, rc);
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		if (ep->state != RR__EP_CONNECTING && ep->state != RR__EP_ACCEPTING)
			break;
		ep->state = RR__EP_CONNECTED;
		rr__ep_stop_timer(ep);
		l = ep->listener;
		ep->listener = NULL;
		ep->in_callback++;
		if (l)
			l->on_accept(l, ep, l->data);
		else if (ep->on_connect)
			ep->on_connect(ep, 0, ep->data);
		ep->in_callback--;
		if (ep->destroy_pending && !ep->in_callback)
			rr__ep_free(ep);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		if (ep->state <= RR__EP_ACCEPTING)
			connect_failed(ep, event_errno(type));
		else
			rr__ep_to_error(ep, event_errno(type));
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (ep->state == RR__EP_ACCEPTING) {
			connect_failed(ep, -ECONNRESET);
		} else if (ep->state == RR__EP_CONNECTED || ep->state == RR__EP_DISCONNECTING) {
			int status = ep->state == RR__EP_DISCONNECTING ? 0 : -ECONNRESET;

			/* Moves our QP to error, so its work is flushed. */
			rdma_disconnect(ep->id);
			rr__ep_down(ep, status);
		}
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		if (ep->dev)
			ep->dev->dead = true;
		rr__ep_to_error(ep, -ENODEV);
		break;
	default:
		break; /* TIMEWAIT_EXIT, ADDR_CHANGE, ...: nothing to do */
	}
}

static void cm_ready(rr_bridge *b, void *ctx, int revents)
{
	struct rdma_cm_event *ev;

	if (revents < 0)
		return;
	while (!b->closing && rdma_get_cm_event(b->cm_ch, &ev) == 0) {
		enum rdma_cm_event_type type = ev->event;
		struct rdma_cm_id *id = ev->id;
		struct rdma_cm_id *listen_id = ev->listen_id;

		/* Acknowledge before acting: destroying an id waits for the
		 * acknowledgement of its events. */
		rdma_ack_cm_event(ev);
		b->stats.cm_events++;
		if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			on_connect_request(b, listen_id->context, id);
			continue;
		}
		if (!id->context)
			continue;
		if (*(uint32_t *)id->context == RR__OBJ_EP)
			ep_event(id->context, type);
		/* Listener ids get no other event worth acting on. */
	}
}

/* Created on first use: a bridge that only dispatches CQs needs no rdma_cm. */
int rr__cm_init(rr_bridge *b)
{
	int rc;

	if (b->cm_ch)
		return 0;
	b->cm_ch = rdma_create_event_channel();
	if (!b->cm_ch)
		return errno ? -errno : -ENODEV;
	rc = rr__set_nonblock(b->cm_ch->fd);
	if (!rc)
		rc = rr__poll_add(b, b->cm_ch->fd, cm_ready, NULL, &b->cm_slot);
	if (rc) {
		rdma_destroy_event_channel(b->cm_ch);
		b->cm_ch = NULL;
	}
	return rc;
}

void rr__cm_fini(rr_bridge *b)
{
	rr__poll_close(b, b->cm_slot);
	b->cm_slot = RR__NO_SLOT;
	if (b->cm_ch)
		rdma_destroy_event_channel(b->cm_ch);
	b->cm_ch = NULL;
}

static int lookup(const char *host, uint16_t port, int passive, struct rdma_addrinfo **res)
{
	struct rdma_addrinfo hints = {0};
	char ps[8];
	int rc;

	hints.ai_port_space = RDMA_PS_TCP;
	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	snprintf(ps, sizeof(ps), "%u", port);
	rc = rdma_getaddrinfo(host, ps, &hints, res);
	if (rc)
		return rc == -1 && errno ? -errno : -EINVAL;
	return 0;
}

static void connect_timeout(rr_bridge *b, void *ctx, int res)
{
	rr_ep *ep = ctx;

	ep->timer_slot = RR__NO_SLOT; /* fired: the slot is gone */
	if (ep->state < RR__EP_CONNECTED)
		connect_failed(ep, -ETIMEDOUT);
}

int rr_connect(rr_bridge *b, const char *host, uint16_t port, const struct rr_ep_opts *opts,
	       rr_ep_cb on_connect, rr_ep **out)
{
	struct rdma_addrinfo *ai = NULL;
	struct rdma_cm_id *id;
	rr_ep *ep;
	int rc;

	if (!b || !host || !port || !on_connect || !out || b->closing)
		return -EINVAL;
	rc = rr__cm_init(b);
	if (rc)
		return rc;
	rc = lookup(host, port, 0, &ai);
	if (rc)
		return rc;
	if (!ai->ai_dst_addr) {
		rc = -EINVAL;
		goto err_ai;
	}
	if (rdma_create_id(b->cm_ch, &id, NULL, RDMA_PS_TCP)) {
		rc = errno ? -errno : -ENOMEM;
		goto err_ai;
	}
	rc = rr__ep_alloc(b, id, opts, &ep);
	if (rc) {
		rdma_destroy_id(id);
		goto err_ai;
	}
	ep->on_connect = on_connect;
	ep->state = RR__EP_RESOLVING_ADDR;
	if (rdma_resolve_addr(id, ai->ai_src_addr, ai->ai_dst_addr, RESOLVE_TIMEOUT_MS)) {
		rc = errno ? -errno : -EADDRNOTAVAIL;
		ep->on_connect = NULL; /* a failed call never calls back */
		rr_ep_destroy(ep);
		goto err_ai;
	}
	if (ep->opts.connect_timeout_ms) {
		rc = rr__timer_add(b, ep->opts.connect_timeout_ms, connect_timeout, ep,
				   &ep->timer_slot);
		if (rc) {
			ep->on_connect = NULL;
			rr_ep_destroy(ep);
			goto err_ai;
		}
	}
	rdma_freeaddrinfo(ai);
	*out = ep;
	return 0;

err_ai:
	rdma_freeaddrinfo(ai);
	return rc;
}

int rr_listen(rr_bridge *b, const char *host, uint16_t port, const struct rr_ep_opts *ep_opts,
	      rr_accept_cb on_accept, void *data, rr_listener **out)
{
	struct rdma_addrinfo *ai = NULL;
	rr_listener *l;
	int rc;

	if (!b || !on_accept || !out || b->closing)
		return -EINVAL;
	rc = rr__cm_init(b);
	if (rc)
		return rc;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->type = RR__OBJ_LISTENER;
	l->b = b;
	l->on_accept = on_accept;
	l->data = data;
	if (ep_opts)
		l->ep_opts = *ep_opts;
	rc = lookup(host, port, 1, &ai);
	if (rc)
		goto err_free;
	if (rdma_create_id(b->cm_ch, &l->id, l, RDMA_PS_TCP)) {
		rc = errno ? -errno : -ENOMEM;
		goto err_ai;
	}
	if (rdma_bind_addr(l->id, ai->ai_src_addr) || rdma_listen(l->id, 128)) {
		rc = errno ? -errno : -EADDRINUSE;
		goto err_id;
	}
	rdma_freeaddrinfo(ai);
	rr__list_add_tail(&b->listeners, &l->link);
	*out = l;
	return 0;

err_id:
	rdma_destroy_id(l->id);
err_ai:
	rdma_freeaddrinfo(ai);
err_free:
	free(l);
	return rc;
}

int rr_listener_reg_mr(rr_listener *l, void *buf, size_t len, int access, struct ibv_mr **out)
{
	struct rr__device *dev;
	struct ibv_mr *mr;
	int rc;

	if (!l || !buf || !len || !out)
		return -EINVAL;
	if (!l->id->verbs)
		return -ENODEV;
	rc = rr__device_get(l->b, l->id->verbs, &dev);
	if (rc)
		return rc;
	mr = ibv_reg_mr(dev->pd, buf, len, access | IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return errno ? -errno : -ENOMEM;
	*out = mr;
	return 0;
}

uint16_t rr_listener_port(const rr_listener *l)
{
	return be16toh(rdma_get_src_port(l->id));
}

int rr_listener_destroy(rr_listener *l)
{
	rr_bridge *b;
	struct rr__list *e, *next;

	if (!l)
		return 0;
	b = l->b;
	/* Connections still being accepted die with their listener. */
	for (e = b->eps.next; e != &b->eps; e = next) {
		rr_ep *ep = rr__container_of(e, rr_ep, link);

		next = e->next;
		if (ep->listener == l)
			rr_ep_destroy(ep);
	}
	rr__list_del(&l->link);
	rdma_destroy_id(l->id);
	free(l);
	return 0;
}
