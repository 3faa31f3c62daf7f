// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp serve, one receiving connection: its files and tree
 * entries. FILE_START opens the file (cp/store.c), FILE_END checks its
 * length, and once every chunk is written and hashed it is verified,
 * synced and named, or found to be the file already under that name;
 * MKDIR, SYMLINK and DIR_META are made between files. Called by rx.c;
 * calls down into rx_resume.c, rx_win.c and rx_conn.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "rx_int.h"

static void finish_file(struct rx *r);
static void open_file(struct rx *r, const char *name);
static void entry_done(struct rx *r, const struct cp_msg *done);

/* FILE_END came, the file is open and every chunk left the window,
 * reached the file and was hashed: on to verifying it. */
void rx_maybe_finish(struct rx *r)
{
	if (r->state == RX_FILE && r->end_seen && !r->writes && r->released == r->end_seq &&
	    cp_hasher_caught_up(&r->hs))
		finish_file(r);
}
static void same_done(struct rx *r);
static void commit_reread(struct rx *r);
static void commit_opened(struct rx *r);

/* The hashing thread got further: the stages it is done with are free. */
void rx_hashed(struct cp_hasher *h)
{
	struct rx *r = (struct rx *)((char *)h - offsetof(struct rx, hs));
	uint64_t done = cp_hasher_done(h);

	for (unsigned int i = 0; i < r->nstages; i++)
		if (r->stages[i].busy && r->stages[i].written && r->stages[i].job < done)
			r->stages[i].busy = false;
	r->last_activity = cp_now_ns(); /* a long file read is progress too */
	if (r->state == RX_SCAN && cp_hasher_caught_up(h))
		rx_scan_done(r);
	else if (r->state == RX_VERIFY || (r->state == RX_SAME && r->cur_commit))
		commit_reread(r);
	else if (r->state == RX_SAME && cp_hasher_caught_up(h))
		same_done(r);
	rx_stage_chunks(r);
	rx_maybe_finish(r);
}
static struct rx *rx_of_store(struct cp_store *st)
{
	return (struct rx *)((char *)st - offsetof(struct rx, st));
}

/* A store call came back after rx_fail(): rx_fail() left the file to us,
 * to abort once nothing of ours is in flight. */
static bool closed_meanwhile(struct rx *r)
{
	if (r->state != RX_CLOSING)
		return false;
	if (r->file_active && !r->io_inflight) {
		cp_store_abort(&r->st);
		r->file_active = false;
	}
	return true;
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
		rx_store_failed(r, code);
		return;
	}
	file_stored(r, r->cur_commit ? "committed" : "received");
}

/* The file is stored (or was already, with the same content): FILE_DONE,
 * and the next file, if it began meanwhile. */
static void file_stored(struct rx *r, const char *how)
{
	struct cp_msg m = {.type = CP_FILE_DONE};

	r->file_active = false;
	m.end.bytes = r->end_bytes;
	m.end.checksum = r->end_sum;
	if (!r->cur_range) /* a striped file counts once, at its commit */
		r->env->stored(r->env->data, r->end_bytes, r->end_sum);
	if (!rx_quiet(r))
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
		if (rx_send_failed(rc))
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
		r->cur_range = r->q.range;
		r->cur_commit = false;
		r->range_off = r->q.range_off;
		r->range_len = r->q.range_len;
		r->stripe = r->q.stripe;
		open_file(r, r->q.name);
	}
}

/* A range is synced: its partial closed through the ring, which gives
 * the range and the shared lock back before FILE_DONE tells the sender
 * (whose FILE_COMMIT next needs the partial to itself). */
static void range_closed(struct cp_op *op, int res)
{
	struct rx *r = (struct rx *)((char *)op - offsetof(struct rx, sync_op));

	(void)res; /* a close that fails has closed: the data was synced */
	r->io_inflight--;
	r->sync_op.done = rx_sync_done;
	if (r->state == RX_CLOSING)
		return;
	cp_store_abort(&r->st); /* its directory: the partial is forgotten */
	file_stored(r, "received range of");
}

