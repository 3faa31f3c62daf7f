// SPDX-License-Identifier: MIT
/* ringrdma-cp: safe creation of received files under the served directory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proto.h"
#include "range.h"
#include "store.h"

#define RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)

/*
 * The steps, each one SQE; open: PARENT? (STAT + TMPFILE) NAMED*; commit:
 * (LINK > SYNC_DIR) | LINK_TMP* (RENAME > SYNC_DIR) | (RENAME > SYNC_DIR)
 * [LINK_NAMED UNLINK SYNC_DIR]. "+": both at once, each TCG round trip
 * through io-wq costs a few hundred microseconds per file; ">": linked, the
 * fsync runs only after the name exists.
 */
enum step {
	S_PARENT,
	S_STAT,
	S_TMPFILE,
	S_NAMED,
	S_LINK,
	S_LINK_TMP,
	S_RENAME,
	S_LINK_NAMED,
	S_UNLINK,
	S_SYNC_DIR,
	S_STAT_TMP, /* pairs: res[0] of the first step, res[1] of the second */
	S_LINK_SYNC,
	S_RENAME_SYNC,
	S_PARTIAL,     /* second of S_STAT_TMP for CP_STORE_PARTIAL, or alone */
	S_PART_DROP,   /* what was in the partial's way */
	S_PART_UNLINK, /* committed: the partial's name goes */
};

bool cp_store_reserved(const char *base)
{
	static const char part[] = ".rrcp-partial", tmp[] = ".rrcp-";
	size_t n = strlen(base);

	if (base[0] != '.')
		return false;
	if (n > sizeof(part) && !strcmp(base + n - (sizeof(part) - 1), part))
		return true;
	/* ".NAME.rrcp-%08x" */
	if (n < 1 + sizeof(tmp) - 1 + 8 ||
	    memcmp(base + n - 8 - (sizeof(tmp) - 1), tmp, sizeof(tmp) - 1))
		return false;
	for (size_t i = n - 8; i < n; i++)
		if (!strchr("0123456789abcdef", base[i]))
			return false;
	return true;
}

bool cp_store_supported(struct cp_loop *lp)
{
	static const int ops[] = {IORING_OP_OPENAT2,  IORING_OP_STATX,	  IORING_OP_LINKAT,
				  IORING_OP_RENAMEAT, IORING_OP_UNLINKAT, IORING_OP_FSYNC,
				  IORING_OP_CLOSE,    IORING_OP_MKDIRAT,  IORING_OP_SYMLINKAT};
	struct io_uring_probe *p = io_uring_get_probe_ring(&lp->ring);
	bool ok = p != NULL;

	for (size_t i = 0; ok && i < sizeof(ops) / sizeof(ops[0]); i++)
		ok = io_uring_opcode_supported(p, ops[i]);
	io_uring_free_probe(p);
	return ok;
}

/* The cp_err code for a failed file system call. */
int cp_store_io_err(int err)
{
	switch (err) {
	case ENOSPC:
	case EDQUOT:
		return CP_E_NOSPC;
	case EXDEV:
	case ELOOP:
	case ENOENT:
	case ENOTDIR:
	case ENAMETOOLONG:
		return CP_E_NAME;
	case EEXIST:
		return CP_E_EXISTS;
	default:
		return CP_E_IO;
	}
}

static int fail(struct cp_store *st, int code, const char *what, const char *name, int err)
{
	snprintf(st->why, sizeof(st->why), "%s %s: %s", what, name, strerror(err));
	return code;
}

