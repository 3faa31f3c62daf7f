// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp serve: one receiving connection.
 *
 * The receiver owns the pace: it exposes one window of `window` slots of
 * `chunk` bytes (only after the token was checked) and grants the sender a
 * limit: chunks with seq < limit may be written, chunk seq into slot
 * seq % window, with seq as the immediate. Each slot is reachable only
 * through its own type 2 memory window, bound on this connection's QP for
 * one grant (a new key each time, sent in the GRANT) and invalidated as
 * soon as that grant's chunk arrived: a slot is writable by its own sender
 * only between its grant and its chunk's arrival, and by nobody else ever.
 * Each chunk is admitted by cp_rx_admit(), then copied out of the window
 * into a private stage buffer, hashed there by the connection's hashing
 * thread (hash.h) while io_uring writes it to the temp file: a write
 * already under way when the window was invalidated may still land, so
 * only a copy no peer can reach makes the bytes stored the bytes checked.
 * A slot is bound and granted again once copied and invalidated; a chunk
 * waits in its slot while every stage is still busy, and while its file
 * is being opened (chunks follow FILE_START without waiting for an
 * answer). The next file may begin once FILE_END came (protocol 4: the
 * sender does not wait for FILE_DONE, one file ahead at most): its chunks
 * wait in their slots until the file before is named and its own is open.
 * Control messages are SEND/RECV with credit: the sender never has more
 * than `window` chunks plus the last file's FILE_END, FILE_START, FILE_END
 * and ERROR outstanding, and receives are reposted as each completes, so
 * the receive queue (window + RX_SPARE_RECVS) never runs dry (rxe can stall
 * for good on RNR).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "gate.h"
#include "hash.h"
#include "rx.h"
#include "store.h"

#define RX_GRANTS_OUT 2
#define RX_STAGES     4 /* file writes in flight per connection */
#define FLUSH_MS      3000
#define CLOSE_MS      5000
/* A refused stranger's ERROR gets this long to go out, then its QP goes. */
#define REFUSE_MS 500
/* Receives flushed without a disconnect: the QP is in error, unless a
 * disconnect says otherwise by then (it comes with its flushes). */
#define LOST_MS 250

/* RX_OPEN: FILE_START arrived, its file is being opened. RX_SCAN: a file
 * to resume, what it holds is being hashed; RX_FROM: FILE_HAVE went, the
 * sender's FILE_FROM is due. RX_SAME: received in full, the file already
 * under its name is being hashed: the same content is a success. RX_ENTRY:
 * a tree entry (MKDIR, SYMLINK, DIR_META) was made, its directory is being
 * synced. */
enum rx_state {
	RX_HELLO,
	RX_IDLE,
	RX_OPEN,
	RX_SCAN,
	RX_FROM,
	RX_FILE,
	RX_SAME,
	RX_SYNC,
	RX_ENTRY,
	RX_CLOSING
};

struct rx_slot {
	struct rx *r;
	struct ibv_mw *mw; /* the slot's only remote access; NULL: the region's */
	bool arrived;	   /* admitted, not yet copied out */
	bool binding;	   /* bound for the next grant, not yet done */
	bool invalidating; /* its chunk arrived, the window is being shut */
	uint32_t len;
};

/* A private copy of one chunk on its way to the file. */
struct rx_stage {
	struct cp_op op;
	struct rx *r;
	uint8_t *buf;
	bool busy;    /* until written and hashed */
	bool written; /* all of it reached the file */
	uint32_t len, done;
	uint64_t off;
	uint64_t job; /* its number at the hashing thread */
};

struct rx {
	struct rx *next;
	struct rx_env *env;
	rr_ep *ep;
	char peer[INET6_ADDRSTRLEN];
	struct sockaddr_storage src; /* the peer's address, for the gate */
	enum rx_state state;
	bool accepted, orphan, down;
	bool gone; /* evicted on its own thread: its endpoint destroyed */
	/* The QP went into error with no disconnect: receives flushed (no
	 * status: a bad RDMA access of the peer's, on rxe), or on_disconnect
	 * with an error; the connection is lost. */
	bool lost;
	int lost_status;
	uint64_t lost_at;
	bool authed;		  /* the token was good and it was admitted */
	bool error_out;		  /* an ERROR is being sent */
	struct cp_gate_ticket gt; /* in env->gate until admitted or freed */
	uint64_t born_at;	  /* its connect request: the HELLO deadline runs from here */
	uint64_t down_at, closing_at, last_activity;
	int result;

	struct cp_ctl ctl; /* window + RX_SPARE_RECVS receives, RX_SENDS sends */
	unsigned int recvs_posted;
	uint8_t *pending; /* a message that arrived before on_accept */
	uint32_t pending_len;
	unsigned int grants_out;

	uint8_t *win;
	size_t win_len;
	struct ibv_mr *win_mr;
	struct rx_slot *slots;
	struct cp_rx_window w;
	uint32_t released; /* every seq below was copied out of the window */
	uint32_t bound;	   /* every seq below has its slot bound (or binding) */
	uint32_t limit_sent;

	uint8_t *stage_mem;
	struct rx_stage stages[RX_STAGES];
	unsigned int nstages;

	unsigned int io_inflight, writes;
	struct cp_store st;
	bool file_active, end_seen;
	uint32_t end_seq; /* end_seen: the first seq past this file */
	bool committing;  /* verified and synced, being named */
	char name[CP_NAME_MAX + 1];
	bool meta; /* FILE_START gave the file's mode and mtime */
	uint32_t mode;
	struct cp_time mtime;
	/* The file being stored: as FILE_START said, and resumed how */
	bool cur_resume, cur_stream;
	uint64_t cur_size;
	uint64_t have;	 /* FILE_HAVE: bytes we hold (partial or named file) */
	bool have_named; /* ... and they are the file under its name */
	int same_fd;	 /* RX_SCAN of a named file, RX_SAME: its fd */
	uint64_t w_off;	 /* where the chunks the window admits begin */
	struct cp_hasher hs;
	uint64_t file_off, end_bytes, end_sum;
	struct cp_op sync_op;
	struct cp_op entry_op; /* RX_ENTRY: the fsync of entry_fd */
	int entry_fd;
	/* The next file, begun after end_seen: the window admits its chunks,
	 * opened once this one is named (commit_done) */
	struct {
		bool on, end_seen, resume, stream;
		uint32_t end_seq;
		uint64_t bytes, sum, size;
		char name[CP_NAME_MAX + 1];
		bool meta;
		uint32_t mode;
		struct cp_time mtime;
	} q;
};

