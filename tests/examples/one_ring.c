// SPDX-License-Identifier: MIT
/*
 * rr-one-ring: TCP sockets, file I/O and RDMA through ONE io_uring, driven by
 * ONE thread that owns the ring and embeds the ringrdma bridge.
 *
 *   rr-one-ring [--timeout SECS] server ADDR PORT TCPPORT FILE
 *   rr-one-ring [--timeout SECS] client ADDR PORT
 *
 * The server listens for RDMA on ADDR:PORT and for TCP on 127.0.0.1:TCPPORT
 * (IORING_OP_ACCEPT). When an RDMA client connects, it reads FILE with
 * IORING_OP_READ in 64 KiB chunks straight into memory registered with
 * rr_ep_reg_mr() and SENDs each chunk, then a zero-length "last" marker. A
 * TCP client gets one status line (IORING_OP_SEND, then IORING_OP_CLOSE).
 * The server exits once one RDMA client was served completely and at least
 * one status line went out; the client prints what it received. Both print
 * "N bytes, fnv1a64 HEX" so the two ends can be compared.
 *
 * The loop is the application's: io_uring_submit_and_wait() submits its own
 * SQEs and those the bridge queued, and every CQE reaped goes first to
 * rr_bridge_handle_cqe(); a 0 means the CQE is ours. Our user_data values
 * are small integers or heap pointers, never the bridge's tag.
 *
 * Flow control: rxe can stall for good on RNR, so the server never sends a
 * message the client has no receive posted for. The client keeps WINDOW
 * receives posted; the server may run WINDOW messages ahead of the count of
 * messages the client consumed, which the client returns in small ACK
 * SENDs. The client posts its receives as soon as its QP exists, before the
 * connection is established, because the server starts sending as soon as
 * it accepts.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ringrdma.h>

#define PROG	     "rr-one-ring"
#define RING_ENTRIES 256
#define CHUNK	     (64 * 1024)
/* Messages the server may send ahead: the receives the client keeps posted. */
#define WINDOW 16
/* ACK SENDs the client keeps in flight; more credit is coalesced meanwhile. */
#define ACKS_MAX 4
/* Receives the server keeps posted for ACKs: the client's ACKs carry strictly
 * increasing counts no larger than what was sent, so at most WINDOW of them
 * can be outstanding; one spare. */
#define ACK_RECVS (WINDOW + 1)
#define ACK_BUF	  64
#define DRAIN_MS  5000
/* How long a disconnected endpoint may take to flush its requests back. */
#define FLUSH_MS   2000
#define CONNECT_MS 10000

#define MAGIC_DATA 0x31525252u /* "RRR1" */
#define MAGIC_ACK  0x41525252u /* "RRRA" */

/* Every message from the server: a header, then len bytes of the file. */
struct msg_hdr {
	uint32_t magic;
	uint32_t len;
	uint32_t last; /* 1: end of file, len is 0 */
	uint32_t seq;  /* message number, checked by the client */
};

/* Every message from the client: the number of messages it consumed. */
struct ack_msg {
	uint32_t magic;
	uint32_t consumed;
};

#define SLOT_SIZE (sizeof(struct msg_hdr) + CHUNK)

/* user_data of our own SQEs; anything larger is a struct tcp_conn pointer. */
enum {
	UD_TIMER = 1, /* the --timeout deadline */
	UD_CANCEL,    /* a cancel or timeout removal: result not needed */
	UD_ACCEPT,    /* the TCP listener's accept */
	UD_READ,      /* the one file read in flight */
	UD_WAKE,      /* a short timer that brings the loop round again */
	UD_LIMIT = 4096,
};

static uint64_t fnv1a64(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n--) {
		h ^= *b++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

#define FNV_BASIS 0xcbf29ce484222325ULL

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the loop: one ring, our CQEs and the bridge's ---------------------- */

struct loop {
	struct io_uring ring;
	rr_bridge *b;
	int err;       /* first failure, negative errno */
	bool done;     /* leave the loop */
	bool closing;  /* tearing down: start no new work */
	bool timer_on; /* UD_TIMER still in flight */
	bool wake_on;  /* UD_WAKE still in flight */
	struct __kernel_timespec wake;
	unsigned int inflight; /* our SQEs without their CQE yet */
	struct __kernel_timespec deadline;
	/* Role hooks: our non-timer CQEs, and a check after every CQE. */
	void (*on_cqe)(struct loop *lp, const struct io_uring_cqe *cqe);
	void (*after)(struct loop *lp);
};

static void fail(struct loop *lp, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fail(struct loop *lp, int err, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s\n", strerror(err < 0 ? -err : err));
	if (!lp->err)
		lp->err = err < 0 ? err : -EIO;
	lp->done = true;
}

/*
 * An SQE for our own work, user_data set before returning: the bridge may
 * submit whenever it is called, so an SQE must never sit half-filled.
 */
static struct io_uring_sqe *app_sqe(struct loop *lp, uint64_t ud)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&lp->ring);

	if (!sqe && io_uring_submit(&lp->ring) >= 0)
		sqe = io_uring_get_sqe(&lp->ring);
	if (!sqe) {
		fail(lp, -EBUSY, "no free SQE");
		return NULL;
	}
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, ud);
	lp->inflight++;
	return sqe;
}

