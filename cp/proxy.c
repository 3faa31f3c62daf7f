// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp proxy: accept TCP clients and forward each byte stream over
 * its own RDMA connection to a serve peer, which stores it as a file. The
 * socket reads (IORING_OP_RECV straight into the registered buffers), the
 * accepts and the verbs all go through the one ring. When the receiver
 * confirmed the file, the client gets one line back, "OK BYTES xxh3:HEX
 * NAME" or "ERROR MESSAGE", and the socket is closed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "tx.h"

#define RING_ENTRIES 1024

struct proxy;

struct client {
	struct client *next;
	struct proxy *p;
	struct cp_op op; /* the reply's send */
	int fd;
	unsigned int id;
	struct tx *t;
	bool given, stored, replying;
	uint64_t bytes, sum, chunks;
	char name[CP_NAME_MAX + 1];
	char reply[320];
	size_t rlen, roff;
};

struct proxy {
	struct cp_loop lp;
	const struct cp_opts *o;
	char host[256];
	uint16_t port;
	int lfd;
	struct cp_op accept_op;
	bool accept_on, closing, cancelled;
	struct client *clients;
	unsigned int live; /* clients in the list: --max-clients */
	unsigned int accepted;
	struct cp_tally n; /* connections: clients ended; refused: over the cap */
	int result;
	char msg[256];
};

static bool client_next(struct tx *t, struct tx_src *src, void *data)
{
	struct client *c = data;

	if (c->given)
		return false; /* one stream per connection */
	c->given = true;
	src->fd = c->fd;
	src->stream = true;
	src->label = "TCP client";
	snprintf(src->name, sizeof(src->name), "%s", c->name);
	return true;
}

static void client_stored(struct tx *t, const struct tx_src *src, uint64_t bytes, uint64_t sum,
			  void *data)
{
	struct client *c = data;

	c->stored = true;
	c->chunks = tx_chunks(t);
	c->bytes = bytes;
	c->sum = sum;
}

static void reply_done(struct cp_op *op, int res);

static void send_reply(struct client *c)
{
	struct io_uring_sqe *sqe = cp_loop_sqe(&c->p->lp, &c->op);

	if (!sqe) {
		c->replying = false;
		return;
	}
	io_uring_prep_send(sqe, c->fd, c->reply + c->roff, c->rlen - c->roff, MSG_NOSIGNAL);
}

static void reply_done(struct cp_op *op, int res)
{
	struct client *c = (struct client *)((char *)op - offsetof(struct client, op));

	if (res > 0) {
		c->roff += (size_t)res;
		if (c->roff < c->rlen) {
			send_reply(c);
			return;
		}
	}
	/* Sent, or the client went away: either way this one is over. */
	c->replying = false;
}

static void arm_accept(struct proxy *p);

/*
 * Over --max-clients or --count: say so and close, never silently. What
 * the client sent already is read away first, so that the close is a FIN,
 * not a reset that could discard the answer.
 */
