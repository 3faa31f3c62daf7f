// SPDX-License-Identifier: MIT
/* An in-process rdma_cm over the fake device; see fake_cm.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_cm.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#else
/* Pointers no one can follow, fds no one can read. */
#define POISON(p, n) memset(p, 0x5a, n)
#endif

#define CH_MAGIC   0x63684348u
#define ID_MAGIC   0x69644944u
#define WAIT_MS	   2000
#define REQ_PDATA  56
#define REP_PDATA  196
#define REJ_PDATA  148
#define REJ_NO_SVC 8  /* IB_CM_REJ_INVALID_SERVICE_ID */
#define REJ_USER   28 /* IB_CM_REJ_CONSUMER_DEFINED */

#define container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

struct fake_ev;

struct fake_cm_ch {
	uint32_t magic;
	bool dead;
	int wfd;
	struct fake_ev *head, **tail;
	struct fake_cm_ch *all;
	struct rdma_event_channel ch; /* last: poisoned when destroyed */
};

enum id_state {
	ID_IDLE,
	ID_BOUND,
	ID_LISTEN,
	ID_ADDR_RESOLVED,
	ID_ROUTE_RESOLVED,
	ID_CONNECT,  /* active: request sent */
	ID_REQ_RCVD, /* passive: request not answered */
	ID_ESTABLISHED,
	ID_DISCONNECTED,
	ID_REJECTED,
};

struct fake_id {
	uint32_t magic;
	bool dead;	  /* rdma_destroy_id() done */
	bool kernel_gone; /* its channel was closed: the kernel's side is gone */
	struct fake_id *all;
	struct fake_cm_ch *ch;
	enum id_state state;
	struct fake_id *peer;
	uint32_t addr; /* host order; INADDR_ANY: wildcard */
	uint16_t port;
	unsigned int reported, acked; /* events read and acknowledged */
	bool rtu_due;		      /* passive: its ESTABLISHED is held back */
	struct rdma_cm_id id;	      /* last: poisoned when destroyed */
};

struct fake_ev {
	struct fake_ev *next;
	struct fake_id *owner;
	uint8_t pdata[256];
	struct rdma_cm_event ev;
};

static struct fake_cm_ch *chans;
static struct fake_id *ids;
static bool rtu_late; /* fake_cm_rtu_late() */
unsigned int fake_notifies;
static uint16_t next_port = 32768;
static pthread_cond_t acked_cv = PTHREAD_COND_INITIALIZER;

static void die(const char *what, const char *why)
{
	fprintf(stderr, "fake_cm: %s: %s\n", what, why);
	fflush(stderr);
	abort();
}

static struct fake_cm_ch *chan(struct rdma_event_channel *ch, const char *what)
{
	struct fake_cm_ch *c;

	if (!ch)
		die(what, "NULL event channel");
	c = container_of(ch, struct fake_cm_ch, ch);
	if (c->magic != CH_MAGIC)
		die(what, "not an event channel of the fake");
	if (c->dead)
		die(what, "event channel already destroyed (use after free in librdmacm)");
	return c;
}

/* Every call on an id checks it, and the channel it lives on. */
static struct fake_id *fid(struct rdma_cm_id *id, const char *what)
{
	struct fake_id *f;

	if (!id)
		die(what, "NULL id");
	f = container_of(id, struct fake_id, id);
	if (f->magic != ID_MAGIC)
		die(what, "not an rdma_cm id of the fake");
	if (f->dead)
		die(what, "id already destroyed (use after free in librdmacm)");
	if (f->ch->dead)
		die(what, "the id's event channel was destroyed (use after free in librdmacm)");
	return f;
}

static int fail(int e)
{
	errno = e;
	return -1;
}