/* The CQEs of ours that every role has: the deadline and cancellations. */
static void app_cqe(struct loop *lp, const struct io_uring_cqe *cqe)
{
	lp->inflight--;
	switch (cqe->user_data) {
	case UD_TIMER:
		lp->timer_on = false;
		if (cqe->res == -ETIME)
			fail(lp, -ETIMEDOUT, "gave up after %lld s",
			     (long long)lp->deadline.tv_sec);
		break;
	case UD_WAKE:
		lp->wake_on = false; /* after() runs next: that was the point */
		break;
	case UD_CANCEL:
		break; /* -ENOENT or -EALREADY are fine: the target ends anyway */
	default:
		lp->on_cqe(lp, cqe);
		break;
	}
}

/* rr_bridge_destroy() hands us any CQE of ours that it has to reap. */
static void bridge_app_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	app_cqe(data, cqe);
}

static void dispatch(struct loop *lp, const struct io_uring_cqe *cqe)
{
	if (!rr_bridge_handle_cqe(lp->b, cqe))
		app_cqe(lp, cqe);
	if (lp->after)
		lp->after(lp);
}

static int loop_init(struct loop *lp, unsigned int timeout_s)
{
	struct rr_bridge_opts bo = {.on_app_cqe = bridge_app_cqe, .data = lp};
	struct io_uring_sqe *sqe;
	int rc;

	rc = io_uring_queue_init(RING_ENTRIES, &lp->ring, 0);
	if (rc < 0) {
		fprintf(stderr, PROG ": io_uring_queue_init: %s\n", strerror(-rc));
		return rc;
	}
	rc = rr_bridge_create(&lp->b, &lp->ring, &bo, sizeof(bo));
	if (rc) {
		fprintf(stderr, PROG ": rr_bridge_create: %s\n", strerror(-rc));
		io_uring_queue_exit(&lp->ring);
		return rc;
	}
	/* The deadline is one more request in the same ring. */
	lp->deadline.tv_sec = timeout_s;
	sqe = app_sqe(lp, UD_TIMER);
	if (!sqe) {
		rr_bridge_destroy(lp->b);
		io_uring_queue_exit(&lp->ring);
		return lp->err;
	}
	io_uring_prep_timeout(sqe, &lp->deadline, 0, 0);
	io_uring_sqe_set_data64(sqe, UD_TIMER);
	lp->timer_on = true;
	return 0;
}

static void run(struct loop *lp)
{
	struct io_uring_cqe *cqe;
	int rc;

	while (!lp->done) {
		/* Submits the bridge's queued polls and re-arms with ours. */
		rc = io_uring_submit_and_wait(&lp->ring, 1);
		if (rc < 0 && rc != -EINTR && rc != -EBUSY) {
			fail(lp, rc, "io_uring_submit_and_wait");
			break;
		}
		while (!lp->done && io_uring_peek_cqe(&lp->ring, &cqe) == 0) {
			dispatch(lp, cqe);
			io_uring_cqe_seen(&lp->ring, cqe);
		}
	}
}

/* Cancel by user_data; the target's own CQE still arrives. */
static void cancel(struct loop *lp, uint64_t target)
{
	struct io_uring_sqe *sqe = app_sqe(lp, UD_CANCEL);

	if (sqe) {
		io_uring_prep_cancel64(sqe, target, 0);
		io_uring_sqe_set_data64(sqe, UD_CANCEL);
	}
}

static void remove_timer(struct loop *lp, uint64_t target)
{
	struct io_uring_sqe *sqe = app_sqe(lp, UD_CANCEL);

	if (sqe) {
		io_uring_prep_timeout_remove(sqe, target, 0);
		io_uring_sqe_set_data64(sqe, UD_CANCEL);
	}
}