static void range_synced(struct rx *r)
{
	struct io_uring_sqe *sqe = cp_loop_sqe(r->env->lp, &r->sync_op);

	if (!sqe) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue a close");
		return;
	}
	r->file_active = false;
	io_uring_prep_close(sqe, cp_store_release(&r->st));
	r->sync_op.done = range_closed;
	r->io_inflight++;
}

void rx_sync_done(struct cp_op *op, int res)
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
	if (r->cur_range) {
		range_synced(r);
		return;
	}
	code = cp_store_commit(&r->st, commit_done);
	if (code) {
		rx_store_failed(r, code);
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
/*
 * The name exists (no --force): received in full and verified, the file
 * is a success if the one under the name has the same length and hash.
 * Whatever the lengths, the declared length is read and hashed: the named
 * file as far as it goes, then the received file from there. Refused at
 * once for another length, the delay of an equal one told a token holder
 * the file's size; it now learns only "other content".
 */
static void same_check(struct rx *r)
{
	uint64_t named;
	char path[64];

	if (rx_open_named(r))
		return;
	if (r->cur_commit) {
		/* The named file folded as the sender's ranges, over the
		 * declared length: one shorter fails with -ENODATA. */
		int rc = cp_range_verify_start(&r->rv, &r->hs, r->same_fd, r->end_bytes, r->stripe);

		if (rc) {
			rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue a hash: %s", strerror(-rc));
			return;
		}
		r->state = RX_SAME;
		return;
	}
	named = r->st.exist_size < r->end_bytes ? r->st.exist_size : r->end_bytes;
	if (named < r->end_bytes) {
		/* Its own descriptor: the store's may be write-only, O_DIRECT. */
		snprintf(path, sizeof(path), "/proc/self/fd/%d", r->st.fd);
		r->pad_fd = open(path, O_RDONLY | O_CLOEXEC);
		if (r->pad_fd < 0) {
			rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO, "reopening the file of %s: %s",
				r->name, strerror(errno));
			return;
		}
	}
	cp_hasher_reset(&r->hs);
	if (cp_hasher_add_fd(&r->hs, r->same_fd, 0, named) < 0 ||
	    (r->pad_fd >= 0 &&
	     cp_hasher_add_fd(&r->hs, r->pad_fd, named, r->end_bytes - named) < 0)) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue a hash");
		return;
	}
	r->state = RX_SAME;
}

static void same_done(struct rx *r)
{
	int err = cp_hasher_error(&r->hs);
	uint64_t sum = cp_hasher_digest(&r->hs);

	rx_close_named(r);
	if (err || r->st.exist_size != r->end_bytes || sum != r->end_sum) {
		rx_fail(r, CP_E_EXISTS, CP_EXIT_REFUSED,
			"refusing to replace %s: it exists with other content%s%s", r->name,
			err ? ": " : "", err ? strerror(-err) : "");
		return;
	}
	drop_file(r);
	file_stored(r, "already had");
}

/* The file has its mode and time (RX_SYNC): its fsync. */
static void meta_done(struct cp_store *st, int code)
{
	struct rx *r = rx_of_store(st);
	struct io_uring_sqe *sqe;

	r->io_inflight--;
	if (closed_meanwhile(r))
		return;
	if (code) {
		rx_store_failed(r, code);
		return;
	}
	sqe = cp_loop_sqe(r->env->lp, &r->sync_op);
	if (!sqe) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue fsync");
		return;
	}
	io_uring_prep_fsync(sqe, r->st.fd, 0);
	r->io_inflight++;
}

/* Every chunk is on disk and FILE_END arrived: verify, set the mode and
 * time, fsync, name it. */
static void store_file(struct rx *r);

static void finish_file(struct rx *r)
{
	uint64_t sum = cp_hasher_digest(&r->hs);

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
	store_file(r);
}

/* Verified: a range is synced into the partial; a file (or a striped
 * file's commit) is compared with the one under its name, or gets its
 * mode and time, is synced and named. */