static void drain_byte(struct fake_cm_ch *c)
{
	char b;

	if (c->wfd < 0) {
		/* Hung up: bytes written before are read, later events had none. */
		if (read(c->ch.fd, &b, 1) < 0)
			die("event channel", "read of a hung-up channel failed");
		return;
	}
	if (read(c->ch.fd, &b, 1) != 1)
		die("event channel", "pipe out of step with its queue");
}

static void queue(struct fake_id *f, enum rdma_cm_event_type type, int status,
		  struct fake_id *listen, const struct rdma_conn_param *p, const void *pdata,
		  size_t len, size_t pad)
{
	struct fake_cm_ch *c = f->ch;
	struct fake_ev *e;
	char b = 1;

	if (f->dead || f->kernel_gone || c->dead)
		return; /* nobody to tell */
	e = calloc(1, sizeof(*e));
	if (!e)
		abort();
	e->owner = f;
	e->ev.id = &f->id;
	e->ev.listen_id = listen ? &listen->id : NULL;
	e->ev.event = type;
	e->ev.status = status;
	if (p)
		e->ev.param.conn = *p;
	e->ev.param.conn.private_data = NULL;
	e->ev.param.conn.private_data_len = 0;
	if (pad) {
		if (len)
			memcpy(e->pdata, pdata, len);
		e->ev.param.conn.private_data = e->pdata;
		e->ev.param.conn.private_data_len = (uint8_t)pad;
	}
	*c->tail = e;
	c->tail = &e->next;
	if (c->wfd >= 0 && write(c->wfd, &b, 1) != 1)
		abort();
}

/* Take the events waiting on @c that @match picks, in order. */
static struct fake_ev *unqueue(struct fake_cm_ch *c, bool (*match)(struct fake_ev *, void *),
			       void *arg)
{
	struct fake_ev *taken = NULL, **tt = &taken, **p = &c->head;

	while (*p) {
		struct fake_ev *e = *p;

		if (!match(e, arg)) {
			p = &e->next;
			continue;
		}
		*p = e->next;
		e->next = NULL;
		*tt = e;
		tt = &e->next;
		if (!c->dead)
			drain_byte(c);
	}
	c->tail = p;
	return taken;
}

static bool of_id(struct fake_ev *e, void *arg)
{
	return e->owner == arg;
}

static bool request_to(struct fake_ev *e, void *arg)
{
	return e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->ev.listen_id == arg;
}

static void unlink_id(struct fake_id *f)
{
	struct fake_id **p;

	for (p = &ids; *p != f; p = &(*p)->all) {
	}
	*p = f->all;
}

/* Requests not read yet never reach user space: refused, their ids gone. */
static void drop_requests(struct fake_cm_ch *c, bool (*match)(struct fake_ev *, void *), void *arg)
{
	struct fake_ev *e = unqueue(c, match, arg);

	while (e) {
		struct fake_ev *n = e->next;
		struct fake_id *conn = e->owner;

		if (conn->peer) {
			conn->peer->state = ID_REJECTED;
			queue(conn->peer, RDMA_CM_EVENT_REJECTED, REJ_USER, NULL, NULL, NULL, 0,
			      REJ_PDATA);
			conn->peer->peer = NULL;
		}
		unlink_id(conn);
		fake_stats_raw()->ids_live--;
		free(conn);
		free(e);
		e = n;
	}
}

/* The kernel's side of an id goes (rdma_destroy_id(), or its channel
 * closed): the peer hears of it as the remote CM would tell it. */
static void kernel_destroy(struct fake_id *f)
{
	struct fake_id *p = f->peer;

	if (f->state == ID_LISTEN)
		drop_requests(f->ch, request_to, &f->id);
	if (p) {
		switch (f->state) {
		case ID_CONNECT:
		case ID_REQ_RCVD:
			p->state = ID_REJECTED;
			queue(p, RDMA_CM_EVENT_REJECTED, REJ_USER, NULL, NULL, NULL, 0, REJ_PDATA);
			break;
		case ID_ESTABLISHED:
		case ID_DISCONNECTED:
			/* Its QP no longer answers: the peer's goes to error. */
			if (p->id.qp)
				fake_qp_to_error(p->id.qp);
			if (p->state == ID_ESTABLISHED) {
				p->state = ID_DISCONNECTED;
				queue(p, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, NULL, 0, 0);
			}
			break;
		default:
			break;
		}
		p->peer = NULL;
		f->peer = NULL;
	}
	f->state = ID_IDLE;
	f->port = 0;
}