/* Come round the loop in @ms even if nothing else completes. */
static void wake_in(struct loop *lp, unsigned int ms)
{
	struct io_uring_sqe *sqe;

	if (lp->wake_on || lp->closing)
		return;
	sqe = app_sqe(lp, UD_WAKE);
	if (!sqe)
		return;
	lp->wake.tv_sec = ms / 1000;
	lp->wake.tv_nsec = (long long)(ms % 1000) * 1000000;
	io_uring_prep_timeout(sqe, &lp->wake, 0, 0);
	io_uring_sqe_set_data64(sqe, UD_WAKE);
	lp->wake_on = true;
}

/*
 * Once an endpoint is down, may it be destroyed? Its QP is in error, so
 * every request still posted comes back through the CQ, after the real
 * completions that preceded the disconnect (the peer's last message may be
 * among them: on_disconnect can run before the CQ was read). Wait for that
 * rather than rely on rr_ep_destroy() finding them in the CQ, as some
 * providers drop a QP's completions when it is destroyed; give up after
 * FLUSH_MS.
 */
static bool ep_settled(struct loop *lp, rr_ep *ep, uint64_t *down_at)
{
	if (!*down_at)
		*down_at = now_ms();
	if (!rr_ep_outstanding(ep) || now_ms() - *down_at >= FLUSH_MS)
		return true;
	wake_in(lp, 50);
	return false;
}

/* Reap until none of our requests is in flight: their buffers outlive them. */
static void drain(struct loop *lp)
{
	uint64_t end = now_ms() + DRAIN_MS;
	struct io_uring_cqe *cqe;

	if (lp->timer_on)
		remove_timer(lp, UD_TIMER);
	if (lp->wake_on)
		remove_timer(lp, UD_WAKE);
	while (lp->inflight && now_ms() < end) {
		struct __kernel_timespec ts = {.tv_nsec = 100 * 1000000};
		int rc = io_uring_submit_and_wait_timeout(&lp->ring, &cqe, 1, &ts, NULL);

		if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY) {
			fail(lp, rc, "io_uring_submit_and_wait_timeout");
			break;
		}
		while (io_uring_peek_cqe(&lp->ring, &cqe) == 0) {
			dispatch(lp, cqe);
			io_uring_cqe_seen(&lp->ring, cqe);
		}
	}
	if (lp->inflight)
		fail(lp, -ETIMEDOUT, "%u requests still in flight at exit", lp->inflight);
}

/* After drain(): the bridge, then the ring. */
static void loop_fini(struct loop *lp)
{
	int rc = rr_bridge_destroy(lp->b);

	if (rc)
		fail(lp, rc, "rr_bridge_destroy");
	io_uring_queue_exit(&lp->ring);
}

static void *alloc_buf(size_t len)
{
	size_t pg = 4096;

	return aligned_alloc(pg, (len + pg - 1) / pg * pg);
}

/* ---- server ------------------------------------------------------------- */

enum slot_state { SLOT_FREE, SLOT_READING, SLOT_FILLED, SLOT_SENDING };

struct server;

struct slot {
	struct server *s;
	struct msg_hdr *hdr; /* the payload follows it: one SGE per SEND */
	enum slot_state state;
};

struct tcp_conn {
	struct server *s;
	int fd;
	bool closing; /* the CQE to come is the close */
	size_t len, off;
	char line[128];
};

struct server {
	struct loop lp;
	const char *path;
	int file_fd, tcp_fd;
	bool accept_on;
	rr_listener *l;

	rr_ep *ep;    /* the RDMA client being served */
	bool ep_down; /* its on_disconnect ran */
	uint64_t down_at;
	int down_status;
	uint8_t *buf; /* WINDOW slots, then ACK_RECVS ACK buffers */
	size_t buf_len;
	struct ibv_mr *mr;
	struct slot slots[WINDOW];
	unsigned int fifo[WINDOW]; /* filled slots, in file order */
	unsigned int fifo_head, fifo_len;

	bool read_on;
	unsigned int read_slot;
	uint64_t read_off;
	bool eof;
	uint32_t sent;	   /* messages posted */
	uint32_t consumed; /* messages the client consumed, from its ACKs */
	bool final_posted, final_done;

	unsigned int rdma_clients;
	bool rdma_served;
	uint64_t file_bytes, bytes_sent, fnv;
	unsigned int tcp_served;
};

static void pump(struct server *s);

static void arm_accept(struct server *s)
{
	struct io_uring_sqe *sqe;

	if (s->lp.closing || s->accept_on)
		return;
	sqe = app_sqe(&s->lp, UD_ACCEPT);
	if (!sqe)
		return;
	io_uring_prep_accept(sqe, s->tcp_fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, UD_ACCEPT);
	s->accept_on = true;
}