/* Prepare @sqe for @step, from st's own buffers. */
static void prep(struct cp_store *st, struct io_uring_sqe *sqe, int step)
{
	uint64_t direct = st->direct ? O_DIRECT : 0;

	switch (step) {
	case S_PARENT:
		/* RESOLVE_BENEATH: no "..", absolute or symlink way out of DIR. */
		st->how = (struct open_how){.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
					    .resolve = RESOLVE};
		io_uring_prep_openat2(sqe, st->dirfd, st->parent, &st->how);
		break;
	case S_STAT:
		io_uring_prep_statx(sqe, st->parentfd, st->base, AT_SYMLINK_NOFOLLOW,
				    STATX_TYPE | STATX_SIZE, &st->stx);
		break;
	case S_PARTIAL:
		/* Files are private (0600) until cp_store_meta() gives them
		 * their mode: a partial lives under a name in DIR, maybe for
		 * long, and a file sent with mode 0600 must never have been
		 * readable by others on the way.
		 * Its own name in DIR, kept across connections: no symbolic
		 * link anywhere on the way, none as the name itself, and
		 * O_NONBLOCK so that a FIFO put there cannot hold a worker;
		 * after what was in the way went, only a new file. */
		snprintf(st->part, sizeof(st->part), ".%.*s.rrcp-partial", CP_STORE_PART_MAX,
			 st->base);
		st->how = (struct open_how){.flags = O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
						     O_CLOEXEC | direct |
						     (st->part_fresh ? O_EXCL : 0),
					    .mode = 0600,
					    .resolve = RESOLVE | RESOLVE_NO_SYMLINKS};
		io_uring_prep_openat2(sqe, st->parentfd, st->part, &st->how);
		break;
	case S_PART_DROP:
		io_uring_prep_unlinkat(sqe, st->parentfd, st->part, st->drop_flags);
		break;
	case S_PART_UNLINK:
		io_uring_prep_unlinkat(sqe, st->parentfd, st->part, 0);
		break;
	case S_TMPFILE:
		st->how = (struct open_how){.flags = O_WRONLY | O_TMPFILE | O_CLOEXEC | direct,
					    .mode = 0600,
					    .resolve = RESOLVE};
		io_uring_prep_openat2(sqe, st->parentfd, ".", &st->how);
		break;
	case S_NAMED:
	case S_LINK_TMP:
		cp_store_tmp_name(st->tmp, st->base, (unsigned int)st->tries);
		if (step == S_LINK_TMP) {
			io_uring_prep_linkat(sqe, AT_FDCWD, st->path, st->parentfd, st->tmp,
					     AT_SYMLINK_FOLLOW);
			break;
		}
		st->how =
			(struct open_how){.flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | direct,
					  .mode = 0600,
					  .resolve = RESOLVE};
		io_uring_prep_openat2(sqe, st->parentfd, st->tmp, &st->how);
		break;
	case S_LINK:
		/* Give the O_TMPFILE its name directly. */
		io_uring_prep_linkat(sqe, AT_FDCWD, st->path, st->parentfd, st->base,
				     AT_SYMLINK_FOLLOW);
		break;
	case S_RENAME:
		io_uring_prep_renameat(sqe, st->parentfd, st->tmp, st->parentfd, st->base,
				       st->force ? 0 : RENAME_NOREPLACE);
		break;
	case S_LINK_NAMED:
		/* No RENAME_NOREPLACE here: link() refuses an existing name too. */
		io_uring_prep_linkat(sqe, st->parentfd, st->tmp, st->parentfd, st->base, 0);
		break;
	case S_UNLINK:
		io_uring_prep_unlinkat(sqe, st->parentfd, st->tmp, 0);
		break;
	case S_SYNC_DIR:
		/* The new name must survive a crash as well as the data. */
		io_uring_prep_fsync(sqe, st->parentfd, 0);
		break;
	}
}

static int queue_fail(struct cp_store *st)
{
	st->busy = false;
	return fail(st, CP_E_IO, "cannot queue a file system call for", st->base, EBUSY);
}

/* Queue @step alone. */
static int queue(struct cp_store *st, int step)
{
	struct io_uring_sqe *sqe = cp_loop_sqe(st->lp, &st->op[0]);

	if (!sqe)
		return queue_fail(st);
	prep(st, sqe, step);
	st->step = step;
	st->pending = 1;
	st->busy = true;
	return 0;
}

/* Room for two SQEs in a row: a link must not be cut by a submission
 * between them. */
static bool room_for_two(struct io_uring *ring)
{
	if (io_uring_sq_space_left(ring) < 2)
		io_uring_submit(ring);
	return io_uring_sq_space_left(ring) >= 2;
}