/* ---- event channels ---- */

struct rdma_event_channel *__wrap_rdma_create_event_channel(void);
void __wrap_rdma_destroy_event_channel(struct rdma_event_channel *channel);
int __wrap_rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event);
int __wrap_rdma_ack_cm_event(struct rdma_cm_event *event);

struct rdma_event_channel *__wrap_rdma_create_event_channel(void)
{
	struct fake_cm_ch *c = calloc(1, sizeof(*c));
	int p[2];

	if (!c || pipe(p)) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	fake_device();
	fake_lock();
	c->magic = CH_MAGIC;
	c->ch.fd = p[0];
	c->wfd = p[1];
	c->tail = &c->head;
	c->all = chans;
	chans = c;
	fake_stats_raw()->cm_channels_live++;
	fake_unlock();
	return &c->ch;
}

void fake_cm_channel_hang_up(struct rdma_event_channel *channel)
{
	struct fake_cm_ch *c;

	fake_lock();
	c = chan(channel, "fake_cm_channel_hang_up");
	if (c->wfd >= 0)
		close(c->wfd);
	c->wfd = -1;
	fake_unlock();
}

static bool any(struct fake_ev *e, void *arg)
{
	return true;
}

static bool is_request(struct fake_ev *e, void *arg)
{
	return e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST;
}

void __wrap_rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct fake_cm_ch *c;
	struct fake_ev *e;

	fake_lock();
	c = chan(channel, "rdma_destroy_event_channel");
	drop_requests(c, is_request, NULL);
	/* Closing the fd destroys the kernel's side of every id left on it;
	 * librdmacm leaves their user-space part dangling. */
	for (struct fake_id *f = ids; f; f = f->all) {
		if (f->ch != c || f->dead || f->kernel_gone)
			continue;
		kernel_destroy(f);
		f->kernel_gone = true;
		fake_stats_raw()->ids_orphaned++;
	}
	e = unqueue(c, any, NULL);
	while (e) {
		struct fake_ev *n = e->next;

		free(e);
		e = n;
	}
	close(c->ch.fd);
	if (c->wfd >= 0)
		close(c->wfd);
	c->dead = true;
	fake_stats_raw()->cm_channels_live--;
	POISON(&c->ch, sizeof(c->ch));
	fake_unlock();
}

int __wrap_rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct fake_cm_ch *c;
	struct fake_ev *e;

	fake_lock();
	c = chan(channel, "rdma_get_cm_event");
	while (!c->head) {
		struct pollfd pfd = {.fd = c->ch.fd, .events = POLLIN};

		if (fcntl(c->ch.fd, F_GETFL) & O_NONBLOCK) {
			fake_unlock();
			return fail(EAGAIN);
		}
		/* A blocking channel waits, as the kernel's read does. */
		fake_unlock();
		poll(&pfd, 1, -1);
		fake_lock();
		c = chan(channel, "rdma_get_cm_event");
	}
	e = c->head;
	c->head = e->next;
	if (!c->head)
		c->tail = &c->head;
	e->next = NULL;
	drain_byte(c);
	if (e->owner->dead)
		die("rdma_get_cm_event", "event of a destroyed id");
	e->owner->reported++;
	fake_stats_raw()->cm_events_unacked++;
	*event = &e->ev;
	fake_unlock();
	return 0;
}

int __wrap_rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct fake_ev *e = container_of(event, struct fake_ev, ev);

	fake_lock();
	e->owner->acked++;
	fake_stats_raw()->cm_events_unacked--;
	pthread_cond_broadcast(&acked_cv);
	fake_unlock();
	free(e);
	return 0;
}