/* Send what is left of the status line, or close the socket. */
static void tcp_next(struct tcp_conn *t)
{
	struct io_uring_sqe *sqe = app_sqe(&t->s->lp, (uintptr_t)t);

	if (!sqe) {
		close(t->fd);
		free(t);
		return;
	}
	if (t->off < t->len) {
		io_uring_prep_send(sqe, t->fd, t->line + t->off, t->len - t->off, MSG_NOSIGNAL);
	} else {
		io_uring_prep_close(sqe, t->fd);
		t->closing = true;
	}
	io_uring_sqe_set_data64(sqe, (uintptr_t)t);
}

static void on_accept_cqe(struct server *s, int res)
{
	struct tcp_conn *t;

	s->accept_on = false;
	if (res < 0) {
		if (s->lp.closing || res == -ECANCELED)
			return;
		/* The peer gave up before we took it: keep listening. */
		if (res != -ECONNABORTED && res != -EINTR && res != -EAGAIN)
			fail(&s->lp, res, "accept on TCP status port");
		arm_accept(s);
		return;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		close(res);
		fail(&s->lp, -ENOMEM, "TCP connection");
		return;
	}
	t->s = s;
	t->fd = res;
	t->len = (size_t)snprintf(t->line, sizeof(t->line), "rdma clients: %u, bytes sent: %llu\n",
				  s->rdma_clients, (unsigned long long)s->bytes_sent);
	tcp_next(t);
	arm_accept(s);
}

static void on_tcp_cqe(struct tcp_conn *t, int res)
{
	struct server *s = t->s;

	if (t->closing) {
		if (res < 0)
			fprintf(stderr, PROG ": close of a TCP connection: %s\n", strerror(-res));
		free(t);
		return;
	}
	if (res <= 0) {
		/* A status reader that went away is not our failure. */
		fprintf(stderr, PROG ": status send: %s\n", res ? strerror(-res) : "peer closed");
		t->off = t->len;
	} else {
		t->off += (size_t)res;
		if (t->off == t->len) {
			s->tcp_served++;
			printf(PROG ": status line sent to a TCP client\n");
		}
	}
	tcp_next(t);
}

static void on_read_cqe(struct server *s, int res)
{
	struct slot *sl = &s->slots[s->read_slot];

	s->read_on = false;
	if (res < 0) {
		sl->state = SLOT_FREE;
		if (!s->lp.closing)
			fail(&s->lp, res, "read %s", s->path);
		return;
	}
	if (res == 0) {
		sl->state = SLOT_FREE;
		s->eof = true;
	} else {
		/* Reads are issued one at a time, so they complete in file order. */
		sl->hdr->len = (uint32_t)res;
		s->fnv = fnv1a64(s->fnv, sl->hdr + 1, (size_t)res);
		s->file_bytes += (uint64_t)res;
		s->read_off += (uint64_t)res;
		sl->state = SLOT_FILLED;
		s->fifo[(s->fifo_head + s->fifo_len) % WINDOW] = s->read_slot;
		s->fifo_len++;
	}
	pump(s);
}

static void server_cqe(struct loop *lp, const struct io_uring_cqe *cqe)
{
	struct server *s = (struct server *)lp;

	if (cqe->user_data == UD_ACCEPT)
		on_accept_cqe(s, cqe->res);
	else if (cqe->user_data == UD_READ)
		on_read_cqe(s, cqe->res);
	else if (cqe->user_data >= UD_LIMIT)
		on_tcp_cqe((struct tcp_conn *)(uintptr_t)cqe->user_data, cqe->res);
}

static void on_sent(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct slot *sl = data;
	struct server *s = sl->s;
	int rc;

	sl->state = SLOT_FREE;
	if (c->status) {
		/* Flushes are judged when the endpoint goes down. */
		if (c->status != -ECANCELED)
			fail(&s->lp, c->status, "RDMA SEND");
		return;
	}
	if (!sl->hdr->last) {
		s->bytes_sent += sl->hdr->len;
		pump(s);
		return;
	}
	/* The client has the last message: hang up; its exit then tells a
	 * test that our counters are final. */
	s->final_done = true;
	printf(PROG ": sent %llu bytes, fnv1a64 %016llx\n", (unsigned long long)s->bytes_sent,
	       (unsigned long long)s->fnv);
	if (s->ep_down || s->lp.closing)
		return; /* delivered by the flush of rr_ep_destroy() */
	rc = rr_ep_disconnect(ep);
	if (rc && rc != -ENOTCONN)
		fail(&s->lp, rc, "rr_ep_disconnect");
}

