// SPDX-License-Identifier: MIT
/*
 * rdma_cm through the ring: the bridge's event channel is polled like any
 * other fd; each event drives an endpoint or listener state machine:
 *
 *   active:  RESOLVING_ADDR -> RESOLVING_ROUTE -> CONNECTING -> CONNECTED
 *   passive: CONNECT_REQUEST -> ACCEPTING -> CONNECTED (then on_accept), at
 *            ESTABLISHED or at a receive that comes first
 *   both:    CONNECTED -> DISCONNECTING -> DISCONNECTED, or -> ERROR
 *
 * A listener with groups places each request on one of them instead: the
 * request's cm_id moves to the group's event channel at once (so nothing
 * of it is left on the listener's, which may go before the group takes
 * it), the request is pushed onto the group's inbox and the group's ring
 * is rung; the group's thread creates the QP on its own CQ and accepts.
 * Only the inbox and the connection count are touched by two threads.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "cm.h"
#include "cm_errno.h"

#define RESOLVE_TIMEOUT_MS 5000

/* An endpoint as the connection manager allocates it (every one is): what
 * only this layer keeps of it stands beside it, not in the endpoint. */
struct rr__cm_ep {
	rr_ep ep; /* first: the endpoint layer frees the whole as an rr_ep */
	/* A passive endpoint not yet established: its listener, for
	 * rr_ep_set_group() and the count of those dropped. */
	struct rr_listener *listener;
	/* The group rr_ep_set_group() chose, by identity: an index would
	 * name another group, or one past the end, once the hook removed
	 * one (NULL: none). */
	struct rr__cm *group_hint;
	/* Waits for an rdma_cm event on a channel whose poll was just lost:
	 * cm_lost() fails it (and only those it found, not one a callback
	 * made meanwhile, which the poll made for it serves). */
	bool lost;
	/* Placed on this bridge by a listener elsewhere: told when established. */
	rr_accept_cb group_accept;
	void *group_accept_data;
};

static void early_recv(rr_ep *ep);

static struct rr__cm_ep *cm_ep(rr_ep *ep)
{
	return rr__container_of(ep, struct rr__cm_ep, ep);
}

static uint8_t depth(unsigned int want, unsigned int cap)
{
	if (!want)
		want = 1;
	return (uint8_t)(want < cap ? want : cap);
}

/*
 * The connection's parameters; @req is the peer's request on the passive
 * side (NULL on the active side), whose offer bounds ours.
 */
static void conn_param(rr_ep *ep, const struct rdma_conn_param *req, struct rdma_conn_param *p)
{
	unsigned int init, resp;

	rr__device_rd_limits(ep->dev, &init, &resp);
	if (req) {
		/* rdma_cm turns the request's figures to our side: its
		 * initiator_depth is how many reads the peer serves. */
		init = req->initiator_depth < init ? req->initiator_depth : init;
		resp = req->responder_resources < resp ? req->responder_resources : resp;
	}
	memset(p, 0, sizeof(*p));
	p->private_data = ep->pdata_len ? ep->pdata : NULL;
	p->private_data_len = ep->pdata_len;
	ep->pdata_sent = true;
	/* A peer that offers 0 gets 0: it serves no READs, or makes none. */
	p->initiator_depth = depth(ep->opts.initiator_depth, init);
	p->responder_resources = depth(ep->opts.responder_resources, resp);
	p->retry_count = 7;
	p->rnr_retry_count = 7; /* infinite: a SEND waits for its RECV */
}

/* An active connect failed: report it once; the endpoint stays until
 * rr_ep_destroy(). A passive one is simply dropped (see rr__ep_to_error). */
static void connect_failed(rr_ep *ep, int status)
{
	rr__ep_to_error(ep, status);
}

static void pending_dropped(rr_ep *ep)
{
	cm_ep(ep)->listener->stats.dropped++;
	cm_ep(ep)->listener = NULL;
}

