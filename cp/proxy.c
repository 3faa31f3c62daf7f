// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp proxy: accept TCP clients and forward each byte stream over
 * its own RDMA connection to a serve peer, which stores it as a file. The
 * socket reads (IORING_OP_RECV straight into the registered buffers), the
 * accepts and the verbs all go through the one ring. When the receiver
 * confirmed the file, the client gets one line back, "OK BYTES xxh3:HEX
 * NAME" or "ERROR MESSAGE", and the socket is closed.
 *
 * Every client is forwarded under the proxy's own token, so the TCP side
 * has a gate of its own: clients from loopback only, unless --tcp-allow
 * names more (a non-loopback --tcp-listen without it is refused), and a
 * client must keep up --min-rate while the proxy waits for its bytes and
 * finish within --max-time: else a client trickling a byte now and then
 * would hold an RDMA session and one of serve's --max-conns forever.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <linux/tcp.h> /* tcp_info with tcpi_bytes_received */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "tx.h"

#define RING_ENTRIES	      1024
#define RATE_PERIOD_S	      10 /* --min-rate is kept over each such period */
#define TCP_STATE_ESTABLISHED 1	 /* the kernel's TCP_ESTABLISHED (net/tcp_states.h) */

/* A network a TCP client may come from: 16 bytes, IPv4 mapped. */
struct cidr {
	uint8_t addr[16];
	unsigned int bits;
};

struct proxy;

struct client {
	struct client *next;
	struct proxy *p;
	struct cp_op op; /* the reply's send */
	int fd;
	unsigned int id;
	struct tx *t;
	bool given, stored, replying, cut;
	uint64_t accepted_ns;
	uint64_t period_ns, period_bytes; /* the --min-rate period: start, bytes then */
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
	/* The client's address as accept found it: a client that has reset
	 * already has none for getpeername(). */
	struct sockaddr_storage accept_addr;
	socklen_t accept_len;
	bool accept_on, closing, cancelled;
	struct client *clients;
	unsigned int live; /* clients in the list: --max-clients */
	unsigned int accepted;
	struct cp_tally n; /* connections: clients ended; refused: over the cap */
	int result;
	char msg[256];
	struct cidr allow[CP_TCP_ALLOW_MAX + 2]; /* loopback, then --tcp-allow */
	unsigned int nallow;
};

/* @sa as 16 bytes, IPv4 mapped; false for another family. */
static bool addr_key(const struct sockaddr *sa, uint8_t key[16])
{
	static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};

	if (sa->sa_family == AF_INET) {
		memcpy(key, mapped, 12);
		memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return true;
	}
	return false;
}

static bool in_cidr(const uint8_t key[16], const struct cidr *c)
{
	unsigned int full = c->bits / 8, rest = c->bits % 8;

	if (memcmp(key, c->addr, full))
		return false;
	return !rest || !((key[full] ^ c->addr[full]) & (0xff00 >> rest));
}

/* "ADDR[/BITS]", IPv4 or IPv6; 0 or -EINVAL. */
static int parse_cidr(const char *spec, struct cidr *c)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(spec, '/');
	size_t len = slash ? (size_t)(slash - spec) : strlen(spec);
	struct in_addr a4;
	unsigned long bits;
	char *end;
	bool v4;

	if (!len || len >= sizeof(host))
		return -EINVAL;
	memcpy(host, spec, len);
	host[len] = '\0';
	memset(c, 0, sizeof(*c));
	if (inet_pton(AF_INET, host, &a4) == 1) {
		v4 = true;
		c->addr[10] = c->addr[11] = 0xff;
		memcpy(c->addr + 12, &a4, 4);
	} else if (inet_pton(AF_INET6, host, c->addr) == 1) {
		v4 = false;
	} else {
		return -EINVAL;
	}
	bits = v4 ? 32 : 128;
	if (slash) {
		errno = 0;
		bits = strtoul(slash + 1, &end, 10);
		if (errno || end == slash + 1 || *end || bits > (v4 ? 32u : 128u))
			return -EINVAL;
	}
	c->bits = (unsigned int)bits + (v4 ? 96 : 0);
	/* Host bits must be zero: "10.1.2.3/8" is more likely a slip. */
	for (unsigned int i = c->bits; i < 128; i++)
		if (c->addr[i / 8] & (0x80 >> (i % 8)))
			return -EINVAL;
	return 0;
}

static bool client_allowed(const struct proxy *p)
{
	uint8_t key[16];

	if (p->accept_len > sizeof(p->accept_addr) ||
	    !addr_key((const struct sockaddr *)&p->accept_addr, key))
		return false;
	for (unsigned int i = 0; i < p->nallow; i++)
		if (in_cidr(key, &p->allow[i]))
			return true;
	return false;
}