static void rx_fail(struct rx *r, unsigned int code, int result, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

struct rx *rx_next(struct rx *r)
{
	return r->next;
}

void rx_set_next(struct rx *r, struct rx *next)
{
	r->next = next;
}

/* Said once a process: the device has no memory windows. */
static atomic_bool mw_warned;

static bool quiet(const struct rx *r)
{
	return r->env->o->quiet;
}

static void send_done(rr_ep *ep, const struct rr_completion *c, void *data);

/* SEND one control message; returns 0 or a negative errno. */
static int rx_send(struct rx *r, const struct cp_msg *m)
{
	return cp_ctl_send(&r->ctl, r->ep, m, send_done);
}

/* A SEND that found the connection ending (-ENOTCONN) fails nothing: what
 * arrived before the end is still being handed out, a sender's ERROR may
 * be next, and on_disconnect follows to say how it ended. */
static bool send_failed(int rc)
{
	return rc && rc != -ENOTCONN;
}

/* Admitted or gone: it stops holding a place in the gate. */
static void leave_unauth(struct rx *r)
{
	cp_gate_leave(r->env->gate, &r->gt);
}

/* A line about a connection: before authentication, rate-limited (a
 * stranger decides how many there are). */
static void rx_log(struct rx *r, const char *msg)
{
	unsigned int skipped = 0;

	if (!r->authed && !cp_gate_log_ok(r->env->gate, cp_now_ns(), &skipped))
		return;
	if (skipped)
		cp_log("serve: (%u more refusals not logged)", skipped);
	cp_log("serve: %s: %s", r->peer, msg);
}

static void disconnect(struct rx *r)
{
	if (r->down)
		return;
	if (rr_ep_disconnect(r->ep)) {
		r->down = true; /* not connected (any more): nothing to wait for */
		r->down_at = cp_now_ns();
	}
}

/*
 * Give up on the connection: log, drop the file being received (never a
 * partial file under its final name), tell the peer why with an ERROR
 * unless @code is 0, then disconnect once that was sent.
 */
static void rx_fail(struct rx *r, unsigned int code, int result, const char *fmt, ...)
{
	struct cp_msg m = {.type = CP_ERROR};
	va_list ap;
	char msg[CP_TEXT_MAX + 1];

	if (r->state == RX_CLOSING)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	rx_log(r, msg);
	if (!r->result)
		r->result = result;
	/* Still in the gate while it holds a QP: refusals count toward
	 * --max-pending until they are gone, which rx_poll() makes quick. */
	/* A partial is kept for a resume when the transfer was cut, not
	 * when what it holds failed a check or may not be stored at all. */
	if (code == CP_E_CHECKSUM || code == CP_E_PROTO || code == CP_E_EXISTS || code == CP_E_NAME)
		r->st.keep = false;
	/* A write or fsync of ours may still name the fd, even queued and not
	 * yet submitted: closed now, the number could go to a file opened
	 * meanwhile and the write with it. rx_free() drops the file once
	 * nothing of ours is in flight; nothing commits it from here on. */
	if (r->file_active && !r->io_inflight) {
		cp_store_abort(&r->st);
		r->file_active = false;
	}
	r->state = RX_CLOSING;
	r->closing_at = cp_now_ns();
	if (r->down || !r->accepted)
		return;
	if (code) {
		m.error.code = code;
		cp_esc(msg, m.error.text, sizeof(m.error.text));
		m.error.len = (uint16_t)strlen(m.error.text);
		if (rx_send(r, &m) == 0) {
			r->error_out = true;
			return; /* disconnect once it went out: send_done() */
		}
	}
	disconnect(r);
}

void rx_abort(struct rx *r, const char *why)
{
	rx_fail(r, CP_E_ABORT, CP_EXIT_INTERRUPTED, "%s", why);
}

static int err_result(unsigned int code)
{
	switch (code) {
	case CP_E_IO:
	case CP_E_NOSPC:
		return CP_EXIT_LOCAL_IO;
	case CP_E_CHECKSUM:
	case CP_E_PROTO:
		return CP_EXIT_INTEGRITY;
	default:
		return CP_EXIT_REFUSED;
	}
}

/* The store gave up on the file with cp_err @code (why in r->st.why). */
static void store_failed(struct rx *r, int code)
{
	rx_fail(r, (unsigned int)code, err_result((unsigned int)code), "%s", r->st.why);
}

/* Between FILE_START and FILE_DONE: a lost sender loses this file. */
static bool in_file(const struct rx *r)
{
	return r->state >= RX_OPEN && r->state <= RX_ENTRY;
}

/* The slots' memory windows, freed before their QP: rxe in 6.1 hangs
 * freeing a type 2 window still bound to a QP already destroyed. */
void rx_free_windows(struct rx *r)
{
	for (unsigned int i = 0; r->slots && i < r->w.window; i++) {
		rr_mw_dealloc(r->slots[i].mw);
		r->slots[i].mw = NULL;
	}
}

/*
 * Everything registered in the connection's own protection domain, gone
 * before the endpoint frees it (a PD with regions left cannot be freed):
 * once nothing posted names them any more.
 */
static void release_regions(struct rx *r)
{
	rx_free_windows(r); /* before their region: a bound window holds it */
	rr_mr_dereg(r->win_mr);
	r->win_mr = NULL;
	rr_mr_dereg(r->ctl.mr);
	r->ctl.mr = NULL;
}

static bool granting(const struct rx *r)
{
	return r->state == RX_IDLE || in_file(r);
}

static uint32_t slot_key(const struct rx *r, const struct rx_slot *sl)
{
	return sl->mw ? sl->mw->rkey : r->win_mr->rkey;
}

/* Grant the seqs whose slots are bound, in order, each with its key. */
static void send_grant(struct rx *r)
{
	struct cp_msg m = {.type = CP_GRANT};
	uint32_t limit = r->limit_sent;
	int rc;

	if (!granting(r) || r->grants_out >= RX_GRANTS_OUT)
		return;
	while (limit != r->bound && m.grant.nkeys < CP_GRANT_KEYS_MAX) {
		const struct rx_slot *sl = &r->slots[limit % r->w.window];

		if (sl->binding)
			break;
		m.grant.keys[m.grant.nkeys++] = slot_key(r, sl);
		limit++;
	}
	if (!m.grant.nkeys)
		return;
	m.grant.limit = limit;
	rc = rx_send(r, &m);
	if (rc) {
		if (send_failed(rc))
			rx_fail(r, 0, CP_EXIT_NET, "cannot send a GRANT");
		return;
	}
	r->grants_out++;
	r->limit_sent = limit;
	r->w.limit = limit;
}

/* A slot's bind or invalidate ended: does the connection go on? */
static bool slot_op_ok(struct rx *r, const struct rr_completion *c, const char *what)
{
	if (r->state == RX_CLOSING)
		return false;
	if (c->status) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "%s a slot's window: %s (%s)", what,
			strerror(-c->status), ibv_wc_status_str(c->wc_status));
		return false;
	}
	return true;
}

static void bind_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct rx_slot *sl = data;

	(void)ep;
	sl->binding = false;
	if (slot_op_ok(sl->r, c, "binding"))
		send_grant(sl->r);
}

/*
 * Bind the slots of the seqs the next grants will give, a fresh key each:
 * a slot is ready once its last chunk was copied out and its window shut.
 */
static void bind_slots(struct rx *r)
{
	while (granting(r) && r->bound - r->released < r->w.window) {
		struct rx_slot *sl = &r->slots[r->bound % r->w.window];
		int rc;

		if (sl->invalidating)
			break;
		if (sl->mw) {
			rc = rr_ep_post_bind_mw(r->ep, sl->mw, ibv_inc_rkey(sl->mw->rkey),
						r->win_mr,
						r->win + (size_t)(sl - r->slots) * r->w.chunk,
						r->w.chunk, IBV_ACCESS_REMOTE_WRITE, bind_done, sl);
			if (rc) {
				rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "binding a slot's window: %s",
					strerror(-rc));
				return;
			}
			sl->binding = true;
		}
		r->bound++;
	}
	send_grant(r);
}

static void inv_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct rx_slot *sl = data;

	(void)ep;
	sl->invalidating = false;
	if (slot_op_ok(sl->r, c, "shutting"))
		bind_slots(sl->r);
}