/* A request placed on a group, on its way there. */
struct rr__handoff {
	struct rr__inbox_node node; /* on the group's cm->inbox */
	struct rdma_cm_id *id;
	struct rdma_conn_param req; /* its private data: peer[] */
	struct rr_ep_opts opts;	    /* its private data: pdata[] */
	void *data;
	rr_accept_cb on_accept;
	void *accept_data;
	bool pdata_set;
	uint8_t pdata_len, peer_len;
	uint8_t pdata[RR_PRIVATE_DATA_ACCEPT_MAX];
	uint8_t peer[RR_PRIVATE_DATA_ACCEPT_MAX];
};

/* The group with the fewest connections placed and not yet gone, the
 * next one round robin on ties; or the one the request hook chose, if
 * the hook did not remove it after choosing it. */
static unsigned int choose_group(rr_listener *l, rr_ep *ep)
{
	unsigned int best = l->next_group % l->ngroups, best_n = UINT32_MAX;

	for (unsigned int k = 0; cm_ep(ep)->group_hint && k < l->ngroups; k++)
		if (l->groups[k].cm == cm_ep(ep)->group_hint)
			return k;
	for (unsigned int k = 0; k < l->ngroups; k++) {
		unsigned int g = (l->next_group + k) % l->ngroups;
		unsigned int n = atomic_load(&l->groups[g].cm->conns);

		if (n < best_n) {
			best = g;
			best_n = n;
		}
	}
	l->next_group = best + 1;
	return best;
}

/* Hand an accepted request over to a group; the temporary endpoint the
 * hook saw is gone afterwards, the id now belongs to the group. */
static void place(rr_listener *l, rr_ep *ep, struct rdma_cm_id *id,
		  const struct rdma_conn_param *req)
{
	struct rr__group *g = &l->groups[choose_group(l, ep)];
	struct rr__handoff *h = calloc(1, sizeof(*h));

	/* Events of the id until the group took it find no endpoint. */
	id->context = NULL;
	if (!h || rdma_migrate_id(id, g->cm->ch)) {
		id->context = ep;
		free(h);
		rdma_reject(id, NULL, 0);
		l->stats.dropped++;
		rr_ep_destroy(ep);
		return;
	}
	h->id = id;
	h->req = *req;
	h->opts = l->ep_opts;
	h->opts.private_data = NULL;
	h->opts.private_data_len = 0;
	h->opts.flags |= RR_EP_SHARED_CQ;
	h->data = ep->data_set || !g->data ? ep->data : g->data;
	h->on_accept = g->on_accept;
	h->accept_data = g->data;
	h->pdata_set = ep->pdata_set;
	h->pdata_len = ep->pdata_len;
	memcpy(h->pdata, ep->pdata, ep->pdata_len);
	h->peer_len = ep->peer_pdata_len;
	memcpy(h->peer, ep->peer_pdata, ep->peer_pdata_len);
	ep->id = NULL;
	rr_ep_destroy(ep);
	l->stats.placed++;
	atomic_fetch_add(&g->cm->conns, 1);
	rr__inbox_push(&g->cm->inbox, &h->node);
	switch (rr__ring_peer_ring(l->cm->ring, g->peer)) {
	case RR__BELL_MSG_RING:
		l->stats.bells_msg_ring++;
		break;
	case RR__BELL_EVENTFD:
		l->stats.bells_eventfd++;
		break;
	}
}

static void on_connect_request(struct rr__cm *cm, rr_listener *l, struct rdma_cm_id *id,
			       const struct rdma_conn_param *req, const uint8_t *pdata, size_t plen)
{
	struct rdma_conn_param p;
	rr_ep *ep;

	l->stats.requests++;
	if (!l->id || rr__ep_alloc(cm->eps, id, &l->ep_opts, sizeof(struct rr__cm_ep), &ep)) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		l->stats.dropped++;
		return;
	}
	rr__ep_set_peer_pdata(ep, pdata, plen);
	ep->state = RR__EP_ACCEPTING;
	if (!ep->data)
		ep->data = l->data;
	cm_ep(ep)->listener = l; /* for rr_ep_set_group() */
	if (l->on_request) {
		int rc;

		l->in_request = true;
		rc = rr__ep_request(ep, l->on_request, l, l->data);
		l->in_request = false;
		if (rc < 0)
			return; /* destroyed in the hook: its id went with it */
		if (rc) {
			/* Refused: not a drop, and no callback. Only what the
			 * hook set goes back, never the listener's acceptance. */
			l->stats.refused++;
			ep->pdata_sent = true;
			if (ep->pdata_set)
				rdma_reject(id, ep->pdata, ep->pdata_len);
			else
				rdma_reject(id, NULL, 0);
			rr_ep_destroy(ep);
			return;
		}
	}
	if (l->ngroups) {
		place(l, ep, id, req);
		return;
	}
	ep->on_drop = pending_dropped;
	rr__list_add_tail(&l->pending, &ep->pending_link);
	if (rr__ep_setup_qp(ep))
		goto drop;
	if (rr__ep_qp_ready(ep))
		return;		 /* destroyed (and freed) in on_qp_ready: nothing to touch */
	conn_param(ep, req, &p); /* after on_qp_ready, which may set our private data */
	if (rdma_accept(id, &p))
		goto drop;
	ep->on_early_recv = early_recv;
	return;