static int post_ack_recv(struct server *s, void *buf);

static void on_ack(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct server *s = rr_ep_data(ep);
	const struct ack_msg *a = data;
	int rc;

	if (c->status) {
		if (c->status != -ECANCELED)
			fail(&s->lp, c->status, "RDMA RECV");
		return;
	}
	if (c->byte_len != sizeof(*a) || a->magic != MAGIC_ACK || a->consumed <= s->consumed ||
	    a->consumed > s->sent) {
		fail(&s->lp, -EPROTO, "bad ACK (%u bytes, consumed %u of %u sent)", c->byte_len,
		     a->consumed, s->sent);
		return;
	}
	s->consumed = a->consumed;
	if (s->ep_down || s->lp.closing)
		return; /* being flushed: no new work */
	rc = post_ack_recv(s, data);
	if (rc && !s->final_done) {
		fail(&s->lp, rc, "rr_ep_post_recv");
		return;
	}
	pump(s);
}

static int post_ack_recv(struct server *s, void *buf)
{
	return rr_ep_post_recv(s->ep, buf, ACK_BUF, s->mr, on_ack, buf);
}

static bool may_send(const struct server *s)
{
	return s->sent - s->consumed < WINDOW;
}

static int free_slot(const struct server *s)
{
	for (unsigned int i = 0; i < WINDOW; i++)
		if (s->slots[i].state == SLOT_FREE)
			return (int)i;
	return -1;
}

static int send_slot(struct server *s, struct slot *sl)
{
	int rc;

	sl->hdr->magic = MAGIC_DATA;
	sl->hdr->seq = s->sent;
	rc = rr_ep_post_send(s->ep, sl->hdr, (uint32_t)sizeof(*sl->hdr) + sl->hdr->len, s->mr,
			     on_sent, sl);
	if (rc)
		return rc;
	sl->state = SLOT_SENDING;
	s->sent++;
	return 0;
}

/* Move the file along: read into free slots, send filled ones in order while
 * the client has receives for them, and end with the marker. */
static void pump(struct server *s)
{
	struct io_uring_sqe *sqe;
	struct slot *sl;
	int i, rc;

	while (!s->lp.done && !s->lp.closing && s->ep && !s->ep_down) {
		if (s->fifo_len && may_send(s)) {
			sl = &s->slots[s->fifo[s->fifo_head]];
			rc = send_slot(s, sl);
			if (rc) {
				fail(&s->lp, rc, "rr_ep_post_send");
				return;
			}
			s->fifo_head = (s->fifo_head + 1) % WINDOW;
			s->fifo_len--;
			continue;
		}
		if (!s->read_on && !s->eof && (i = free_slot(s)) >= 0) {
			sl = &s->slots[i];
			sqe = app_sqe(&s->lp, UD_READ);
			if (!sqe)
				return;
			io_uring_prep_read(sqe, s->file_fd, sl->hdr + 1, CHUNK, s->read_off);
			io_uring_sqe_set_data64(sqe, UD_READ);
			sl->state = SLOT_READING;
			s->read_slot = (unsigned int)i;
			s->read_on = true;
			continue;
		}
		if (s->eof && !s->read_on && !s->fifo_len && !s->final_posted && may_send(s) &&
		    (i = free_slot(s)) >= 0) {
			sl = &s->slots[i];
			sl->hdr->len = 0;
			sl->hdr->last = 1;
			rc = send_slot(s, sl);
			if (rc) {
				fail(&s->lp, rc, "rr_ep_post_send");
				return;
			}
			s->final_posted = true;
			continue;
		}
		break;
	}
}

static void server_on_down(rr_ep *ep, int status, void *data)
{
	struct server *s = data;

	s->ep_down = true;
	s->down_status = status;
}

static void server_on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct server *s = data;
	int rc;

	if (s->ep || s->rdma_served || s->lp.closing) {
		/* One client per run, as the file position is per client. */
		printf(PROG ": refusing another RDMA client\n");
		rc = rr_ep_destroy(ep);
		if (rc)
			fail(&s->lp, rc, "rr_ep_destroy");
		return;
	}
	s->ep = ep;
	s->rdma_clients++;
	rr_ep_set_data(ep, s);
	rr_ep_set_on_disconnect(ep, server_on_down);
	rc = rr_ep_reg_mr(ep, s->buf, s->buf_len, 0, &s->mr);
	if (rc) {
		fail(&s->lp, rc, "rr_ep_reg_mr");
		return;
	}
	/* Before the first SEND: the client only ACKs what it received. */
	for (unsigned int i = 0; i < ACK_RECVS; i++) {
		rc = post_ack_recv(s, s->buf + WINDOW * SLOT_SIZE + i * ACK_BUF);
		if (rc) {
			fail(&s->lp, rc, "rr_ep_post_recv");
			return;
		}
	}
	printf(PROG ": RDMA client connected, sending %s\n", s->path);
	pump(s);
}