static void send_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct rx *r = rr_ep_data(ep);
	uint8_t type = cp_ctl_sent(&r->ctl, data);

	if (type == CP_GRANT)
		r->grants_out--;
	if (type == CP_ERROR)
		r->error_out = false;
	if (c->status) {
		/* Mid-file this is a lost sender as much as a disconnect is
		 * (whichever the killed peer's QP shows first): say both. */
		if (c->status != -ECANCELED && in_file(r))
			rx_fail(r, 0, CP_EXIT_NET,
				"connection lost during %s after %llu bytes (%s SEND: %s); %s",
				r->name, (unsigned long long)(r->w_off + r->w.got),
				cp_type_name(type), ibv_wc_status_str(c->wc_status),
				r->st.partial ? "the partial is kept, to resume from"
					      : "nothing stored");
		else if (c->status != -ECANCELED)
			rx_fail(r, 0, CP_EXIT_NET, "%s SEND failed: %s (%s)", cp_type_name(type),
				strerror(-c->status), ibv_wc_status_str(c->wc_status));
		if (r->state == RX_CLOSING)
			disconnect(r);
		return;
	}
	if (type == CP_ERROR)
		disconnect(r);
	else if (type == CP_GRANT)
		send_grant(r);
}

static void finish_file(struct rx *r);
static void open_file(struct rx *r, const char *name);
static void entry_done(struct rx *r, const struct cp_msg *done);

/* FILE_END came, the file is open and every chunk left the window,
 * reached the file and was hashed: on to verifying it. */
static void maybe_finish(struct rx *r)
{
	if (r->state == RX_FILE && r->end_seen && !r->writes && r->released == r->end_seq &&
	    cp_hasher_caught_up(&r->hs))
		finish_file(r);
}

static int submit_write(struct rx_stage *st)
{
	struct rx *r = st->r;
	struct io_uring_sqe *sqe;
	int rc = cp_store_unaligned(&r->st, st->off + st->done, st->len - st->done);

	if (rc)
		return rc;
	sqe = cp_loop_sqe(r->env->lp, &st->op);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_write(sqe, r->st.fd, st->buf + st->done, st->len - st->done,
			    st->off + st->done);
	r->io_inflight++;
	return 0;
}

/*
 * Arrived chunks leave the window in seq order, each into a free stage,
 * and their slots are bound and granted again.
 */
static void stage_chunks(struct rx *r)
{
	/* Before the file is open (RX_OPEN) chunks wait in their slots, and
	 * those of the next file until it is. */
	uint32_t upto = r->end_seen ? r->end_seq : r->w.next_seq;

	while (r->state == RX_FILE && r->released != upto) {
		uint32_t slot = r->released % r->w.window;
		struct rx_slot *sl = &r->slots[slot];
		struct rx_stage *st = NULL;
		int64_t job;
		int rc;

		for (unsigned int i = 0; i < r->nstages && !st; i++)
			if (!r->stages[i].busy)
				st = &r->stages[i];
		if (!st)
			break; /* it waits in its slot for a write to complete */
		/* A tail that drops O_DIRECT waits for the writes before it:
		 * queued behind the flag change, they would lose it too. */
		if (r->writes && !cp_store_aligned(&r->st, r->file_off, sl->len))
			break;
		memcpy(st->buf, r->win + (size_t)slot * r->w.chunk, sl->len);
		/* The receive says how long the write was, not where it began:
		 * a chunk written at an offset leaves the head of [0, len) as
		 * it was. Zeroed now, a slot holds nothing but zeros and what
		 * its own peer wrote there, whatever the next write covers. */
		memset(r->win + (size_t)slot * r->w.chunk, 0, sl->len);
		job = cp_hasher_add(&r->hs, st->buf, sl->len);
		if (job < 0) {
			rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue a hash");
			return;
		}
		st->job = (uint64_t)job;
		st->written = false;
		sl->arrived = false;
		r->released++;
		st->busy = true;
		st->len = sl->len;
		st->done = 0;
		st->off = r->file_off;
		r->file_off += sl->len;
		r->writes++;
		rc = submit_write(st);
		if (rc) {
			r->writes--;
			st->busy = false;
			rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue a write to %s: %s", r->name,
				strerror(-rc));
			return;
		}
	}
	bind_slots(r);
}

static void write_done(struct cp_op *op, int res)
{
	struct rx_stage *st = (struct rx_stage *)op;
	struct rx *r = st->r;
	int rc;

	r->io_inflight--;
	r->writes--;
	if (r->state == RX_CLOSING) {
		st->busy = false;
		return;
	}
	if (res <= 0) {
		int err = res ? -res : EIO;

		rx_fail(r, err == ENOSPC || err == EDQUOT ? CP_E_NOSPC : CP_E_IO, CP_EXIT_LOCAL_IO,
			"writing %s: %s", r->name, strerror(err));
		return;
	}
	st->done += (uint32_t)res;
	r->last_activity = cp_now_ns();
	if (st->done < st->len) {
		/* A short write: the rest goes on from where it stopped. */
		r->writes++;
		rc = submit_write(st);
		if (rc) {
			r->writes--;
			rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue a write to %s: %s", r->name,
				strerror(-rc));
		}
		return;
	}
	st->written = true;
	st->busy = st->job >= cp_hasher_done(&r->hs);
	stage_chunks(r);
	maybe_finish(r);
}

static void scan_done(struct rx *r);
static void same_done(struct rx *r);
static void start_scan(struct rx *r);

/* The hashing thread got further: the stages it is done with are free. */
static void rx_hashed(struct cp_hasher *h)
{
	struct rx *r = (struct rx *)((char *)h - offsetof(struct rx, hs));
	uint64_t done = cp_hasher_done(h);

	for (unsigned int i = 0; i < r->nstages; i++)
		if (r->stages[i].busy && r->stages[i].written && r->stages[i].job < done)
			r->stages[i].busy = false;
	r->last_activity = cp_now_ns(); /* a long file read is progress too */
	if (r->state == RX_SCAN && cp_hasher_caught_up(h))
		scan_done(r);
	else if (r->state == RX_SAME && cp_hasher_caught_up(h))
		same_done(r);
	stage_chunks(r);
	maybe_finish(r);
}

static void on_chunk(struct rx *r, uint32_t imm, uint32_t len)
{
	char why[160];
	struct rx_slot *sl;
	uint32_t slot;

	if (!in_file(r) || !r->w.file_open) {
		rx_fail(r, CP_E_PROTO, CP_EXIT_INTEGRITY, "data chunk %u outside a file", imm);
		return;
	}
	if (cp_rx_admit(&r->w, imm, len, &slot, why, sizeof(why))) {
		rx_fail(r, CP_E_PROTO, CP_EXIT_INTEGRITY, "%s", why);
		return;
	}
	r->env->n->chunks++;
	sl = &r->slots[slot];
	if (sl->arrived) {
		/* cp_rx_admit() only admits granted seqs, and slots are granted free. */
		rx_fail(r, CP_E_PROTO, CP_EXIT_INTEGRITY, "slot %u still busy", slot);
		return;
	}
	sl->arrived = true;
	sl->len = len;
	/* Its grant is used up: shut the slot before anything reads it. */
	if (sl->mw) {
		int rc = rr_ep_post_local_inv(r->ep, sl->mw->rkey, inv_done, sl);

		if (rc) {
			rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "shutting a slot's window: %s",
				strerror(-rc));
			return;
		}
		sl->invalidating = true;
	}
	stage_chunks(r);
}

static struct rx *rx_of_store(struct cp_store *st)
{
	return (struct rx *)((char *)st - offsetof(struct rx, st));
}

static void file_stored(struct rx *r, const char *how);

/* The file has its name (or could not get it). */
static void commit_done(struct cp_store *st, int code)
{
	struct rx *r = rx_of_store(st);

	r->io_inflight--;
	r->committing = false;
	if (r->state == RX_CLOSING)
		return;
	if (code) {
		store_failed(r, code);
		return;
	}
	file_stored(r, "received");
}