bool fake_cm_channel_alive(const struct rdma_event_channel *ch)
{
	bool alive = false;

	fake_lock();
	for (struct fake_cm_ch *c = chans; c; c = c->all)
		if (&c->ch == ch)
			alive = !c->dead;
	fake_unlock();
	return alive;
}

unsigned int fake_cm_channel_queued(const struct rdma_event_channel *ch)
{
	unsigned int n = 0;

	fake_lock();
	for (struct fake_cm_ch *c = chans; c; c = c->all)
		if (&c->ch == ch && !c->dead)
			for (struct fake_ev *e = c->head; e; e = e->next)
				n++;
	fake_unlock();
	return n;
}

/* ---- ids ---- */

int __wrap_rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
			  enum rdma_port_space ps);
int __wrap_rdma_destroy_id(struct rdma_cm_id *id);
int __wrap_rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel);

static struct fake_id *new_id(struct fake_cm_ch *c, void *context)
{
	struct fake_id *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->magic = ID_MAGIC;
	f->ch = c;
	f->id.channel = &c->ch;
	f->id.context = context;
	f->id.ps = RDMA_PS_TCP;
	f->id.qp_type = IBV_QPT_RC;
	f->all = ids;
	ids = f;
	fake_stats_raw()->ids_live++;
	return f;
}

int __wrap_rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
			  enum rdma_port_space ps)
{
	struct fake_id *f;

	fake_lock();
	f = new_id(chan(channel, "rdma_create_id"), context);
	fake_unlock();
	if (!f)
		return fail(ENOMEM);
	f->id.ps = ps;
	*id = &f->id;
	return 0;
}

/* librdmacm waits until every event of the id it handed out was
 * acknowledged; an event never acknowledged is a hang. */
static void wait_acked(struct fake_id *f, const char *what)
{
	while (f->acked != f->reported)
		if (!fake_wait(&acked_cv, WAIT_MS) && f->acked != f->reported)
			die(what, "events of the id read and never acknowledged: librdmacm "
				  "would wait for ever");
}

int __wrap_rdma_destroy_id(struct rdma_cm_id *id)
{
	struct fake_id *f;
	struct fake_ev *e;

	fake_lock();
	f = container_of(id, struct fake_id, id);
	if (f->magic == ID_MAGIC && f->dead)
		die("rdma_destroy_id", "id destroyed twice");
	f = fid(id, "rdma_destroy_id");
	wait_acked(f, "rdma_destroy_id");
	if (id->qp && fake_qp_alive(id->qp)) {
		/* librdmacm leaves it: the QP leaks and its PD stays busy. */
		fprintf(stderr, "fake_cm: rdma_destroy_id(%p) with its QP still there\n",
			(void *)id);
		fake_stats_raw()->ids_with_qp_destroyed++;
	}
	if (!f->kernel_gone)
		kernel_destroy(f);
	e = unqueue(f->ch, of_id, f);
	while (e) {
		struct fake_ev *n = e->next;

		free(e);
		e = n;
	}
	f->dead = true;
	if (!f->kernel_gone)
		fake_stats_raw()->ids_live--;
	POISON(&f->id, sizeof(f->id));
	fake_unlock();
	return 0;
}

int __wrap_rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct fake_id *f;
	struct fake_cm_ch *to, *from;
	struct fake_ev *e;
	char b = 1;

	fake_lock();
	f = fid(id, "rdma_migrate_id");
	to = chan(channel, "rdma_migrate_id (to)");
	wait_acked(f, "rdma_migrate_id");
	from = f->ch;
	/* Its events not read yet move with it, in order. */
	e = unqueue(from, of_id, f);
	while (e) {
		struct fake_ev *n = e->next;

		e->next = NULL;
		*to->tail = e;
		to->tail = &e->next;
		if (write(to->wfd, &b, 1) != 1)
			abort();
		e = n;
	}
	f->ch = to;
	f->id.channel = &to->ch;
	fake_unlock();
	return 0;
}