static void store_file(struct rx *r)
{
	int code;

	if (r->cur_range) {
		/* Stored in the partial, synced and left to the commit. */
		struct io_uring_sqe *sqe = cp_loop_sqe(r->env->lp, &r->sync_op);

		if (!sqe) {
			rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue fsync");
			return;
		}
		io_uring_prep_fsync(sqe, r->st.fd, 0);
		r->io_inflight++;
		r->state = RX_SYNC;
		return;
	}
	if (r->st.exists) {
		same_check(r);
		return;
	}
	/* Mode and mtime before the fsync, which makes them last too.
	 * Without the sender's: what a new file gets (0644 less umask). */
	code = r->meta ? cp_store_meta(&r->st, r->mode, &r->mtime, meta_done)
		       : cp_store_meta(&r->st, 0644, NULL, meta_done);
	if (code) {
		rx_store_failed(r, code);
		return;
	}
	r->io_inflight++;
	r->state = RX_SYNC;
}

/* The file of FILE_START is open (or could not be): the chunks that came
 * meanwhile go to it. */
static void open_done(struct cp_store *st, int code)
{
	struct rx *r = rx_of_store(st);

	r->io_inflight--;
	if (!code)
		r->file_active = true;
	if (closed_meanwhile(r))
		return;
	if (code) {
		rx_store_failed(r, code);
		return;
	}
	/* Another file has the name (no --force): the content decides, at
	 * the end, whatever the length declared; refused at once for another
	 * length, it would tell a token holder the file's size. */
	if (r->cur_commit) {
		commit_opened(r);
		return;
	}
	if (r->cur_resume) {
		rx_start_scan(r);
		return;
	}
	r->state = RX_FILE;
	rx_stage_chunks(r);
	rx_maybe_finish(r);
}
/* Open @name, written from offset 0 and hashed anew; its chunks wait in
 * their slots meanwhile (a file to resume has none before FILE_FROM). */
static void open_file(struct rx *r, const char *name)
{
	unsigned int flags;
	int code;

	memcpy(r->name, name, sizeof(r->name));
	r->file_off = 0;
	r->have = 0;
	rx_close_named(r);
	cp_hasher_reset(&r->hs);
	flags = CP_STORE_SAME | (r->env->o->force ? CP_STORE_FORCE : 0) |
		(r->env->o->direct && !r->cur_commit ? CP_STORE_DIRECT : 0) |
		(r->cur_resume || r->cur_commit ? CP_STORE_PARTIAL : 0);
	if (r->cur_range)
		code = cp_store_open_range(&r->st, r->env->lp, r->env->dirfd, r->name, flags,
					   r->range_off, r->range_len, open_done);
	else
		code = cp_store_open(&r->st, r->env->lp, r->env->dirfd, r->name, flags, open_done);

	if (code) {
		rx_store_failed(r, code);
		return;
	}
	r->io_inflight++;
	r->state = RX_OPEN;
}

/* FILE_COMMIT's partial is ours alone (held alone: no range is held): it
 * must hold the whole file, and is reread range by range. */
static void commit_opened(struct rx *r)
{
	int rc;

	if (r->st.partial_size != r->cur_size) {
		if (!r->st.partial_size)
			r->st.keep = false; /* made by this open: nothing to keep */
		rx_fail(r, CP_E_CHECKSUM, CP_EXIT_INTEGRITY,
			"%s: its partial holds %llu of the %llu bytes: a range is missing", r->name,
			(unsigned long long)r->st.partial_size, (unsigned long long)r->cur_size);
		return;
	}
	rc = cp_range_verify_start(&r->rv, &r->hs, r->st.fd, r->cur_size, r->stripe);
	if (rc) {
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue a hash: %s", strerror(-rc));
		return;
	}
	r->state = RX_VERIFY;
}

/* The hashing thread got further in a commit's reread (RX_VERIFY) or in
 * its compare with the file under the name (RX_SAME). */
