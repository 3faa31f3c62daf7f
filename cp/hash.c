// SPDX-License-Identifier: MIT
/* ringrdma-cp: a file's hash on a thread of its own (see hash.h). */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hash.h"

#define READ_LEN (1u << 20)

/* A file job: @len bytes of @fd from @off into the hash; 0 or -errno. */
static int hash_fd(struct cp_hasher *h, int fd, uint64_t off, uint64_t len)
{
	if (!h->rbuf)
		h->rbuf = malloc(READ_LEN);
	if (!h->rbuf)
		return -ENOMEM;
	while (len) {
		ssize_t n = pread(fd, h->rbuf, len < READ_LEN ? len : READ_LEN, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;
		h->xxh->update(h->state, h->rbuf, (size_t)n);
		off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

static void *worker(void *arg)
{
	struct cp_hasher *h = arg;
	const uint64_t one = 1;
	int nice;

	/* Give way to the loop thread, which on rxe carries the device's own
	 * work inside its posts: a hash of equal weight, woken beside it,
	 * preempted it there up to twice per chunk
	 * (docs/ringrdma-cp-figures.md, "One large file"). Lowering one's own
	 * priority needs no privilege; a failure only leaves the thread at
	 * the loop's. */
	errno = 0;
	nice = getpriority(PRIO_PROCESS, 0);
	if (!errno)
		(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid),
				  nice + CP_HASH_NICE > 19 ? 19 : nice + CP_HASH_NICE);
	pthread_mutex_lock(&h->mu);
	while (!h->stop) {
		const void *buf;
		size_t len;
		uint64_t off;
		int fd, rc = 0;

		if (h->done == h->queued) {
			pthread_cond_wait(&h->cv, &h->mu);
			continue;
		}
		buf = h->q[h->done % CP_WINDOW_MAX].buf;
		len = h->q[h->done % CP_WINDOW_MAX].len;
		fd = h->q[h->done % CP_WINDOW_MAX].fd;
		off = h->q[h->done % CP_WINDOW_MAX].off;
		pthread_mutex_unlock(&h->mu);
		if (fd >= 0)
			rc = hash_fd(h, fd, off, len);
		else
			h->xxh->update(h->state, buf, len);
		pthread_mutex_lock(&h->mu);
		if (rc && !h->err)
			h->err = rc;
		h->done++;
		/* Fails only when the counter is full: the loop has a wake-up
		 * coming anyway. */
		if (write(h->efd, &one, sizeof(one)) < 0)
			continue;
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

static void ev_done(struct cp_op *op, int res);

static int arm(struct cp_hasher *h)
{
	struct io_uring_sqe *sqe;

	if (h->armed)
		return 0;
	sqe = cp_loop_sqe(h->lp, &h->op);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, h->efd, &h->ev, sizeof(h->ev), 0);
	h->armed = true;
	return 0;
}

static void ev_done(struct cp_op *op, int res)
{
	struct cp_hasher *h = (struct cp_hasher *)((char *)op - offsetof(struct cp_hasher, op));
	bool more;

	(void)res; /* an error only repeats: the thread's count is what matters */
	h->armed = false;
	pthread_mutex_lock(&h->mu);
	more = h->done != h->queued;
	pthread_mutex_unlock(&h->mu);
	/* Queued jobs always have a read in the ring, so the loop hears of
	 * each; if the ring is full just now, cp_hasher_kick() arms it. */
	if (more)
		arm(h);
	h->progress(h);
}

void cp_hasher_kick(struct cp_hasher *h)
{
	if (h->started && !h->armed && !cp_hasher_idle(h))
		arm(h);
}

int cp_hasher_init(struct cp_hasher *h, struct cp_loop *lp, void (*progress)(struct cp_hasher *h))
{
	int rc;

	h->lp = lp;
	h->progress = progress;
	h->op.done = ev_done;
	h->stop = h->armed = h->started = false;
	h->queued = h->done = 0;
	h->err = 0;
	h->rbuf = NULL;
	h->xxh = cp_xxh();
	h->state = h->xxh->create();
	if (!h->state)
		return -ENOMEM;
	h->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (h->efd < 0) {
		rc = -errno;
		goto err_state;
	}
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	rc = -pthread_create(&h->thread, NULL, worker, h);
	if (rc)
		goto err_fd;
	h->started = true;
	return 0;

err_fd:
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	close(h->efd);
err_state:
	h->xxh->destroy(h->state);
	h->state = NULL;
	return rc;
}

void cp_hasher_reset(struct cp_hasher *h)
{
	h->xxh->reset(h->state);
	h->err = 0; /* the thread is waiting: it touches nothing */
}

int cp_hasher_error(struct cp_hasher *h)
{
	int err;

	pthread_mutex_lock(&h->mu);
	err = h->err;
	pthread_mutex_unlock(&h->mu);
	return err;
}

int64_t cp_hasher_add(struct cp_hasher *h, const void *buf, size_t len)
{
	int64_t job;
	bool idle;

	pthread_mutex_lock(&h->mu);
	job = (int64_t)h->queued;
	idle = h->done == h->queued;
	if (idle && len <= CP_HASH_INLINE) {
		/* The thread is waiting and touches nothing: hash it here. */
		h->xxh->update(h->state, buf, len);
		h->queued++;
		h->done++;
		pthread_mutex_unlock(&h->mu);
		return job;
	}
	pthread_mutex_unlock(&h->mu);
	if (arm(h))
		return -EBUSY;
	pthread_mutex_lock(&h->mu);
	h->q[h->queued % CP_WINDOW_MAX].buf = buf;
	h->q[h->queued % CP_WINDOW_MAX].len = len;
	h->q[h->queued % CP_WINDOW_MAX].fd = -1;
	h->queued++;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
	return job;
}

/* A file job is cut in pieces: each one done is progress the loop hears
 * of (its --timeout counts it), and a few fill no queue. */
#define FILE_JOB_MIN  (64ull << 20)
#define FILE_JOBS_MAX 32u

int64_t cp_hasher_add_fd(struct cp_hasher *h, int fd, uint64_t off, uint64_t len)
{
	uint64_t piece = (len + FILE_JOBS_MAX - 1) / FILE_JOBS_MAX;
	int64_t job = -1;

	if (piece < FILE_JOB_MIN)
		piece = FILE_JOB_MIN;
	if (arm(h))
		return -EBUSY;
	pthread_mutex_lock(&h->mu);
	do {
		uint64_t n = len < piece ? len : piece;

		job = (int64_t)h->queued;
		h->q[h->queued % CP_WINDOW_MAX].buf = NULL;
		h->q[h->queued % CP_WINDOW_MAX].len = (size_t)n;
		h->q[h->queued % CP_WINDOW_MAX].fd = fd;
		h->q[h->queued % CP_WINDOW_MAX].off = off;
		h->queued++;
		off += n;
		len -= n;
	} while (len);
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
	return job;
}

uint64_t cp_hasher_done(struct cp_hasher *h)
{
	uint64_t done;

	pthread_mutex_lock(&h->mu);
	done = h->done;
	pthread_mutex_unlock(&h->mu);
	return done;
}

bool cp_hasher_caught_up(struct cp_hasher *h)
{
	bool caught_up;

	if (!h->started)
		return true;
	pthread_mutex_lock(&h->mu);
	caught_up = h->done == h->queued;
	pthread_mutex_unlock(&h->mu);
	return caught_up;
}

bool cp_hasher_idle(struct cp_hasher *h)
{
	return !h->armed && cp_hasher_caught_up(h);
}

uint64_t cp_hasher_digest(struct cp_hasher *h)
{
	return h->xxh->digest(h->state);
}

void cp_hasher_destroy(struct cp_hasher *h)
{
	if (!h->started)
		return;
	pthread_mutex_lock(&h->mu);
	h->stop = true;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->thread, NULL);
	free(h->rbuf);
	h->rbuf = NULL;
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	close(h->efd);
	h->xxh->destroy(h->state);
	h->started = false;
}