/* ---- addresses ---- */

int __wrap_rdma_getaddrinfo(const char *node, const char *service,
			    const struct rdma_addrinfo *hints, struct rdma_addrinfo **res);
void __wrap_rdma_freeaddrinfo(struct rdma_addrinfo *res);
int __wrap_rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr);
int __wrap_rdma_listen(struct rdma_cm_id *id, int backlog);
__be16 __wrap_rdma_get_src_port(struct rdma_cm_id *id);
int __wrap_rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
			     int timeout_ms);
int __wrap_rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms);

int __wrap_rdma_getaddrinfo(const char *node, const char *service,
			    const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	bool passive = hints && (hints->ai_flags & RAI_PASSIVE);
	struct sockaddr_in *sin;
	struct rdma_addrinfo *ai;
	struct in_addr a = {.s_addr = htonl(INADDR_ANY)};
	char *end;
	unsigned long port = service ? strtoul(service, &end, 10) : 0;

	if ((service && (*end || port > 65535)) || (!node && !passive))
		return EAI_NONAME;
	if (node && !strcmp(node, "localhost"))
		node = "127.0.0.1";
	/* Names need a resolver; the fake knows numeric IPv4 only. */
	if (node && inet_pton(AF_INET, node, &a) != 1)
		return EAI_NONAME;
	ai = calloc(1, sizeof(*ai));
	sin = calloc(1, sizeof(*sin));
	if (!ai || !sin) {
		free(ai);
		free(sin);
		return EAI_MEMORY;
	}
	sin->sin_family = AF_INET;
	sin->sin_addr = a;
	sin->sin_port = htons((uint16_t)port);
	ai->ai_family = AF_INET;
	ai->ai_qp_type = IBV_QPT_RC;
	ai->ai_port_space = hints ? hints->ai_port_space : RDMA_PS_TCP;
	ai->ai_flags = hints ? hints->ai_flags : 0;
	if (passive) {
		ai->ai_src_addr = (struct sockaddr *)sin;
		ai->ai_src_len = sizeof(*sin);
	} else {
		ai->ai_dst_addr = (struct sockaddr *)sin;
		ai->ai_dst_len = sizeof(*sin);
	}
	*res = ai;
	return 0;
}

void __wrap_rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = n;
	}
}

static bool loopback(uint32_t a)
{
	return (a >> 24) == 127;
}

static bool port_taken(uint16_t port, uint32_t addr)
{
	for (struct fake_id *f = ids; f; f = f->all)
		if (!f->dead && !f->kernel_gone && f->port == port &&
		    (f->state == ID_BOUND || f->state == ID_LISTEN ||
		     f->state == ID_ADDR_RESOLVED || f->state == ID_ROUTE_RESOLVED ||
		     f->state == ID_CONNECT) &&
		    (!f->addr || !addr || f->addr == addr))
			return true;
	return false;
}

static uint16_t ephemeral(uint32_t addr)
{
	for (unsigned int i = 0; i < 32768; i++) {
		uint16_t p = next_port++;

		if (next_port < 32768)
			next_port = 32768;
		if (!port_taken(p, addr))
			return p;
	}
	return 0;
}

static void set_src(struct fake_id *f)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)&f->id.route.addr.src_addr;

	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(f->addr);
	sin->sin_port = htons(f->port);
}

