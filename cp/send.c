// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp send FILE... ADDR:PORT: the files in order over one connection,
 * or over --conns N side by side, each taking the next file when its last
 * one is sent (one file ahead of the receiver's FILE_DONE).
 *
 * With -r a directory is walked before anything moves into a list of
 * entries in order: MKDIR of the directory, its files (and links, with
 * --links), each subdirectory's entries in turn, then DIR_META with its
 * mode and mtime. The connections take entries from that list in order,
 * as with files, except that an entry goes only once its directory's
 * MKDIR was confirmed, or went on the same connection (the receiver
 * keeps a connection's order), and DIR_META only once everything beneath
 * it was stored (a name made in a directory changes its mtime, and a
 * directory without write or search permission takes nothing more).
 * The list and those rules are cp/sendq.c's.
 *
 * With --threads N (N > 1) the connections are spread over N threads,
 * each with a ring, bridge and loop of its own made where it runs; all
 * take from the one list. The first thread is the caller's and reads
 * the signals (the others block them); a failure or a signal sets one
 * flag every thread's loop reads at each pass (a 100 ms tick at the
 * latest) and ends its own connections on. A FILE_DONE that lets a
 * waiting entry go wakes the other threads through their eventfds, so
 * their waiting connections ask again at once. Counts, progress and the
 * "sent" lines are shared under one mutex.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "ranks.h"
#include "progress.h"
#include "range.h"
#include "sendq.h"
#include "store.h"
#include "tx.h"

#define RING_ENTRIES 512

struct sender;

/* A thread of connections: its loop, and s->c[first .. first + n). */
struct sthread {
	struct cp_loop lp; /* first: the loop's hooks get it */
	struct sender *s;
	unsigned int first, n, live;
	bool stopping; /* its connections were told to end (s->stop) */
	bool failed;   /* its loop or a connection's start failed */
	pthread_t thread;
	bool started;
	/* Written by another thread when one of its FILE_DONEs may let an
	 * entry go that a connection here waits for (open to the end). */
	int efd;
	struct cp_op wake;
	bool wake_on;
	uint64_t wake_buf;
};

/* One connection; its files go in turn, the connections' side by side. */
struct sconn {
	struct sthread *th; /* the thread that runs it */
	struct tx *t;
	int fd;			/* the file being sent on it */
	_Atomic uint64_t acked; /* tx_bytes(), as its thread last saw it */
	uint64_t chunks;	/* tx_chunks() */
	uint64_t resumed;	/* tx_resumed() */
};

#define CP_DEST_MAX 64

/* A serve address; connection g (numbered across ranks) goes to g mod n. */
struct dest {
	char host[256];
	uint16_t port;
};

struct sender {
	const struct cp_opts *o;
	struct cp_opts conn_opts; /* o, with each connection's share of the rate */
	struct dest dest[CP_DEST_MAX];
	unsigned int ndest;
	/* --mpi: this rank's number among the job's, and rank 0's list */
	bool mpi;
	int rank, ranks;
	struct cp_mpiq mq;
	uint64_t last_ask; /* the other ranks: when rank 0 was last asked */
	struct sconn c[CP_SEND_CONNS_MAX];
	unsigned int nconns, nthreads;
	struct sthread *th;
	struct cp_sendq q;
	/* Set once: the result every thread ends its connections with. */
	atomic_int stop;
	atomic_bool signalled;
	atomic_uint running; /* threads but the first still running */
	pthread_mutex_t mu;  /* over what follows, once connections run */
	uint64_t total;
	struct cp_tally n;	       /* files, bytes, checksum as they are stored */
	uint64_t data_start, data_end; /* first WELCOME, last FILE_DONE */
	struct cp_progress prog;
	int result; /* the first connection that failed says it */
	char msg[256];
	uint64_t walked; /* entries this rank's walk listed (--mpi: rank 0's) */
	int *tops;	 /* the walked trees' top directories, open to the end */
	int ntops;
};

static int conn_index(const struct sconn *c)
{
	return (int)(c - c->th->s->c);
}

/* An entry may go now: the other threads' waiting connections ask
 * again at their next pass, not at their next tick. */
static void wake_others(struct sender *s, const struct sthread *th)
{
	uint64_t one = 1;

	for (unsigned int k = 0; k < s->nthreads; k++) {
		if (&s->th[k] == th || s->th[k].efd < 0)
			continue;
		/* Fails only when the count is full: a wake is due anyway. */
		if (write(s->th[k].efd, &one, sizeof(one)) < 0)
			continue;
	}
}

static void arm_wake(struct sthread *th)
{
	struct io_uring_sqe *sqe;

	if (th->wake_on || th->efd < 0 || th->lp.stop)
		return;
	sqe = cp_loop_sqe(&th->lp, &th->wake);
	if (!sqe)
		return; /* the tick still asks again */
	io_uring_prep_read(sqe, th->efd, &th->wake_buf, sizeof(th->wake_buf), 0);
	io_uring_sqe_set_data(sqe, &th->wake);
	th->wake_on = true;
}

/* Woken: the loop's poll, which follows every batch of completions,
 * asks the waiting connections again. */
static void wake_done(struct cp_op *op, int res)
{
	struct sthread *th = (struct sthread *)((char *)op - offsetof(struct sthread, wake));

	th->wake_on = false;
	if (res >= 0 || res == -EINTR)
		arm_wake(th); /* else the tick still asks again */
}

/* A file's source: opened, still a regular file, its size, mode and mtime. */
static bool open_file(struct sconn *c, struct tx *t, struct tx_src *src, const char *path)
{
	struct sender *s = c->th->s;
	const struct cp_sendq_entry *e = &s->q.e[src->id];
	struct stat sb = {0};
	char msg[256];

	/* The file the walk found, and nothing else: not what a link put at
	 * its name (or at a directory's on its path) leads to since, and no
	 * FIFO to block on. */
	c->fd = e->in_tree ? cp_open_walked(s->tops[e->top], path + e->rel, e->dev, e->ino, true)
			   : cp_open_walked(-1, path, e->dev, e->ino, false);
	if (c->fd < 0 || fstat(c->fd, &sb)) {
		int err = c->fd < 0 ? -c->fd : errno;

		snprintf(msg, sizeof(msg), "cannot open %s: %s", path,
			 err == EINVAL	 ? "not a regular file"
			 : err == ESTALE ? "not the file found before connecting (changed since)"
			 : err == ELOOP	 ? "a symbolic link now (changed since)"
					 : strerror(err));
		if (c->fd >= 0)
			close(c->fd);
		c->fd = -1;
		tx_abort(t, CP_EXIT_LOCAL_IO, msg);
		return false;
	}
	if (e->range && (uint64_t)sb.st_size != e->size) {
		snprintf(msg, sizeof(msg),
			 "%s: %llu bytes now, %llu when its ranges were made (changed since)", path,
			 (unsigned long long)sb.st_size, (unsigned long long)e->size);
		close(c->fd);
		c->fd = -1;
		tx_abort(t, CP_EXIT_LOCAL_IO, msg);
		return false;
	}
	src->fd = c->fd;
	src->size = (uint64_t)sb.st_size;
	src->range = e->range;
	src->range_off = e->range_off;
	src->range_len = e->range_len;
	src->stripe = e->stripe;
	src->meta = true;
	src->mode = sb.st_mode & 0777;
	src->mtime = (struct cp_time){sb.st_mtim.tv_sec, (uint32_t)sb.st_mtim.tv_nsec};
	return true;
}

static void failed(struct sender *s, int result, const char *msg);

/* With --mpi: rank 0 said every rank stops (with what, and why). */
static void stopped_by_rank0(struct sender *s)
{
	int result = atomic_load(&s->mq.stop);

	if (result)
		failed(s, result, s->mq.stop_msg);
}

static bool next_file(struct tx *t, struct tx_src *src, void *data)
{
	struct sconn *c = data;
	struct sender *s = c->th->s;
	const struct cp_sendq_entry *e;
	uint64_t commit_sum = 0;
	int i;

	if (c->fd >= 0)
		close(c->fd); /* its FILE_END went: every read of it ended */
	c->fd = -1;
	i = cp_mpiq_take(&s->mq, conn_index(c), &commit_sum);
	if (i == -1)
		return false;
	if (i == -3 || i == -ENOMEM) {
		stopped_by_rank0(s);
		tx_abort(t, i == -3 && s->mq.stop ? s->mq.stop : CP_EXIT_FAIL,
			 i == -3 ? "another rank failed" : "out of memory");
		return false;
	}
	if (i == -2) {
		src->wait = true;
		return true;
	}
	e = &s->q.e[i];
	src->id = i;
	src->label = e->path;
	src->kind = e->kind;
	snprintf(src->name, sizeof(src->name), "%s", e->name);
	if (!e->kind)
		return open_file(c, t, src, e->path);
	if (e->kind == CP_FILE_COMMIT) {
		src->sum = commit_sum;
		src->size = e->size;
		src->stripe = e->stripe;
	}
	src->mode = e->mode;
	src->mtime = e->mtime;
	if (e->target)
		snprintf(src->target, sizeof(src->target), "%s", e->target);
	return true;
}

/* Bytes the receiver acknowledged, over every connection (as their
 * threads last saw them). */
static uint64_t acked(const struct sender *s)
{
	uint64_t n = 0;

	for (unsigned int i = 0; i < s->nconns; i++)
		n += atomic_load_explicit(&s->c[i].acked, memory_order_relaxed);
	return n;
}

/* Rank 0's progress line counts every rank's (as each last said). */
static uint64_t acked_all(const struct sender *s)
{
	return acked(s) + (s->mpi ? cp_mpiq_others_bytes(&s->mq) : 0);
}

static void file_done(struct tx *t, const struct tx_src *src, uint64_t bytes, uint64_t sum,
		      void *data)
{
	char l[CP_ESC_LEN(256)], n[CP_ESC_LEN(CP_NAME_MAX)];
	struct sconn *c = data;
	struct sender *s = c->th->s;
	const struct cp_sendq_entry *e = &s->q.e[src->id];
	uint64_t now = cp_now_ns();

	if (cp_mpiq_stored(&s->mq, (int)src->id, sum) && s->nthreads > 1)
		wake_others(s, c->th);
	c->chunks = tx_chunks(t);
	c->resumed = tx_resumed(t);
	atomic_store_explicit(&c->acked, tx_bytes(t), memory_order_relaxed);
	pthread_mutex_lock(&s->mu);
	s->data_end = now;
	if (!s->data_start || tx_welcome_ns(t) < s->data_start)
		s->data_start = tx_welcome_ns(t);
	if (e->range) {
		/* Its file's bytes, counted as they are stored; the file once
		 * it is committed. */
		s->n.ranges++;
		s->n.bytes += bytes;
		if (src->from == bytes) {
			s->n.ranges_held++;
		} else if (src->from) {
			s->n.ranges_cut++;
			s->n.bytes_after_cut += bytes - src->from;
		}
		if (!s->o->quiet)
			cp_progress_update(&s->prog, acked_all(s), false);
		goto out;
	}
	if (src->kind && src->kind != CP_FILE_COMMIT)
		goto out; /* a directory or link: no bytes, no line */
	s->n.files++;
	if (!src->kind)
		s->n.bytes += bytes;
	s->n.checksum = sum;
	if (!s->o->quiet) {
		cp_progress_update(&s->prog, acked_all(s), false);
		if (s->prog.drawn)
			fputs("\r\033[K", stderr);
		printf(CP_PROG ": sent %s as %s: %llu bytes, xxh3 %016llx\n",
		       cp_esc(src->label, l, sizeof(l)), cp_esc(src->name, n, sizeof(n)),
		       (unsigned long long)bytes, (unsigned long long)sum);
		fflush(stdout);
	}
out:
	pthread_mutex_unlock(&s->mu);
}

/* Every thread is to end its connections with @result (the first asked
 * for counts); with --mpi every rank's. */
static void stop_all(struct sender *s, int result)
{
	char msg[sizeof(s->mq.stop_msg)];
	int none = 0;

	if (!atomic_compare_exchange_strong(&s->stop, &none, result) || !s->mpi)
		return;
	if (atomic_load(&s->mq.stop))
		return; /* rank 0 said it: it knows */
	pthread_mutex_lock(&s->mu);
	snprintf(msg, sizeof(msg), "rank %d: %.180s", s->rank,
		 s->msg[0]		      ? s->msg
		 : atomic_load(&s->signalled) ? "interrupted"
					      : "failed");
	pthread_mutex_unlock(&s->mu);
	cp_mpiq_fail(&s->mq, result, msg);
}

/* A connection or a rank failed with @result: the first says why, and
 * every thread (every rank) stops. */
static void failed(struct sender *s, int result, const char *msg)
{
	pthread_mutex_lock(&s->mu);
	if (!s->result) {
		s->result = result;
		snprintf(s->msg, sizeof(s->msg), "%s", msg);
	}
	pthread_mutex_unlock(&s->mu);
	stop_all(s, result);
}

/* With --mpi, on rank 0's thread that answers the others: another rank
 * failed (@msg names it), or stored an entry others may wait for. */
static void rank_failed(void *data, int result, const char *msg)
{
	failed(data, result, msg);
}

static void rank_stored(void *data)
{
	wake_others(data, NULL);
}

/* Something of a thread failed, not a connection: @why is the error
 * unless a connection said one first; every thread stops. */
static void fail(struct sthread *th, const char *why)
{
	struct sender *s = th->s;

	th->failed = true;
	pthread_mutex_lock(&s->mu);
	if (!s->msg[0])
		snprintf(s->msg, sizeof(s->msg), "%s", why);
	pthread_mutex_unlock(&s->mu);
	stop_all(s, CP_EXIT_FAIL);
}

/* A thread's own connections end, if the sender is stopping. */
static void check_stop(struct sthread *th)
{
	struct sender *s = th->s;
	int result = atomic_load(&s->stop);

	if (!result || th->stopping)
		return;
	th->stopping = true;
	for (unsigned int i = th->first; i < th->first + th->n; i++)
		if (s->c[i].t)
			tx_abort(s->c[i].t, result,
				 atomic_load(&s->signalled) ? "sender interrupted"
							    : "another connection failed");
}

/* Poll the thread's live connections; a failure ends the others. */
static void poll_conns(struct sthread *th)
{
	struct sender *s = th->s;

	for (unsigned int i = th->first; i < th->first + th->n; i++) {
		struct sconn *c = &s->c[i];
		char msg[256];
		int result = 0;

		if (!c->t)
			continue;
		atomic_store_explicit(&c->acked, tx_bytes(c->t), memory_order_relaxed);
		c->chunks = tx_chunks(c->t);
		c->resumed = tx_resumed(c->t);
		if (tx_poll(c->t, &result, msg, sizeof(msg)) != TX_ENDED)
			continue;
		c->t = NULL;
		th->live--;
		if (!result)
			continue;
		failed(s, result, msg);
		check_stop(th);
	}
}

static void send_poll(struct cp_loop *lp)
{
	struct sthread *th = (struct sthread *)lp;
	struct sender *s = th->s;

	if (s->mpi && s->rank && th == s->th) {
		/* Whether another rank failed: asked of rank 0 every second
		 * (every answer says it too). Stores kept back 500 ms are
		 * told: only a DIR_META waits for a file's, and where one
		 * does, the waiting connections' asks carry theirs. */
		uint64_t now = cp_now_ns();

		cp_mpiq_tick(&s->mq, 500000000ull);
		if (now - s->last_ask >= 1000000000ull) {
			s->last_ask = now;
			if (cp_mpiq_stopped(&s->mq, acked(s)))
				stopped_by_rank0(s);
		}
	}
	check_stop(th);
	if (th->live)
		poll_conns(th);
	if (!th->live) {
		/* The first thread reads the signals: it stays until the
		 * others are done. */
		if (th != s->th || !atomic_load(&s->running))
			lp->stop = true;
		return;
	}
	if (!s->o->quiet) {
		pthread_mutex_lock(&s->mu);
		cp_progress_update(&s->prog, acked_all(s), false);
		pthread_mutex_unlock(&s->mu);
	}
}

static void send_signal(struct cp_loop *lp, int signo)
{
	struct sthread *th = (struct sthread *)lp;
	struct sender *s = th->s;

	(void)signo;
	atomic_store(&s->signalled, true);
	stop_all(s, CP_EXIT_INTERRUPTED);
	for (unsigned int i = th->first; i < th->first + th->n; i++)
		if (s->c[i].t)
			tx_abort(s->c[i].t, CP_EXIT_INTERRUPTED, "sender interrupted");
	th->stopping = true;
}

/* A thread's connections, from their start to their end, on its loop. */
static void run_thread(struct sthread *th)
{
	struct sender *s = th->s;
	struct tx_hooks h = {.next = next_file, .file_done = file_done};
	int rc = 0;

	th->lp.poll = send_poll;
	th->wake.done = wake_done;
	arm_wake(th);
	for (unsigned int i = th->first; i < th->first + th->n; i++) {
		/* Numbered across ranks, so that every serve address gets
		 * its share of the job's connections. */
		const struct dest *d = &s->dest[((unsigned int)s->rank * s->nconns + i) % s->ndest];

		h.data = &s->c[i];
		s->c[i].t = tx_start(&th->lp, &s->conn_opts, d->host, d->port, &h);
		if (!s->c[i].t) {
			fail(th, "out of memory");
			for (unsigned int k = th->first; k < i; k++)
				tx_abort(s->c[k].t, CP_EXIT_FAIL, "out of memory");
			th->stopping = true;
			break;
		}
		th->live++;
	}
	rc = th->failed ? -1 : cp_loop_run(&th->lp);
	if (rc && !th->failed)
		fail(th, "event loop failed");
	if (th->live) {
		/* The loop broke: still end the connections before the bridge. */
		for (unsigned int i = th->first; i < th->first + th->n; i++)
			if (s->c[i].t)
				tx_abort(s->c[i].t, CP_EXIT_FAIL, "event loop failed");
		th->stopping = true;
		while (th->live && cp_loop_pass(&th->lp, 100) >= 0)
			poll_conns(th);
	}
	th->lp.stop = true; /* no more wakes armed */
	if (th->wake_on)
		cp_loop_cancel(&th->lp, &th->wake);
}

/* A thread but the first: its ring and bridge are made here, where they
 * run (SIGINT and SIGTERM stay blocked: the first thread reads them). */
static void *thread_main(void *arg)
{
	struct sthread *th = arg;
	struct sender *s = th->s;

	if (cp_loop_init_thread(&th->lp, RING_ENTRIES)) {
		fail(th, "cannot start a sender thread's ring");
	} else {
		/* Its CQs' interrupts on a vector of their own, as serve's
		 * groups (modulo the device's vectors). */
		rr_bridge_set_comp_vector(th->lp.b, (unsigned int)(th - s->th));
		run_thread(th);
		cp_loop_fini(&th->lp);
	}
	atomic_fetch_sub(&s->running, 1);
	return NULL;
}

static int walk_fail(struct sender *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Stop before anything moves: the reason in s->msg (and in --json). */
static int walk_fail(struct sender *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->msg, sizeof(s->msg), fmt, ap);
	va_end(ap);
	cp_log("send: %s", s->msg);
	return CP_EXIT_LOCAL_IO;
}

static struct cp_time mtime_of(const struct stat *sb)
{
	return (struct cp_time){sb->st_mtim.tv_sec, (uint32_t)sb->st_mtim.tv_nsec};
}

/*
 * A regular file @e of @sb: one entry, or above --stripe (and with a
 * last component short enough for a partial) an entry per range and
 * its CP_FILE_COMMIT entry after them. 0, or -1 out of memory.
 */
static int add_file(struct sender *s, struct cp_sendq_entry e, const struct stat *sb)
{
	uint64_t size = (uint64_t)sb->st_size;
	uint64_t stripe = cp_stripe_for(size, s->o->stripe, s->o->chunk);
	const char *base = strrchr(e.name ? e.name : "", '/');

	base = base ? base + 1 : e.name;
	if (!stripe || !e.name || !e.path || strlen(base) > CP_STORE_PART_MAX) {
		e.size = size; /* as walked: for the ranks' batches (cp/ranks.h) */
		return cp_sendq_add(&s->q, e) < 0 ? -1 : 0;
	}
	e.mode = sb->st_mode & 0777;
	e.mtime = mtime_of(sb);
	return cp_sendq_add_striped(&s->q, e, size, stripe);
}

static int by_bytes(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in the directory @dfd but "." and "..", in byte order (the
 * same tree goes the same way, whatever the locale): their count in *n,
 * or NULL (errno set). */
static char **list_dir(int dfd, int *n)
{
	int fd = dup(dfd);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	char **v = NULL;
	int cap = 0;
	struct dirent *de;

	*n = 0;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	errno = 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (*n == cap) {
			char **g = realloc(v, (size_t)(cap = cap ? 2 * cap : 64) * sizeof(*v));

			if (!g)
				break;
			v = g;
		}
		if (!(v[*n] = strdup(de->d_name)))
			break;
		++*n;
		errno = 0;
	}
	if (errno) {
		int err = errno;

		while (*n > 0)
			free(v[--*n]);
		free(v);
		closedir(d);
		errno = err;
		return NULL;
	}
	closedir(d);
	if (!v)
		v = malloc(sizeof(*v));
	if (*n)
		qsort(v, (size_t)*n, sizeof(*v), by_bytes);
	return v;
}

static char *join(const char *a, const char *b)
{
	char *p;

	return asprintf(&p, "%s/%s", a, b) < 0 ? NULL : p;
}

/*
 * The directory @path (@sb, open as @dfd) as @name, in directory entry
 * @dir: MKDIR, its files and links, its subdirectories' entries,
 * DIR_META. Everything beneath is looked at relative to @dfd, and each
 * subdirectory opened beneath it with O_NOFOLLOW and checked to be the
 * one just looked at: a directory swapped for a link while the walk runs
 * leads it nowhere else. Each file's device and inode are kept: only
 * that file is sent under its path (cp_open_walked()).
 */
static int walk(struct sender *s, const char *path, const char *name, const struct stat *sb,
		int dir, int dfd)
{
	char **list = NULL;
	int me, n, ret = 0;

	me = cp_sendq_add(&s->q, (struct cp_sendq_entry){.kind = CP_MKDIR,
							 .path = strdup(path),
							 .name = strdup(name),
							 .dir = dir,
							 .dev = sb->st_dev,
							 .ino = sb->st_ino});
	if (me < 0)
		return walk_fail(s, "out of memory");
	list = list_dir(dfd, &n);
	if (!list)
		return walk_fail(s, "%s: %s", path, strerror(errno));
	/* Files and links first, then each subdirectory's tree. */
	for (int pass = 0; pass < 2 && !ret; pass++) {
		for (int i = 0; i < n && !ret; i++) {
			const char *base = list[i];
			char *cpath = join(path, base);
			char *cname = join(name, base);
			struct stat cb, ob;
			char target[CP_TARGET_MAX + 2];
			ssize_t tl;
			int cfd;

			if (!cpath || !cname) {
				ret = walk_fail(s, "out of memory");
			} else if (fstatat(dfd, base, &cb, AT_SYMLINK_NOFOLLOW)) {
				ret = walk_fail(s, "%s: %s", cpath, strerror(errno));
			} else if (S_ISDIR(cb.st_mode) != (pass == 1)) {
				/* the other pass */
			} else if (strlen(cname) > CP_NAME_MAX ||
				   !cp_name_ok(cname, strlen(cname))) {
				ret = walk_fail(s,
						"%s: its name on the receiver, %s, is longer "
						"than %d bytes or has control characters",
						cpath, cname, CP_NAME_MAX);
			} else if (S_ISDIR(cb.st_mode)) {
				cfd = openat(dfd, base,
					     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (cfd < 0)
					ret = walk_fail(s, "%s: %s", cpath, strerror(errno));
				else if (fstat(cfd, &ob) || ob.st_dev != cb.st_dev ||
					 ob.st_ino != cb.st_ino)
					ret = walk_fail(s, "%s: changed while the tree was walked",
							cpath);
				else
					ret = walk(s, cpath, cname, &cb, me, cfd);
				if (cfd >= 0)
					close(cfd);
			} else if (S_ISREG(cb.st_mode)) {
				if (faccessat(dfd, base, R_OK, 0))
					ret = walk_fail(s, "%s: %s", cpath, strerror(errno));
				else if (add_file(s,
						  (struct cp_sendq_entry){.path = cpath,
									  .name = cname,
									  .dir = me,
									  .dev = cb.st_dev,
									  .ino = cb.st_ino,
									  .in_tree = true},
						  &cb) < 0)
					ret = walk_fail(s, "out of memory");
				else
					s->total += (uint64_t)cb.st_size;
				cpath = cname = NULL;
			} else if (S_ISLNK(cb.st_mode) && s->o->links) {
				tl = readlinkat(dfd, base, target, sizeof(target));
				if (tl < 0)
					ret = walk_fail(s, "%s: %s", cpath, strerror(errno));
				else if (tl == 0 || tl > CP_TARGET_MAX)
					ret = walk_fail(
						s,
						"%s: a link target of %zd bytes (at most %d "
						"go)",
						cpath, tl, CP_TARGET_MAX);
				if (ret)
					goto next;
				target[tl] = 0;
				if (cp_sendq_add(&s->q,
						 (struct cp_sendq_entry){.kind = CP_SYMLINK,
									 .path = cpath,
									 .name = cname,
									 .target = strdup(target),
									 .mtime = mtime_of(&cb),
									 .dir = me}) < 0)
					ret = walk_fail(s, "out of memory");
				cpath = cname = NULL;
			} else {
				/* rsync and scp skip them too, and say so. */
				if (!s->o->quiet)
					cp_log("send: skipping %s %s%s",
					       S_ISLNK(cb.st_mode) ? "symbolic link"
								   : "special file",
					       cpath,
					       S_ISLNK(cb.st_mode) ? " (--links sends links)" : "");
			}
		next:
			free(cpath);
			free(cname);
		}
	}
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
	if (ret)
		return ret;
	if (cp_sendq_add(&s->q, (struct cp_sendq_entry){.kind = CP_DIR_META,
							.path = strdup(path),
							.name = strdup(name),
							.mode = sb->st_mode & 0777,
							.mtime = mtime_of(sb),
							.own = me,
							.dir = dir}) < 0)
		return walk_fail(s, "out of memory");
	return 0;
}

/* "dir/" as "dir", "/" as it is. */
static char *trim_slashes(char *p)
{
	for (size_t len = p ? strlen(p) : 0; len > 1 && p[len - 1] == '/'; len--)
		p[len - 1] = 0;
	return p;
}

/* What a directory operand is called on the receiver: --as, or its last
 * component ("." and ".." resolved); NULL for "/". */
static char *top_name(const char *path, const char *as)
{
	char *p = trim_slashes(strdup(path)), *base, *real = NULL;

	if (as || !p) {
		free(p);
		return as ? strdup(as) : NULL;
	}
	base = strrchr(p, '/');
	base = base ? base + 1 : p;
	if (!strcmp(base, ".") || !strcmp(base, "..")) {
		real = realpath(p, NULL);
		base = real ? strrchr(real, '/') + 1 : "";
	}
	base = *base ? strdup(base) : NULL;
	free(real);
	free(p);
	return base;
}

/* A directory operand (@sb, as stat() found it: a link given as the
 * operand is followed), opened and checked to be that one, then walked
 * (with --mpi on rank 0 only: the others get its list). */
static int walk_top(struct sender *s, const char *path, const char *name, const struct stat *sb)
{
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), ret = 0, first = s->q.ne, *tops;
	struct stat ob;

	if (dfd < 0)
		return walk_fail(s, "%s: %s", path, strerror(errno));
	if (fstat(dfd, &ob) || ob.st_dev != sb->st_dev || ob.st_ino != sb->st_ino)
		ret = walk_fail(s, "%s: changed while the tree was walked", path);
	else if (!s->rank)
		ret = walk(s, path, name, sb, -1, dfd);
	tops = ret ? NULL : realloc(s->tops, (size_t)(s->ntops + 1) * sizeof(*tops));
	if (!tops) {
		close(dfd);
		return ret ? ret : walk_fail(s, "out of memory");
	}
	/* Kept open: each file is opened again beneath it, never by a path
	 * whose directories may be links by then (cp_open_walked()). */
	s->tops = tops;
	s->tops[s->ntops] = dfd;
	for (int i = first; i < s->q.ne; i++) {
		s->q.e[i].top = s->ntops;
		s->q.e[i].rel = strlen(path) + 1; /* walk() joins "path/..." */
	}
	s->ntops++;
	return 0;
}

/* Every operand, and with -r every entry beneath, before anything moves:
 * files readable, directories walked, names valid. With --mpi the ranks
 * but 0 only check the operands and open the trees' tops: rank 0's list
 * comes to them (take_list()). */
static int check_files(struct sender *s)
{
	for (int i = 0; i < s->o->nfiles; i++) {
		const char *path = s->o->files[i], *base;
		struct stat sb;
		char *name, *dpath;
		int ret;

		if (stat(path, &sb) || (!S_ISDIR(sb.st_mode) && access(path, R_OK)))
			return walk_fail(s, "%s: %s", path, strerror(errno));
		if (S_ISDIR(sb.st_mode)) {
			if (!s->o->recursive)
				return walk_fail(s, "%s: a directory (-r sends its tree)", path);
			name = top_name(path, s->o->as);
			if (!name)
				return walk_fail(s,
						 "%s: no name to give it on the receiver (--as "
						 "gives one)",
						 path);
			if (!cp_name_ok(name, strlen(name))) {
				ret = walk_fail(s, "%s: cannot be sent as %s", path, name);
				free(name);
				return ret;
			}
			dpath = trim_slashes(strdup(path));
			ret = dpath ? walk_top(s, dpath, name, &sb) : walk_fail(s, "out of memory");
			free(dpath);
			free(name);
			if (ret)
				return ret;
			continue;
		}
		if (!S_ISREG(sb.st_mode))
			return walk_fail(s, "%s: not a regular file", path);
		if (s->rank)
			continue; /* rank 0 lists it */
		base = strrchr(path, '/');
		base = base ? base + 1 : path;
		if (add_file(s,
			     (struct cp_sendq_entry){.path = strdup(path),
						     .name = strdup(s->o->as ? s->o->as : base),
						     .dir = -1,
						     .dev = sb.st_dev,
						     .ino = sb.st_ino},
			     &sb) < 0)
			return walk_fail(s, "out of memory");
		s->total += (uint64_t)sb.st_size;
	}
	return 0;
}

/* Where rank 0's walk found @dev, @ino, what this host sees at @path
 * (stat() or, for a top, its open directory @fd): 0 and *@dev set to
 * this host's, or a walk_fail() when it is another file. */
static int same_here(struct sender *s, const char *path, int fd, dev_t *dev, ino_t ino)
{
	struct stat sb;

	if (fd >= 0 ? fstat(fd, &sb) : stat(path, &sb))
		return walk_fail(s, "%s: %s", path, strerror(errno));
	if (sb.st_ino != ino)
		return walk_fail(s,
				 "%s: not the one rank 0 walked (the source must be one tree "
				 "every send rank sees: a shared or parallel file system)",
				 path);
	*dev = sb.st_dev;
	return 0;
}

/*
 * --mpi: every rank's list is rank 0's walk (the tree is walked once,
 * however many ranks send it). A file system seen by every host gives a
 * file the same inode on each but a device number of the host's own: the
 * other ranks check each top and file operand to be the one rank 0 found
 * and take their device, so that cp_open_walked() still opens only the
 * walked file.
 */
static int take_list(struct sender *s, int ret)
{
	dev_t dev0 = 0, here = 0;
	int top = -1;

	ret = cp_mpi_share_list(&s->q, ret, &s->total, s->msg, sizeof(s->msg));
	for (int i = 0; !ret && s->rank && i < s->q.ne; i++) {
		struct cp_sendq_entry *e = &s->q.e[i];

		if (e->kind == CP_MKDIR && e->dir < 0) {
			/* a top: its tree's files are on its device here */
			if (e->top < 0 || e->top >= s->ntops)
				return walk_fail(s, "rank 0's list names a tree not given here");
			top = e->top;
			dev0 = e->dev;
			ret = same_here(s, e->path, s->tops[top], &here, e->ino);
		} else if (e->kind != 0 && e->kind != CP_FILE_COMMIT) {
			continue; /* no file of its own is opened */
		} else if (e->in_tree) {
			if (e->top != top)
				return walk_fail(s, "rank 0's list names a tree not given here");
			if (e->dev == dev0)
				e->dev = here;
		} else if (i && (e->range ? e->index : e->kind == CP_FILE_COMMIT)) {
			e->dev = e[-1].dev; /* its file's first range was checked */
		} else {
			ret = same_here(s, e->path, -1, &e->dev, e->ino); /* a file operand */
		}
	}
	return ret;
}

/*
 * The connections and threads: no more connections than entries (each
 * would only say goodbye), at least one per thread, and no more threads
 * than connections; thread k runs its share, in connection order.
 */
static int plan(struct sender *s)
{
	const struct cp_opts *o = s->o;
	unsigned int want = o->threads > 1 ? o->threads : 1;

	s->nconns = o->conns ? o->conns : 1;
	if (s->nconns < want)
		s->nconns = want;
	if (s->nconns > CP_SEND_CONNS_MAX)
		s->nconns = CP_SEND_CONNS_MAX;
	if (s->nconns > (unsigned int)s->q.ne)
		s->nconns = (unsigned int)s->q.ne;
	s->nthreads = want < s->nconns ? want : s->nconns;
	s->th = calloc(s->nthreads, sizeof(*s->th));
	if (!s->th)
		return walk_fail(s, "out of memory");
	for (unsigned int k = 0; k < s->nthreads; k++)
		s->th[k].efd = -1;
	for (unsigned int k = 0; k < s->nthreads; k++) {
		struct sthread *th = &s->th[k];

		th->s = s;
		if (s->nthreads > 1 || s->mpi) {
			/* Blocking, as the worker's: the ring's read waits.
			 * With --mpi rank 0's thread answering the other ranks
			 * writes it too. */
			th->efd = eventfd(0, EFD_CLOEXEC);
			if (th->efd < 0)
				return walk_fail(s, "eventfd: %s", strerror(errno));
		}
		th->first = k * s->nconns / s->nthreads;
		th->n = (k + 1) * s->nconns / s->nthreads - th->first;
		for (unsigned int i = th->first; i < th->first + th->n; i++)
			s->c[i].th = th;
	}
	return 0;
}

/* Threads but the first, each with its own loop; SIGINT and SIGTERM are
 * blocked already (the first thread's loop): they inherit that. */
static void start_threads(struct sender *s)
{
	for (unsigned int k = 1; k < s->nthreads; k++) {
		struct sthread *th = &s->th[k];
		int rc;

		atomic_fetch_add(&s->running, 1);
		rc = pthread_create(&th->thread, NULL, thread_main, th);
		if (rc) {
			atomic_fetch_sub(&s->running, 1);
			cp_log("send: cannot start a thread: %s", strerror(rc));
			fail(th, "cannot start a thread");
			break;
		}
		th->started = true;
	}
}

/* "ADDR:PORT[,ADDR:PORT...]" into s->dest: 0, or -1. */
static int parse_dests(struct sender *s, const char *to)
{
	char buf[CP_DEST_MAX * 272], *save = NULL, *one;

	if (strlen(to) >= sizeof(buf))
		return -1;
	snprintf(buf, sizeof(buf), "%s", to);
	for (one = strtok_r(buf, ",", &save); one; one = strtok_r(NULL, ",", &save)) {
		struct dest *d = &s->dest[s->ndest];

		if (s->ndest == CP_DEST_MAX ||
		    cp_parse_hostport(one, d->host, sizeof(d->host), &d->port))
			return -1;
		s->ndest++;
	}
	return s->ndest ? 0 : -1;
}

int cp_send(const struct cp_opts *o)
{
	struct cp_summary sum = {.mode = "send", .start_ns = cp_now_ns()};
	unsigned int *thread_conns = NULL;
	struct cp_rank_figs *ranks = NULL;
	bool mq_on = false;
	struct sender *s;
	int ret;

	s = calloc(1, sizeof(*s));
	if (!s) {
		cp_log("send: out of memory");
		return CP_EXIT_FAIL;
	}
	if (parse_dests(s, o->to)) {
		cp_log("send: the destination must be ADDR:PORT[,ADDR:PORT...] (at most %d), got "
		       "\"%s\"",
		       CP_DEST_MAX, o->to);
		free(s);
		return CP_EXIT_USAGE;
	}
	s->o = o;
	s->mpi = o->mpi;
	s->rank = o->mpi ? cp_mpi_rank() : 0;
	s->ranks = o->mpi ? cp_mpi_size() : 1;
	cp_sendq_init(&s->q);
	pthread_mutex_init(&s->mu, NULL);
	for (unsigned int i = 0; i < CP_SEND_CONNS_MAX; i++)
		s->c[i] = (struct sconn){.fd = -1};
	ret = check_files(s);
	s->walked = (uint64_t)s->q.ne;
	if (s->mpi && !s->rank && !ret &&
	    !(ranks = calloc((size_t)s->ranks, sizeof(*ranks)))) /* the end must not fail */
		ret = walk_fail(s, "out of memory");
	if (s->mpi) /* rank 0's list, on every rank, or none sends */
		ret = take_list(s, ret);
	if (!ret)
		ret = plan(s);
	if (s->mpi)
		ret = cp_mpi_worst(ret); /* each rank's plan */
	if (ret)
		goto out;
	s->mq.on_fail = rank_failed;
	s->mq.on_ready = rank_stored;
	s->mq.data = s;
	if (cp_mpiq_start(&s->mq, &s->q, s->mpi)) {
		cp_log("send: out of memory");
		if (s->mpi) /* the other ranks would wait for its answers */
			cp_mpi_abort(CP_EXIT_FAIL);
		cp_mpiq_finish(&s->mq, CP_EXIT_FAIL, NULL);
		ret = CP_EXIT_FAIL;
		goto out;
	}
	mq_on = true;
	s->conn_opts = *o;
	if (o->rate)
		s->conn_opts.rate = o->rate / s->nconns ? o->rate / s->nconns : 1;
	if (cp_loop_init(&s->th[0].lp, RING_ENTRIES)) {
		ret = CP_EXIT_FAIL;
		goto out;
	}
	s->th[0].lp.on_signal = send_signal;
	/* With --mpi rank 0 draws the job's: every rank has its list. */
	cp_progress_init(&s->prog, o->quiet || s->rank ? 0 : o->progress, s->total);
	start_threads(s);
	run_thread(&s->th[0]);
	for (unsigned int k = 1; k < s->nthreads; k++)
		if (s->th[k].started)
			pthread_join(s->th[k].thread, NULL);
	for (unsigned int k = 0; k < s->nthreads; k++)
		if (s->th[k].failed)
			ret = CP_EXIT_FAIL;
	ret = ret ? ret : s->result;
	if (!ret && s->mpi)
		ret = atomic_load(&s->stop); /* another rank's */
	if (!o->quiet && s->prog.drawn)
		cp_progress_update(&s->prog, s->n.bytes, true);
	if (ret)
		cp_log("send: %s", s->msg[0] ? s->msg : "failed");
	cp_loop_fini(&s->th[0].lp);
out:
	for (unsigned int i = 0; i < CP_SEND_CONNS_MAX; i++)
		if (s->c[i].fd >= 0)
			close(s->c[i].fd);
	for (unsigned int i = 0; i < s->nconns; i++) {
		s->n.chunks += s->c[i].chunks;
		s->n.resumed += s->c[i].resumed;
	}
	s->n.connections = s->nconns;
	s->n.failures = ret != 0;
	if (mq_on && s->mpi) {
		struct cp_rank_figs mine = {.n = s->n,
					    .data_start = s->data_start,
					    .data_end = s->data_end,
					    .requests = s->mq.requests,
					    .walked = s->walked,
					    .exit_code = ret};

		if (ret)
			stop_all(s, ret); /* e.g. its loop did not start */
		/* Rank 0's thread answers until every other rank said done. */
		cp_mpiq_finish(&s->mq, ret, s->msg);
		ret = cp_mpi_summary(&mine, &sum, ranks);
		if (s->rank)
			goto done; /* rank 0 writes the summary */
	} else {
		if (mq_on)
			cp_mpiq_finish(&s->mq, ret, s->msg);
		sum.n = s->n;
		sum.data_ns = s->n.files ? s->data_end - s->data_start : 0;
	}
	sum.exit_code = ret;
	sum.error = ret && s->msg[0] ? s->msg : NULL;
	/* With threads: how many connections each ran. */
	if (s->nthreads > 1)
		thread_conns = calloc(s->nthreads, sizeof(*thread_conns));
	if (thread_conns) {
		for (unsigned int k = 0; k < s->nthreads; k++)
			thread_conns[k] = s->th[k].n;
		sum.threads = s->nthreads;
		sum.thread_conns = thread_conns;
	}
	cp_json_report(o, &sum);
done:
	free(ranks);
	free(thread_conns);
	/* After every thread ended: none writes to another's any more. */
	for (unsigned int k = 0; s->th && k < s->nthreads; k++)
		if (s->th[k].efd >= 0)
			close(s->th[k].efd);
	cp_sendq_free(&s->q);
	for (int i = 0; i < s->ntops; i++)
		close(s->tops[i]);
	free(s->tops);
	free(s->th);
	pthread_mutex_destroy(&s->mu);
	free(s);
	return ret;
}