/* The file is stored (or was already, with the same content): FILE_DONE,
 * and the next file, if it began meanwhile. */
static void file_stored(struct rx *r, const char *how)
{
	struct cp_msg m = {.type = CP_FILE_DONE};

	r->file_active = false;
	m.end.bytes = r->end_bytes;
	m.end.checksum = r->end_sum;
	r->env->stored(r->env->data, r->end_bytes, r->end_sum);
	if (!quiet(r))
		cp_log("serve: %s: %s %s (%llu bytes, xxh3 %016llx)", r->peer, how, r->name,
		       (unsigned long long)r->end_bytes, (unsigned long long)r->end_sum);
	entry_done(r, &m);
}

static void entry_done(struct rx *r, const struct cp_msg *done)
{
	int rc;

	r->state = RX_IDLE;
	r->end_seen = false;
	rc = rx_send(r, done);
	if (rc) {
		if (send_failed(rc))
			rx_fail(r, 0, CP_EXIT_NET, "cannot send FILE_DONE");
		return;
	}
	if (r->q.on) {
		/* The next file began meanwhile: its chunks (and maybe its
		 * FILE_END) are in; now it gets its file. */
		r->q.on = false;
		r->end_seen = r->q.end_seen;
		r->end_seq = r->q.end_seq;
		r->end_bytes = r->q.bytes;
		r->end_sum = r->q.sum;
		r->meta = r->q.meta;
		r->mode = r->q.mode;
		r->mtime = r->q.mtime;
		r->cur_resume = r->q.resume;
		r->cur_stream = r->q.stream;
		r->cur_size = r->q.size;
		open_file(r, r->q.name);
	}
}

static void sync_done(struct cp_op *op, int res)
{
	struct rx *r = (struct rx *)((char *)op - offsetof(struct rx, sync_op));
	int code;

	r->io_inflight--;
	if (r->state == RX_CLOSING)
		return;
	if (res < 0) {
		rx_fail(r, res == -ENOSPC ? CP_E_NOSPC : CP_E_IO, CP_EXIT_LOCAL_IO, "fsync %s: %s",
			r->name, strerror(-res));
		return;
	}
	code = cp_store_commit(&r->st, commit_done);
	if (code) {
		store_failed(r, code);
		return;
	}
	r->io_inflight++;
	r->committing = true; /* past this point, no going back */
}

/* Nothing of the file being stored is wanted any more (a partial neither). */
static void drop_file(struct rx *r)
{
	r->st.keep = false;
	cp_store_abort(&r->st);
	r->file_active = false;
}

/* Open the file under its name, to hash it: 0, or failed (said). */
static int open_named(struct rx *r)
{
	struct stat sb;

	/* The store found a regular file there; read-only, never through a
	 * symbolic link put there since, and a FIFO cannot block. */
	r->same_fd =
		openat(r->st.parentfd, r->st.base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (r->same_fd < 0 || fstat(r->same_fd, &sb) || !S_ISREG(sb.st_mode)) {
		rx_fail(r, CP_E_EXISTS, CP_EXIT_REFUSED, "refusing to replace %s: %s", r->name,
			r->same_fd < 0 ? strerror(errno) : "not a regular file");
		return -1;
	}
	r->st.exist_size = (uint64_t)sb.st_size;
	return 0;
}

static void close_named(struct rx *r)
{
	if (r->same_fd >= 0)
		close(r->same_fd);
	r->same_fd = -1;
}

/* The name exists (no --force): received in full and verified, the file
 * is a success if the one under the name has the same length and hash. */
static void same_check(struct rx *r)
{
	if (r->st.exist_size != r->end_bytes || open_named(r))
		goto differs;
	if (r->st.exist_size != r->end_bytes)
		goto differs;
	cp_hasher_reset(&r->hs);
	if (cp_hasher_add_fd(&r->hs, r->same_fd, 0, r->end_bytes) < 0) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue a hash");
		return;
	}
	r->state = RX_SAME;
	return;
differs:
	if (r->state != RX_CLOSING)
		rx_fail(r, CP_E_EXISTS, CP_EXIT_REFUSED,
			"refusing to replace %s: it exists with other content", r->name);
}

static void same_done(struct rx *r)
{
	int err = cp_hasher_error(&r->hs);
	uint64_t sum = cp_hasher_digest(&r->hs);

	close_named(r);
	if (err || sum != r->end_sum) {
		rx_fail(r, CP_E_EXISTS, CP_EXIT_REFUSED,
			"refusing to replace %s: it exists with other content%s%s", r->name,
			err ? ": " : "", err ? strerror(-err) : "");
		return;
	}
	drop_file(r);
	file_stored(r, "already had");
}

/* Every chunk is on disk and FILE_END arrived: verify, fsync, name it. */
static void finish_file(struct rx *r)
{
	uint64_t sum = cp_hasher_digest(&r->hs);
	int code;
	struct io_uring_sqe *sqe;

	if (sum != r->end_sum) {
		/* What was received is hashed here and logged, never sent: a
		 * peer learns nothing of bytes it did not write itself. */
		cp_log("serve: %s: %s: received bytes hash to %016llx", r->peer, r->name,
		       (unsigned long long)sum);
		rx_fail(r, CP_E_CHECKSUM, CP_EXIT_INTEGRITY,
			"%s: checksum mismatch (sender %016llx)", r->name,
			(unsigned long long)r->end_sum);
		return;
	}
	if (r->have_named) {
		/* FILE_FROM at its end: the file under its name is this one. */
		drop_file(r);
		file_stored(r, "already had");
		return;
	}
	if (r->st.exists) {
		same_check(r);
		return;
	}
	/* Mode and mtime before the fsync, which makes them last too.
	 * Without the sender's: what a new file gets (0644 less umask). */
	code = r->meta ? cp_store_meta(&r->st, r->mode, &r->mtime)
		       : cp_store_meta(&r->st, 0644, NULL);
	if (code) {
		store_failed(r, code);
		return;
	}
	r->state = RX_SYNC;
	sqe = cp_loop_sqe(r->env->lp, &r->sync_op);
	if (!sqe) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue fsync");
		return;
	}
	io_uring_prep_fsync(sqe, r->st.fd, 0);
	r->io_inflight++;
}

static bool token_ok(const struct rx *r, const struct cp_msg *m)
{
	const struct cp_opts *o = r->env->o;
	unsigned int diff = 0;

	if (!o->have_token)
		return true;
	/* Same time whatever the content, given the length. */
	for (unsigned int i = 0; i < CP_TOKEN_MAX; i++)
		diff |= (unsigned int)(m->hello.token[i] ^ o->token[i]);
	return !diff && m->hello.token_len == o->token_len;
}

/*
 * The token first: a stranger learns nothing, not even "busy", and never
 * counts toward --max-conns or --count. Only then is it admitted.
 */