/* Bytes the kernel took from the client so far; UINT64_MAX when the
 * client is not (or no longer) sending: its stream ended, or it failed. */
static uint64_t client_received(int fd, bool *queued)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	int inq = 0;

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) ||
	    ti.tcpi_state != TCP_STATE_ESTABLISHED)
		return UINT64_MAX;
	*queued = !ioctl(fd, SIOCINQ, &inq) && inq > 0;
	return ti.tcpi_bytes_received;
}

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
static void refuse_client(struct proxy *p, int fd, bool allowed)
{
	char msg[128], junk[4096];
	int len;

	if (!allowed)
		len = snprintf(msg, sizeof(msg),
			       "ERROR not allowed from this address (--tcp-allow)\n");
	else if (p->o->count && p->accepted >= p->o->count)
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
	if (!client_allowed(p)) {
		refuse_client(p, res, false);
		arm_accept(p);
		return;
	}
	if (p->live >= p->o->max_clients || (p->o->count && p->accepted >= p->o->count)) {
		refuse_client(p, res, true);
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
	c->accepted_ns = c->period_ns = cp_now_ns();
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
	p->accept_len = sizeof(p->accept_addr);
	io_uring_prep_accept(sqe, p->lfd, (struct sockaddr *)&p->accept_addr, &p->accept_len,
			     SOCK_CLOEXEC);
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
					   (unsigned long long)c->bytes, (unsigned long long)c->sum,
					   c->name);
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

/*
 * A client that holds its session without using it is cut: past
 * --max-time, or under --min-rate over a period in which the proxy was
 * waiting for it (nothing of it queued unread: a proxy held up by its
 * receiver never blames the client).
 */
static void check_pace(struct proxy *p, struct client *c, uint64_t now)
{
	const struct cp_opts *o = p->o;
	char why[160];
	uint64_t got;
	bool queued = false;

	if (c->cut || c->stored)
		return;
	if (o->max_time_s && now - c->accepted_ns > (uint64_t)o->max_time_s * 1000000000ull) {
		snprintf(why, sizeof(why), "TCP client still sending after %u s (--max-time)",
			 o->max_time_s);
		goto cut;
	}
	if (!o->min_rate || now - c->period_ns < RATE_PERIOD_S * 1000000000ull)
		return;
	got = client_received(c->fd, &queued);
	if (got != UINT64_MAX && !queued && got - c->period_bytes < o->min_rate * RATE_PERIOD_S) {
		snprintf(why, sizeof(why),
			 "TCP client too slow: %llu bytes in %u s (--min-rate %llu)",
			 (unsigned long long)(got - c->period_bytes), RATE_PERIOD_S,
			 (unsigned long long)o->min_rate);
		goto cut;
	}
	c->period_ns = now;
	c->period_bytes = got == UINT64_MAX ? c->period_bytes : got;
	return;
cut:
	c->cut = true;
	tx_abort(c->t, CP_EXIT_NET, why);
}

static void proxy_poll(struct cp_loop *lp)
{
	struct proxy *p = (struct proxy *)lp;
	struct client **pp = &p->clients, *c;
	uint64_t now = cp_now_ns();

	while ((c = *pp)) {
		int result = 0;
		char msg[256];

		if (c->t)
			check_pace(p, c, now);
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

/* Who may be a client: loopback, and --tcp-allow's networks, which a
 * --tcp-listen address others can reach needs. */
static int proxy_gate(struct proxy *p)
{
	const struct cp_opts *o = p->o;
	struct cidr listen_at;
	char host[256];
	uint16_t port;

	parse_cidr("127.0.0.0/8", &p->allow[p->nallow++]);
	parse_cidr("::1", &p->allow[p->nallow++]);
	for (unsigned int i = 0; i < o->n_tcp_allow; i++) {
		if (parse_cidr(o->tcp_allow[i], &p->allow[p->nallow])) {
			cp_log("proxy: --tcp-allow %s: want ADDR or ADDR/BITS (IPv4 or IPv6, host "
			       "bits zero)",
			       o->tcp_allow[i]);
			return -EINVAL;
		}
		p->nallow++;
	}
	if (cp_parse_hostport(o->tcp_listen, host, sizeof(host), &port) ||
	    parse_cidr(host, &listen_at))
		return 0; /* tcp_listen() says what is wrong with it */
	if (!o->n_tcp_allow && !in_cidr(listen_at.addr, &p->allow[0]) &&
	    !in_cidr(listen_at.addr, &p->allow[1])) {
		cp_log("proxy: --tcp-listen %s is reachable from other hosts, and each client is "
		       "forwarded under this proxy's token: say which with --tcp-allow CIDR "
		       "(loopback clients only without it)",
		       o->tcp_listen);
		return -EINVAL;
	}
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
	rc = proxy_gate(p);
	if (rc) {
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