int __wrap_rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)addr;
	struct fake_id *f;
	uint32_t a;
	uint16_t port;
	int rc = 0;

	fake_lock();
	f = fid(id, "rdma_bind_addr");
	if (!addr || addr->sa_family != AF_INET) {
		rc = addr ? EAFNOSUPPORT : EINVAL;
		goto out;
	}
	a = ntohl(sin->sin_addr.s_addr);
	port = ntohs(sin->sin_port);
	if (f->state != ID_IDLE) {
		rc = EINVAL;
	} else if (a && !loopback(a)) {
		rc = EADDRNOTAVAIL; /* no RDMA device has that address */
	} else if (a && fake_device_dead()) {
		rc = ENODEV;
	} else if (port && port_taken(port, a)) {
		rc = EADDRINUSE;
	} else if (!port && !(port = ephemeral(a))) {
		rc = EADDRINUSE;
	} else {
		f->addr = a;
		f->port = port;
		f->state = ID_BOUND;
		/* A wildcard bind has no device yet. */
		f->id.verbs = a ? fake_device() : NULL;
		f->id.port_num = a ? 1 : 0;
		set_src(f);
	}
out:
	fake_unlock();
	return rc ? fail(rc) : 0;
}

int __wrap_rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct fake_id *f;
	int rc = 0;

	fake_lock();
	f = fid(id, "rdma_listen");
	if (f->state == ID_BOUND)
		f->state = ID_LISTEN;
	else
		rc = EINVAL;
	fake_unlock();
	return rc ? fail(rc) : 0;
}

__be16 __wrap_rdma_get_src_port(struct rdma_cm_id *id)
{
	struct fake_id *f;
	uint16_t port;

	fake_lock();
	f = fid(id, "rdma_get_src_port");
	port = f->port;
	fake_unlock();
	return htons(port);
}

int __wrap_rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
			     int timeout_ms)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)dst;
	struct fake_id *f;
	uint32_t a;
	int rc = 0;

	fake_lock();
	f = fid(id, "rdma_resolve_addr");
	if (!dst || dst->sa_family != AF_INET) {
		rc = dst ? EAFNOSUPPORT : EINVAL;
		goto out;
	}
	if (f->state != ID_IDLE && f->state != ID_BOUND) {
		rc = EINVAL;
		goto out;
	}
	a = ntohl(sin->sin_addr.s_addr);
	if (!loopback(a) || fake_device_dead()) {
		queue(f, RDMA_CM_EVENT_ADDR_ERROR, fake_device_dead() ? -ENODEV : -EHOSTUNREACH,
		      NULL, NULL, NULL, 0, 0);
		goto out;
	}
	if (f->state == ID_IDLE) {
		f->addr = 0x7f000001;
		f->port = ephemeral(f->addr);
	}
	f->state = ID_ADDR_RESOLVED;
	f->id.verbs = fake_device();
	f->id.port_num = 1;
	set_src(f);
	memcpy(&f->id.route.addr.dst_addr, dst, sizeof(*sin));
	queue(f, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, NULL, NULL, 0, 0);
out:
	fake_unlock();
	return rc ? fail(rc) : 0;
}

int __wrap_rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct fake_id *f;
	int rc = 0;

	fake_lock();
	f = fid(id, "rdma_resolve_route");
	if (f->state == ID_ADDR_RESOLVED) {
		f->state = ID_ROUTE_RESOLVED;
		queue(f, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, NULL, NULL, 0, 0);
	} else {
		rc = EINVAL;
	}
	fake_unlock();
	return rc ? fail(rc) : 0;
}

/* ---- QPs ---- */

int __wrap_rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
void __wrap_rdma_destroy_qp(struct rdma_cm_id *id);

int __wrap_rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct fake_id *f;
	struct ibv_qp *qp;
	int rc = 0;

	fake_lock();
	f = fid(id, "rdma_create_qp");
	if (!id->verbs || id->qp || !pd || pd->context != id->verbs) {
		rc = EINVAL;
	} else if (!(qp = fake_qp_create(pd, attr))) {
		rc = errno;
	} else {
		f->id.qp = qp;
		f->id.pd = pd;
		f->id.send_cq = attr->send_cq;
		f->id.recv_cq = attr->recv_cq;
		f->id.srq = attr->srq;
		/* Already connected (a passive id accepted without a QP
		 * would be): not modelled, rdma_accept() needs the QP. */
	}
	fake_unlock();
	return rc ? fail(rc) : 0;
}

