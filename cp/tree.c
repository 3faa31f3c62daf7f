// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp: the entries of a received tree (directories, symbolic
 * links, a directory's mode and time), made beneath the served directory
 * and through no symbolic link, step by step through the loop's ring;
 * a mode or a time on the loop's worker.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "store.h"
#include "tree.h"

#define RESOLVE_TREE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)

enum kind { K_MKDIR, K_SYMLINK, K_META };

/*
 * The steps: PARENT (DIR_META: the directory itself), then
 * MKDIR: MKDIR STAT_MADE? | MKDIR STAT_OLD (it exists: a directory?)
 * SYMLINK: [CHECK] SYMLINK_TMP LINK_TIME (PLACE | UNLINK_TMP)
 *          forced: ... SWAP STAT_SWAPPED (UNLINK_OLD | SWAP_BACK UNLINK_TMP)
 * A link is made and timed under a temporary name of its own (a time set
 * by the final name could land on a file another connection put there
 * since), then put in place: PLACE (RENAME_NOREPLACE), or forced, SWAP
 * (RENAME_EXCHANGE) and a look at what came out: another link goes
 * (UNLINK_OLD); anything else (a file or directory put there since the
 * link was checked) is swapped back and the new link refused.
 * DIR_META: META
 * LINK_TIME and META run on the worker: io_uring has no op for a mode
 * or a time.
 */
enum step {
	T_PARENT,
	T_MKDIR,
	T_CHECK,
	T_STAT_MADE,
	T_STAT_OLD,
	T_SYMLINK_TMP,
	T_PLACE,
	T_SWAP,
	T_STAT_SWAPPED,
	T_UNLINK_OLD,
	T_SWAP_BACK,
	T_UNLINK_TMP,
	T_LINK_TIME,
	T_META,
};

/* A directory's key in a struct cp_dirs: never 0. */
static uint64_t dir_key(dev_t dev, ino_t ino)
{
	uint64_t k = ((uint64_t)dev * 0x9e3779b97f4a7c15ull) ^ (uint64_t)ino;

	return k ? k : 1;
}

static bool dirs_has_locked(const struct cp_dirs *d, uint64_t k)
{
	if (!d->cap)
		return false;
	for (size_t i = k & (d->cap - 1);; i = (i + 1) & (d->cap - 1)) {
		if (d->v[i] == k)
			return true;
		if (!d->v[i])
			return false;
	}
}

static bool dirs_has(struct cp_dirs *d, uint64_t k)
{
	bool has;

	pthread_mutex_lock(&d->mu);
	has = dirs_has_locked(d, k);
	pthread_mutex_unlock(&d->mu);
	return has;
}

static int dirs_add_locked(struct cp_dirs *d, uint64_t k)
{
	if (dirs_has_locked(d, k))
		return 0;
	if ((d->n + 1) * 2 > d->cap) {
		struct cp_dirs g = {.cap = d->cap ? 2 * d->cap : 64};

		g.v = calloc(g.cap, sizeof(*g.v));
		if (!g.v)
			return -ENOMEM;
		for (size_t i = 0; i < d->cap; i++)
			if (d->v[i])
				dirs_add_locked(&g, d->v[i]);
		free(d->v);
		d->v = g.v;
		d->cap = g.cap;
		d->n = g.n;
	}
	for (size_t i = k & (d->cap - 1);; i = (i + 1) & (d->cap - 1))
		if (!d->v[i]) {
			d->v[i] = k;
			d->n++;
			return 0;
		}
}

static int dirs_add(struct cp_dirs *d, uint64_t k)
{
	int rc;

	pthread_mutex_lock(&d->mu);
	rc = dirs_add_locked(d, k);
	pthread_mutex_unlock(&d->mu);
	return rc;
}

void cp_dirs_free(struct cp_dirs *d)
{
	pthread_mutex_lock(&d->mu);
	free(d->v);
	d->v = NULL;
	d->cap = d->n = 0;
	pthread_mutex_unlock(&d->mu);
}