static void commit_reread(struct rx *r)
{
	uint64_t sum = 0;
	int rc = cp_range_verify_step(&r->rv, &sum);

	if (rc == 1)
		return;
	if (r->state == RX_SAME) {
		rx_close_named(r);
		if (rc || r->st.exist_size != r->end_bytes || sum != r->end_sum) {
			rx_fail(r, CP_E_EXISTS, CP_EXIT_REFUSED,
				"refusing to replace %s: it exists with other content", r->name);
			return;
		}
		drop_file(r);
		file_stored(r, "already had");
		return;
	}
	if (rc && rc != -ENODATA) {
		rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO, "rereading the partial of %s: %s", r->name,
			strerror(-rc));
		return;
	}
	if (rc || sum != r->end_sum) {
		/* Logged, never sent, as a whole file's. */
		if (!rc)
			cp_log("serve: %s: %s: its ranges fold to %016llx", r->peer, r->name,
			       (unsigned long long)sum);
		rx_fail(r, CP_E_CHECKSUM, CP_EXIT_INTEGRITY,
			"%s: checksum mismatch of its ranges (sender %016llx)", r->name,
			(unsigned long long)r->end_sum);
		return;
	}
	store_file(r);
}

/*
 * FILE_COMMIT: every range of the file was stored (the sender saw their
 * FILE_DONEs); the partial is opened as a whole file's (held alone, so
 * "busy" while any range is held, and no range opens until it is
 * named), reread and checked, then named as any file. Between files only,
 * as a tree entry.
 */
void rx_on_commit(struct rx *r, const struct cp_msg *m)
{
	const struct cp_opts *o = r->env->o;
	const char *slash = strrchr(m->start.name, '/');

	if (o->max_size && m->start.size > o->max_size) {
		rx_fail(r, CP_E_NOSPC, CP_EXIT_REFUSED, "%s: %llu bytes, over --max-size %llu",
			m->start.name, (unsigned long long)m->start.size,
			(unsigned long long)o->max_size);
		return;
	}
	if (strlen(slash ? slash + 1 : m->start.name) > CP_STORE_PART_MAX) {
		rx_fail(r, CP_E_NAME, CP_EXIT_REFUSED, "%s: no partial name, so no ranges",
			m->start.name);
		return;
	}
	r->end_seen = false;
	r->meta = m->start.flags & CP_START_META;
	r->mode = m->start.mode;
	r->mtime = m->start.mtime;
	r->cur_resume = r->cur_stream = r->cur_range = false;
	r->cur_commit = true;
	r->cur_size = m->start.size;
	r->stripe = m->start.stripe;
	r->end_bytes = m->start.size;
	r->end_sum = m->start.sum;
	open_file(r, m->start.name);
}

/* FILE_START: the window admits the file's chunks from now on. Between
 * files it is opened at once; after the last file's FILE_END it waits in
 * r->q until that one is named. */
/* --max-size and --min-free: may a file of @size (a stream: 0) begin?
 * 0, or failed (said). */
static int room_for(struct rx *r, const struct cp_msg *m)
{
	const struct cp_opts *o = r->env->o;
	bool stream = m->start.flags & CP_START_STREAM;
	struct statvfs vfs;
	uint64_t avail;

	if (o->max_size && !stream && m->start.size > o->max_size) {
		rx_fail(r, CP_E_NOSPC, CP_EXIT_REFUSED, "%s: %llu bytes, over --max-size %llu",
			m->start.name, (unsigned long long)m->start.size,
			(unsigned long long)o->max_size);
		return -1;
	}
	if (!o->min_free)
		return 0;
	/* One call on the loop thread, answered from the super block. */
	if (fstatvfs(r->env->dirfd, &vfs))
		return 0; /* the writes will say */
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (avail < o->min_free || avail - o->min_free < (stream ? 0 : m->start.size)) {
		rx_fail(r, CP_E_NOSPC, CP_EXIT_REFUSED,
			"%s: %llu bytes would leave less than --min-free %llu free", m->start.name,
			(unsigned long long)m->start.size, (unsigned long long)o->min_free);
		return -1;
	}
	return 0;
}

void rx_on_start(struct rx *r, const struct cp_msg *m)
{
	bool resume = m->start.flags & CP_START_RESUME;
	bool range = m->start.flags & CP_START_RANGE;
	char why[128];

	/* The decoder took it for the layout's range; whole chunks too? */
	if (range && cp_range_check(m->start.size, m->start.range_off, m->start.range_len,
				    r->w.chunk, why, sizeof(why))) {
		rx_fail(r, CP_E_PROTO, CP_EXIT_INTEGRITY, "%s: %s", m->start.name, why);
		return;
	}
	/* A range's file is judged whole: the partial may grow to it. */
	if (room_for(r, m))
		return;

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
		r->q.range = range;
		r->q.range_off = m->start.range_off;
		r->q.range_len = m->start.range_len;
		r->q.stripe = m->start.stripe;
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
	r->cur_range = range;
	r->cur_commit = false;
	r->range_off = m->start.range_off;
	r->range_len = m->start.range_len;
	r->stripe = m->start.stripe;
	open_file(r, m->start.name);
}