static void server_after(struct loop *lp)
{
	struct server *s = (struct server *)lp;

	if (s->ep && s->ep_down && ep_settled(lp, s->ep, &s->down_at)) {
		/* Every request has its outcome now: judge by the last one. */
		int rc = rr_ep_destroy(s->ep);

		s->ep = NULL;
		if (rc)
			fail(lp, rc, "rr_ep_destroy");
		if (!s->final_done) {
			fail(lp, s->down_status ? s->down_status : -ECONNRESET,
			     "RDMA client gone after %llu of %llu bytes",
			     (unsigned long long)s->bytes_sent, (unsigned long long)s->file_bytes);
			return;
		}
		s->rdma_served = true;
	}
	if (s->rdma_served && s->tcp_served)
		lp->done = true;
}

static int tcp_listen(struct server *s, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int one = 1, fd;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16)) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	s->tcp_fd = fd;
	return 0;
}

static int server_main(const char *addr, uint16_t port, uint16_t tcp_port, const char *path,
		       unsigned int timeout_s)
{
	struct rr_ep_opts eo = {.max_send_wr = WINDOW, .max_recv_wr = ACK_RECVS};
	struct server *s = calloc(1, sizeof(*s));
	struct loop *lp;
	int rc;

	if (!s) {
		fprintf(stderr, PROG ": %s\n", strerror(ENOMEM));
		return 1;
	}
	lp = &s->lp;
	lp->on_cqe = server_cqe;
	lp->after = server_after;
	s->path = path;
	s->tcp_fd = -1;
	s->fnv = FNV_BASIS;
	s->file_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (s->file_fd < 0) {
		fprintf(stderr, PROG ": open %s: %s\n", path, strerror(errno));
		free(s);
		return 1;
	}
	s->buf_len = WINDOW * SLOT_SIZE + ACK_RECVS * ACK_BUF;
	s->buf = alloc_buf(s->buf_len);
	if (!s->buf) {
		fprintf(stderr, PROG ": %s\n", strerror(ENOMEM));
		close(s->file_fd);
		free(s);
		return 1;
	}
	memset(s->buf, 0, s->buf_len);
	for (unsigned int i = 0; i < WINDOW; i++) {
		s->slots[i].s = s;
		s->slots[i].hdr = (struct msg_hdr *)(s->buf + i * SLOT_SIZE);
	}
	rc = loop_init(lp, timeout_s);
	if (rc) {
		free(s->buf);
		close(s->file_fd);
		free(s);
		return 1;
	}
	eo.data = s;
	eo.on_disconnect = server_on_down;
	rc = rr_listen(lp->b, addr, port, &eo, sizeof(eo), server_on_accept, s, &s->l);
	if (rc)
		fail(lp, rc, "rr_listen %s:%u", addr, port);
	if (!rc) {
		rc = tcp_listen(s, tcp_port);
		if (rc)
			fail(lp, rc, "TCP listen on 127.0.0.1:%u", tcp_port);
	}
	if (!rc) {
		arm_accept(s);
		printf(PROG ": listening on %s:%u (RDMA) and 127.0.0.1:%u (TCP status)\n", addr,
		       port, tcp_port);
		fflush(stdout);
		run(lp);
	}

	/* Teardown: stop our requests, then the endpoint, MR and bridge. */
	lp->closing = true;
	if (s->accept_on)
		cancel(lp, UD_ACCEPT);
	if (s->read_on)
		cancel(lp, UD_READ);
	drain(lp);
	rc = rr_ep_destroy(s->ep);
	if (rc)
		fail(lp, rc, "rr_ep_destroy");
	s->ep = NULL;
	rc = rr_listener_destroy(s->l);
	if (rc)
		fail(lp, rc, "rr_listener_destroy");
	rc = rr_mr_dereg(s->mr);
	if (rc)
		fail(lp, rc, "rr_mr_dereg");
	loop_fini(lp);
	if (s->tcp_fd >= 0 && close(s->tcp_fd))
		fail(lp, -errno, "close TCP listener");
	if (close(s->file_fd))
		fail(lp, -errno, "close %s", path);
	rc = lp->err;
	if (!rc)
		printf(PROG ": served %u RDMA client(s) and %u status request(s)\n",
		       s->rdma_clients, s->tcp_served);
	free(s->buf);
	free(s);
	return rc ? 1 : 0;
}