static void refuse_client(struct proxy *p, int fd)
{
	char msg[128], junk[4096];
	int len;

	if (p->o->count && p->accepted >= p->o->count)
		len = snprintf(msg, sizeof(msg), "ERROR proxy done (--count %u reached)\n",
			       p->o->count);
	else
		len = snprintf(msg, sizeof(msg),
			       "ERROR too many clients (--max-clients %u), try later\n",
			       p->o->max_clients);
	p->n.refused++;
	if (send(fd, msg, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && !p->o->quiet)
		cp_log("proxy: refusing a TCP client: %s", strerror(errno));
	shutdown(fd, SHUT_WR);
	for (int i = 0; i < 16 && recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; i++)
		;
	close(fd);
	cp_log("proxy: TCP client refused: %.*s", len - 7, msg + 6);
}

static void accept_done(struct cp_op *op, int res)
{
	struct proxy *p = (struct proxy *)((char *)op - offsetof(struct proxy, accept_op));
	struct tx_hooks h = {.next = client_next, .file_done = client_stored};
	struct client *c;
	struct timespec ts;
	struct tm tm;

	p->accept_on = false;
	if (res < 0) {
		if (!p->closing && res != -ECANCELED && res != -ECONNABORTED && res != -EINTR)
			cp_log("proxy: accept: %s", strerror(-res));
		arm_accept(p);
		return;
	}
	if (p->live >= p->o->max_clients || (p->o->count && p->accepted >= p->o->count)) {
		refuse_client(p, res);
		arm_accept(p);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		cp_log("proxy: out of memory for a client");
		close(res);
		arm_accept(p);
		return;
	}
	c->p = p;
	c->fd = res;
	c->id = ++p->accepted;
	c->op.done = reply_done;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(c->name, sizeof(c->name), "%s-%04d%02d%02dT%02d%02d%02d-%d-%u", p->o->prefix,
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 (int)getpid(), c->id);
	h.data = c;
	c->t = tx_start(&p->lp, p->o, p->host, p->port, &h);
	if (!c->t) {
		cp_log("proxy: out of memory for a connection");
		close(c->fd);
		free(c);
		p->n.connections++;
		p->n.failures++;
	} else {
		c->next = p->clients;
		p->clients = c;
		p->live++;
	}
	arm_accept(p);
}

static void arm_accept(struct proxy *p)
{
	struct io_uring_sqe *sqe;

	/* Past --count it still accepts, to refuse, until the last client ended. */
	if (p->accept_on || p->closing)
		return;
	sqe = cp_loop_sqe(&p->lp, &p->accept_op);
	if (!sqe)
		return;
	io_uring_prep_accept(sqe, p->lfd, NULL, NULL, SOCK_CLOEXEC);
	p->accept_on = true;
}

/* A client's connection ended: answer it, then let it go. */
static void client_ended(struct client *c, int result, const char *msg)
{
	struct proxy *p = c->p;

	if (c->stored && !result) {
		p->n.files++;
		p->n.bytes += c->bytes;
		p->n.chunks += c->chunks;
		p->n.checksum = c->sum;
		c->rlen = (size_t)snprintf(c->reply, sizeof(c->reply), "OK %llu xxh3:%016llx %s\n",
					   (unsigned long long)c->bytes,
					   (unsigned long long)c->sum, c->name);
		if (!p->o->quiet)
			cp_log("proxy: client %u stored as %s: %llu bytes, xxh3 %016llx", c->id,
			       c->name, (unsigned long long)c->bytes, (unsigned long long)c->sum);
	} else {
		if (!result)
			result = CP_EXIT_FAIL;
		p->n.failures++;
		if (!p->result)
			p->result = result;
		snprintf(p->msg, sizeof(p->msg), "%s", msg);
		c->rlen = (size_t)snprintf(c->reply, sizeof(c->reply), "ERROR %s\n", msg);
		cp_log("proxy: client %u: %s", c->id, msg);
	}
	c->replying = true;
	send_reply(c);
}

static void proxy_poll(struct cp_loop *lp)
{
	struct proxy *p = (struct proxy *)lp;
	struct client **pp = &p->clients, *c;

	while ((c = *pp)) {
		int result = 0;
		char msg[256];

		if (c->t && tx_poll(c->t, &result, msg, sizeof(msg)) == TX_ENDED) {
			c->t = NULL;
			client_ended(c, result, msg);
		}
		if (c->t || c->replying) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		close(c->fd);
		free(c);
		p->live--;
		p->n.connections++;
	}
	if (p->o->count && p->n.connections >= p->o->count)
		p->closing = true;
	if (p->closing && p->accept_on && !p->cancelled) {
		cp_loop_cancel(lp, &p->accept_op);
		p->cancelled = true;
	}
	if (p->closing && !p->clients && !p->accept_on)
		lp->stop = true;
}

static void proxy_signal(struct cp_loop *lp, int signo)
{
	struct proxy *p = (struct proxy *)lp;

	cp_log("proxy: %s, closing", strsignal(signo));
	p->closing = true;
	p->result = CP_EXIT_INTERRUPTED;
	for (struct client *c = p->clients; c; c = c->next)
		if (c->t)
			tx_abort(c->t, CP_EXIT_INTERRUPTED, "proxy interrupted");
}

static int tcp_listen(const char *spec, int *out)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	char host[256];
	uint16_t port;
	socklen_t len;
	int one = 1, fd;

	if (cp_parse_hostport(spec, host, sizeof(host), &port))
		return -EINVAL;
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		len = sizeof(*s4);
	} else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		len = sizeof(*s6);
	} else {
		return -EINVAL;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&ss, len) || listen(fd, 64)) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

int cp_proxy(const struct cp_opts *o)
{
	struct cp_summary sum = {.mode = "proxy", .start_ns = cp_now_ns()};
	struct proxy *p;
	int ret, rc;

	p = calloc(1, sizeof(*p));
	if (!p) {
		cp_log("proxy: out of memory");
		return CP_EXIT_FAIL;
	}
	p->o = o;
	p->lfd = -1;
	p->accept_op.done = accept_done;
	if (cp_parse_hostport(o->to, p->host, sizeof(p->host), &p->port)) {
		cp_log("proxy: --to wants ADDR:PORT, got \"%s\"", o->to);
		ret = CP_EXIT_USAGE;
		goto out;
	}
	rc = tcp_listen(o->tcp_listen, &p->lfd);
	if (rc) {
		cp_log("proxy: cannot listen on TCP %s: %s", o->tcp_listen, strerror(-rc));
		ret = rc == -EINVAL ? CP_EXIT_USAGE : CP_EXIT_NET;
		goto out;
	}
	if (cp_loop_init(&p->lp, RING_ENTRIES)) {
		ret = CP_EXIT_FAIL;
		goto out;
	}
	p->lp.poll = proxy_poll;
	p->lp.on_signal = proxy_signal;
	arm_accept(p);
	printf(CP_PROG ": proxy: listening on TCP %s, forwarding to %s\n", o->tcp_listen, o->to);
	fflush(stdout);
	rc = cp_loop_run(&p->lp);
	ret = rc ? CP_EXIT_FAIL : p->result;
	if (p->clients) {
		uint64_t end = cp_now_ns() + 10000000000ull;

		/* The loop broke or a second signal: end every connection first. */
		proxy_signal(&p->lp, SIGTERM);
		while (p->clients && cp_now_ns() < end && cp_loop_pass(&p->lp, 100) >= 0)
			proxy_poll(&p->lp);
	}
	cp_loop_fini(&p->lp);
out:
	if (p->lfd >= 0)
		close(p->lfd);
	sum.exit_code = ret;
	sum.error = ret && p->msg[0] ? p->msg : NULL;
	sum.n = p->n;
	cp_json_report(o, &sum);
	free(p);
	return ret;
}