/*
 * Where a link's target must resolve through directories only: the part
 * of @target up to its last "..", from the link's directory @parent, into
 * @out (for openat2() from DIR); false if @target has no "..".
 *
 * The kernel follows every part before a "..": one that is a link (or a
 * name a later link may take) makes the ".." the parent of wherever that
 * link leads, not of the name in the text (l1 -> ., l2 -> l1/.. is DIR's
 * parent). The parts after the last ".." only go down; a link among them
 * was stored under this same rule (or planted by the operator), so it
 * resolves beneath DIR too, and so does the whole target. Directories
 * are never replaced by links (no rename or link goes over one), so what
 * was checked stays true for every link stored later.
 */
static bool climbs(const char *parent, const char *target, char *out, size_t len)
{
	const char *last = NULL;

	for (const char *p = target; *p;) {
		size_t n = strcspn(p, "/");

		if (n == 2 && p[0] == '.' && p[1] == '.')
			last = p + 2;
		p += n;
		p += *p == '/';
	}
	if (!last)
		return false;
	snprintf(out, len, "%s/%.*s", parent, (int)(last - target), target);
	return true;
}

static int fail(struct cp_entry *e, int code, const char *what, const char *name, int err)
{
	snprintf(e->why, sizeof(e->why), "%s %s: %s", what, name, strerror(err));
	return code;
}

/* Prepare @sqe for @step, from e's own buffers. */
static void prep(struct cp_entry *e, struct io_uring_sqe *sqe, int step)
{
	switch (step) {
	case T_PARENT:
		e->how = (struct open_how){.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
					   .resolve = RESOLVE_TREE};
		io_uring_prep_openat2(sqe, e->dirfd, e->kind == K_META ? e->name : e->parent,
				      &e->how);
		break;
	case T_CHECK:
		e->how = (struct open_how){.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
					   .resolve = RESOLVE_TREE | RESOLVE_NO_MAGICLINKS};
		io_uring_prep_openat2(sqe, e->dirfd, e->check, &e->how);
		break;
	case T_MKDIR:
		/* mkdirat() follows no link in base: a link there is EEXIST. */
		io_uring_prep_mkdirat(sqe, e->fd, e->base, 0700);
		break;
	case T_STAT_MADE:
	case T_STAT_OLD:
		io_uring_prep_statx(sqe, e->fd, e->base, AT_SYMLINK_NOFOLLOW,
				    STATX_TYPE | STATX_INO, &e->stx);
		break;
	case T_STAT_SWAPPED:
		io_uring_prep_statx(sqe, e->fd, e->tmp, AT_SYMLINK_NOFOLLOW, STATX_TYPE, &e->stx);
		break;
	case T_SYMLINK_TMP:
		cp_store_tmp_name(e->tmp, e->base, (unsigned int)e->tries);
		io_uring_prep_symlinkat(sqe, e->target, e->fd, e->tmp);
		break;
	case T_PLACE:
		io_uring_prep_renameat(sqe, e->fd, e->tmp, e->fd, e->base, RENAME_NOREPLACE);
		break;
	case T_SWAP:
	case T_SWAP_BACK:
		io_uring_prep_renameat(sqe, e->fd, e->tmp, e->fd, e->base, RENAME_EXCHANGE);
		break;
	case T_UNLINK_OLD:
	case T_UNLINK_TMP:
		io_uring_prep_unlinkat(sqe, e->fd, e->tmp, 0);
		break;
	}
}

static int queue(struct cp_entry *e, int step)
{
	struct io_uring_sqe *sqe = cp_loop_sqe(e->lp, &e->op);

	if (!sqe)
		return fail(e, CP_E_IO, "cannot queue a file system call for", e->name, EBUSY);
	prep(e, sqe, step);
	e->step = step;
	return 0;
}

static int queue_work(struct cp_entry *e, int step)
{
	int rc;

	e->step = step;
	rc = cp_loop_work(e->lp, &e->work);
	return rc ? fail(e, CP_E_IO, "cannot queue a file system call for", e->name, -rc) : 0;
}

/* On the worker: the calls io_uring has no op for. 0 or -errno. */
static int work_fn(struct cp_work *w)
{
	struct cp_entry *e = (struct cp_entry *)((char *)w - offsetof(struct cp_entry, work));
	struct stat sb;

	if (e->step == T_LINK_TIME) /* its own temporary name */
		return utimensat(e->fd, e->tmp, e->ts, AT_SYMLINK_NOFOLLOW) ? -errno : 0;
	/* T_META: e->fd is the directory itself. */
	if (fstat(e->fd, &sb)) {
		e->what = "fstat of";
		return -errno;
	}
	if (!e->force && !(e->made && dirs_has(e->made, dir_key(sb.st_dev, sb.st_ino)))) {
		/* Not made by this transfer: an operator's, or another's. */
		e->left = true;
		return 0;
	}
	e->what = "mode or time of";
	return fchmod(e->fd, e->mode) || futimens(e->fd, e->ts) ? -errno : 0;
}

