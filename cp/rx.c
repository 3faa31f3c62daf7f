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
 *
 * This file is the connection itself; rx_int.h lists the others.
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

#include "auth.h"
#include "rx_int.h"

struct rx *rx_next(struct rx *r)
{
	return r->next;
}

void rx_set_next(struct rx *r, struct rx *next)
{
	r->next = next;
}

/* Admitted or gone: it stops holding a place in the gate. */
static void leave_unauth(struct rx *r)
{
	cp_gate_leave(r->env->gate, &r->gt);
}

/* A failed proof of the token (or none): counted against its source. */
static void auth_failed(struct rx *r, const char *what)
{
	const struct sockaddr *src = (const struct sockaddr *)&r->src;
	unsigned int held = cp_gate_failed(r->env->gate, src, cp_now_ns());

	if (held)
		rx_fail(r, CP_E_AUTH, CP_EXIT_REFUSED, "refused: %s token; %s held back for %u s",
			what, r->peer, held);
	else
		rx_fail(r, CP_E_AUTH, CP_EXIT_REFUSED, "refused: %s token", what);
}

static void admit_peer(struct rx *r);

/* Is r's source held back? Then it is refused, uncounted. */
static bool refused_held(struct rx *r)
{
	unsigned int held =
		cp_gate_held(r->env->gate, (const struct sockaddr *)&r->src, cp_now_ns());

	if (held)
		rx_fail(r, CP_E_AUTH, CP_EXIT_REFUSED,
			"refused: too many wrong tokens from %s, try again in %u s", r->peer, held);
	return held != 0;
}

/*
 * The token first: a stranger learns nothing, not even "busy", and never
 * counts toward --max-conns or --count. Only then is it admitted. With a
 * token, HELLO's nonce gets a CHALLENGE of ours and the AUTH that answers
 * it must prove the token (cp/auth.h); the token itself never crosses.
 */
static void on_hello(struct rx *r, const struct cp_msg *m)
{
	struct rx_env *env = r->env;
	const struct cp_opts *o = env->o;
	struct cp_msg c = {.type = CP_CHALLENGE};
	int rc;

	/* A source that failed too often is not even checked: a guesser
	 * gets one try per hold, whatever it sends meanwhile. */
	if (o->have_token && refused_held(r))
		return;
	r->want_chunk = m->hello.chunk;
	r->want_window = m->hello.window;
	if (!o->have_token) {
		admit_peer(r);
		return;
	}
	if (m->hello.nonce_len != CP_NONCE_LEN) {
		auth_failed(r, "no");
		return;
	}
	memcpy(r->client_nonce, m->hello.nonce, CP_NONCE_LEN);
	/* The address the sender reached: its proof must name it. */
	rc = cp_auth_server_id(rdma_get_local_addr(rr_ep_cm_id(r->ep)), r->server_id);
	if (rc) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "no address of ours to prove the token on: %s",
			strerror(-rc));
		return;
	}
	rc = cp_auth_nonce(r->server_nonce);
	if (rc) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "no random nonce: %s", strerror(-rc));
		return;
	}
	memcpy(c.challenge.nonce, r->server_nonce, CP_NONCE_LEN);
	r->state = RX_AUTH;
	rc = rx_send(r, &c);
	if (rx_send_failed(rc))
		rx_fail(r, 0, CP_EXIT_NET, "cannot send CHALLENGE");
}

/* AUTH: the sender's proof, over both nonces. */
static void on_auth(struct rx *r, const struct cp_msg *m)
{
	const struct cp_opts *o = r->env->o;

	/* Held back since its HELLO (its other connections failed): not
	 * compared, not counted, the right proof included, or a guesser
	 * would say HELLO on every connection first and AUTH on each. */
	if (refused_held(r))
		return;
	if (!cp_auth_check(o->token, o->token_len, CP_AUTH_CLIENT, r->client_nonce, r->server_nonce,
			   r->server_id, m->auth.proof)) {
		auth_failed(r, "wrong");
		return;
	}
	cp_gate_passed(r->env->gate, (const struct sockaddr *)&r->src);
	admit_peer(r);
}

/* The token proved (or none asked for): admitted, its window set up, and
 * WELCOME with our own proof. */