drop:
	rdma_reject(id, NULL, 0);
	l->stats.dropped++;
	rr_ep_destroy(ep);
}

static void accept_cb(void *ctx, rr_ep *ep)
{
	rr_listener *l = ctx;

	l->on_accept(l, ep, l->data);
}

/* Placed here by a listener of another thread: that listener is not ours
 * to hand out. */
static void group_accept_cb(void *ctx, rr_ep *ep)
{
	(void)ctx;
	cm_ep(ep)->group_accept(NULL, ep, cm_ep(ep)->group_accept_data);
}

/* Lost before ESTABLISHED: the group's loss (its conns go with the
 * destroy that follows). */
static void placed_dropped(rr_ep *ep)
{
	ep->set->stats->placed_dropped++;
}

static int cm_open(struct rr__cm *cm);

/* The group's side of a handoff: the id is on our channel already; as a
 * request of our own listener would. */
static void adopt(struct rr__cm *cm, struct rr__handoff *h)
{
	struct rdma_conn_param p;
	rr_ep *ep;

	if (cm->closing || rr__ep_alloc(cm->eps, h->id, &h->opts, sizeof(struct rr__cm_ep), &ep)) {
		rdma_reject(h->id, NULL, 0);
		rdma_destroy_id(h->id);
		atomic_fetch_sub(&cm->conns, 1);
		cm->stats->placed_dropped++;
		return;
	}
	ep->counter = &cm->conns;
	rr__ep_set_peer_pdata(ep, h->peer, h->peer_len);
	memcpy(ep->pdata, h->pdata, h->pdata_len);
	ep->pdata_len = h->pdata_len;
	ep->pdata_set = h->pdata_set;
	ep->state = RR__EP_ACCEPTING;
	ep->data = h->data;
	cm_ep(ep)->group_accept = h->on_accept;
	cm_ep(ep)->group_accept_data = h->accept_data;
	ep->on_drop = placed_dropped;
	if (rr__ep_setup_qp(ep))
		goto drop;
	if (rr__ep_qp_ready(ep))
		return; /* destroyed in on_qp_ready */
	conn_param(ep, &h->req, &p);
	if (rdma_accept(ep->id, &p))
		goto drop;
	ep->on_early_recv = early_recv;
	return;
drop:
	rdma_reject(ep->id, NULL, 0);
	cm->stats->placed_dropped++;
	rr_ep_destroy(ep);
}

static void inbox_ready(void *ctx)
{
	struct rr__cm *cm = ctx;
	struct rr__inbox_node *n = rr__inbox_take(&cm->inbox);

	while (n) {
		struct rr__handoff *h = rr__container_of(n, struct rr__handoff, node);

		n = n->next;
		adopt(cm, h);
		free(h);
	}
}
int rr__cm_group_open(struct rr__cm *cm)
{
	int rc = rr__ring_bell_open(cm->ring, inbox_ready, cm);

	if (rc)
		return rc;
	cm->group = true;
	/* Listeners move requests onto it: it must exist before the first
	 * one is placed. Without rdma_cm the group serves CQs only. */
	cm_open(cm);
	return 0;
}