static void on_hello(struct rx *r, const struct cp_msg *m)
{
	struct rx_env *env = r->env;
	const struct cp_opts *o = env->o;
	struct cp_msg w = {.type = CP_WELCOME};
	const struct sockaddr *src = (const struct sockaddr *)&r->src;
	char why[128];
	unsigned int held;
	bool use_mw;
	int rc;

	/* A source that failed too often is not even checked: a guesser
	 * gets one try per hold, whatever it sends meanwhile. */
	held = o->have_token ? cp_gate_held(env->gate, src, cp_now_ns()) : 0;
	if (held) {
		rx_fail(r, CP_E_AUTH, CP_EXIT_REFUSED,
			"refused: too many wrong tokens from %s, try again in %u s", r->peer, held);
		return;
	}
	if (!token_ok(r, m)) {
		held = cp_gate_failed(env->gate, src, cp_now_ns());
		if (held)
			rx_fail(r, CP_E_AUTH, CP_EXIT_REFUSED,
				"refused: %s token; %s held back for %u s",
				m->hello.token_len ? "wrong" : "no", r->peer, held);
		else
			rx_fail(r, CP_E_AUTH, CP_EXIT_REFUSED, "refused: %s token",
				m->hello.token_len ? "wrong" : "no");
		return;
	}
	if (o->have_token)
		cp_gate_passed(env->gate, src);
	if (env->admit(env->data, why, sizeof(why))) {
		rx_fail(r, CP_E_BUSY, CP_EXIT_REFUSED, "%s", why);
		return;
	}
	leave_unauth(r);
	r->authed = true;
	r->w.chunk = m->hello.chunk < o->chunk ? m->hello.chunk : o->chunk;
	r->w.window = m->hello.window < o->window ? m->hello.window : o->window;
	r->win_len = (size_t)r->w.chunk * r->w.window;
	/* Zero pages, never a freed buffer's bytes (another connection's
	 * file): whatever a chunk's write leaves out is zero. */
	r->win = mmap(NULL, r->win_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (r->win == MAP_FAILED)
		r->win = NULL;
	r->slots = calloc(r->w.window, sizeof(*r->slots));
	r->nstages = r->w.window < RX_STAGES ? r->w.window : RX_STAGES;
	r->stage_mem = aligned_alloc(4096, (size_t)r->w.chunk * r->nstages);
	if (!r->win || !r->slots || !r->stage_mem) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "out of memory for a %zu-byte window",
			r->win_len);
		return;
	}
	rc = cp_hasher_init(&r->hs, env->lp, rx_hashed);
	if (rc) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot start a hashing thread: %s",
			strerror(-rc));
		return;
	}
	for (unsigned int i = 0; i < r->nstages; i++) {
		r->stages[i].r = r;
		r->stages[i].op.done = write_done;
		r->stages[i].buf = r->stage_mem + (size_t)i * r->w.chunk;
	}
	/*
	 * The only memory the peer may ever write, and only this peer: the
	 * region itself grants no remote access (its key would open it to
	 * every QP of the device's PD, every other connection included); each
	 * slot's type 2 memory window, bound on this connection's QP for one
	 * grant at a time, does. A device without memory windows falls back
	 * to the region's own key: the connection's own protection domain
	 * (RR_EP_OWN_PD) still keeps it from every other QP.
	 */
	use_mw = true;
	for (unsigned int i = 0; i < r->w.window && use_mw; i++) {
		r->slots[i].r = r;
		rc = cp_mw_forced_off() ? -EOPNOTSUPP : rr_ep_alloc_mw(r->ep, &r->slots[i].mw);
		if ((rc == -EOPNOTSUPP || rc == -ENOSYS) && o->require_mw) {
			rx_fail(r, CP_E_IO, CP_EXIT_FAIL,
				"no memory windows on this device, and --require-mw");
			return;
		} else if (rc == -EOPNOTSUPP || rc == -ENOSYS) {
			if (!atomic_exchange(&mw_warned, true))
				cp_log("serve: no memory windows on this device: a connection's "
				       "window stays open to its own peer for the whole "
				       "connection (its own protection domain keeps every "
				       "other connection out)");
			use_mw = false;
		} else if (rc) {
			rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "allocating a memory window: %s",
				strerror(-rc));
			return;
		}
	}
	if (!use_mw)
		rx_free_windows(r);
	rc = rr_ep_reg_mr(r->ep, r->win, r->win_len,
			  use_mw ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_WRITE, &r->win_mr);
	if (rc) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "registering the window: %s", strerror(-rc));
		return;
	}
	/* WELCOME grants nothing: GRANTs with the keys follow as slots bind. */
	w.welcome.chunk = r->w.chunk;
	w.welcome.window = r->w.window;
	w.welcome.addr = (uintptr_t)r->win;
	r->state = RX_IDLE;
	rc = rx_send(r, &w);
	if (rc) {
		if (send_failed(rc))
			rx_fail(r, 0, CP_EXIT_NET, "cannot send WELCOME");
		return;
	}
	bind_slots(r);
}

/* The file of FILE_START is open (or could not be): the chunks that came
 * meanwhile go to it. */
static void open_done(struct cp_store *st, int code)
{
	struct rx *r = rx_of_store(st);

	r->io_inflight--;
	if (!code)
		r->file_active = true;
	if (r->state == RX_CLOSING) {
		/* rx_fail() left the file to us: nothing of ours is in flight now. */
		if (r->file_active && !r->io_inflight) {
			cp_store_abort(st);
			r->file_active = false;
		}
		return;
	}
	if (code) {
		store_failed(r, code);
		return;
	}
	/* Another file has the name (no --force): one of another length is
	 * refused before any data; else the content decides, at the end. */
	if (st->exists && !r->cur_stream && st->exist_size != r->cur_size) {
		rx_fail(r, CP_E_EXISTS, CP_EXIT_REFUSED,
			"refusing to replace %s: it exists with other content", r->name);
		return;
	}
	if (r->cur_resume) {
		start_scan(r);
		return;
	}
	r->state = RX_FILE;
	stage_chunks(r);
	maybe_finish(r);
}

/* A file to resume is open: hash what we hold of it (the file under its
 * name, or the partial) on the hashing thread, then say so (scan_done). */
static void start_scan(struct rx *r)
{
	int fd = r->st.fd;

	r->state = RX_SCAN;
	r->have_named = r->st.exists;
	if (r->have_named) {
		if (open_named(r))
			return;
		fd = r->same_fd;
		r->have = r->cur_size;
	} else {
		r->have = r->st.partial_size;
		if (r->st.direct && r->have) {
			/* O_DIRECT reads want aligned buffers: read it through
			 * a descriptor of its own, the page cache's. */
			char path[64];

			snprintf(path, sizeof(path), "/proc/self/fd/%d", r->st.fd);
			r->same_fd = open(path, O_RDONLY | O_CLOEXEC);
			if (r->same_fd < 0) {
				rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO,
					"reopening the partial of %s: %s", r->name,
					strerror(errno));
				return;
			}
			fd = r->same_fd;
		}
		if (r->have > r->cur_size) {
			/* Longer than the file: not a beginning of it. */
			if (ftruncate(r->st.fd, 0)) {
				rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO,
					"truncating the partial of %s: %s", r->name,
					strerror(errno));
				return;
			}
			r->have = 0;
		}
	}
	if (!r->have) {
		scan_done(r);
		return;
	}
	if (cp_hasher_add_fd(&r->hs, fd, 0, r->have) < 0)
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue a hash");
}

/* What we hold is hashed: FILE_HAVE, and the sender's FILE_FROM is due. */
static void scan_done(struct rx *r)
{
	struct cp_msg m = {.type = CP_FILE_HAVE};
	int err = cp_hasher_error(&r->hs);

	close_named(r);
	if (err) {
		rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO, "reading what we hold of %s: %s", r->name,
			strerror(-err));
		return;
	}
	m.have.bytes = r->have;
	m.have.checksum = cp_hasher_digest(&r->hs);
	m.have.flags = r->have_named ? CP_HAVE_NAMED : 0;
	r->state = RX_FROM;
	if (send_failed(rx_send(r, &m)))
		rx_fail(r, 0, CP_EXIT_NET, "cannot send FILE_HAVE");
}

/* FILE_FROM: the chunks begin here, after what we hold or at 0; the hash
 * goes on from what we hold, or starts again. */