/* Queue @a and @b as the one step @step, @b after @a if @linked. */
static int queue_pair(struct cp_store *st, int step, int a, int b, bool linked)
{
	struct io_uring_sqe *sqe;

	if (!room_for_two(&st->lp->ring))
		return queue_fail(st);
	sqe = cp_loop_sqe(st->lp, &st->op[0]);
	prep(st, sqe, a);
	if (linked)
		sqe->flags |= IOSQE_IO_LINK;
	sqe = cp_loop_sqe(st->lp, &st->op[1]);
	prep(st, sqe, b);
	st->step = step;
	st->pending = 2;
	st->busy = true;
	return 0;
}

/*
 * Dropping a file that never got its name goes to an io-wq worker: the
 * last close of an O_TMPFILE (or the unlink of a temp name) frees the
 * inode, which waits while its file system is frozen (ext4 under fsfreeze
 * until the thaw); on the loop thread that would stall every connection.
 */
static void drop_fd(struct cp_loop *lp, int fd)
{
	struct io_uring_sqe *sqe = cp_loop_sqe(lp, &lp->ignore);

	if (!sqe) {
		close(fd);
		return;
	}
	io_uring_prep_close(sqe, fd);
	sqe->flags |= IOSQE_ASYNC;
}

/* An unlink and the close of its directory after it, in flight together. */
struct drop_named {
	struct cp_op op;
	int left; /* CQEs still to come */
	char name[NAME_MAX + 1];
};

static void drop_named_done(struct cp_op *op, int res)
{
	struct drop_named *d = (struct drop_named *)op;

	if (--d->left == 0)
		free(d);
}

/* Unlink @name, then close st->parentfd (it names the directory until the
 * unlink ran); the name is copied: @st may be gone before the submit. */
static void drop_named(struct cp_store *st, const char *name)
{
	struct drop_named *d = malloc(sizeof(*d));
	struct io_uring_sqe *sqe;

	if (!d || !room_for_two(&st->lp->ring)) {
		free(d);
		unlinkat(st->parentfd, name, 0);
		close(st->parentfd);
		return;
	}
	d->op.done = drop_named_done;
	d->left = 2;
	snprintf(d->name, sizeof(d->name), "%s", name);
	sqe = cp_loop_sqe(st->lp, &d->op);
	io_uring_prep_unlinkat(sqe, st->parentfd, d->name, 0);
	/* A hard link: the directory is closed even if the unlink fails. */
	sqe->flags |= IOSQE_ASYNC | IOSQE_IO_HARDLINK;
	sqe = cp_loop_sqe(st->lp, &d->op);
	io_uring_prep_close(sqe, st->parentfd);
}

static void finish(struct cp_store *st, int code)
{
	st->busy = false;
	if (code && st->opening)
		cp_store_abort(st);
	st->opening = false;
	st->done(st, code);
}

