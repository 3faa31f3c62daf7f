// SPDX-License-Identifier: MIT
/* ringrdma-cp: the entries of a received tree (directories, symbolic links,
 * a directory's mode and time), made beneath the served directory and
 * through no symbolic link. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proto.h"
#include "store.h"

#define RESOLVE_TREE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)

/* The directory @path under @dirfd, reached through no symbolic link;
 * or -errno. */
static int open_beneath(int dirfd, const char *path)
{
	struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
			       .resolve = RESOLVE_TREE};
	long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

static int tree_fail(char *why, size_t len, int code, const char *what, const char *name, int err)
{
	snprintf(why, len, "%s %s: %s", what, name, strerror(err));
	return code;
}

/* The directory @name goes into, opened as above, and its last component
 * in @base; or a negative cp_err code. */
static int open_parent(int dirfd, const char *name, char base[NAME_MAX + 1], char *why, size_t len)
{
	const char *slash = strrchr(name, '/');
	char parent[CP_NAME_MAX + 1];
	int fd;

	snprintf(base, NAME_MAX + 1, "%s", slash ? slash + 1 : name);
	snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - name) : 1,
		 slash ? name : ".");
	fd = open_beneath(dirfd, parent);
	if (fd < 0)
		return -tree_fail(why, len, cp_store_io_err(-fd), "directory", parent, -fd);
	return fd;
}

/* A directory's key in a struct cp_dirs: never 0. */
static uint64_t dir_key(const struct stat *sb)
{
	uint64_t k = ((uint64_t)sb->st_dev * 0x9e3779b97f4a7c15ull) ^ (uint64_t)sb->st_ino;

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

int cp_store_mkdir(int dirfd, const char *name, struct cp_dirs *made, int *syncfd, char *why,
		   size_t why_len)
{
	char base[NAME_MAX + 1];
	int pfd = open_parent(dirfd, name, base, why, why_len);
	struct stat sb;
	int err;

	if (pfd < 0)
		return -pfd;
	if (cp_store_reserved(base)) {
		close(pfd);
		return tree_fail(why, why_len, CP_E_NAME, "refusing", name, EPERM);
	}
	/* mkdirat() follows no link in @base: a link there is EEXIST. */
	if (mkdirat(pfd, base, 0700) == 0) {
		err = !made ? 0
		      : fstatat(pfd, base, &sb, AT_SYMLINK_NOFOLLOW)
			      ? errno
			      : -dirs_add(made, dir_key(&sb));
		if (err) {
			close(pfd);
			return tree_fail(why, why_len, CP_E_IO, "cannot note directory", name, err);
		}
		goto made;
	}
	err = errno;
	if (err == EEXIST && !fstatat(pfd, base, &sb, AT_SYMLINK_NOFOLLOW) && S_ISDIR(sb.st_mode))
		goto made;
	close(pfd);
	if (err == EEXIST)
		return tree_fail(why, why_len, CP_E_EXISTS, "refusing to replace", name, ENOTDIR);
	return tree_fail(why, why_len, cp_store_io_err(err), "cannot create directory", name, err);
made:
	*syncfd = pfd;
	return 0;
}

/* Does @target, from a link at @name (under DIR), stay under DIR? */
static bool target_inside(const char *name, const char *target)
{
	int depth = 0;

	if (target[0] == '/')
		return false;
	for (const char *p = name; (p = strchr(p, '/')); p++)
		depth++; /* the directories the link lies in */
	for (const char *p = target; *p;) {
		size_t n = strcspn(p, "/");

		if (n == 2 && p[0] == '.' && p[1] == '.') {
			if (--depth < 0)
				return false;
		} else if (n && !(n == 1 && p[0] == '.')) {
			depth++;
		}
		p += n;
		p += *p == '/';
	}
	return true;
}

int cp_store_symlink(int dirfd, const char *name, const char *target, const struct cp_time *mtime,
		     unsigned int flags, int *syncfd, char *why, size_t why_len)
{
	char base[NAME_MAX + 1], tmp[NAME_MAX + 1];
	int pfd = open_parent(dirfd, name, base, why, why_len);
	unsigned int r = 0;
	int err = 0;

	if (pfd < 0)
		return -pfd;
	if (cp_store_reserved(base)) {
		close(pfd);
		return tree_fail(why, why_len, CP_E_NAME, "refusing", name, EPERM);
	}
	if (!(flags & CP_LINK_ANYWHERE) && !target_inside(name, target)) {
		close(pfd);
		snprintf(why, why_len, "refusing link %s: its target leads out of DIR", name);
		return CP_E_NAME;
	}
	if (symlinkat(target, pfd, base) == 0)
		goto made;
	err = errno;
	if (err != EEXIST || !(flags & CP_LINK_FORCE))
		goto out;
	/* Forced: over another link only, never a file or directory. */
	{
		struct stat sb;

		if (fstatat(pfd, base, &sb, AT_SYMLINK_NOFOLLOW) || !S_ISLNK(sb.st_mode))
			goto out;
	}
	/* Forced: made under a temp name and renamed over the old entry;
	 * rename() never puts it over a directory. */
	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (unsigned int)getpid() * 2654435761u;
	snprintf(tmp, sizeof(tmp), ".%.200s.rrcp-%08x", base, r);
	if (symlinkat(target, pfd, tmp)) {
		err = errno;
		goto out;
	}
	if (renameat(pfd, tmp, pfd, base)) {
		err = errno == EISDIR || errno == ENOTEMPTY ? EEXIST : errno;
		unlinkat(pfd, tmp, 0);
		goto out;
	}
made:
	if (cp_store_set_mtime(pfd, base, mtime)) {
		err = errno;
		close(pfd);
		return tree_fail(why, why_len, CP_E_IO, "time of link", name, err);
	}
	*syncfd = pfd;
	return 0;
out:
	close(pfd);
	if (err == EEXIST)
		return tree_fail(why, why_len, CP_E_EXISTS, "refusing to replace", name, err);
	return tree_fail(why, why_len, cp_store_io_err(err), "cannot create link", name, err);
}

int cp_store_dir_meta(int dirfd, const char *name, uint32_t mode, const struct cp_time *mtime,
		      struct cp_dirs *made, bool force, bool *left, int *syncfd, char *why,
		      size_t why_len)
{
	int fd = open_beneath(dirfd, name);
	struct stat sb;
	int err;

	*left = false;
	if (fd < 0)
		return tree_fail(why, why_len, cp_store_io_err(-fd), "directory", name, -fd);
	if (fstat(fd, &sb)) {
		err = errno;
		close(fd);
		return tree_fail(why, why_len, CP_E_IO, "fstat of", name, err);
	}
	if (!force && !(made && dirs_has(made, dir_key(&sb)))) {
		/* Not made by this transfer: an operator's, or another's. */
		*left = true;
		*syncfd = fd;
		return 0;
	}
	if (fchmod(fd, cp_store_perm(mode)) || cp_store_set_mtime(fd, NULL, mtime)) {
		err = errno;
		close(fd);
		return tree_fail(why, why_len, CP_E_IO, "mode or time of", name, err);
	}
	*syncfd = fd;
	return 0;
}
