// SPDX-License-Identifier: MIT
/*
 * The mixed workload's file reads, issued by the thread of the RDMA traffic
 * on one schedule for every strategy: one chunk after each loop pass that
 * handled completions, read inline. Those without a ring pread() it; the
 * bridges submit an io_uring read with the next pass's io_uring_enter, not
 * handed to io_uring's workers (no IOSQE_ASYNC: a worker would be a third
 * runnable thread the others do not get), so a page-cache read is copied
 * in that enter as pread() copies it. --file-direct opens the file with
 * O_DIRECT: pread() then waits for the device, where the ring's read goes
 * on without the loop. The file is read round and round; only the byte
 * count matters. The file-only row is the same pread() loop with no RDMA.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define FILER_CHUNK (64 * 1024)
#define FILER_DEPTH 1
#define FILER_TAG   0x46494c45u /* user_data of the reads: "FILE" | slot */

int filer_open(struct filer *f, const char *path, bool direct)
{
	off_t end;

	memset(f, 0, sizeof(*f));
	f->direct = direct;
	f->fd = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
	if (f->fd < 0)
		return -errno;
	end = lseek(f->fd, 0, SEEK_END);
	f->buf = aligned_alloc(4096, (size_t)FILER_CHUNK * FILER_DEPTH);
	if (end < FILER_CHUNK || !f->buf) {
		filer_close(f);
		return end < FILER_CHUNK ? -EINVAL : -ENOMEM;
	}
	f->size = (uint64_t)end - (uint64_t)end % FILER_CHUNK;
	return 0;
}

void filer_close(struct filer *f)
{
	if (f->fd >= 0)
		close(f->fd);
	free(f->buf);
	f->fd = -1;
	f->buf = NULL;
}

static uint64_t next_off(struct filer *f)
{
	uint64_t off = f->off;

	f->off = (f->off + FILER_CHUNK) % f->size;
	return off;
}

int filer_pread(struct filer *f)
{
	ssize_t n = pread(f->fd, f->buf, FILER_CHUNK, (off_t)next_off(f));

	if (n < 0)
		return -errno;
	f->bytes += (uint64_t)n;
	return 0;
}

int filer_kick(struct bside *s)
{
	struct filer *f = s->filer;

	while (f->want && f->inflight < FILER_DEPTH) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
		unsigned int slot = f->inflight;

		if (!sqe)
			return 0; /* the ring is full: the bridge submits it */
		io_uring_prep_read(sqe, f->fd, f->buf + (size_t)slot * FILER_CHUNK, FILER_CHUNK,
				   next_off(f));
		io_uring_sqe_set_data64(sqe, (uint64_t)FILER_TAG << 32 | slot);
		f->inflight++;
		f->want = false;
	}
	return 0;
}

/* The bridge hands every CQE that is not its own here. */
void filer_on_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
	struct bside *s = data;
	struct filer *f = s->filer;

	if (!f || cqe->user_data >> 32 != FILER_TAG)
		return;
	f->inflight--;
	if (cqe->res < 0 && !s->err)
		s->err = cqe->res;
	else if (cqe->res > 0)
		f->bytes += (uint64_t)cqe->res;
}

/* The file-only reference: pread() of one chunk after another for ms. */
int filer_only(const char *path, bool direct, unsigned int ms, struct result *r)
{
	struct filer f;
	double t0, t;
	int rc = filer_open(&f, path, direct);

	if (rc)
		return rc;
	memset(r, 0, sizeof(*r));
	t0 = now_us();
	do {
		rc = filer_pread(&f);
		t = now_us();
	} while (!rc && t - t0 < ms * 1000.0);
	if (!rc) {
		r->name = "file-only";
		r->reference = true;
		r->cfg.wl = W_MIXED;
		r->file_mb_per_s = (double)f.bytes / (t - t0);
	}
	filer_close(&f);
	return rc;
}

/* A file of `size` bytes to read, created and unlinked-on-close by the
 * caller; its pages are written, so reads come from the page cache. */
int filer_make_file(const char *dir, uint64_t size, char *path, size_t len)
{
	uint8_t chunk[4096];
	int fd, rc = 0;

	snprintf(path, len, "%s/ringrdma-bench.XXXXXX", dir);
	fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	for (size_t i = 0; i < sizeof(chunk); i++)
		chunk[i] = (uint8_t)(i * 7);
	for (uint64_t done = 0; done < size && !rc; done += sizeof(chunk))
		if (write(fd, chunk, sizeof(chunk)) != (ssize_t)sizeof(chunk))
			rc = errno ? -errno : -ENOSPC;
	if (close(fd) && !rc)
		rc = -errno;
	if (rc)
		unlink(path);
	return rc;
}