void __wrap_rdma_destroy_qp(struct rdma_cm_id *id)
{
	struct fake_id *f;

	fake_lock();
	f = fid(id, "rdma_destroy_qp");
	if (f->id.qp)
		fake_qp_destroy(f->id.qp);
	f->id.qp = NULL;
	fake_unlock();
}

/* ---- connections ---- */

int __wrap_rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p);
int __wrap_rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p);
int __wrap_rdma_reject(struct rdma_cm_id *id, const void *pdata, uint8_t len);
int __wrap_rdma_disconnect(struct rdma_cm_id *id);

static struct fake_id *listener_on(uint32_t addr, uint16_t port)
{
	for (struct fake_id *f = ids; f; f = f->all)
		if (!f->dead && !f->kernel_gone && f->state == ID_LISTEN && f->port == port &&
		    (!f->addr || f->addr == addr))
			return f;
	return NULL;
}

int __wrap_rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	const struct sockaddr_in *dst = (const struct sockaddr_in *)&id->route.addr.dst_addr;
	struct rdma_conn_param req = {0};
	struct fake_id *f, *l, *conn;
	int rc = 0;

	fake_lock();
	f = fid(id, "rdma_connect");
	if (f->state != ID_ROUTE_RESOLVED || !p || p->private_data_len > REQ_PDATA) {
		rc = EINVAL;
		goto out;
	}
	l = listener_on(ntohl(dst->sin_addr.s_addr), ntohs(dst->sin_port));
	if (!l) {
		/* The remote CM rejects a request for a service no one offers. */
		f->state = ID_REJECTED;
		queue(f, RDMA_CM_EVENT_REJECTED, REJ_NO_SVC, NULL, NULL, NULL, 0, REJ_PDATA);
		goto out;
	}
	/* The request's id inherits the listener's context, as librdmacm's. */
	conn = new_id(l->ch, l->id.context);
	if (!conn) {
		rc = ENOMEM;
		goto out;
	}
	conn->state = ID_REQ_RCVD;
	conn->addr = l->addr ? l->addr : ntohl(dst->sin_addr.s_addr);
	conn->port = l->port;
	conn->id.verbs = fake_device();
	conn->id.port_num = 1;
	set_src(conn);
	memcpy(&conn->id.route.addr.dst_addr, &id->route.addr.src_addr, sizeof(struct sockaddr_in));
	conn->peer = f;
	f->peer = conn;
	f->state = ID_CONNECT;
	/* Turned to the listener's side: its initiator depth is our
	 * responder resources, and the other way round. */
	req.responder_resources = p->initiator_depth;
	req.initiator_depth = p->responder_resources;
	req.flow_control = p->flow_control;
	req.retry_count = p->retry_count;
	req.rnr_retry_count = p->rnr_retry_count;
	req.srq = p->srq;
	req.qp_num = id->qp ? id->qp->qp_num : p->qp_num;
	queue(conn, RDMA_CM_EVENT_CONNECT_REQUEST, 0, l, &req, p->private_data, p->private_data_len,
	      REQ_PDATA);
out:
	fake_unlock();
	return rc ? fail(rc) : 0;
}

int __wrap_rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct rdma_conn_param rep = {0};
	struct fake_id *f, *a;
	int rc = 0;

	fake_lock();
	f = fid(id, "rdma_accept");
	a = f->peer;
	if (f->state != ID_REQ_RCVD || !a || a->state != ID_CONNECT || !id->qp || !a->id.qp ||
	    (p && p->private_data_len > REP_PDATA)) {
		rc = EINVAL;
		goto out;
	}
	fake_qp_connect(id->qp, a->id.qp);
	f->state = ID_ESTABLISHED;
	a->state = ID_ESTABLISHED;
	if (p) {
		rep.responder_resources = p->initiator_depth;
		rep.initiator_depth = p->responder_resources;
		rep.flow_control = p->flow_control;
		rep.rnr_retry_count = p->rnr_retry_count;
	}
	rep.qp_num = id->qp->qp_num;
	if (rtu_late)
		f->rtu_due = true;
	else
		queue(f, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, NULL, NULL, 0, 0);
	queue(a, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, &rep, p ? p->private_data : NULL,
	      p ? p->private_data_len : 0, REP_PDATA);