/* Is the partial's name still the file we hold? */
static bool part_is_ours(struct cp_store *st)
{
	struct stat a, b;

	return !fstat(st->fd, &a) && !fstatat(st->parentfd, st->part, &b, AT_SYMLINK_NOFOLLOW) &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static int queue(struct cp_store *st, int step);

/* The name exists; the directory's fsync ended with @res. */
static int synced(struct cp_store *st, int res)
{
	if (res < 0 && res != -EINVAL)
		return fail(st, CP_E_IO, "fsync of the directory (the file has its name) of",
			    st->base, -res);
	if (st->part_named) {
		/* The file has its name; the partial's goes too, if it still
		 * is this file (the unlink's own fsync follows). */
		st->part_named = false;
		if (part_is_ours(st))
			return queue(st, S_PART_UNLINK);
	}
	close(st->fd);
	st->fd = -1;
	close(st->parentfd);
	st->parentfd = -1;
	finish(st, 0);
	return 0;
}

/* Not a partial of ours, whatever it holds: remove it (what it leads to
 * stays), then create the partial anew. */
static int part_replace(struct cp_store *st, bool dir)
{
	if (st->part_fresh)
		return fail(st, CP_E_NAME, "something keeps coming back at the partial of",
			    st->base, EEXIST);
	st->drop_flags = dir ? AT_REMOVEDIR : 0;
	return queue(st, S_PART_DROP);
}

/* A range's partial is open and shared: claim the range's bytes, and
 * check the partial was not named between its open and the claim (a
 * commit holds the file alone until its partial's name is gone). */
static int range_claimed(struct cp_store *st)
{
	int rc = cp_range_claim(st->fd, st->range_off, st->range_len);

	if (!rc)
		rc = cp_range_still_partial(st->fd, st->parentfd, st->part);
	if (rc) {
		st->part_named = false; /* not ours to remove */
		close(st->fd);
		st->fd = -1;
		return fail(st, rc == -EBUSY || rc == -ESTALE ? CP_E_BUSY : CP_E_IO,
			    rc == -ESTALE ? "the partial was named meanwhile: a range of"
					  : "another connection receives this range of",
			    st->base, -rc);
	}
	finish(st, 0);
	return 0;
}

/* The partial's open ended with @res: a private regular file of ours,
 * one link, no other connection writing it; or replaced. */
static int partial_opened(struct cp_store *st, int res)
{
	struct stat sb;
	int held;

	if (res == -EINVAL && st->direct)
		return fail(st, CP_E_IO, "no O_DIRECT (--direct) for", st->base, -res);
	/* A symbolic link (O_NOFOLLOW), a directory. */
	if (res == -ELOOP || res == -EISDIR)
		return part_replace(st, res == -EISDIR);
	if (res < 0)
		return fail(st, cp_store_io_err(-res), "cannot open the partial of", st->base,
			    -res);
	st->fd = res;
	if (fstat(st->fd, &sb))
		return fail(st, CP_E_IO, "fstat of the partial of", st->base, errno);
	/* Locked first: a partial being committed has two links for a moment.
	 * Ranges share it; a whole file or a commit has it alone. */
	if (S_ISREG(sb.st_mode) && (held = cp_range_hold(st->fd, !st->range))) {
		close(st->fd);
		st->fd = -1;
		return fail(st, held == -EBUSY ? CP_E_BUSY : CP_E_IO, "another connection receives",
			    st->base, held == -EBUSY ? EWOULDBLOCK : -held);
	}
	if (!S_ISREG(sb.st_mode) || sb.st_nlink != 1 || sb.st_uid != geteuid() ||
	    (sb.st_mode & 07777) != 0600) {
		close(st->fd);
		st->fd = -1;
		return part_replace(st, false);
	}
	st->part_named = true; /* commit removes it */
	st->partial_size = (uint64_t)sb.st_size;
	if (st->range)
		return range_claimed(st);
	finish(st, 0);
	return 0;
}

/* The next step after @st->step ended (results in st->res); 0 or a cp_err
 * code. */
static int next(struct cp_store *st)
{
	int res = st->res[0];

	switch (st->step) {
	case S_PARENT:
		if (res < 0)
			return fail(st, cp_store_io_err(-res), "directory", st->parent, -res);
		st->parentfd = res;
		return queue_pair(st, S_STAT_TMP, S_STAT, st->partial ? S_PARTIAL : S_TMPFILE,
				  false);
	case S_STAT_TMP:
		if (res == 0 && !st->force && st->same && S_ISREG(st->stx.stx_mode)) {
			st->exists = true;
			st->exist_size = st->stx.stx_size;
		} else if (res == 0 && (!st->force || S_ISDIR(st->stx.stx_mode))) {
			if (st->res[1] >= 0)
				drop_fd(st->lp, st->res[1]);
			return fail(st, CP_E_EXISTS, "refusing to replace", st->base, EEXIST);
		}
		res = st->res[1]; /* then as for the temp file alone */
		if (st->partial)
			return partial_opened(st, res);
		__attribute__((fallthrough));
	case S_TMPFILE:
		if (res == -EOPNOTSUPP || res == -EISDIR || res == -EINVAL) {
			st->tries = 0;
			return queue(st, S_NAMED);
		}
		break;
	case S_NAMED:
		if (res == -EEXIST && ++st->tries < 16)
			return queue(st, S_NAMED);
		st->tmp_named = res >= 0;
		break;
	case S_LINK_SYNC:
		if (res < 0) /* the fsync linked behind it was cancelled */
			return fail(st, cp_store_io_err(-res), "cannot name", st->base, -res);
		return synced(st, st->res[1]);
	case S_LINK_TMP:
		if (res == -EEXIST && ++st->tries < 16)
			return queue(st, S_LINK_TMP);
		if (res < 0)
			return fail(st, cp_store_io_err(-res), "cannot name", st->base, -res);
		st->tmp_named = true;
		return queue_pair(st, S_RENAME_SYNC, S_RENAME, S_SYNC_DIR, true);
	case S_RENAME_SYNC:
		if (res == -EINVAL && !st->force)
			return queue(st, S_LINK_NAMED);
		if (res < 0)
			return fail(st, cp_store_io_err(-res), "cannot name", st->base, -res);
		st->tmp_named = false;
		return synced(st, st->res[1]);
	case S_LINK_NAMED:
		if (res < 0)
			return fail(st, cp_store_io_err(-res), "cannot name", st->base, -res);
		return queue(st, S_UNLINK);
	case S_UNLINK:
		st->tmp_named = false; /* named either way; a stale temp name is harmless */
		return queue(st, S_SYNC_DIR);
	case S_SYNC_DIR:
		return synced(st, res);
	case S_PARTIAL:
		return partial_opened(st, res);
	case S_PART_DROP:
		if (res < 0)
			return fail(st, cp_store_io_err(-res),
				    "cannot remove what is in the way of the partial of", st->base,
				    -res);
		st->part_fresh = true;
		return queue(st, S_PARTIAL);
	case S_PART_UNLINK:
		return queue(st, S_SYNC_DIR);
	}
	/* The end of open: S_TMPFILE or S_NAMED. */
	if (res == -EINVAL && st->direct)
		return fail(st, CP_E_IO, "no O_DIRECT (--direct) for", st->base, -res);
	if (res < 0)
		return fail(st, cp_store_io_err(-res), "cannot create", st->base, -res);
	st->fd = res;
	finish(st, 0);
	return 0;
}

/* One of a step's SQEs ended; the step is over once all have. */
static void ended(struct cp_store *st, int i, int res)
{
	int code;

	st->res[i] = res;
	if (--st->pending)
		return;
	code = next(st);
	if (code)
		finish(st, code);
}

static void step_done(struct cp_op *op, int res)
{
	ended((struct cp_store *)((char *)op - offsetof(struct cp_store, op[0])), 0, res);
}

static void step2_done(struct cp_op *op, int res)
{
	ended((struct cp_store *)((char *)op - offsetof(struct cp_store, op[1])), 1, res);
}

static int store_open(struct cp_store *st, struct cp_loop *lp, int dirfd, const char *name,
		      unsigned int flags, const uint64_t *range, cp_store_fn done)
{
	const char *slash = strrchr(name, '/');
	int fd, code;

	memset(st, 0, sizeof(*st));
	if (range) {
		st->range = true;
		st->range_off = range[0];
		st->range_len = range[1];
		flags |= CP_STORE_PARTIAL;
	}
	st->fd = -1;
	st->parentfd = -1;
	st->force = flags & CP_STORE_FORCE;
	st->same = flags & CP_STORE_SAME;
	st->partial = flags & CP_STORE_PARTIAL;
	st->keep = true;
	st->direct = flags & CP_STORE_DIRECT;
	st->lp = lp;
	st->done = done;
	st->op[0].done = step_done;
	st->op[1].done = step2_done;
	st->dirfd = dirfd;
	st->opening = true;
	snprintf(st->base, sizeof(st->base), "%s", slash ? slash + 1 : name);
	if (cp_store_reserved(st->base))
		return fail(st, CP_E_NAME, "refusing", name, EPERM);
	/* No partial name can hold it: received as if not to resume, so
	 * that no two names ever share one. */
	if (strlen(st->base) > CP_STORE_PART_MAX) {
		if (st->range)
			return fail(st, CP_E_NAME, "no partial name for a range of", name,
				    ENAMETOOLONG);
		st->partial = false;
	}
	if (slash) {
		snprintf(st->parent, sizeof(st->parent), "%.*s", (int)(slash - name), name);
		code = queue(st, S_PARENT);
	} else {
		fd = dup(dirfd);
		if (fd < 0)
			return fail(st, CP_E_IO, "dup of", "DIR", errno);
		st->parentfd = fd;
		code = queue_pair(st, S_STAT_TMP, S_STAT, st->partial ? S_PARTIAL : S_TMPFILE,
				  false);
	}
	if (code) {
		st->busy = false;
		cp_store_abort(st);
	}
	return code;
}

int cp_store_open(struct cp_store *st, struct cp_loop *lp, int dirfd, const char *name,
		  unsigned int flags, cp_store_fn done)
{
	return store_open(st, lp, dirfd, name, flags, NULL, done);
}

int cp_store_open_range(struct cp_store *st, struct cp_loop *lp, int dirfd, const char *name,
			unsigned int flags, uint64_t off, uint64_t len, cp_store_fn done)
{
	const uint64_t range[2] = {off, len};

	return store_open(st, lp, dirfd, name, flags, range, done);
}

int cp_store_commit(struct cp_store *st, cp_store_fn done)
{
	st->done = done;
	st->tries = 0;
	/* A partial too is linked from the file we hold: its name may hold
	 * another by now. */
	if (st->tmp_named && !st->partial)
		return queue_pair(st, S_RENAME_SYNC, S_RENAME, S_SYNC_DIR, true);
	snprintf(st->path, sizeof(st->path), "/proc/self/fd/%d", st->fd);
	/* Forced: link under a temp name, then rename over the old file. */
	if (st->force)
		return queue(st, S_LINK_TMP);
	return queue_pair(st, S_LINK_SYNC, S_LINK, S_SYNC_DIR, true);
}

bool cp_store_aligned(const struct cp_store *st, uint64_t off, uint32_t len)
{
	return !st->direct || !((off | len) & 4095);
}

int cp_store_unaligned(struct cp_store *st, uint64_t off, uint32_t len)
{
	int fl;

	if (cp_store_aligned(st, off, len))
		return 0;
	/* Only a flag of the open file, no I/O: harmless on the loop thread.
	 * Writes already issued keep O_DIRECT; the rest use the page cache. */
	fl = fcntl(st->fd, F_GETFL);
	if (fl < 0 || fcntl(st->fd, F_SETFL, fl & ~O_DIRECT) < 0)
		return -errno;
	st->direct = false;
	return 0;
}

int cp_store_direct_ok(int dirfd)
{
	int fd = openat(dirfd, ".", O_WRONLY | O_TMPFILE | O_DIRECT | O_CLOEXEC, 0600);

	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (errno == EINVAL)
		return -EINVAL;
	/* No O_TMPFILE here (or no room): each file's own open will say. */
	return 0;
}

/* A kept partial: its data synced, then closed, on an io-wq worker. */
static void keep_partial(struct cp_store *st)
{
	struct drop_named *d = malloc(sizeof(*d));
	struct io_uring_sqe *sqe;

	if (!d || !room_for_two(&st->lp->ring)) {
		free(d);
		fsync(st->fd);
		close(st->fd);
		return;
	}
	d->op.done = drop_named_done;
	d->left = 2;
	sqe = cp_loop_sqe(st->lp, &d->op);
	io_uring_prep_fsync(sqe, st->fd, 0);
	sqe->flags |= IOSQE_ASYNC | IOSQE_IO_HARDLINK;
	sqe = cp_loop_sqe(st->lp, &d->op);
	io_uring_prep_close(sqe, st->fd);
}

int cp_store_release(struct cp_store *st)
{
	int fd = st->fd;

	st->fd = -1;
	st->part_named = false;
	st->tmp_named = false;
	return fd;
}

void cp_store_abort(struct cp_store *st)
{
	if (st->busy)
		return;
	if (st->partial && st->keep && st->part_named && st->fd >= 0) {
		keep_partial(st);
		st->fd = -1;
		st->part_named = false;
	}
	if (st->part_named && st->parentfd >= 0 && st->fd >= 0 && !part_is_ours(st))
		st->part_named = false; /* not ours to remove */
	if (st->part_named && st->tmp_named && st->parentfd >= 0) {
		/* Both: the temp name first, on the loop thread (rare). */
		unlinkat(st->parentfd, st->tmp, 0);
		st->tmp_named = false;
	}
	if ((st->tmp_named || st->part_named) && st->parentfd >= 0) {
		drop_named(st, st->part_named ? st->part : st->tmp);
		st->parentfd = -1;
	}
	st->part_named = false;
	st->tmp_named = false;
	if (st->fd >= 0)
		drop_fd(st->lp, st->fd);
	st->fd = -1;
	if (st->parentfd >= 0)
		close(st->parentfd);
	st->parentfd = -1;
}

/* The process's umask, read without changing it (umask(2) would, for a
 * moment, for every thread). */
static mode_t cur_umask(void)
{
	static atomic_int cached = -1;
	int m = atomic_load(&cached);
	unsigned int v;
	char line[128];
	FILE *f;

	if (m >= 0)
		return (mode_t)m;
	m = 022;
	f = fopen("/proc/self/status", "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Umask: %o", &v) == 1) {
			m = (int)(v & 0777);
			break;
		}
	if (f)
		fclose(f);
	atomic_store(&cached, m);
	return (mode_t)m;
}