static void on_from(struct rx *r, const struct cp_msg *m)
{
	uint64_t off = m->from.offset;

	if (off && off != r->have) {
		rx_fail(r, CP_E_PROTO, CP_EXIT_INTEGRITY, "%s: FILE_FROM %llu, we hold %llu",
			r->name, (unsigned long long)off, (unsigned long long)r->have);
		return;
	}
	if (r->have_named && off != r->have) {
		rx_fail(r, CP_E_EXISTS, CP_EXIT_REFUSED,
			"refusing to replace %s: it exists with other content", r->name);
		return;
	}
	if (!off && r->have) {
		if (ftruncate(r->st.fd, 0)) {
			rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO, "truncating the partial of %s: %s",
				r->name, strerror(errno));
			return;
		}
		cp_hasher_reset(&r->hs);
	}
	if (off && !quiet(r) && !r->have_named)
		cp_log("serve: %s: resuming %s at %llu of %llu bytes", r->peer, r->name,
		       (unsigned long long)off, (unsigned long long)r->cur_size);
	r->file_off = off;
	r->w_off = off;
	r->w.size = r->cur_size - off;
	r->w.got = 0;
	r->w.stream = false;
	r->w.file_open = true;
	r->state = RX_FILE;
	stage_chunks(r);
	maybe_finish(r);
}

/* Open @name, written from offset 0 and hashed anew; its chunks wait in
 * their slots meanwhile (a file to resume has none before FILE_FROM). */
static void open_file(struct rx *r, const char *name)
{
	int code;

	memcpy(r->name, name, sizeof(r->name));
	r->file_off = 0;
	r->have = 0;
	r->have_named = false;
	close_named(r);
	cp_hasher_reset(&r->hs);
	code = cp_store_open(&r->st, r->env->lp, r->env->dirfd, r->name,
			     CP_STORE_SAME | (r->env->o->force ? CP_STORE_FORCE : 0) |
				     (r->env->o->direct ? CP_STORE_DIRECT : 0) |
				     (r->cur_resume ? CP_STORE_PARTIAL : 0),
			     open_done);

	if (code) {
		store_failed(r, code);
		return;
	}
	r->io_inflight++;
	r->state = RX_OPEN;
}

/* FILE_START: the window admits the file's chunks from now on. Between
 * files it is opened at once; after the last file's FILE_END it waits in
 * r->q until that one is named. */
static void on_start(struct rx *r, const struct cp_msg *m)
{
	bool resume = m->start.flags & CP_START_RESUME;

	/* Its chunks may come before its file is open; those of a file to
	 * resume wait for FILE_FROM. */
	r->w.file_open = !resume;
	r->w.stream = m->start.flags & CP_START_STREAM;
	r->w.size = m->start.size;
	r->w.got = 0;
	r->w_off = 0;
	if (r->state != RX_IDLE) {
		r->env->n->files_ahead++;
		r->q.on = true;
		r->q.end_seen = false;
		r->q.resume = resume;
		r->q.stream = r->w.stream;
		r->q.size = m->start.size;
		memcpy(r->q.name, m->start.name, sizeof(r->q.name));
		r->q.meta = m->start.flags & CP_START_META;
		r->q.mode = m->start.mode;
		r->q.mtime = m->start.mtime;
		return;
	}
	r->end_seen = false;
	r->meta = m->start.flags & CP_START_META;
	r->mode = m->start.mode;
	r->mtime = m->start.mtime;
	r->cur_resume = resume;
	r->cur_stream = r->w.stream;
	r->cur_size = m->start.size;
	open_file(r, m->start.name);
}

/* FILE_END of the file the window admits: every chunk of it came before
 * (RC keeps the order), so its length is checked now and the window is
 * free for the next file. */
static void on_end(struct rx *r, const struct cp_msg *m)
{
	const char *name = r->q.on ? r->q.name : r->name;

	/* A resumed file's FILE_END counts what we held too. */
	if (m->end.bytes != r->w_off + r->w.got || (!r->w.stream && r->w.got != r->w.size)) {
		rx_fail(r, CP_E_CHECKSUM, CP_EXIT_INTEGRITY,
			"%s: length mismatch (sender says %llu, received %llu)", name,
			(unsigned long long)m->end.bytes,
			(unsigned long long)(r->w_off + r->w.got));
		return;
	}
	r->w.file_open = false;
	if (r->q.on) {
		r->q.end_seen = true;
		r->q.end_seq = r->w.next_seq;
		r->q.bytes = m->end.bytes;
		r->q.sum = m->end.checksum;
		return;
	}
	r->end_seen = true;
	r->end_seq = r->w.next_seq;
	r->end_bytes = m->end.bytes;
	r->end_sum = m->end.checksum;
	maybe_finish(r);
}

/* The entry's directory was synced: answered like a file, with 0 bytes
 * and checksum 0, and the next file, if it began, goes on. */
static void entry_synced(struct cp_op *op, int res)
{
	struct rx *r = (struct rx *)((char *)op - offsetof(struct rx, entry_op));
	struct cp_msg m = {.type = CP_FILE_DONE};

	r->io_inflight--;
	close(r->entry_fd);
	r->entry_fd = -1;
	if (r->state == RX_CLOSING)
		return;
	if (res < 0 && res != -EINVAL) {
		rx_fail(r, res == -ENOSPC ? CP_E_NOSPC : CP_E_IO, CP_EXIT_LOCAL_IO,
			"fsync of the directory of %s: %s", r->name, strerror(-res));
		return;
	}
	entry_done(r, &m);
}

/*
 * MKDIR, SYMLINK, DIR_META: made at once (cp/store.c, beneath DIR and
 * through no link), then the directory they changed is synced through
 * the ring. They come only between files (the sender waits for the last
 * FILE_DONE), and the next file may begin meanwhile, as after a FILE_END.
 */
static void on_entry(struct rx *r, const struct cp_msg *m)
{
	const char *what = m->type == CP_MKDIR ? "made directory" : "made link";
	struct io_uring_sqe *sqe;
	char why[sizeof(r->st.why)];
	int code, fd = -1;

	memcpy(r->name, m->entry.name, sizeof(r->name));
	if (m->type == CP_MKDIR)
		code = cp_store_mkdir(r->env->dirfd, r->name, &fd, why, sizeof(why));
	else if (m->type == CP_SYMLINK)
		code = cp_store_symlink(r->env->dirfd, r->name, m->entry.target,
					&m->entry.mtime, r->env->o->force, &fd, why, sizeof(why));
	else
		code = cp_store_dir_meta(r->env->dirfd, r->name, m->entry.mode, &m->entry.mtime,
					 &fd, why, sizeof(why));
	if (code) {
		rx_fail(r, (unsigned int)code, err_result((unsigned int)code), "%s", why);
		return;
	}
	if (!quiet(r) && m->type != CP_DIR_META)
		cp_log("serve: %s: %s %s%s%s", r->peer, what, r->name,
		       m->type == CP_SYMLINK ? " -> " : "",
		       m->type == CP_SYMLINK ? m->entry.target : "");
	r->entry_fd = fd;
	sqe = cp_loop_sqe(r->env->lp, &r->entry_op);
	if (!sqe) {
		close(fd);
		r->entry_fd = -1;
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue fsync");
		return;
	}
	io_uring_prep_fsync(sqe, fd, 0);
	r->io_inflight++;
	/* Nothing of it passes through the window: the next file's chunks
	 * wait for it as for a file whose FILE_END came. */
	r->state = RX_ENTRY;
	r->end_seen = true;
	r->end_seq = r->w.next_seq;
	r->end_bytes = r->end_sum = 0;
}