out:
	fake_unlock();
	return rc ? fail(rc) : 0;
}

int __wrap_rdma_reject(struct rdma_cm_id *id, const void *pdata, uint8_t len)
{
	struct fake_id *f;
	int rc = 0;

	fake_lock();
	f = fid(id, "rdma_reject");
	if (f->state != ID_REQ_RCVD || len > REJ_PDATA || (len && !pdata)) {
		rc = EINVAL;
		goto out;
	}
	f->state = ID_REJECTED;
	if (f->peer) {
		f->peer->state = ID_REJECTED;
		queue(f->peer, RDMA_CM_EVENT_REJECTED, REJ_USER, NULL, NULL, pdata, len, REJ_PDATA);
		f->peer->peer = NULL;
		f->peer = NULL;
	}
out:
	fake_unlock();
	return rc ? fail(rc) : 0;
}

int __wrap_rdma_disconnect(struct rdma_cm_id *id)
{
	struct fake_id *f, *p;
	int rc = 0;

	fake_lock();
	f = fid(id, "rdma_disconnect");
	p = f->peer;
	/* librdmacm moves the QP to error first, whatever follows. */
	if (id->qp)
		fake_qp_to_error(id->qp);
	switch (f->state) {
	case ID_ESTABLISHED:
		/* DREQ and DREP: both ends hear DISCONNECTED once, and the
		 * peer's QP, which nothing answers any more, errs too. */
		f->state = ID_DISCONNECTED;
		queue(f, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, NULL, 0, 0);
		if (p && p->state == ID_ESTABLISHED) {
			if (p->id.qp)
				fake_qp_to_error(p->id.qp);
			p->state = ID_DISCONNECTED;
			queue(p, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, NULL, 0, 0);
		}
		break;
	case ID_DISCONNECTED:
	case ID_CONNECT:
		break; /* the DREP, or nothing to disconnect yet */
	default:
		rc = EINVAL;
		break;
	}
	fake_unlock();
	return rc ? fail(rc) : 0;
}

/* The CM takes the connection as established on the QP's word, at once. */
int __wrap_rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event);

static void rtu_now(struct fake_id *f)
{
	f->rtu_due = false;
	if (f->state == ID_ESTABLISHED)
		queue(f, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, NULL, NULL, 0, 0);
}

int __wrap_rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	struct fake_id *f;
	int rc = 0;

	fake_lock();
	f = fid(id, "rdma_notify");
	if (event != IBV_EVENT_COMM_EST)
		rc = EINVAL;
	else if (f->rtu_due)
		rtu_now(f);
	fake_notifies++;
	fake_unlock();
	return rc ? fail(rc) : 0;
}

void fake_cm_rtu_late(bool late)
{
	fake_lock();
	rtu_late = late;
	fake_notifies = 0;
	if (!late)
		for (struct fake_id *f = ids; f; f = f->all)
			if (!f->dead && !f->kernel_gone && f->rtu_due)
				rtu_now(f);
	fake_unlock();
}

void fake_cm_device_removal(void)
{
	fake_lock();
	for (struct fake_id *f = ids; f; f = f->all)
		if (!f->dead && !f->kernel_gone && f->id.verbs == fake_device())
			queue(f, RDMA_CM_EVENT_DEVICE_REMOVAL, 0, NULL, NULL, NULL, 0, 0);
	fake_unlock();
}