/* FILE_END of the file the window admits: every chunk of it came before
 * (RC keeps the order), so its length is checked now and the window is
 * free for the next file. */
void rx_on_end(struct rx *r, const struct cp_msg *m)
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
	rx_maybe_finish(r);
}

/* The entry's directory was synced: answered like a file, with 0 bytes
 * and checksum 0, and the next file, if it began, goes on. */
void rx_entry_synced(struct cp_op *op, int res)
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

/* The entry is made (or refused): its directory is synced through the
 * ring, then it is answered. */
static void entry_made(struct cp_entry *e, int code)
{
	struct rx *r = (struct rx *)((char *)e - offsetof(struct rx, ent));
	struct io_uring_sqe *sqe;

	r->io_inflight--;
	if (r->state == RX_CLOSING) {
		if (!code)
			close(e->syncfd);
		return;
	}
	if (code) {
		rx_fail(r, (unsigned int)code, rx_err_result((unsigned int)code), "%s", e->why);
		return;
	}
	if (e->left && !rx_quiet(r))
		cp_log("serve: %s: %s: not made by this transfer, its mode and time left as they "
		       "are (--force sets them)",
		       r->peer, r->name);
	if (!rx_quiet(r) && r->entry_type != CP_DIR_META)
		cp_log("serve: %s: %s %s%s%s", r->peer,
		       r->entry_type == CP_MKDIR ? "made directory" : "made link", r->name,
		       r->entry_type == CP_SYMLINK ? " -> " : "",
		       r->entry_type == CP_SYMLINK ? e->target : "");
	r->entry_fd = e->syncfd;
	sqe = cp_loop_sqe(r->env->lp, &r->entry_op);
	if (!sqe) {
		close(r->entry_fd);
		r->entry_fd = -1;
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue fsync");
		return;
	}
	io_uring_prep_fsync(sqe, r->entry_fd, 0);
	r->io_inflight++;
}

/*
 * MKDIR, SYMLINK, DIR_META: made through the ring (cp/tree.c, beneath
 * DIR and through no link; a mode or a time on the loop's worker), then
 * the directory they changed is synced through the ring. They come only
 * between files (the sender waits for the last FILE_DONE), and the next
 * file may begin meanwhile, as after a FILE_END.
 */
void rx_on_entry(struct rx *r, const struct cp_msg *m)
{
	const struct cp_opts *o = r->env->o;
	struct rx_env *env = r->env;
	int code;

	memcpy(r->name, m->entry.name, sizeof(r->name));
	r->entry_type = m->type;
	if (m->type == CP_MKDIR)
		code = cp_entry_mkdir(&r->ent, env->lp, env->dirfd, r->name, env->made, entry_made);
	else if (m->type == CP_SYMLINK)
		code = cp_entry_symlink(
			&r->ent, env->lp, env->dirfd, r->name, m->entry.target, &m->entry.mtime,
			(o->force ? CP_LINK_FORCE : 0) | (o->any_links ? CP_LINK_ANYWHERE : 0),
			entry_made);
	else
		code = cp_entry_dir_meta(&r->ent, env->lp, env->dirfd, r->name, m->entry.mode,
					 &m->entry.mtime, env->made, o->force, entry_made);
	if (code) {
		rx_fail(r, (unsigned int)code, rx_err_result((unsigned int)code), "%s", r->ent.why);
		return;
	}
	r->io_inflight++;
	/* Nothing of it passes through the window: the next file's chunks
	 * wait for it as for a file whose FILE_END came. */
	r->state = RX_ENTRY;
	r->end_seen = true;
	r->end_seq = r->w.next_seq;
	r->end_bytes = r->end_sum = 0;
}
