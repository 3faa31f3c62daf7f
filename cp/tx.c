// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp: one sending connection (see tx.h and docs/ringrdma-cp.md).
 *
 * Chunk seq goes into the receiver's slot seq % window and carries seq as
 * its immediate; it may be written once seq < the receiver's grant limit,
 * with the key the GRANT gave for that seq (the receiver rebinds a slot's
 * memory window for every grant, so every seq has a key of its own).
 * Up to `window` reads run at once, each into the local buffer of its seq,
 * and chunks are posted strictly in seq order and handed to the hashing
 * thread right after (hash.h), so the checksum is computed in file order
 * while reads, writes and hashing overlap. A buffer is read into again once
 * its WRITE completed and it was hashed.
 * Our receives: `window` GRANTs at most (one per chunk the receiver copied
 * out of its window) plus one reply and one ERROR, and each is reposted as
 * it completes.
 * The next file's FILE_START follows a FILE_END at once (protocol 4): its
 * reads and chunks overlap the receiver's fsync and naming of the last
 * one. One file ahead at most: its FILE_END waits for the last FILE_DONE.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "auth.h"
#include "ctl.h"
#include "hash.h"
#include "proto.h"
#include "tx.h"

/* HELLO and AUTH (their completions may not be reaped yet), or the last
 * file's FILE_END, FILE_START, FILE_END, ERROR: one more than the four
 * at most at once, for that. */
#define TX_SENDS       5
#define TX_SPARE_RECVS 4
#define FLUSH_MS       3000
#define CLOSE_MS       5000
#define CONNECT_MS     15000

/* TX_DATA: a file is being sent; TX_HAVE: a file to resume waits for the
 * receiver's FILE_HAVE; TX_VERIFY: our own first bytes are being hashed
 * against it; TX_HOLD: it failed, the ERROR waits for the last file's
 * FILE_DONE; TX_NEXT: the next file (or tree entry) waits for it too;
 * TX_WAIT: the hook has nothing ready yet; TX_END: none left,
 * the last FILE_DONE is due. */
enum tx_state {
	TX_CONNECTING,
	TX_HELLO,
	TX_IDLE,
	TX_DATA,
	TX_HAVE,
	TX_VERIFY,
	TX_HOLD,
	TX_NEXT,
	TX_WAIT,
	TX_END,
	TX_CLOSING
};
/* SL_WRITING: posted, maybe not hashed yet; SL_HASHING: written, not hashed. */
enum slot_state { SL_FREE, SL_READING, SL_FILLED, SL_WRITING, SL_HASHING };

struct tx_slot {
	struct cp_op op;
	struct tx *t;
	enum slot_state state;
	uint32_t seq, len, want;
	uint64_t off;
	uint64_t job; /* its number at the hashing thread */
};

struct tx {
	struct cp_loop *lp;
	const struct cp_opts *o;
	/* HELLO's nonce and CHALLENGE's (cp/auth.h) */
	uint8_t client_nonce[CP_NONCE_LEN], server_nonce[CP_NONCE_LEN];
	uint8_t server_id[CP_SERVER_ID_LEN]; /* the address we dialled */
	bool challenged;
	struct tx_hooks h;
	rr_ep *ep;
	enum tx_state state;
	bool connected, down;
	bool hangup; /* a post found the peer gone: its word comes next */
	uint64_t down_at, closing_at, last_activity, rate_start;
	int result;
	char msg[256];
	char peer[300];

	struct cp_ctl ctl; /* window + TX_SPARE_RECVS receives, TX_SENDS sends */

	uint8_t *data;
	size_t data_len;
	struct ibv_mr *data_mr;
	struct tx_slot *slots;
	uint32_t chunk, window;
	uint32_t *rkeys; /* the key of the last seq granted in each slot */
	uint64_t raddr;
	uint32_t limit, next_read, next_write;

	struct tx_src src;
	bool src_eof, stream_reading;
	bool awaiting;	    /* FILE_END of `done` went, its FILE_DONE is due */
	bool in_next;	    /* in h.next: a failure there is the new file's */
	int held_result;    /* TX_HOLD: the failure to report after FILE_DONE */
	struct tx_src done; /* that file */
	uint64_t done_bytes, done_sum;
	uint64_t read_off, file_bytes;
	struct cp_hasher hs;
	uint64_t file_sum;
	unsigned int io_inflight;
	uint64_t bytes_done, bytes_posted;
	uint64_t chunks;    /* data chunks posted, over all sources */
	struct cp_msg have; /* TX_VERIFY: the receiver's FILE_HAVE */
	uint64_t resumed;   /* bytes the receiver already held, over all sources */
};