/* ---- client ------------------------------------------------------------- */

struct client {
	struct loop lp;
	rr_ep *ep;
	bool posted; /* MR registered and receives posted */
	bool down;
	uint64_t down_at;
	int down_status;
	uint8_t *buf; /* WINDOW receive slots, then ACKS_MAX ACK buffers */
	size_t buf_len;
	struct ibv_mr *mr;
	bool ack_busy[ACKS_MAX];
	unsigned int acks_out;
	uint32_t consumed, acked, seq;
	bool final_seen;
	uint64_t bytes, fnv;
};

static void send_acks(struct client *c);

static void on_ack_sent(rr_ep *ep, const struct rr_completion *comp, void *data)
{
	struct client *c = rr_ep_data(ep);

	c->ack_busy[(uintptr_t)data] = false;
	c->acks_out--;
	if (comp->status) {
		/* ACKs still in flight when the server hangs up get flushed. */
		if (!c->final_seen && !c->down && !c->lp.closing)
			fail(&c->lp, comp->status, "ACK SEND");
		return;
	}
	send_acks(c);
}

/* Return credit: one ACK per message, coalesced while ACKS_MAX are out. */
static void send_acks(struct client *c)
{
	while (!c->final_seen && !c->down && !c->lp.closing && c->consumed > c->acked &&
	       c->acks_out < ACKS_MAX) {
		unsigned int i = 0;
		struct ack_msg *a;
		int rc;

		while (c->ack_busy[i])
			i++;
		a = (struct ack_msg *)(c->buf + WINDOW * SLOT_SIZE + i * ACK_BUF);
		a->magic = MAGIC_ACK;
		a->consumed = c->consumed;
		rc = rr_ep_post_send(c->ep, a, sizeof(*a), c->mr, on_ack_sent,
				     (void *)(uintptr_t)i);
		if (rc == -ENOTCONN)
			return; /* hung up: no more credit is needed */
		if (rc) {
			fail(&c->lp, rc, "rr_ep_post_send (ACK)");
			return;
		}
		c->ack_busy[i] = true;
		c->acks_out++;
		c->acked = c->consumed;
	}
}

static void on_data(rr_ep *ep, const struct rr_completion *comp, void *data)
{
	struct client *c = rr_ep_data(ep);
	struct msg_hdr *h = data;
	int rc;

	if (comp->status) {
		/* The spare receives flush when the server hangs up. */
		if (comp->status != -ECANCELED)
			fail(&c->lp, comp->status, "RDMA RECV");
		return;
	}
	if (comp->byte_len < sizeof(*h) || h->magic != MAGIC_DATA || h->seq != c->seq ||
	    h->len != comp->byte_len - sizeof(*h) || (h->last && h->len)) {
		fail(&c->lp, -EPROTO, "bad message %u (%u bytes)", c->seq, comp->byte_len);
		return;
	}
	c->seq++;
	if (h->last) {
		c->final_seen = true;
		return;
	}
	/* RC delivers in order and receives complete in posting order. */
	c->fnv = fnv1a64(c->fnv, h + 1, h->len);
	c->bytes += h->len;
	if (c->down || c->lp.closing)
		return; /* being flushed: no new work */
	/* Repost before returning the credit, so the server never outruns us. */
	rc = rr_ep_post_recv(ep, h, SLOT_SIZE, c->mr, on_data, h);
	if (rc == -ENOTCONN)
		return; /* the server hung up: what it sent is handed out before
			 * on_disconnect, which judges the transfer */
	if (rc) {
		fail(&c->lp, rc, "rr_ep_post_recv");
		return;
	}
	c->consumed++;
	send_acks(c);
}

/* Post the receives the moment the QP exists, before ESTABLISHED: the
 * server may send as soon as it sees the connection, which can be before
 * our on_connect runs. */
static void client_setup(struct client *c)
{
	int rc;

	if (c->posted || !c->ep || c->down || c->lp.done || c->lp.closing || !rr_ep_qp(c->ep))
		return;
	c->posted = true;
	rc = rr_ep_reg_mr(c->ep, c->buf, c->buf_len, 0, &c->mr);
	if (rc) {
		fail(&c->lp, rc, "rr_ep_reg_mr");
		return;
	}
	for (unsigned int i = 0; i < WINDOW; i++) {
		void *p = c->buf + i * SLOT_SIZE;

		rc = rr_ep_post_recv(c->ep, p, SLOT_SIZE, c->mr, on_data, p);
		if (rc) {
			fail(&c->lp, rc, "rr_ep_post_recv");
			return;
		}
	}
}

