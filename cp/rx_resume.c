// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp serve, one receiving connection: resuming a file. What we
 * hold of it (its partial, or the file under its name) is hashed and
 * offered in FILE_HAVE; FILE_FROM says where the chunks begin. Called by
 * rx_file.c; calls down into rx_win.c and rx_conn.c, and up only through
 * the hook of struct rx (progress).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rx_int.h"

/* Open the file under its name, to hash it: 0, or failed (said). */
int rx_open_named(struct rx *r)
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

void rx_close_named(struct rx *r)
{
	if (r->same_fd >= 0)
		close(r->same_fd);
	r->same_fd = -1;
	if (r->pad_fd >= 0)
		close(r->pad_fd);
	r->pad_fd = -1;
}
/*
 * A file to resume is open: hash what its partial holds on the hashing
 * thread, then say so (rx_scan_done()). Only the partial, never a file
 * under the name: its hash (and whether its size is the one declared)
 * would be an oracle on an operator's file for anyone holding the token.
 * A partial longer than the file is not a beginning of it: another
 * transfer of that name left it, and it stays for that one.
 */
void rx_start_scan(struct rx *r)
{
	int fd = r->st.fd;

	r->state = RX_SCAN;
	r->have = r->st.partial_size;
	if (r->have > r->cur_size) {
		rx_fail(r, CP_E_BUSY, CP_EXIT_REFUSED,
			"%s: its partial holds more than the %llu bytes declared, left by another "
			"transfer: kept, not resumed",
			r->name, (unsigned long long)r->cur_size);
		return;
	}
	if (r->cur_range) {
		/* What it holds of this range: its bytes up to the first hole,
		 * in whole chunks, hashed from the range's start. */
		int rc = cp_range_have(r->st.fd, r->range_off, r->range_len, r->w.chunk, &r->have);

		if (rc) {
			rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO, "what the partial of %s holds: %s",
				r->name, strerror(-rc));
			return;
		}
	}
	if (r->st.direct && r->have) {
		/* O_DIRECT reads want aligned buffers: read it through a
		 * descriptor of its own, the page cache's. */
		char path[64];

		snprintf(path, sizeof(path), "/proc/self/fd/%d", r->st.fd);
		r->same_fd = open(path, O_RDONLY | O_CLOEXEC);
		if (r->same_fd < 0) {
			rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO, "reopening the partial of %s: %s",
				r->name, strerror(errno));
			return;
		}
		fd = r->same_fd;
	}
	if (!r->have) {
		rx_scan_done(r);
		return;
	}
	if (cp_hasher_add_fd(&r->hs, fd, r->cur_range ? r->range_off : 0, r->have) < 0)
		rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue a hash");
}

/* What we hold is hashed: FILE_HAVE, and the sender's FILE_FROM is due. */
void rx_scan_done(struct rx *r)
{
	struct cp_msg m = {.type = CP_FILE_HAVE};
	int err = cp_hasher_error(&r->hs);

	rx_close_named(r);
	if (err) {
		rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO, "reading what we hold of %s: %s", r->name,
			strerror(-err));
		return;
	}
	m.have.bytes = r->have;
	m.have.checksum = cp_hasher_digest(&r->hs);
	r->state = RX_FROM;
	if (rx_send_failed(rx_send(r, &m)))
		rx_fail(r, 0, CP_EXIT_NET, "cannot send FILE_HAVE");
}

/* The chunks of FILE_FROM go to the file from here on. */
static void from_ready(struct rx *r)
{
	r->state = RX_FILE;
	rx_stage_chunks(r);
	r->progress(r);
}

/* On the loop's worker: no io_uring op truncates before Linux 6.9. */
static int truncate_fn(struct cp_work *w)
{
	struct rx *r = (struct rx *)((char *)w - offsetof(struct rx, trunc));

	return ftruncate(r->trunc_fd, 0) ? -errno : 0;
}

static void truncated(struct cp_op *op, int res)
{
	struct rx *r = (struct rx *)((char *)op - offsetof(struct rx, trunc.op));

	r->io_inflight--;
	if (r->state == RX_CLOSING) {
		/* rx_fail() left the file to us: nothing of ours is in flight now. */
		if (r->file_active && !r->io_inflight) {
			cp_store_abort(&r->st);
			r->file_active = false;
		}
		return;
	}
	if (res < 0) {
		rx_fail(r, CP_E_IO, CP_EXIT_LOCAL_IO, "truncating the partial of %s: %s", r->name,
			strerror(-res));
		return;
	}
	from_ready(r);
}

/* FILE_FROM: the chunks begin here, after what we hold or at 0; the hash
 * goes on from what we hold, or starts again. Chunks that come while the
 * partial is being emptied (RX_TRUNC) wait in their slots. */
void rx_on_from(struct rx *r, const struct cp_msg *m)
{
	uint64_t off = m->from.offset;
	/* A range is written again over its bytes: the partial holds others. */
	bool empty = !off && r->have && !r->cur_range;

	if (off && off != r->have) {
		rx_fail(r, CP_E_PROTO, CP_EXIT_INTEGRITY, "%s: FILE_FROM %llu, we hold %llu",
			r->name, (unsigned long long)off, (unsigned long long)r->have);
		return;
	}
	if (empty) {
		r->trunc.fn = truncate_fn;
		r->trunc.op.done = truncated;
		r->trunc_fd = r->st.fd;
		if (cp_loop_work(r->env->lp, &r->trunc)) {
			rx_fail(r, CP_E_IO, CP_EXIT_FAIL, "cannot queue the truncation of %s",
				r->name);
			return;
		}
		r->io_inflight++;
		cp_hasher_reset(&r->hs);
	}
	if (off && !rx_quiet(r))
		cp_log("serve: %s: resuming %s at %llu of %llu bytes", r->peer, r->name,
		       (unsigned long long)((r->cur_range ? r->range_off : 0) + off),
		       (unsigned long long)r->cur_size);
	if (!off && r->have)
		cp_hasher_reset(&r->hs); /* a range's bytes that hashed otherwise */
	r->file_off = (r->cur_range ? r->range_off : 0) + off;
	r->w_off = off;
	r->w.size = (r->cur_range ? r->range_len : r->cur_size) - off;
	r->w.got = 0;
	r->w.stream = false;
	r->w.file_open = true;
	if (empty) {
		r->state = RX_TRUNC;
		return;
	}
	from_ready(r);
}