static void tx_fail(struct tx *t, int result, unsigned int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void file_fail(struct tx *t, int result, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

uint64_t tx_chunks(const struct tx *t)
{
	return t->chunks;
}

uint64_t tx_bytes(const struct tx *t)
{
	return t->bytes_done;
}

uint64_t tx_resumed(const struct tx *t)
{
	return t->resumed;
}

uint64_t tx_welcome_ns(const struct tx *t)
{
	return t->rate_start;
}

void tx_geometry(const struct tx *t, uint32_t *chunk, uint32_t *window)
{
	*chunk = t->chunk;
	*window = t->window;
}

static void send_done(rr_ep *ep, const struct rr_completion *c, void *data);

static int tx_send(struct tx *t, const struct cp_msg *m)
{
	return cp_ctl_send(&t->ctl, t->ep, m, send_done);
}

static void disconnect(struct tx *t)
{
	if (t->down)
		return;
	if (!t->connected || rr_ep_disconnect(t->ep)) {
		t->down = true;
		t->down_at = cp_now_ns();
	}
}

/* Give up: remember why, tell the receiver (unless @code is 0), disconnect. */
static void tx_fail(struct tx *t, int result, unsigned int code, const char *fmt, ...)
{
	struct cp_msg m = {.type = CP_ERROR};
	va_list ap;

	if (t->state == TX_CLOSING)
		return;
	if (t->state == TX_HOLD) {
		/* Whatever ends the wait, the held failure came first. */
		result = t->held_result;
		code = CP_E_ABORT;
	} else {
		va_start(ap, fmt);
		vsnprintf(t->msg, sizeof(t->msg), fmt, ap);
		va_end(ap);
	}
	t->result = result;
	t->state = TX_CLOSING;
	t->closing_at = cp_now_ns();
	if (!t->connected || t->down)
		return;
	if (code) {
		m.error.code = code;
		cp_esc(t->msg, m.error.text, sizeof(m.error.text));
		m.error.len = (uint16_t)strlen(m.error.text);
		if (tx_send(t, &m) == 0)
			return; /* send_done() disconnects */
	}
	disconnect(t);
}

void tx_abort(struct tx *t, int result, const char *why)
{
	if (t->in_next)
		file_fail(t, result, "%s", why);
	else
		tx_fail(t, result, CP_E_ABORT, "%s", why);
}

/*
 * The file being sent failed on our side (it cannot be opened or read).
 * If the last file is complete on the wire and its FILE_DONE still due,
 * the ERROR waits for that FILE_DONE (or --timeout, a signal, the
 * receiver's own ERROR), so the failure of one file never costs the one
 * before it, as it did not before files overlapped.
 */
static void file_fail(struct tx *t, int result, const char *fmt, ...)
{
	char msg[sizeof(t->msg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (t->state != TX_DATA || !t->awaiting) {
		tx_fail(t, result, CP_E_ABORT, "%s", msg);
		return;
	}
	memcpy(t->msg, msg, sizeof(t->msg));
	t->held_result = result;
	t->state = TX_HOLD; /* pump() posts nothing more */
}

static void send_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct tx *t = rr_ep_data(ep);
	uint8_t type = cp_ctl_sent(&t->ctl, data);

	if (c->status && c->status != -ECANCELED)
		tx_fail(t, CP_EXIT_NET, 0, "%s SEND to %s failed: %s", cp_type_name(type), t->peer,
			strerror(-c->status));
	if (t->state == TX_CLOSING)
		disconnect(t);
}

static void pump(struct tx *t);
static void verified(struct tx *t);
static void next_source(struct tx *t);

/*
 * A post found the connection down (the peer hung up): what came before the
 * end is being handed out. The completions already in the CQ, the
 * receiver's ERROR among them, and then on_down() still come
 * (rr_ep_opts.on_disconnect), and they say why: failing here would put
 * "not connected" in place of the receiver's reason. Nothing more is posted.
 */
static bool hung_up(struct tx *t, int rc)
{
	if (rc != -ENOTCONN)
		return false;
	t->hangup = true;
	return true;
}

/* Every file sent and stored: a clean goodbye. */
static void goodbye(struct tx *t)
{
	t->state = TX_CLOSING;
	t->closing_at = cp_now_ns();
	disconnect(t);
}

/* The bytes of the source that go: a range's, or the whole file's. */
static uint64_t src_len(const struct tx *t)
{
	return t->src.range ? t->src.range_len : t->src.size;
}

static int submit_read(struct tx_slot *sl)
{
	struct tx *t = sl->t;
	struct io_uring_sqe *sqe = cp_loop_sqe(t->lp, &sl->op);
	uint8_t *buf = t->data + (size_t)(sl - t->slots) * t->chunk;

	if (!sqe)
		return -EBUSY;
	if (t->src.stream)
		io_uring_prep_recv(sqe, t->src.fd, buf + sl->len, t->chunk - sl->len, 0);
	else
		io_uring_prep_read(sqe, t->src.fd, buf + sl->len, sl->want - sl->len,
				   t->src.range_off + sl->off + sl->len);
	t->io_inflight++;
	sl->state = SL_READING;
	return 0;
}

static void read_done(struct cp_op *op, int res)
{
	struct tx_slot *sl = (struct tx_slot *)op;
	struct tx *t = sl->t;

	t->io_inflight--;
	if (t->state == TX_CLOSING) {
		sl->state = SL_FREE;
		return;
	}
	if (res < 0) {
		sl->state = SL_FREE;
		file_fail(t, CP_EXIT_LOCAL_IO, "reading %s: %s", t->src.label, strerror(-res));
		return;
	}
	if (t->src.stream) {
		if (res) {
			/* Fill the chunk: it goes out full unless the stream ends. */
			sl->len += (uint32_t)res;
			t->last_activity = cp_now_ns();
			if (sl->len < t->chunk) {
				if (submit_read(sl))
					tx_fail(t, CP_EXIT_FAIL, CP_E_ABORT, "cannot queue a read");
				return;
			}
		} else {
			t->src_eof = true;
		}
		t->stream_reading = false;
		if (!sl->len) {
			sl->state = SL_FREE;
		} else {
			sl->seq = t->next_read++;
			sl->state = SL_FILLED;
		}
		pump(t);
		return;
	}
	if (!res) {
		sl->state = SL_FREE;
		file_fail(t, CP_EXIT_LOCAL_IO, "%s shrank while being sent", t->src.label);
		return;
	}
	sl->len += (uint32_t)res;
	if (sl->len < sl->want) {
		/* A short read: ask for the rest into the same slot. */
		if (submit_read(sl))
			tx_fail(t, CP_EXIT_FAIL, CP_E_ABORT, "cannot queue a read");
		return;
	}
	sl->state = SL_FILLED;
	pump(t);
}

static void write_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct tx_slot *sl = data;
	struct tx *t = sl->t;

	sl->state = sl->job < cp_hasher_done(&t->hs) ? SL_FREE : SL_HASHING;
	if (c->status) {
		if (c->status != -ECANCELED || t->state != TX_CLOSING)
			tx_fail(t, CP_EXIT_NET, 0, "RDMA WRITE to %s failed: %s", t->peer,
				strerror(-c->status));
		return;
	}
	t->bytes_done += sl->len;
	t->last_activity = cp_now_ns();
	pump(t);
}

static bool rate_blocked(struct tx *t)
{
	uint64_t el;

	if (!t->o->rate)
		return false;
	el = cp_now_ns() - t->rate_start;
	return (double)t->bytes_posted > (double)t->o->rate * (double)el / 1e9;
}

/* Keep reads running ahead, post filled chunks in order while granted. */
static void pump(struct tx *t)
{
	struct tx_slot *sl;
	struct cp_msg m = {.type = CP_FILE_END};
	int64_t job;
	int rc;

	if (t->state != TX_DATA || t->hangup)
		return;
	if (t->src.stream) {
		sl = &t->slots[t->next_read % t->window];
		if (!t->src_eof && !t->stream_reading && sl->state == SL_FREE) {
			sl->len = 0;
			if (submit_read(sl)) {
				tx_fail(t, CP_EXIT_FAIL, CP_E_ABORT, "cannot queue a read");
				return;
			}
			t->stream_reading = true;
		}
	} else {
		while (t->read_off < src_len(t) &&
		       (sl = &t->slots[t->next_read % t->window])->state == SL_FREE) {
			uint64_t left = src_len(t) - t->read_off;

			sl->seq = t->next_read;
			sl->off = t->read_off;
			sl->want = left < t->chunk ? (uint32_t)left : t->chunk;
			sl->len = 0;
			if (submit_read(sl)) {
				tx_fail(t, CP_EXIT_FAIL, CP_E_ABORT, "cannot queue a read");
				return;
			}
			t->next_read++;
			t->read_off += sl->want;
		}
	}
	/* Unsigned distance: next_write < limit, also across the wrap. */
	while ((sl = &t->slots[t->next_write % t->window])->state == SL_FILLED &&
	       sl->seq == t->next_write && t->limit - t->next_write - 1 < t->window &&
	       !rate_blocked(t)) {
		uint8_t *buf = t->data + (size_t)(sl - t->slots) * t->chunk;

		rc = rr_ep_post_write_imm(t->ep, buf, sl->len, t->data_mr,
					  t->raddr + (uint64_t)(sl - t->slots) * t->chunk,
					  t->rkeys[sl - t->slots], t->next_write, write_done, sl);
		if (rc) {
			if (!hung_up(t, rc))
				tx_fail(t, CP_EXIT_NET, 0, "RDMA WRITE: %s", strerror(-rc));
			return;
		}
		/* Hashed while it flies: the buffer is ours and stays as it is
		 * until the WRITE completes and the hash has it. */
		job = cp_hasher_add(&t->hs, buf, sl->len);
		if (job < 0) {
			sl->state = SL_WRITING;
			sl->job = UINT64_MAX; /* never freed: teardown only */
			tx_fail(t, CP_EXIT_FAIL, CP_E_ABORT, "cannot queue a hash");
			return;
		}
		sl->job = (uint64_t)job;
		sl->state = SL_WRITING;
		t->chunks++;
		t->next_write++;
		t->file_bytes += sl->len;
		t->bytes_posted += sl->len;
	}
	if ((t->src.stream ? !t->src_eof || t->stream_reading : t->read_off < src_len(t)) ||
	    t->next_write != t->next_read || !cp_hasher_caught_up(&t->hs))
		return;
	/* Everything is posted and hashed; RC delivers FILE_END after the
	 * last chunk. One file ahead of FILE_DONE at most. */
	if (t->awaiting)
		return;
	t->file_sum = cp_hasher_digest(&t->hs);
	m.end.bytes = t->file_bytes;
	m.end.checksum = t->file_sum;
	rc = tx_send(t, &m);
	if (rc) {
		if (!hung_up(t, rc))
			tx_fail(t, CP_EXIT_NET, 0, "cannot send FILE_END");
		return;
	}
	t->awaiting = true;
	t->done = t->src;
	t->done_bytes = t->file_bytes;
	t->done_sum = t->file_sum;
	next_source(t);
}

/* The hashing thread got further: free the buffers it is done with. */
static void hashed(struct cp_hasher *h)
{
	struct tx *t = (struct tx *)((char *)h - offsetof(struct tx, hs));
	uint64_t done = cp_hasher_done(h);

	for (unsigned int i = 0; t->slots && i < t->window; i++)
		if (t->slots[i].state == SL_HASHING && t->slots[i].job < done)
			t->slots[i].state = SL_FREE;
	t->last_activity = cp_now_ns(); /* a long file read is progress too */
	if (t->state == TX_VERIFY && cp_hasher_caught_up(h))
		verified(t);
	pump(t);
}

static void send_start(struct tx *t);

/* Send the file from @off on: FILE_FROM, then its chunks. */
static void send_from(struct tx *t, uint64_t off)
{
	struct cp_msg m = {.type = CP_FILE_FROM};
	int rc;

	m.from.offset = off;
	rc = tx_send(t, &m);
	if (rc) {
		if (!hung_up(t, rc))
			tx_fail(t, CP_EXIT_NET, 0, "cannot send FILE_FROM");
		return;
	}
	if (off && !t->o->quiet)
		cp_log("send: %s: the receiver %s; %llu bytes left to send", t->src.label,
		       t->have.have.flags & CP_HAVE_NAMED ? "has it already, with the same content"
							  : "kept a partial with our first bytes",
		       (unsigned long long)(src_len(t) - off));
	/* FILE_END counts and hashes the whole file: the bytes held too. */
	t->read_off = t->file_bytes = off;
	t->resumed += off;
	t->src.from = off;
	t->state = TX_DATA;
	pump(t);
}

/* Our first bytes are hashed: go on after the receiver's if they are the
 * same, else from 0 with a new hash. */
static void verified(struct tx *t)
{
	int err = cp_hasher_error(&t->hs);

	if (err) {
		tx_fail(t, CP_EXIT_LOCAL_IO, CP_E_ABORT, "reading %s: %s", t->src.label,
			err == -ENODATA ? "it shrank while being sent" : strerror(-err));
		return;
	}
	if (cp_hasher_digest(&t->hs) == t->have.have.checksum) {
		send_from(t, t->have.have.bytes);
		return;
	}
	cp_hasher_reset(&t->hs);
	send_from(t, 0);
}

/* FILE_HAVE: what the receiver holds of the file to resume. */
static void on_have(struct tx *t, const struct cp_msg *m)
{
	if (m->have.bytes > src_len(t) ||
	    ((m->have.flags & CP_HAVE_NAMED) && (m->have.bytes != t->src.size || t->src.range))) {
		tx_fail(t, CP_EXIT_INTEGRITY, CP_E_PROTO,
			"%s: the receiver holds %llu of %llu bytes", t->src.label,
			(unsigned long long)m->have.bytes, (unsigned long long)src_len(t));
		return;
	}
	/* --no-resume: a range (always into the partial) is sent whole. */
	if (!m->have.bytes || t->o->no_resume) {
		send_from(t, 0);
		return;
	}
	t->have = *m;
	if (cp_hasher_add_fd(&t->hs, t->src.fd, t->src.range_off, m->have.bytes) < 0) {
		tx_fail(t, CP_EXIT_FAIL, CP_E_ABORT, "cannot queue a hash");
		return;
	}
	t->state = TX_VERIFY;
}

static void next_source(struct tx *t)
{
	bool ok;

	memset(&t->src, 0, sizeof(t->src));
	t->src.fd = -1;
	t->in_next = true;
	ok = t->h.next(t, &t->src, t->h.data);
	t->in_next = false;
	if (ok && t->src.wait) {
		if (t->state != TX_CLOSING && t->state != TX_HOLD)
			t->state = TX_WAIT;
		return;
	}
	if (!ok) {
		if (t->state == TX_CLOSING || t->state == TX_HOLD)
			return; /* the hook gave up */
		if (t->awaiting) {
			t->state = TX_END;
			return;
		}
		goodbye(t);
		return;
	}
	t->read_off = t->file_bytes = 0;
	t->src_eof = t->stream_reading = false;
	cp_hasher_reset(&t->hs);
	/* A name the receiver refuses would end the connection before the
	 * last file is stored: that one goes only after its FILE_DONE; so
	 * does a tree entry, which the receiver takes only between files,
	 * and anything after a FILE_COMMIT, which the receiver handles as a
	 * file without a FILE_END (it takes no FILE_START until its
	 * FILE_DONE went: "unexpected FILE_START" before). */
	if (t->awaiting && (t->src.kind || t->done.kind == CP_FILE_COMMIT ||
			    !cp_name_ok(t->src.name, strlen(t->src.name)))) {
		t->state = TX_NEXT;
		return;
	}
	send_start(t);
}

/*
 * MKDIR, SYMLINK or DIR_META for t->src, with no file's FILE_DONE due:
 * it is answered by a FILE_DONE of its own (0 bytes, checksum 0), and the
 * next file may go ahead of that, as after a FILE_END.
 */
static void send_entry(struct tx *t)
{
	struct cp_msg m = {.type = t->src.kind};
	int rc;

	if (m.type == CP_FILE_COMMIT) {
		/* Answered by FILE_DONE with the size and the folded sum. */
		m.start.size = t->src.size;
		m.start.flags = CP_START_META;
		m.start.mode = t->src.mode & 0777;
		m.start.mtime = t->src.mtime;
		m.start.name_len = (uint16_t)strlen(t->src.name);
		memcpy(m.start.name, t->src.name, m.start.name_len);
		m.start.stripe = t->src.stripe;
		m.start.sum = t->src.sum;
		rc = tx_send(t, &m);
		if (rc) {
			if (!hung_up(t, rc))
				tx_fail(t, CP_EXIT_FAIL, 0, "cannot send FILE_COMMIT for %s",
					t->src.label);
			return;
		}
		t->state = TX_DATA;
		t->awaiting = true;
		t->done = t->src;
		t->done_bytes = t->src.size;
		t->done_sum = t->src.sum;
		next_source(t);
		return;
	}

	m.entry.name_len = (uint16_t)strlen(t->src.name);
	memcpy(m.entry.name, t->src.name, m.entry.name_len);
	if (m.type == CP_SYMLINK) {
		m.entry.target_len = (uint16_t)strlen(t->src.target);
		memcpy(m.entry.target, t->src.target, m.entry.target_len);
	}
	if (m.type == CP_DIR_META)
		m.entry.mode = t->src.mode;
	if (m.type != CP_MKDIR)
		m.entry.mtime = t->src.mtime;
	rc = tx_send(t, &m);
	if (rc) {
		if (!hung_up(t, rc))
			tx_fail(t, CP_EXIT_FAIL, 0, "cannot send %s for %s", cp_type_name(m.type),
				t->src.label);
		return;
	}
	t->state = TX_DATA;
	t->awaiting = true;
	t->done = t->src;
	t->done_bytes = t->done_sum = 0;
	next_source(t);
}

/* FILE_START for t->src, then its chunks at once. */
static void send_start(struct tx *t)
{
	struct cp_msg m = {.type = CP_FILE_START};
	int rc;

	if (t->src.kind) {
		send_entry(t);
		return;
	}
	m.start.size = t->src.stream ? 0 : t->src.size;
	m.start.flags = t->src.stream ? CP_START_STREAM : 0;
	/* Bigger than a window: a round trip before the data is little next
	 * to it, and a cut transfer goes on from what the receiver kept. */
	if (!t->src.stream && !t->o->no_resume && t->src.size > (uint64_t)t->chunk * t->window)
		m.start.flags |= CP_START_RESUME;
	if (t->src.range) {
		/* Always into the partial: resumed on its own. */
		m.start.flags |= CP_START_RESUME | CP_START_RANGE;
		m.start.range_off = t->src.range_off;
		m.start.range_len = t->src.range_len;
		m.start.stripe = t->src.stripe;
	}
	m.start.name_len = (uint16_t)strlen(t->src.name);
	memcpy(m.start.name, t->src.name, m.start.name_len);
	if (t->src.meta) {
		m.start.flags |= CP_START_META;
		m.start.mode = t->src.mode & 0777;
		m.start.mtime = t->src.mtime;
	}
	/* Chunks follow at once: the receiver keeps them while it opens the
	 * file, and a refusal comes as ERROR. */
	rc = tx_send(t, &m);
	if (rc) {
		if (!hung_up(t, rc))
			tx_fail(t, CP_EXIT_FAIL, 0, "cannot send FILE_START for %s", t->src.label);
		return;
	}
	if (m.start.flags & CP_START_RESUME) {
		t->state = TX_HAVE; /* the data waits for FILE_HAVE and our FILE_FROM */
		return;
	}
	t->state = TX_DATA;
	pump(t);
}

/* CHALLENGE: our proof of the token over both nonces, never the token. */
static void on_challenge(struct tx *t, const struct cp_msg *m)
{
	struct cp_msg a = {.type = CP_AUTH};

	if (!t->o->have_token) {
		tx_fail(t, CP_EXIT_REFUSED, CP_E_AUTH,
			"%s asks for a token (--token-file): none given", t->peer);
		return;
	}
	t->challenged = true;
	memcpy(t->server_nonce, m->challenge.nonce, CP_NONCE_LEN);
	/* The address we dialled goes into both proofs: a server that is not
	 * the real one cannot pass ours on to the real one. */
	if (cp_auth_server_id(rdma_get_peer_addr(rr_ep_cm_id(t->ep)), t->server_id) ||
	    cp_auth_proof(t->o->token, t->o->token_len, CP_AUTH_CLIENT, t->client_nonce,
			  t->server_nonce, t->server_id, a.auth.proof)) {
		tx_fail(t, CP_EXIT_FAIL, CP_E_ABORT, "cannot compute the proof of the token");
		return;
	}
	if (tx_send(t, &a))
		tx_fail(t, CP_EXIT_NET, 0, "cannot send AUTH");
}

static void on_welcome(struct tx *t, const struct cp_msg *m)
{
	if (m->welcome.chunk > t->o->chunk || m->welcome.window > t->o->window) {
		tx_fail(t, CP_EXIT_INTEGRITY, CP_E_PROTO, "receiver offers chunk %u, window %u",
			m->welcome.chunk, m->welcome.window);
		return;
	}
	t->chunk = m->welcome.chunk;
	t->window = m->welcome.window;
	t->limit = 0; /* the GRANTs with the keys follow */
	t->raddr = m->welcome.addr;
	t->rate_start = cp_now_ns();
	next_source(t);
}

static void on_message(struct tx *t, const uint8_t *buf, uint32_t len)
{
	struct cp_msg m;
	char why[160];

	if (cp_decode(buf, len, &m, why, sizeof(why))) {
		tx_fail(t, CP_EXIT_INTEGRITY, CP_E_PROTO, "bad message from %s: %s", t->peer, why);
		return;
	}
	switch (m.type) {
	case CP_ERROR:
		tx_fail(t, cp_err_exit(m.error.code), 0, "receiver %s: %s: %s", t->peer,
			cp_err_name(m.error.code), m.error.text);
		return;
	case CP_CHALLENGE:
		if (t->state != TX_HELLO || t->challenged)
			break;
		on_challenge(t, &m);
		return;
	case CP_WELCOME:
		if (t->state != TX_HELLO)
			break;
		/* With a token, only a receiver that proved it holds it too:
		 * one that is not the real one learns nothing from us. */
		if (t->o->have_token &&
		    (!t->challenged ||
		     !cp_auth_check(t->o->token, t->o->token_len, CP_AUTH_SERVER, t->client_nonce,
				    t->server_nonce, t->server_id, m.welcome.proof))) {
			tx_fail(t, CP_EXIT_REFUSED, CP_E_AUTH,
				"%s did not prove it holds the token (%s): not the receiver "
				"meant, or it runs --no-auth",
				t->peer, t->challenged ? "wrong proof" : "no CHALLENGE");
			return;
		}
		on_welcome(t, &m);
		return;
	case CP_FILE_HAVE:
		if (t->state != TX_HAVE)
			break;
		on_have(t, &m);
		return;
	case CP_GRANT:
		if (t->state < TX_IDLE || t->state > TX_END)
			break;
		/* Never backwards, never more than a window ahead, and a key
		 * for exactly each seq it adds. */
		if (m.grant.limit - t->limit > t->window ||
		    m.grant.limit - t->next_write > t->window ||
		    m.grant.limit - t->limit != m.grant.nkeys) {
			tx_fail(t, CP_EXIT_INTEGRITY, CP_E_PROTO,
				"bad GRANT %u with %u keys (limit %u, next %u)", m.grant.limit,
				m.grant.nkeys, t->limit, t->next_write);
			return;
		}
		for (unsigned int i = 0; i < m.grant.nkeys; i++)
			t->rkeys[(t->limit + i) % t->window] = m.grant.keys[i];
		t->limit = m.grant.limit;
		pump(t);
		return;
	case CP_BUSY:
		/* The receiver at work: activity, counted above. */
		if (t->state < TX_IDLE || t->state > TX_END)
			break;
		return;
	case CP_FILE_DONE:
		if (!t->awaiting || t->state < TX_DATA || t->state > TX_END)
			break;
		if (m.end.bytes != t->done_bytes || m.end.checksum != t->done_sum) {
			tx_fail(t, CP_EXIT_INTEGRITY, CP_E_PROTO,
				"receiver confirmed %llu bytes/%016llx for %s, sent %llu/%016llx",
				(unsigned long long)m.end.bytes, (unsigned long long)m.end.checksum,
				t->done.label, (unsigned long long)t->done_bytes,
				(unsigned long long)t->done_sum);
			return;
		}
		t->awaiting = false;
		if (t->h.file_done)
			t->h.file_done(t, &t->done, t->done_bytes, t->done_sum, t->h.data);
		if (t->state == TX_HOLD) {
			tx_fail(t, 0, 0, "held"); /* now the held failure goes out */
		} else if (t->state == TX_NEXT) {
			send_start(t);
		} else if (t->state == TX_WAIT) {
			next_source(t); /* it may be what was waited for */
		} else if (t->state == TX_END) {
			goodbye(t);
		} else if (t->state == TX_DATA) {
			pump(t); /* its FILE_END may have waited for this */
		}
		return;
	default:
		break;
	}
	tx_fail(t, CP_EXIT_INTEGRITY, CP_E_PROTO, "unexpected %s from %s", cp_type_name(m.type),
		t->peer);
}

static void recv_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct tx *t = rr_ep_data(ep);
	uint8_t *buf = data;
	int rc;

	if (c->status) {
		if (c->status != -ECANCELED)
			tx_fail(t, CP_EXIT_NET, 0, "RECV from %s failed: %s", t->peer,
				strerror(-c->status));
		return;
	}
	t->last_activity = cp_now_ns();
	if (t->state == TX_CLOSING)
		return;
	/* The message first: an ERROR may arrive just before the disconnect,
	 * when a repost would fail. */
	if (c->has_imm)
		tx_fail(t, CP_EXIT_INTEGRITY, CP_E_PROTO, "unexpected RDMA WRITE from %s", t->peer);
	else
		on_message(t, buf, c->byte_len);
	if (t->state == TX_CLOSING || t->down)
		return;
	rc = cp_ctl_recv(&t->ctl, ep, buf, recv_done);
	if (rc && !hung_up(t, rc))
		tx_fail(t, CP_EXIT_NET, 0, "cannot repost a receive: %s", strerror(-rc));
}

/*
 * The data buffers at our own chunk x window, which WELCOME can only lower:
 * registered while the connection is made and the receiver registers its
 * window, not after WELCOME, where it cost 50-200 ms per connection in the
 * lab (pinning 64 MiB).
 */
static int data_buffers(struct tx *t, rr_ep *ep)
{
	t->data_len = (size_t)t->o->chunk * t->o->window;
	t->data = aligned_alloc(4096, t->data_len);
	t->slots = calloc(t->o->window, sizeof(*t->slots));
	t->rkeys = calloc(t->o->window, sizeof(*t->rkeys));
	if (!t->data || !t->slots || !t->rkeys)
		return -ENOMEM;
	for (unsigned int i = 0; i < t->o->window; i++) {
		t->slots[i].t = t;
		t->slots[i].op.done = read_done;
	}
	/* Local access only: the receiver never touches the sender's memory. */
	return rr_ep_reg_mr(ep, t->data, t->data_len, 0, &t->data_mr);
}

static void on_qp_ready(rr_ep *ep, int status, void *data)
{
	struct tx *t = data;
	int rc;

	rc = cp_ctl_reg(&t->ctl, ep);
	if (rc) {
		tx_fail(t, CP_EXIT_FAIL, 0, "registering receive buffers: %s", strerror(-rc));
		return;
	}
	rc = data_buffers(t, ep);
	if (rc) {
		tx_fail(t, CP_EXIT_FAIL, 0, "%zu bytes of buffers: %s", t->data_len, strerror(-rc));
		return;
	}
	/* Before the connection exists: the receiver's first SEND needs one. */
	for (unsigned int i = 0; i < t->ctl.nrecv; i++) {
		rc = cp_ctl_recv(&t->ctl, ep, cp_ctl_recv_buf(&t->ctl, i), recv_done);
		if (rc) {
			tx_fail(t, CP_EXIT_FAIL, 0, "posting receives: %s", strerror(-rc));
			return;
		}
	}
}

static void on_connect(rr_ep *ep, int status, void *data)
{
	struct tx *t = data;
	struct cp_msg m = {.type = CP_HELLO};

	if (status) {
		t->down = true;
		t->down_at = cp_now_ns();
		tx_fail(t, CP_EXIT_NET, 0, "cannot connect to %s: %s", t->peer, strerror(-status));
		return;
	}
	t->connected = true;
	t->last_activity = cp_now_ns();
	if (t->state == TX_CLOSING) {
		disconnect(t);
		return;
	}
	m.hello.chunk = t->o->chunk;
	m.hello.window = t->o->window;
	if (t->o->have_token) {
		int rc = cp_auth_nonce(t->client_nonce);

		if (rc) {
			tx_fail(t, CP_EXIT_FAIL, CP_E_ABORT, "no random nonce: %s", strerror(-rc));
			return;
		}
		m.hello.nonce_len = CP_NONCE_LEN;
		memcpy(m.hello.nonce, t->client_nonce, CP_NONCE_LEN);
	}
	t->state = TX_HELLO;
	if (tx_send(t, &m))
		tx_fail(t, CP_EXIT_NET, 0, "cannot send HELLO");
}

static void on_down(rr_ep *ep, int status, void *data)
{
	struct tx *t = data;

	if (!t->down) {
		t->down = true;
		t->down_at = cp_now_ns();
	}
	if (t->state != TX_CLOSING)
		tx_fail(t, CP_EXIT_NET, 0, "connection to %s lost%s%s", t->peer, status ? ": " : "",
			status ? strerror(-status) : "");
}

struct tx *tx_start(struct cp_loop *lp, const struct cp_opts *o, const char *host, uint16_t port,
		    const struct tx_hooks *h)
{
	struct rr_ep_opts eo = {
		.max_send_wr = o->window + TX_SENDS,
		.max_recv_wr = o->window + TX_SPARE_RECVS,
		.connect_timeout_ms = CONNECT_MS,
		.on_qp_ready = on_qp_ready,
		.on_disconnect = on_down,
	};
	struct tx *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return NULL;
	t->lp = lp;
	t->o = o;
	t->h = *h;
	t->src.fd = -1;
	t->last_activity = cp_now_ns();
	snprintf(t->peer, sizeof(t->peer), "%s:%u", host, port);
	if (cp_ctl_alloc(&t->ctl, o->window + TX_SPARE_RECVS, TX_SENDS) ||
	    cp_hasher_init(&t->hs, lp, hashed)) {
		cp_ctl_free(&t->ctl);
		free(t);
		return NULL;
	}
	eo.data = t;
	rc = rr_connect(lp->b, host, port, &eo, sizeof(eo), on_connect, &t->ep);
	if (rc) {
		t->ep = NULL;
		t->down = true;
		tx_fail(t, rc == -EINVAL ? CP_EXIT_USAGE : CP_EXIT_NET, 0,
			"cannot connect to %s: %s", t->peer, strerror(-rc));
	}
	return t;
}

/* TX_WAIT: ask the hook again. Waiting for another connection is no
 * lack of progress of ours, unless a FILE_DONE of ours is due. */
static void wait_more(struct tx *t, uint64_t now)
{
	if (!t->awaiting)
		t->last_activity = now;
	next_source(t);
}

enum tx_poll_res tx_poll(struct tx *t, int *result, char *msg, size_t msg_len)
{
	uint64_t now = cp_now_ns();
	unsigned int to = t->o->timeout_s;

	if (t->state != TX_CLOSING) {
		if (to && now - t->last_activity > (uint64_t)to * 1000000000ull)
			tx_fail(t, CP_EXIT_NET, CP_E_ABORT, "no progress with %s for %u s", t->peer,
				to);
		else if (t->state == TX_WAIT)
			wait_more(t, now);
		else
			pump(t); /* --limit-rate waits for the clock */
		cp_hasher_kick(&t->hs);
		return TX_ALIVE;
	}
	if (!t->down) {
		if (now - t->closing_at < CLOSE_MS * 1000000ull)
			return TX_ALIVE;
		t->down = true; /* the peer never answered the disconnect */
		t->down_at = now;
	}
	if (t->ep && rr_ep_outstanding(t->ep) && now - t->down_at < FLUSH_MS * 1000000ull)
		return TX_ALIVE;
	/* The hashing thread may still read a buffer. */
	cp_hasher_kick(&t->hs);
	if (t->io_inflight || !cp_hasher_idle(&t->hs))
		return TX_ALIVE;
	rr_ep_destroy(t->ep);
	rr_mr_dereg(t->data_mr);
	cp_ctl_free(&t->ctl);
	*result = t->result;
	snprintf(msg, msg_len, "%s", t->msg);
	cp_hasher_destroy(&t->hs);
	free(t->slots);
	free(t->rkeys);
	free(t->data);
	free(t);
	return TX_ENDED;
}
