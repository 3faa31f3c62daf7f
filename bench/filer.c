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
 * on without the loop. The mixed-direct workload is mixed with O_DIRECT on
 * a file of its own (--file-dir: the lab's virtio-blk disk), beside mixed's
 * page-cache file. The file is read round and round; only the byte count
 * matters. The file-only row is the same pread() loop with no RDMA.
 *
 * Several reads in flight (--file-qd N, mixed-direct): after each pass that
 * handled completions the ring and epoll-aio top their reads up to N,
 * the ring with SQEs its next io_uring_enter submits, epoll-aio with one
 * io_submit() of Linux AIO whose completions signal an eventfd in its
 * epoll set (one read(2) of the eventfd and one io_getevents() per
 * wake-up). A blocking pread() has one in flight, whatever N is.
 *
 * Where a ring's read ran: the kernel may issue it in the submitting
 * io_uring_enter (inline: a page-cache copy, or an O_DIRECT read handed
 * to the device) or hand it to an io-wq worker (from 6.5 a tmpfs read,
 * which cannot be tried without blocking). Workers are threads of this
 * process named iou-wrk-*; each one sleeps between work items at depth 1,
 * so the context switches they make while measuring count the reads
 * they ran.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#ifdef BENCH_HAVE_LIBAIO
#include <libaio.h>
#include <sys/eventfd.h>
#endif

#include "bench.h"

#define FILER_CHUNK (64 * 1024)
#define FILER_TAG   0x46494c45u /* user_data of the reads: "FILE" | slot */

#ifdef BENCH_HAVE_LIBAIO
struct filer_aio {
	io_context_t ctx;
	int efd;
	struct iocb cb[FILER_MAX_DEPTH];
};
#endif

bool bench_has_aio(void)
{
#ifdef BENCH_HAVE_LIBAIO
	return true;
#else
	return false;
#endif
}

int filer_open(struct filer *f, const char *path, bool direct, unsigned int depth)
{
	off_t end;

	memset(f, 0, sizeof(*f));
	f->direct = direct;
	f->depth = depth < 1 ? 1 : depth > FILER_MAX_DEPTH ? FILER_MAX_DEPTH : depth;
	f->fd = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
	if (f->fd < 0)
		return -errno;
	end = lseek(f->fd, 0, SEEK_END);
	f->buf = aligned_alloc(4096, (size_t)FILER_CHUNK * f->depth);
	if (end < FILER_CHUNK || !f->buf) {
		filer_close(f);
		return end < FILER_CHUNK ? -EINVAL : -ENOMEM;
	}
	f->size = (uint64_t)end - (uint64_t)end % FILER_CHUNK;
	return 0;
}

void filer_close(struct filer *f)
{
#ifdef BENCH_HAVE_LIBAIO
	if (f->aio) {
		/* Waits for the reads still in flight: their buffer goes next. */
		io_destroy(f->aio->ctx);
		close(f->aio->efd);
		free(f->aio);
		f->aio = NULL;
	}
#endif
	if (f->fd >= 0)
		close(f->fd);
	free(f->buf);
	f->fd = -1;
	f->buf = NULL;
}

/* A slot of buf with no read in flight, marked busy; -1: none. */
static int slot_take(struct filer *f)
{
	for (unsigned int i = 0; i < f->depth; i++)
		if (!(f->busy & (1ull << i))) {
			f->busy |= 1ull << i;
			return (int)i;
		}
	return -1;
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
	f->reads++;
	f->calls++;
	f->most = 1;
	return 0;
}

int filer_kick(struct bside *s)
{
	struct filer *f = s->filer;

	while (f->want && f->inflight < f->depth) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
		int slot;

		if (!sqe)
			return 0; /* the ring is full: the bridge submits it */
		slot = slot_take(f);
		io_uring_prep_read(sqe, f->fd, f->buf + (size_t)slot * FILER_CHUNK, FILER_CHUNK,
				   next_off(f));
		io_uring_sqe_set_data64(sqe, (uint64_t)FILER_TAG << 32 | (uint32_t)slot);
		f->inflight++;
	}
	f->want = false;
	if (f->inflight > f->most)
		f->most = f->inflight;
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
	f->busy &= ~(1ull << (cqe->user_data & 63));
	if (cqe->res < 0 && !s->err)
		s->err = cqe->res;
	else if (cqe->res > 0) {
		f->bytes += (uint64_t)cqe->res;
		f->reads++;
	}
}

#ifdef BENCH_HAVE_LIBAIO
int filer_aio_attach(struct bside *s)
{
	struct filer *f = s->filer;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = FILER_AIO_EVENT};
	struct filer_aio *a = calloc(1, sizeof(*a));
	int rc;

	if (!a)
		return -ENOMEM;
	a->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (a->efd < 0) {
		rc = -errno;
		free(a);
		return rc;
	}
	rc = io_setup((int)f->depth, &a->ctx); /* libaio: 0 or -errno */
	if (rc) {
		close(a->efd);
		free(a);
		return rc;
	}
	f->aio = a;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, a->efd, &ev))
		return -errno; /* filer_close() undoes the rest */
	return 0;
}