static void on_message(struct rx *r, const uint8_t *buf, uint32_t len)
{
	struct cp_msg m;
	char why[160];
	int rc;

	rc = cp_decode(buf, len, &m, why, sizeof(why));
	if (rc == -EACCES) {
		rx_fail(r, CP_E_NAME, CP_EXIT_REFUSED, "%s", why);
		return;
	}
	if (rc) {
		rx_fail(r, CP_E_PROTO, CP_EXIT_INTEGRITY, "bad message: %s", why);
		return;
	}
	if (m.type == CP_ERROR) {
		rx_fail(r, 0, CP_EXIT_NET, "sender gave up: %s: %s", cp_err_name(m.error.code),
			m.error.text);
		return;
	}
	if (m.type == CP_HELLO && r->state == RX_HELLO) {
		on_hello(r, &m);
	} else if (m.type == CP_FILE_START &&
		   (r->state == RX_IDLE || (in_file(r) && r->end_seen && !r->q.on))) {
		on_start(r, &m);
	} else if (m.type == CP_FILE_END && in_file(r) && r->w.file_open) {
		on_end(r, &m);
	} else if ((m.type == CP_MKDIR || m.type == CP_SYMLINK || m.type == CP_DIR_META) &&
		   r->state == RX_IDLE) {
		on_entry(r, &m);
	} else if (m.type == CP_FILE_FROM && r->state == RX_FROM) {
		on_from(r, &m);
	} else {
		rx_fail(r, CP_E_PROTO, CP_EXIT_INTEGRITY, "unexpected %s", cp_type_name(m.type));
	}
}

static void recv_done(rr_ep *ep, const struct rr_completion *c, void *data);

static int post_recv(struct rx *r, uint8_t *buf)
{
	int rc = cp_ctl_recv(&r->ctl, r->ep, buf, recv_done);

	if (!rc)
		r->recvs_posted++;
	/* -ENOTCONN: the connection is ending, and what arrived before the
	 * end is being handed out first (a sender's ABORT may be next);
	 * on_disconnect follows and says how it ended. */
	return rc == -ENOTCONN ? 0 : rc;
}

static void recv_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct rx *r = rr_ep_data(ep);
	uint8_t *buf = data;

	r->recvs_posted--;
	if (c->status) {
		/* Flushed: a connection that never got established is dropped
		 * (and freed) by the library, so ours goes once all came back. */
		if (!r->accepted && !r->recvs_posted) {
			/* The library frees the endpoint, and its PD, by itself. */
			release_regions(r);
			r->orphan = true;
		} else if (c->status != -ECANCELED) {
			rx_fail(r, 0, CP_EXIT_NET, "RECV failed: %s", strerror(-c->status));
		} else if (r->accepted && !r->down && r->state != RX_CLOSING && !r->lost) {
			/* Not flushed by a disconnect of ours: the peer's comes
			 * with its own flushes (on_down() follows), a QP put in
			 * error by a bad RDMA access of the peer's comes alone.
			 * rx_poll() tells them apart. */
			r->lost = true;
			r->lost_status = 0;
			r->lost_at = cp_now_ns();
		}
		return;
	}
	r->last_activity = cp_now_ns();
	if (r->state == RX_CLOSING)
		return;
	if (!r->accepted) {
		/* Only HELLO can come this early; handled in rx_accepted(). */
		if (r->pending || c->has_imm) {
			rx_fail(r, 0, CP_EXIT_INTEGRITY, "data before the connection was accepted");
			return;
		}
		r->pending = buf;
		r->pending_len = c->byte_len;
		return;
	}
	if (c->has_imm)
		on_chunk(r, c->imm_data, c->byte_len);
	else
		on_message(r, buf, c->byte_len);
	/* Back to the queue: the sender's credit counts on it. Anything the
	 * handling made us send is answered into the other receives. */
	if (r->state != RX_CLOSING && !r->down && post_recv(r, buf))
		rx_fail(r, 0, CP_EXIT_NET, "cannot repost a receive");
}

static void on_down(rr_ep *ep, int status, void *data)
{
	struct rx *r = data;

	/* A disconnect (the peer's, -ECONNRESET, or ours answered, 0)
	 * explains the flushes; any other status is the QP gone into error
	 * (a work completion's, an async event's as mlx5 raises for a bad
	 * RDMA access). */
	r->lost = status && status != -ECONNRESET;
	if (r->lost) {
		r->lost_status = status;
		r->lost_at = cp_now_ns();
	}
	if (!r->down) {
		r->down = true;
		r->down_at = cp_now_ns();
	}
}

/*
 * Dropped for a newer request of this thread (rx_create()), from inside
 * that request's callback: its endpoint goes now, so that what
 * --max-pending bounds are QPs, not only places in the gate; the rest of
 * it at its next rx_poll(). It was never admitted: no file I/O, no
 * windows. An established one gets no ERROR: posted from a callback, it
 * would be held to the end of the pass and dropped by the destroy.
 */
static void evict_now(struct rx *r)
{
	char why[128];

	if (r->state != RX_CLOSING) {
		snprintf(why, sizeof(why),
			 r->accepted
				 ? "no HELLO yet, dropped for a newer connection (--max-pending %u)"
				 : "connection not established, dropped for a newer request "
				   "(--max-pending %u)",
			 r->env->o->max_pending);
		rx_log(r, why);
		if (!r->result)
			r->result = CP_EXIT_NET;
		r->state = RX_CLOSING;
		r->closing_at = cp_now_ns();
	}
	r->gone = r->down = true;
	/* Its registrations before the PD the endpoint frees. */
	release_regions(r);
	/* Allowed from a callback of another endpoint of the bridge: its
	 * requests complete (flushed) before this returns, none runs later. */
	rr_ep_destroy(r->ep);
	r->ep = NULL;
}

struct rx *rx_create(struct rx_env *env, rr_ep *ep)
{
	struct sockaddr *sa = rdma_get_peer_addr(rr_ep_cm_id(ep));
	struct rx *r = calloc(1, sizeof(*r));
	struct cp_gate_ticket *v;
	int rc;

	if (!r)
		return NULL;
	r->env = env;
	r->ep = ep;
	r->sync_op.done = sync_done;
	r->entry_op.done = entry_synced;
	r->entry_fd = -1;
	r->st.fd = r->st.parentfd = -1;
	r->same_fd = -1;
	r->last_activity = r->born_at = cp_now_ns();
	snprintf(r->peer, sizeof(r->peer), "peer");
	if (sa && sa->sa_family == AF_INET) {
		inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, r->peer, sizeof(r->peer));
		memcpy(&r->src, sa, sizeof(struct sockaddr_in));
	} else if (sa && sa->sa_family == AF_INET6) {
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, r->peer,
			  sizeof(r->peer));
		memcpy(&r->src, sa, sizeof(struct sockaddr_in6));
	}
	/* Counted from its request on; a full gate makes room: a victim of
	 * this thread's goes at once, one of another thread's at that
	 * thread's next pass (rx_poll()). */
	v = cp_gate_enter_own(env->gate, &r->gt, env, r->born_at);
	if (v)
		evict_now((struct rx *)((char *)v - offsetof(struct rx, gt)));
	if (cp_ctl_alloc(&r->ctl, env->o->window + RX_SPARE_RECVS, RX_SENDS))
		goto err;
	rc = cp_ctl_reg(&r->ctl, ep);
	if (rc) {
		cp_log("serve: registering receive buffers: %s", strerror(-rc));
		goto err;
	}
	rr_ep_set_data(ep, r);
	rr_ep_set_on_disconnect(ep, on_down);
	for (unsigned int i = 0; i < r->ctl.nrecv; i++) {
		rc = post_recv(r, cp_ctl_recv_buf(&r->ctl, i));
		if (rc) {
			cp_log("serve: posting receives: %s", strerror(-rc));
			/* Those posted come back flushed when the library drops it. */
			r->accepted = false;
			if (!r->recvs_posted) {
				release_regions(r);
				r->orphan = true;
			}
			return r;
		}
	}
	return r;