int rr__cm_add_group(rr_listener *l, struct rr__cm *group, rr_accept_cb on_accept, void *data)
{
	struct rr__group *gs;
	uint32_t peer;
	int rc;

	if (!group->group || !on_accept)
		return -EINVAL;
	if (!l->id || !group->ch)
		return -ENODEV;
	for (unsigned int i = 0; i < l->ngroups; i++)
		if (l->groups[i].cm == group)
			return -EEXIST;
	rc = rr__ring_peer_add(l->cm->ring, group->ring, &peer);
	if (rc)
		return rc;
	gs = realloc(l->groups, (l->ngroups + 1) * sizeof(*gs));
	if (!gs)
		return -ENOMEM;
	gs[l->ngroups++] =
		(struct rr__group){.cm = group, .peer = peer, .on_accept = on_accept, .data = data};
	l->groups = gs;
	return 0;
}

int rr__cm_remove_group(rr_listener *l, struct rr__cm *group)
{
	for (unsigned int i = 0; i < l->ngroups; i++) {
		if (l->groups[i].cm != group)
			continue;
		/* What it was given is on its channel already: nothing to undo. */
		memmove(&l->groups[i], &l->groups[i + 1],
			(l->ngroups - i - 1) * sizeof(*l->groups));
		l->ngroups--;
		if (l->next_group > i)
			l->next_group--;
		return 0;
	}
	return -ENOENT;
}

int rr_ep_set_group(rr_ep *ep, unsigned int index)
{
	rr_listener *l = ep ? cm_ep(ep)->listener : NULL;

	if (!l || !l->in_request || index >= l->ngroups)
		return -EINVAL;
	cm_ep(ep)->group_hint = l->groups[index].cm;
	return 0;
}

/* Established: handed to the application from now on. */
static void established(rr_ep *ep)
{
	struct rr__cm_ep *ce = cm_ep(ep);
	rr_listener *l = ce->listener;

	ce->listener = NULL;
	ep->on_drop = NULL;
	ep->on_early_recv = NULL;
	rr__list_del(&ep->pending_link);
	if (ce->group_accept)
		rr__ep_established(ep, group_accept_cb, NULL);
	else
		rr__ep_established(ep, l ? accept_cb : NULL, l);
}

/*
 * A receive completed on an accepted endpoint before its ESTABLISHED: the
 * peer's QP is connected to ours and sends, while the CM's last word (the
 * RTU) is still on its way, which it may be on any fabric. The endpoint
 * is established now, as IBV_EVENT_COMM_EST would say; the CM is told so
 * (rdma_notify()), and its ESTABLISHED, when it comes, finds it done.
 */
static void early_recv(rr_ep *ep)
{
	rdma_notify(ep->id, IBV_EVENT_COMM_EST); /* an error: the RTU still comes */
	established(ep);
}

static void ep_event(struct rr__cm *cm, rr_ep *ep, enum rdma_cm_event_type type,
		     const uint8_t *pdata, size_t plen)
{
	struct rdma_conn_param p;

	/* An acceptance (CONNECTING: the active side) or a rejection says why. */
	if ((type == RDMA_CM_EVENT_ESTABLISHED && ep->state == RR__EP_CONNECTING) ||
	    type == RDMA_CM_EVENT_REJECTED)
		rr__ep_set_peer_pdata(ep, pdata, plen);

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
		if (!rc)
			conn_param(ep, NULL, &p);
		if (!rc && rdma_connect(ep->id, &p))
			rc = errno ? -errno : -ECONNABORTED;
		if (rc)
			connect_failed(ep, rc);
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		/* Not a passive endpoint a receive established already. */
		if (ep->state == RR__EP_CONNECTING || ep->state == RR__EP_ACCEPTING)
			established(ep);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		if (ep->state <= RR__EP_ACCEPTING)
			connect_failed(ep, rr__cm_event_errno(type));
		else
			rr__ep_to_error(ep, rr__cm_event_errno(type));
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (ep->state == RR__EP_ACCEPTING) {
			connect_failed(ep, -ECONNRESET);
		} else if (ep->state == RR__EP_CONNECTED || ep->state == RR__EP_DISCONNECTING ||
			   (ep->state == RR__EP_ERROR && ep->down_pending)) {
			int status = ep->state == RR__EP_DISCONNECTING ? 0 : -ECONNRESET;

			/* Moves our QP to error, so its work is flushed. */
			rdma_disconnect(ep->id);
			rr__ep_down(ep, status);
		}
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		if (ep->dev)
			rr__device_kill(ep->dev); /* held by ep: not freed here */
		rr__ep_to_error(ep, -ENODEV);
		break;
	default:
		break; /* TIMEWAIT_EXIT, ADDR_CHANGE, ...: nothing to do */
	}
}