/* The entry is made: its directory is the caller's to sync. */
static int made(struct cp_entry *e)
{
	e->syncfd = e->fd;
	e->fd = -1;
	e->done(e, 0);
	return 0;
}

static int link_fail(struct cp_entry *e, int err)
{
	if (err == EEXIST)
		return fail(e, CP_E_EXISTS, "refusing to replace", e->name, err);
	return fail(e, cp_store_io_err(err), "cannot create link", e->name, err);
}

/* The next step after e->step ended with @res; 0 or a cp_err code. */
static int next(struct cp_entry *e, int res)
{
	int rc;

	switch (e->step) {
	case T_PARENT:
		if (res < 0)
			return fail(e, cp_store_io_err(-res), "directory",
				    e->kind == K_META ? e->name : e->parent, -res);
		e->fd = res;
		if (e->kind == K_MKDIR)
			return queue(e, T_MKDIR);
		if (e->kind == K_SYMLINK)
			return queue(e, e->check[0] ? T_CHECK : T_SYMLINK_TMP);
		return queue_work(e, T_META);
	case T_CHECK:
		if (res >= 0) {
			close(res);
			return queue(e, T_SYMLINK_TMP);
		}
		if (res == -EAGAIN && e->tries++ < 8)
			return queue(e, T_CHECK); /* a rename raced the walk */
		if (res == -EXDEV || res == -ELOOP || res == -ENOENT || res == -ENOTDIR) {
			snprintf(
				e->why, sizeof(e->why),
				"refusing link %s: its target leads out of DIR, or climbs out of a "
				"link or a name that is no directory: %s",
				e->name, strerror(-res));
			return CP_E_NAME;
		}
		return fail(e, cp_store_io_err(-res), "cannot resolve the target of", e->name,
			    -res);
	case T_MKDIR:
		if (res == 0)
			return e->made ? queue(e, T_STAT_MADE) : made(e);
		if (res == -EEXIST)
			return queue(e, T_STAT_OLD);
		return fail(e, cp_store_io_err(-res), "cannot create directory", e->name, -res);
	case T_STAT_MADE:
		if (res < 0)
			return fail(e, CP_E_IO, "cannot note directory", e->name, -res);
		rc = dirs_add(e->made, dir_key(makedev(e->stx.stx_dev_major, e->stx.stx_dev_minor),
					       e->stx.stx_ino));
		if (rc)
			return fail(e, CP_E_IO, "cannot note directory", e->name, -rc);
		return made(e);
	case T_STAT_OLD:
		if (res == 0 && S_ISDIR(e->stx.stx_mode))
			return made(e); /* used as it is */
		return fail(e, CP_E_EXISTS, "refusing to replace", e->name, ENOTDIR);
	case T_SYMLINK_TMP:
		if (res == -EEXIST && e->tries++ < 8)
			return queue(e, T_SYMLINK_TMP); /* another temporary name */
		if (res < 0)
			return link_fail(e, -res);
		return queue_work(e, T_LINK_TIME);
	case T_LINK_TIME:
		if (res < 0) {
			e->err = -res;
			e->what = "time of link";
			return queue(e, T_UNLINK_TMP);
		}
		return queue(e, e->flags & CP_LINK_FORCE ? T_SWAP : T_PLACE);
	case T_PLACE:
		if (res == 0)
			return made(e);
		e->err = -res;
		return queue(e, T_UNLINK_TMP);
	case T_SWAP:
		if (res == -ENOENT) /* nothing to replace: as without --force */
			return queue(e, T_PLACE);
		if (res < 0) {
			e->err = -res;
			return queue(e, T_UNLINK_TMP);
		}
		return queue(e, T_STAT_SWAPPED);
	case T_STAT_SWAPPED:
		/* Forced: over another link only, never a file or directory,
		 * also not one put there since the link was sent. */
		if (res == 0 && S_ISLNK(e->stx.stx_mode))
			return queue(e, T_UNLINK_OLD);
		e->err = EEXIST;
		return queue(e, T_SWAP_BACK);
	case T_UNLINK_OLD:
		if (res < 0)
			return fail(e, CP_E_IO, "cannot remove the link replaced by", e->name,
				    -res);
		return made(e);
	case T_SWAP_BACK:
		if (res < 0)
			return fail(e, CP_E_IO, "cannot put back what was under", e->name, -res);
		return queue(e, T_UNLINK_TMP);
	case T_UNLINK_TMP:
		if (e->what)
			return fail(e, CP_E_IO, e->what, e->name, e->err);
		return link_fail(e, e->err);
	case T_META:
		if (res < 0)
			return fail(e, CP_E_IO, e->what, e->name, -res);
		return made(e);
	}
	return fail(e, CP_E_IO, "step of", e->name, EINVAL);
}