static void client_on_connect(rr_ep *ep, int status, void *data)
{
	struct client *c = data;

	if (status) {
		fail(&c->lp, status, "RDMA connect");
		return;
	}
	client_setup(c);
	printf(PROG ": connected\n");
}

static void client_on_down(rr_ep *ep, int status, void *data)
{
	struct client *c = data;

	c->down = true;
	c->down_status = status;
}

static void client_cqe(struct loop *lp, const struct io_uring_cqe *cqe)
{
	/* The client has no I/O of its own beyond the deadline. */
}

static void client_after(struct loop *lp)
{
	struct client *c = (struct client *)lp;

	client_setup(c);
	if (c->ep && c->down && ep_settled(lp, c->ep, &c->down_at)) {
		/* Every receive has its outcome now: was the last one among them? */
		int rc = rr_ep_destroy(c->ep);

		c->ep = NULL;
		if (rc)
			fail(lp, rc, "rr_ep_destroy");
		else if (!c->final_seen)
			fail(lp, c->down_status ? c->down_status : -ECONNRESET,
			     "server hung up after %llu bytes", (unsigned long long)c->bytes);
		else
			lp->done = true;
	}
}

static int client_main(const char *addr, uint16_t port, unsigned int timeout_s)
{
	struct rr_ep_opts eo = {
		.max_send_wr = ACKS_MAX,
		.max_recv_wr = WINDOW,
		.connect_timeout_ms = CONNECT_MS,
	};
	struct client *c = calloc(1, sizeof(*c));
	struct loop *lp;
	int rc;

	if (!c) {
		fprintf(stderr, PROG ": %s\n", strerror(ENOMEM));
		return 1;
	}
	lp = &c->lp;
	lp->on_cqe = client_cqe;
	lp->after = client_after;
	c->fnv = FNV_BASIS;
	c->buf_len = WINDOW * SLOT_SIZE + ACKS_MAX * ACK_BUF;
	c->buf = alloc_buf(c->buf_len);
	if (!c->buf) {
		fprintf(stderr, PROG ": %s\n", strerror(ENOMEM));
		free(c);
		return 1;
	}
	/* Defined contents for tools that cannot see the device's writes. */
	memset(c->buf, 0, c->buf_len);
	rc = loop_init(lp, timeout_s);
	if (rc) {
		free(c->buf);
		free(c);
		return 1;
	}
	eo.data = c;
	eo.on_disconnect = client_on_down;
	rc = rr_connect(lp->b, addr, port, &eo, sizeof(eo), client_on_connect, &c->ep);
	if (rc)
		fail(lp, rc, "rr_connect %s:%u", addr, port);
	else
		run(lp);

	lp->closing = true;
	drain(lp);
	rc = rr_ep_destroy(c->ep);
	if (rc)
		fail(lp, rc, "rr_ep_destroy");
	c->ep = NULL;
	rc = rr_mr_dereg(c->mr);
	if (rc)
		fail(lp, rc, "rr_mr_dereg");
	loop_fini(lp);
	rc = lp->err;
	if (!rc)
		printf(PROG ": received %llu bytes, fnv1a64 %016llx\n",
		       (unsigned long long)c->bytes, (unsigned long long)c->fnv);
	free(c->buf);
	free(c);
	return rc ? 1 : 0;
}

/* ---- main --------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " [--timeout SECS] server ADDR PORT TCPPORT FILE\n"
		   "       " PROG " [--timeout SECS] client ADDR PORT\n"
		   "  --timeout SECS  give up with an error after SECS seconds (default 60)\n");
}

static int parse_num(const char *s, long min, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"timeout", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	long timeout = 60, port, tcp_port;
	int opt, n;

	while ((opt = getopt_long(argc, argv, "t:h", opts, NULL)) != -1) {
		switch (opt) {
		case 't':
			if (parse_num(optarg, 1, 86400, &timeout)) {
				usage(stderr);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	argv += optind;
	n = argc - optind;
	/* Lines as they happen: a test script watches for "listening". */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (n == 5 && !strcmp(argv[0], "server") && !parse_num(argv[2], 1, 65535, &port) &&
	    !parse_num(argv[3], 1, 65535, &tcp_port))
		return server_main(argv[1], (uint16_t)port, (uint16_t)tcp_port, argv[4],
				   (unsigned int)timeout);
	if (n == 3 && !strcmp(argv[0], "client") && !parse_num(argv[2], 1, 65535, &port))
		return client_main(argv[1], (uint16_t)port, (unsigned int)timeout);
	usage(stderr);
	return 2;
}