err:
	leave_unauth(r);
	cp_ctl_free(&r->ctl);
	free(r);
	return NULL;
}

void rx_accepted(struct rx *r)
{
	r->accepted = true;
	cp_gate_established(r->env->gate, &r->gt);
	if (r->state == RX_CLOSING) {
		disconnect(r);
		return;
	}
	if (r->pending) {
		uint8_t *buf = r->pending;

		r->pending = NULL;
		on_message(r, buf, r->pending_len);
		if (r->state != RX_CLOSING && !r->down && post_recv(r, buf))
			rx_fail(r, 0, CP_EXIT_NET, "cannot repost a receive");
	}
}

/* File I/O of ours in flight, or a stage the hashing thread still reads. */
static bool io_busy(struct rx *r)
{
	cp_hasher_kick(&r->hs);
	return r->io_inflight || !cp_hasher_idle(&r->hs);
}

static void rx_free(struct rx *r)
{
	leave_unauth(r);
	if (r->file_active)
		cp_store_abort(&r->st);
	close_named(r);
	release_regions(r);
	cp_ctl_free(&r->ctl);
	cp_hasher_destroy(&r->hs);
	free(r->slots);
	free(r->stage_mem);
	if (r->win)
		munmap(r->win, r->win_len);
	free(r);
}

/* A connection never established, dropped by us: the library rejects it. */
static enum rx_poll_res drop_half_open(struct rx *r, const char *why)
{
	if (why)
		rx_log(r, why);
	leave_unauth(r);
	rr_ep_destroy(r->ep); /* its receives come back flushed, at once */
	rx_free(r);
	return RX_REFUSED;
}

/* Not admitted, refused, its ERROR out (or given up on): its QP and
 * buffers go now, without waiting for the peer to answer the disconnect;
 * a stranger that never answers would otherwise hold them for seconds. */
static bool refused_done(const struct rx *r, uint64_t now)
{
	return !r->authed && r->accepted && r->state == RX_CLOSING && !r->io_inflight &&
	       (!r->error_out || atomic_load(&r->gt.evicted) ||
		now - r->closing_at > REFUSE_MS * 1000000ull);
}

/* The QP went into error without a disconnect: the connection is lost,
 * a failure even between files. Said as a lost SEND says it. */
static void rx_lost(struct rx *r)
{
	char how[96];

	/* Without a status: receives flushed and no disconnect, what a bad
	 * RDMA access of the peer's leaves on rxe. */
	if (r->lost_status)
		snprintf(how, sizeof(how), "QP in error: %s", strerror(-r->lost_status));
	else
		snprintf(how, sizeof(how), "QP in error without a disconnect");
	if (r->committing)
		rx_fail(r, 0, CP_EXIT_NET,
			"connection lost while %s, checked, was being named (%s): it is stored "
			"under its name or not at all",
			r->name, how);
	else if (in_file(r))
		rx_fail(r, 0, CP_EXIT_NET, "connection lost during %s after %llu bytes (%s); %s",
			r->name,
			(unsigned long long)(r->end_seen ? r->end_bytes : r->w_off + r->w.got), how,
			r->st.partial ? "the partial is kept, to resume from" : "nothing stored");
	else
		rx_fail(r, 0, CP_EXIT_NET, "connection lost (%s)", how);
}

enum rx_poll_res rx_poll(struct rx *r, int *result)
{
	uint64_t now = cp_now_ns();
	unsigned int t = r->env->o->timeout_s;
	unsigned int hello = r->env->o->hello_timeout_s;
	char why[128];
	bool authed;

	if (r->gone) {
		rx_free(r); /* said and destroyed in evict_now() */
		return RX_REFUSED;
	}
	if (r->orphan) {
		if (io_busy(r))
			return RX_ALIVE;
		rx_free(r);
		return RX_DROPPED;
	}
	if (!r->accepted) {
		if (atomic_load(&r->gt.evicted)) {
			snprintf(why, sizeof(why),
				 "connection not established, dropped for a newer request "
				 "(--max-pending %u)",
				 r->env->o->max_pending);
			return drop_half_open(r, why);
		}
		if (r->state == RX_CLOSING)
			return drop_half_open(r, NULL); /* said in rx_fail() */
		/* Half-open: the HELLO deadline runs from the request too. */
		if (now - r->born_at > (uint64_t)hello * 1000000000ull) {
			snprintf(why, sizeof(why),
				 "connection not established within %u s of its request, dropped",
				 hello);
			return drop_half_open(r, why);
		}
		return RX_ALIVE;
	}
	/* Evicted by a newer request (on any thread), unless its token
	 * passed in the meantime. */
	if (!r->authed && atomic_load(&r->gt.evicted) && r->state != RX_CLOSING)
		rx_fail(r, CP_E_BUSY, CP_EXIT_NET,
			"no HELLO yet, dropped for a newer connection (--max-pending %u)",
			r->env->o->max_pending);
	if (refused_done(r, now))
		goto destroy;
	if (r->lost && !r->down && now - r->lost_at >= LOST_MS * 1000000ull) {
		/* Nothing passes any more, and the peer may never answer a
		 * disconnect: it is down now, its place freed at once. */
		if (r->state != RX_CLOSING)
			rx_lost(r);
		disconnect(r);
		r->down = true;
		r->down_at = now;
	}
	if (!r->down) {
		if (r->state == RX_HELLO && now - r->born_at > (uint64_t)hello * 1000000000ull) {
			rx_fail(r, CP_E_PROTO, CP_EXIT_NET, "no HELLO within %u s, dropped", hello);
			return RX_ALIVE;
		}
		if (r->state == RX_CLOSING && now - r->closing_at > CLOSE_MS * 1000000ull) {
			r->down = true; /* the peer never answered the disconnect */
			r->down_at = now;
		} else if (r->state != RX_CLOSING && t &&
			   now - r->last_activity > (uint64_t)t * 1000000000ull) {
			rx_fail(r, CP_E_ABORT, CP_EXIT_NET, "nothing received for %u s, giving up",
				t);
			return RX_ALIVE;
		} else {
			return RX_ALIVE;
		}
	}
	if (r->state != RX_CLOSING) {
		/* The peer hung up; between files that is how a sender ends. */
		if (r->lost)
			rx_lost(r);
		else if (r->committing)
			rx_fail(r, 0, CP_EXIT_NET,
				"sender disconnected while %s, checked, was being named: it is "
				"stored under its name or not at all",
				r->name);
		else if (in_file(r))
			rx_fail(r, 0, CP_EXIT_NET,
				"sender disconnected during %s after %llu bytes; %s", r->name,
				(unsigned long long)(r->end_seen ? r->end_bytes
								 : r->w_off + r->w.got),
				r->st.partial ? "the partial is kept, to resume from"
					      : "nothing stored");
		else if (r->state == RX_HELLO)
			rx_fail(r, 0, CP_EXIT_NET, "connection closed before HELLO");
		r->state = RX_CLOSING;
	}
	/* Wait for the flush so that no request outlives its buffer. */
	if (rr_ep_outstanding(r->ep) && now - r->down_at < FLUSH_MS * 1000000ull)
		return RX_ALIVE;
	if (io_busy(r))
		return RX_ALIVE;
destroy:
	release_regions(r);
	rr_ep_destroy(r->ep);
	*result = r->result;
	authed = r->authed;
	rx_free(r);
	return authed ? RX_ENDED : RX_REFUSED;
}