mode_t cp_store_perm(uint32_t mode)
{
	return (mode_t)(mode & 0777) & ~cur_umask();
}

void cp_store_tmp_name(char *tmp, const char *base, unsigned int salt)
{
	unsigned int r;

	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (unsigned int)getpid() * 2654435761u + salt;
	snprintf(tmp, NAME_MAX + 1, ".%.200s.rrcp-%08x", base, r);
}

/* On the loop's worker: io_uring has no fchmod or futimens. */
static int meta_fn(struct cp_work *w)
{
	struct cp_store *st = (struct cp_store *)((char *)w - offsetof(struct cp_store, work));

	if (fchmod(st->fd, st->meta_mode) || (st->meta_time && futimens(st->fd, st->meta_ts)))
		return -errno;
	return 0;
}

static void meta_done(struct cp_op *op, int res)
{
	struct cp_store *st = (struct cp_store *)((char *)op - offsetof(struct cp_store, work.op));

	st->busy = false;
	st->done(st, res < 0 ? fail(st, CP_E_IO, "mode or time of", st->base, -res) : 0);
}

int cp_store_meta(struct cp_store *st, uint32_t mode, const struct cp_time *mtime, cp_store_fn done)
{
	int rc;

	st->done = done;
	st->meta_mode = cp_store_perm(mode);
	st->meta_time = mtime != NULL;
	if (mtime) {
		st->meta_ts[0] = (struct timespec){.tv_nsec = UTIME_OMIT}; /* atime untouched */
		st->meta_ts[1] = (struct timespec){.tv_sec = (time_t)mtime->sec,
						   .tv_nsec = (long)mtime->nsec};
	}
	st->work.fn = meta_fn;
	st->work.op.done = meta_done;
	rc = cp_loop_work(st->lp, &st->work);
	if (rc)
		return fail(st, CP_E_IO, "cannot queue a file system call for", st->base, -rc);
	st->busy = true;
	return 0;
}