/* Free a destroyed listener once no walk of the library holds it. */
static void listener_put(rr_listener *l)
{
	if (!--l->busy && l->destroyed) {
		free(l->groups);
		free(l);
	}
}

/* A listener that can no longer accept: its pending connections are
 * dropped, its id destroyed (a device removal waits for that), and the
 * application told once. It stays until rr_listener_destroy(). Held
 * throughout: a flush callback of a dropped connection, or on_error,
 * may destroy it. */
static void listener_lost(rr_listener *l, int status)
{
	if (!l->id)
		return;
	l->busy++;
	while (!rr__list_empty(&l->pending)) {
		rr_ep *ep = rr__container_of(l->pending.next, rr_ep, pending_link);

		l->stats.dropped++;
		rr_ep_destroy(ep);
	}
	if (l->id) { /* not destroyed by a flush callback meanwhile */
		rdma_destroy_id(l->id);
		l->id = NULL;
		if (l->on_error)
			l->on_error(l, status, l->data);
	}
	listener_put(l);
}

static void listener_event(rr_listener *l, enum rdma_cm_event_type type)
{
	if (type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
		/* Nothing of this bridge may keep the device from going.
		 * Held: the kill's callbacks may destroy the listener. */
		l->busy++;
		if (l->id && l->id->verbs)
			rr__devices_kill(l->cm->devs, l->id->verbs);
		listener_lost(l, -ENODEV);
		listener_put(l);
	}
	/* Listener ids get no other event worth acting on. */
}

/* The event channel's poll could not be kept alive: nothing that still
 * waits for an rdma_cm event may wait forever. */
static void cm_lost(struct rr__cm *cm, int status)
{
	struct rr__list *e;

	cm->slot = RR__NO_SLOT;
	for (e = cm->listeners.next; e != &cm->listeners; e = e->next) {
		rr_listener *l = rr__container_of(e, rr_listener, link);

		l->lost = l->id != NULL;
	}
again_listeners:
	/* From the start each time: on_error may destroy any listener, or
	 * listen again (a new one, which the poll made for it serves). */
	for (e = cm->listeners.next; e != &cm->listeners; e = e->next) {
		rr_listener *l = rr__container_of(e, rr_listener, link);

		if (l->lost) {
			l->lost = false;
			listener_lost(l, status);
			goto again_listeners;
		}
	}
	for (e = cm->eps->eps.next; e != &cm->eps->eps; e = e->next) {
		rr_ep *ep = rr__container_of(e, rr_ep, link);

		cm_ep(ep)->lost = ep->state < RR__EP_CONNECTED;
	}
again:
	for (e = cm->eps->eps.next; e != &cm->eps->eps; e = e->next) {
		rr_ep *ep = rr__container_of(e, rr_ep, link);

		if (cm_ep(ep)->lost) {
			cm_ep(ep)->lost = false;
			rr__ep_to_error(ep, status);
			goto again; /* a callback may have destroyed any endpoint */
		}
	}
}