static void admit_peer(struct rx *r)
{
	struct rx_env *env = r->env;
	const struct cp_opts *o = env->o;
	struct cp_msg w = {.type = CP_WELCOME};
	char why[128];
	int rc;

	if (env->admit(env->data, why, sizeof(why))) {
		rx_fail(r, CP_E_BUSY, CP_EXIT_REFUSED, "%s", why);
		return;
	}
	leave_unauth(r);
	r->authed = true;
	r->w.chunk = r->want_chunk < o->chunk ? r->want_chunk : o->chunk;
	r->w.window = r->want_window < o->window ? r->want_window : o->window;
	if (rx_win_setup(r))
		return;
	rc = cp_hasher_init(&r->hs, env->lp, rx_hashed);
	if (rc) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot start a hashing thread: %s",
			strerror(-rc));
		return;
	}
	/* WELCOME grants nothing: GRANTs with the keys follow as slots bind. */
	w.welcome.chunk = r->w.chunk;
	w.welcome.window = r->w.window;
	w.welcome.addr = (uintptr_t)r->win;
	if (o->have_token && cp_auth_proof(o->token, o->token_len, CP_AUTH_SERVER, r->client_nonce,
					   r->server_nonce, r->server_id, w.welcome.proof)) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot compute our proof of the token");
		return;
	}
	r->state = RX_IDLE;
	rc = rx_send(r, &w);
	if (rc) {
		if (rx_send_failed(rc))
			rx_fail(r, 0, CP_EXIT_NET, "cannot send WELCOME");
		return;
	}
	rx_bind_slots(r);
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
	} else if (m.type == CP_AUTH && r->state == RX_AUTH) {
		on_auth(r, &m);
	} else if (m.type == CP_FILE_START &&
		   (r->state == RX_IDLE || (rx_in_file(r) && r->end_seen && !r->q.on))) {
		rx_on_start(r, &m);
	} else if (m.type == CP_FILE_END && rx_in_file(r) && r->w.file_open) {
		rx_on_end(r, &m);
	} else if ((m.type == CP_MKDIR || m.type == CP_SYMLINK || m.type == CP_DIR_META) &&
		   r->state == RX_IDLE) {
		rx_on_entry(r, &m);
	} else if (m.type == CP_FILE_COMMIT && r->state == RX_IDLE) {
		rx_on_commit(r, &m);
	} else if (m.type == CP_FILE_FROM && r->state == RX_FROM) {
		rx_on_from(r, &m);
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
			rx_release_regions(r);
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
		rx_on_chunk(r, c->imm_data, c->byte_len);
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
	rx_release_regions(r);
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
	r->grant_sent = rx_send_grant;
	r->progress = rx_maybe_finish;
	r->sync_op.done = rx_sync_done;
	r->entry_op.done = rx_entry_synced;
	r->entry_fd = -1;
	r->st.fd = r->st.parentfd = -1;
	r->same_fd = -1;
	r->pad_fd = -1;
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
				rx_release_regions(r);
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
		rx_disconnect(r);
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
	rx_close_named(r);
	rx_release_regions(r);
	cp_ctl_free(&r->ctl);
	cp_hasher_destroy(&r->hs);
	cp_range_verify_cancel(&r->rv); /* a commit's reread cut short */
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
	else if (rx_in_file(r))
		rx_fail(r, 0, CP_EXIT_NET, "connection lost during %s after %llu bytes (%s); %s",
			r->name,
			(unsigned long long)(r->end_seen ? r->end_bytes : r->w_off + r->w.got), how,
			r->st.partial ? "the partial is kept, to resume from" : "nothing stored");
	else
		rx_fail(r, 0, CP_EXIT_NET, "connection lost (%s)", how);
}

bool rx_stuck(struct rx *r, uint64_t now)
{
	return r->state == RX_CLOSING && r->io_inflight &&
	       now - r->closing_at > RX_STUCK_S * 1000000000ull;
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
		rx_disconnect(r);
		r->down = true;
		r->down_at = now;
	}
	if (!r->down) {
		/* A failed send is tried again at the next pass. */
		if (r->state > RX_AUTH && r->state != RX_CLOSING && !r->error_out &&
		    now - r->last_sent > RX_BUSY_MS * 1000000ull && io_busy(r))
			rx_send(r, &(struct cp_msg){.type = CP_BUSY,
						    .busy.secs = (uint32_t)((now - r->last_sent) /
									    1000000000ull)});
		if ((r->state == RX_HELLO || r->state == RX_AUTH) &&
		    now - r->born_at > (uint64_t)hello * 1000000000ull) {
			rx_fail(r, CP_E_PROTO, CP_EXIT_NET, "no HELLO within %u s, dropped", hello);
			return RX_ALIVE;
		}
		if (r->state == RX_CLOSING && now - r->closing_at > CLOSE_MS * 1000000ull) {
			r->down = true; /* the peer never answered the disconnect */
			r->down_at = now;
		} else if (r->state != RX_CLOSING && t &&
			   now - r->last_activity > (uint64_t)t * 1000000000ull) {
			/* Waiting on our own file system is no silence of the peer. */
			if (r->io_inflight)
				rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO,
					"a file system call has not returned for %u s (is DIR's "
					"file system hung?), giving up",
					t);
			else
				rx_fail(r, CP_E_ABORT, CP_EXIT_NET,
					"nothing received for %u s, giving up", t);
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
		else if (rx_in_file(r))
			rx_fail(r, 0, CP_EXIT_NET,
				"sender disconnected during %s after %llu bytes; %s", r->name,
				(unsigned long long)(r->end_seen ? r->end_bytes
								 : r->w_off + r->w.got),
				r->st.partial ? "the partial is kept, to resume from"
					      : "nothing stored");
		else if (r->state == RX_HELLO || r->state == RX_AUTH)
			rx_fail(r, 0, CP_EXIT_NET, "connection closed before HELLO");
		r->state = RX_CLOSING;
	}
	/* Wait for the flush so that no request outlives its buffer. */
	if (rr_ep_outstanding(r->ep) && now - r->down_at < FLUSH_MS * 1000000ull)
		return RX_ALIVE;
	if (io_busy(r))
		return RX_ALIVE;
destroy:
	rx_release_regions(r);
	rr_ep_destroy(r->ep);
	*result = r->result;
	authed = r->authed;
	rx_free(r);
	return authed ? RX_ENDED : RX_REFUSED;
}