static bool is_partial_name(const char *n)
{
	static const char part[] = ".rrcp-partial";
	size_t len = strlen(n);

	return n[0] == '.' && len > sizeof(part) && !strcmp(n + len - (sizeof(part) - 1), part);
}

static int expire_in(int dfd, uint64_t max_age_s, int64_t now, unsigned int *removed, int depth)
{
	int fd = dup(dfd), rc = 0;
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *de;

	if (!d) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		return rc;
	}
	while ((de = readdir(d))) {
		struct stat sb;
		int cfd;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW))
			continue;
		if (S_ISDIR(sb.st_mode) && depth < 128) {
			cfd = openat(dfd, de->d_name,
				     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (cfd >= 0) {
				int r = expire_in(cfd, max_age_s, now, removed, depth + 1);

				if (r && !rc)
					rc = r;
				close(cfd);
			}
			continue;
		}
		if (!S_ISREG(sb.st_mode) || !is_partial_name(de->d_name) || sb.st_nlink != 1 ||
		    sb.st_uid != geteuid() ||
		    (int64_t)sb.st_mtim.tv_sec + (int64_t)max_age_s >= now)
			continue;
		/* Not one a connection (of another serve, say) holds. */
		cfd = openat(dfd, de->d_name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (cfd < 0)
			continue;
		if (!cp_range_hold(cfd, true) && !unlinkat(dfd, de->d_name, 0))
			++*removed;
		close(cfd);
	}
	closedir(d);
	return rc;
}

int cp_store_expire(int dirfd, uint64_t max_age_s, int64_t now, unsigned int *removed)
{
	*removed = 0;
	return expire_in(dirfd, max_age_s, now, removed, 0);
}