static void cm_ready(void *ctx, int revents)
{
	struct rr__cm *cm = ctx;
	struct rdma_cm_event *ev;

	if (revents < 0) {
		cm_lost(cm, revents);
		return;
	}
	while (!cm->closing && rdma_get_cm_event(cm->ch, &ev) == 0) {
		enum rdma_cm_event_type type = ev->event;
		struct rdma_cm_id *id = ev->id;
		struct rdma_cm_id *listen_id = ev->listen_id;
		struct rdma_conn_param req = ev->param.conn;
		uint8_t pdata[RR_PRIVATE_DATA_ACCEPT_MAX];
		size_t plen = 0;

		/* The private data goes with ev: copied first. */
		if ((type == RDMA_CM_EVENT_CONNECT_REQUEST || type == RDMA_CM_EVENT_ESTABLISHED ||
		     type == RDMA_CM_EVENT_REJECTED) &&
		    req.private_data) {
			plen = req.private_data_len < sizeof(pdata) ? req.private_data_len
								    : sizeof(pdata);
			memcpy(pdata, req.private_data, plen);
		}
		req.private_data = NULL;

		/* Whose it is, read before the acknowledgement: an id placed
		 * on a group (context NULL) belongs to the group's thread as
		 * soon as this event is acknowledged (rdma_migrate_id() waits
		 * for that), and must not be touched here afterwards. */
		void *owner = type == RDMA_CM_EVENT_CONNECT_REQUEST ? NULL : id->context;

		/* Acknowledge before acting: destroying an id waits for the
		 * acknowledgement of its events. */
		rdma_ack_cm_event(ev);
		cm->stats->cm_events++;
		if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			on_connect_request(cm, listen_id->context, id, &req, pdata, plen);
			continue;
		}
		if (!owner)
			continue;
		if (*(uint32_t *)owner == RR__OBJ_EP)
			ep_event(cm, owner, type, pdata, plen);
		else if (*(uint32_t *)owner == RR__OBJ_LISTENER)
			listener_event(owner, type);
	}
}

void rr__cm_init(struct rr__cm *cm, struct rr__ring *ring, struct rr__devices *devs,
		 struct rr__eps *eps, struct rr_bridge_stats *stats)
{
	*cm = (struct rr__cm){
		.ring = ring, .devs = devs, .eps = eps, .stats = stats, .slot = RR__NO_SLOT};
	rr__list_init(&cm->listeners);
}

/* Created on first use: a bridge that only dispatches CQs needs no rdma_cm. */
static int cm_open(struct rr__cm *cm)
{
	int rc;

	/* A channel whose poll was given up (cm_lost()) is polled again for
	 * each new user: its events would otherwise go unheard, and if the
	 * fd is still broken, the poll fails again and says so to them. */
	if (cm->ch && cm->slot == RR__NO_SLOT)
		return rr__poll_add(cm->ring, cm->ch->fd, cm_ready, cm, &cm->slot);
	if (cm->ch)
		return 0;
	cm->ch = rdma_create_event_channel();
	if (!cm->ch)
		return errno ? -errno : -ENODEV;
	rc = rr__set_nonblock(cm->ch->fd);
	if (!rc)
		rc = rr__poll_add(cm->ring, cm->ch->fd, cm_ready, cm, &cm->slot);
	if (rc) {
		rdma_destroy_event_channel(cm->ch);
		cm->ch = NULL;
	}
	return rc;
}