static void ended(struct cp_entry *e, int res)
{
	int code = next(e, res);

	if (!code)
		return;
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
	e->done(e, code);
}

static void step_done(struct cp_op *op, int res)
{
	ended((struct cp_entry *)((char *)op - offsetof(struct cp_entry, op)), res);
}

static void work_done(struct cp_op *op, int res)
{
	ended((struct cp_entry *)((char *)op - offsetof(struct cp_entry, work.op)), res);
}

static void init(struct cp_entry *e, struct cp_loop *lp, int dirfd, const char *name, int kind,
		 cp_entry_fn done)
{
	const char *slash = strrchr(name, '/');

	e->syncfd = e->fd = -1;
	e->left = false;
	e->what = NULL;
	e->tries = 0;
	e->why[0] = 0;
	e->lp = lp;
	e->done = done;
	e->dirfd = dirfd;
	e->kind = kind;
	e->op.done = step_done;
	e->work.op.done = work_done;
	e->work.fn = work_fn;
	snprintf(e->name, sizeof(e->name), "%s", name);
	snprintf(e->base, sizeof(e->base), "%s", slash ? slash + 1 : name);
	snprintf(e->parent, sizeof(e->parent), "%.*s", slash ? (int)(slash - name) : 1,
		 slash ? name : ".");
}

static void set_time(struct cp_entry *e, const struct cp_time *t)
{
	e->ts[0] = (struct timespec){.tv_nsec = UTIME_OMIT}; /* atime untouched */
	e->ts[1] = (struct timespec){.tv_sec = (time_t)t->sec, .tv_nsec = (long)t->nsec};
}

int cp_entry_mkdir(struct cp_entry *e, struct cp_loop *lp, int dirfd, const char *name,
		   struct cp_dirs *made, cp_entry_fn done)
{
	init(e, lp, dirfd, name, K_MKDIR, done);
	e->made = made;
	if (cp_store_reserved(e->base))
		return fail(e, CP_E_NAME, "refusing", name, EPERM);
	return queue(e, T_PARENT);
}

int cp_entry_symlink(struct cp_entry *e, struct cp_loop *lp, int dirfd, const char *name,
		     const char *target, const struct cp_time *mtime, unsigned int flags,
		     cp_entry_fn done)
{
	init(e, lp, dirfd, name, K_SYMLINK, done);
	e->flags = flags;
	set_time(e, mtime);
	snprintf(e->target, sizeof(e->target), "%s", target);
	if (cp_store_reserved(e->base))
		return fail(e, CP_E_NAME, "refusing", name, EPERM);
	e->check[0] = 0;
	if (!(flags & CP_LINK_ANYWHERE)) {
		if (target[0] == '/') {
			snprintf(e->why, sizeof(e->why), "refusing link %s: its target is absolute",
				 name);
			return CP_E_NAME;
		}
		climbs(e->parent, target, e->check, sizeof(e->check));
	}
	return queue(e, T_PARENT);
}

int cp_entry_dir_meta(struct cp_entry *e, struct cp_loop *lp, int dirfd, const char *name,
		      uint32_t mode, const struct cp_time *mtime, struct cp_dirs *made, bool force,
		      cp_entry_fn done)
{
	init(e, lp, dirfd, name, K_META, done);
	e->made = made;
	e->force = force;
	e->mode = cp_store_perm(mode);
	set_time(e, mtime);
	return queue(e, T_PARENT);
}