int filer_aio_kick(struct filer *f)
{
	struct iocb *list[FILER_MAX_DEPTH];
	int n = 0, rc;

	while (f->want && f->inflight + (unsigned int)n < f->depth) {
		int slot = slot_take(f);
		struct iocb *cb = &f->aio->cb[slot];

		io_prep_pread(cb, f->fd, f->buf + (size_t)slot * FILER_CHUNK, FILER_CHUNK,
			      (long long)next_off(f));
		io_set_eventfd(cb, f->aio->efd);
		cb->data = (void *)(uintptr_t)slot;
		list[n++] = cb;
	}
	f->want = false;
	if (!n)
		return 0;
	rc = io_submit(f->aio->ctx, n, list); /* the count taken, or -errno */
	f->calls++;
	for (int i = rc < 0 ? 0 : rc; i < n; i++)
		f->busy &= ~(1ull << (uintptr_t)list[i]->data);
	if (rc < 0)
		return rc;
	f->inflight += (unsigned int)rc;
	if (f->inflight > f->most)
		f->most = f->inflight;
	return rc < n ? -EAGAIN : 0;
}

int filer_aio_efd(const struct filer *f)
{
	return f->aio ? f->aio->efd : -1;
}

int filer_aio_reap(struct filer *f)
{
	struct io_event ev[FILER_MAX_DEPTH];
	uint64_t done;
	int n;

	f->calls++;
	if (read(f->aio->efd, &done, sizeof(done)) != sizeof(done))
		return errno == EAGAIN ? 0 : -errno;
	/* Whatever the ring holds, without waiting: the count read may
	 * already have been reaped (a completion that came between an
	 * earlier read(2) and its io_getevents()), and waiting for it with
	 * nothing in flight would block the loop for good. */
	n = io_getevents(f->aio->ctx, 0, f->depth, ev, &(struct timespec){0});
	f->calls++;
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		long res = (long)ev[i].res;

		f->busy &= ~(1ull << (uintptr_t)ev[i].data);
		f->inflight--;
		if (res < 0)
			return (int)res;
		f->bytes += (uint64_t)res;
		f->reads++;
	}
	return 0;
}
#else
int filer_aio_attach(struct bside *s)
{
	(void)s;
	return -ENOSYS;
}

int filer_aio_kick(struct filer *f)
{
	(void)f;
	return -ENOSYS;
}

int filer_aio_reap(struct filer *f)
{
	(void)f;
	return -ENOSYS;
}

int filer_aio_efd(const struct filer *f)
{
	(void)f;
	return -1;
}
#endif

/* A task's context switches, voluntary and not, from its status file. */
static int64_t task_switches(int tid)
{
	char path[64], line[128];
	int64_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		long long v;

		if (sscanf(line, "voluntary_ctxt_switches: %lld", &v) == 1 ||
		    sscanf(line, "nonvoluntary_ctxt_switches: %lld", &v) == 1)
			n += v;
	}
	fclose(f);
	return n;
}

int iowq_snap(struct iowq_snap *s)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	s->n = 0;
	if (!d)
		return -errno;
	while ((e = readdir(d)) && s->n < IOWQ_MAX) {
		char path[64], comm[32] = "";
		FILE *f;
		int64_t sw;
		int tid;

		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		tid = atoi(e->d_name);
		snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
		f = fopen(path, "re");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = 0;
		fclose(f);
		if (strncmp(comm, "iou-wrk-", 8))
			continue;
		sw = task_switches(tid);
		if (sw < 0)
			continue;
		s->tid[s->n] = tid;
		s->sw[s->n++] = sw;
	}
	closedir(d);
	return 0;
}

int64_t iowq_since(const struct iowq_snap *before, const struct iowq_snap *now)
{
	int64_t n = 0;

	for (int i = 0; i < now->n; i++) {
		int64_t was = 0;

		for (int j = 0; j < before->n; j++)
			if (before->tid[j] == now->tid[i])
				was = before->sw[j];
		n += now->sw[i] - was;
	}
	return n;
}

/* The file-only reference: pread() of one chunk after another for ms. */
int filer_only(const char *path, bool direct, enum workload wl, unsigned int ms, struct result *r)
{
	struct filer f;
	double t0, t;
	int rc = filer_open(&f, path, direct, 1);

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
		r->cfg.wl = wl;
		r->file_mb_per_s = (double)f.bytes / (t - t0);
		r->file_iowq_pct = 0; /* pread() in this thread */
		r->file_most = 1;
		r->file_sc_per_read = 1; /* one pread() a read */
	}
	filer_close(&f);
	return rc;
}

/* A file of `size` bytes to read, created and unlinked-on-close by the
 * caller; its pages are written, so reads come from the page cache, and
 * synced, so O_DIRECT reads find them on the device. */
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
	if (!rc && fsync(fd))
		rc = -errno;
	if (close(fd) && !rc)
		rc = -errno;
	if (rc)
		unlink(path);
	return rc;
}