void rr__cm_fini(struct rr__cm *cm)
{
	cm->closing = true;
	while (!rr__list_empty(&cm->listeners))
		rr_listener_destroy(rr__container_of(cm->listeners.next, rr_listener, link));
	if (cm->group) {
		/* Requests placed here and never taken are refused. */
		rr__ring_bell_close(cm->ring, inbox_ready, cm);
		inbox_ready(cm);
	}
	rr__poll_close(cm->ring, cm->slot);
	cm->slot = RR__NO_SLOT;
	if (cm->ch)
		rdma_destroy_event_channel(cm->ch);
	cm->ch = NULL;
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

static void connect_timeout(void *ctx, int res)
{
	rr_ep *ep = ctx;

	ep->timer_slot = RR__NO_SLOT; /* fired: the slot is gone */
	if (ep->state < RR__EP_CONNECTED)
		connect_failed(ep, -ETIMEDOUT);
}

int rr__cm_connect(struct rr__cm *cm, const char *host, uint16_t port,
		   const struct rr_ep_opts *opts, rr_ep_cb on_connect, rr_ep **out)
{
	struct rdma_addrinfo *ai = NULL;
	struct rdma_cm_id *id;
	rr_ep *ep;
	int rc;

	if (!host || !port || !on_connect || !out ||
	    (opts && opts->private_data_len > RR_PRIVATE_DATA_CONNECT_MAX))
		return -EINVAL;
	rc = cm_open(cm);
	if (rc)
		return rc;
	rc = lookup(host, port, 0, &ai);
	if (rc)
		return rc;
	if (!ai->ai_dst_addr) {
		rc = -EINVAL;
		goto err_ai;
	}
	if (rdma_create_id(cm->ch, &id, NULL, RDMA_PS_TCP)) {
		rc = errno ? -errno : -ENOMEM;
		goto err_ai;
	}
	rc = rr__ep_alloc(cm->eps, id, opts, sizeof(struct rr__cm_ep), &ep);
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
		rc = rr__timer_add(cm->ring, ep->opts.connect_timeout_ms, connect_timeout, ep,
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

int rr__cm_listen(struct rr__cm *cm, const char *host, uint16_t port,
		  const struct rr_ep_opts *ep_opts, rr_accept_cb on_accept, void *data,
		  rr_listener **out)
{
	struct rdma_addrinfo *ai = NULL;
	rr_listener *l;
	int rc;

	if (!on_accept || !out ||
	    (ep_opts && (ep_opts->private_data_len > RR_PRIVATE_DATA_ACCEPT_MAX ||
			 (ep_opts->private_data_len && !ep_opts->private_data))))
		return -EINVAL;
	rc = cm_open(cm);
	if (rc)
		return rc;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->type = RR__OBJ_LISTENER;
	l->cm = cm;
	rr__list_init(&l->pending);
	l->on_accept = on_accept;
	l->data = data;
	if (ep_opts)
		l->ep_opts = *ep_opts;
	if (l->ep_opts.private_data_len)
		memcpy(l->pdata, l->ep_opts.private_data, l->ep_opts.private_data_len);
	l->ep_opts.private_data = l->pdata;
	rc = lookup(host, port, 1, &ai);
	if (rc)
		goto err_free;
	if (rdma_create_id(cm->ch, &l->id, l, RDMA_PS_TCP)) {
		rc = errno ? -errno : -ENOMEM;
		goto err_ai;
	}
	if (rdma_bind_addr(l->id, ai->ai_src_addr) || rdma_listen(l->id, 128)) {
		rc = errno ? -errno : -EADDRINUSE;
		goto err_id;
	}
	rdma_freeaddrinfo(ai);
	rr__list_add_tail(&cm->listeners, &l->link);
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
	if (!l->id || !l->id->verbs)
		return -ENODEV;
	rc = rr__device_get(l->cm->devs, l->id->verbs, &dev);
	if (rc)
		return rc;
	/* The PD stays while the device lives; no reference is kept. */
	mr = ibv_reg_mr(dev->pd, buf, len, access | IBV_ACCESS_LOCAL_WRITE);
	rc = mr ? 0 : errno ? -errno : -ENOMEM;
	rr__device_put(dev);
	if (rc)
		return rc;
	*out = mr;
	return 0;
}

uint16_t rr_listener_port(const rr_listener *l)
{
	return l->id ? be16toh(rdma_get_src_port(l->id)) : 0;
}

int rr_listener_get_stats(const rr_listener *l, struct rr_listener_stats *out, size_t size)
{
	if (!l)
		return -EINVAL;
	return rr__stats_out(out, size, &l->stats, sizeof(l->stats));
}

void rr_listener_set_on_error(rr_listener *l, rr_listener_cb on_error)
{
	l->on_error = on_error;
}

void rr_listener_set_on_request(rr_listener *l, rr_request_cb on_request)
{
	l->on_request = on_request;
}

int rr_listener_destroy(rr_listener *l)
{
	if (!l)
		return 0;
	if (l->in_request)
		return -EBUSY; /* from its own request hook */
	if (l->destroyed)
		return 0; /* from a flush callback of its own destroy */
	l->destroyed = true;
	l->lost = false;
	l->on_error = NULL;
	/* Connections still being accepted die with their listener; their
	 * flush callbacks may destroy it again (a no-op, above). */
	l->busy++;
	while (!rr__list_empty(&l->pending))
		rr_ep_destroy(rr__container_of(l->pending.next, rr_ep, pending_link));
	rr__list_del(&l->link);
	if (l->id)
		rdma_destroy_id(l->id);
	l->id = NULL;
	listener_put(l); /* freed here unless a walk of ours holds it */
	return 0;
}
