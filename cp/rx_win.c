// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp serve, one receiving connection: its window. The slots and
 * their memory windows, bound for one grant and shut when its chunk
 * arrived; GRANTs; chunks admitted, copied out into stages, hashed and
 * written to the file. Calls down into rx_conn.c only; the file layer
 * hears of finished writes through the hook of struct rx (progress).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hash.h"
#include "rx_int.h"

/* Said once a process: the device has no memory windows. */
static atomic_bool mw_warned;
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
void rx_release_regions(struct rx *r)
{
	rx_free_windows(r); /* before their region: a bound window holds it */
	rr_mr_dereg(r->win_mr);
	r->win_mr = NULL;
	rr_mr_dereg(r->ctl.mr);
	r->ctl.mr = NULL;
}

static bool granting(const struct rx *r)
{
	return r->state == RX_IDLE || rx_in_file(r);
}

static uint32_t slot_key(const struct rx *r, const struct rx_slot *sl)
{
	return sl->mw ? sl->mw->rkey : r->win_mr->rkey;
}

/* Grant the seqs whose slots are bound, in order, each with its key. */
void rx_send_grant(struct rx *r)
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
		if (rx_send_failed(rc))
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
		rx_send_grant(sl->r);
}

/*
 * Bind the slots of the seqs the next grants will give, a fresh key each:
 * a slot is ready once its last chunk was copied out and its window shut.
 */
void rx_bind_slots(struct rx *r)
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
	rx_send_grant(r);
}

static void inv_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct rx_slot *sl = data;

	(void)ep;
	sl->invalidating = false;
	if (slot_op_ok(sl->r, c, "shutting"))
		rx_bind_slots(sl->r);
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
void rx_stage_chunks(struct rx *r)
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
	rx_bind_slots(r);
}

void rx_write_done(struct cp_op *op, int res)
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
	rx_stage_chunks(r);
	r->progress(r);
}
void rx_on_chunk(struct rx *r, uint32_t imm, uint32_t len)
{
	char why[160];
	struct rx_slot *sl;
	uint32_t slot;

	if (!rx_in_file(r) || !r->w.file_open) {
		rx_fail(r, CP_E_PROTO, CP_EXIT_INTEGRITY, "data chunk %u outside a file", imm);
		return;
	}
	if (cp_rx_admit(&r->w, imm, len, &slot, why, sizeof(why))) {
		rx_fail(r, CP_E_PROTO, CP_EXIT_INTEGRITY, "%s", why);
		return;
	}
	r->env->n->chunks++;
	/* A stream has no size to refuse at its start. */
	if (r->env->o->max_size && r->w_off + r->w.got > r->env->o->max_size) {
		rx_fail(r, CP_E_NOSPC, CP_EXIT_REFUSED, "%s: over --max-size %llu",
			r->q.on ? r->q.name : r->name, (unsigned long long)r->env->o->max_size);
		return;
	}
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
	rx_stage_chunks(r);
}

/*
 * The window of an admitted connection (r->w.chunk and window set), its
 * stages and each slot's memory window: 0, or failed (said).
 */
int rx_win_setup(struct rx *r)
{
	bool use_mw;
	int rc;

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
		return -1;
	}
	for (unsigned int i = 0; i < r->nstages; i++) {
		r->stages[i].r = r;
		r->stages[i].op.done = rx_write_done;
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
		if ((rc == -EOPNOTSUPP || rc == -ENOSYS) && r->env->o->require_mw) {
			rx_fail(r, CP_E_IO, CP_EXIT_FAIL,
				"no memory windows on this device, and --require-mw");
			return -1;
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
			return -1;
		}
	}
	if (!use_mw)
		rx_free_windows(r);
	rc = rr_ep_reg_mr(r->ep, r->win, r->win_len,
			  use_mw ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_WRITE, &r->win_mr);
	if (rc) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "registering the window: %s", strerror(-rc));
		return -1;
	}
	return 0;
}
