// SPDX-License-Identifier: MIT
/* ringrdma-cp: safe creation of received files under the served directory. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proto.h"
#include "store.h"

#define RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)

static int openat2_beneath(int dirfd, const char *path, uint64_t flags, uint64_t mode)
{
	struct open_how how = {.flags = flags | O_CLOEXEC, .mode = mode, .resolve = RESOLVE};
	long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

/* The cp_err code for a failed file system call. */
static int io_err(int err)
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

static int fail(int code, char *why, size_t why_len, const char *what, const char *name, int err)
{
	snprintf(why, why_len, "%s %s: %s", what, name, strerror(err));
	return code;
}

static int open_named_tmp(struct cp_store *st)
{
	for (int tries = 0; tries < 16; tries++) {
		unsigned int r;
		int fd;

		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (unsigned int)getpid() * 2654435761u + (unsigned int)tries;
		snprintf(st->tmp, sizeof(st->tmp), ".%.200s.rrcp-%08x", st->base, r);
		fd = openat2_beneath(st->parentfd, st->tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
		if (fd != -EEXIST) {
			st->tmp_named = fd >= 0;
			return fd;
		}
	}
	return -EEXIST;
}

int cp_store_open(struct cp_store *st, int dirfd, const char *name, bool force, char *why,
		  size_t why_len)
{
	const char *slash = strrchr(name, '/');
	struct stat sb;
	int fd;

	memset(st, 0, sizeof(*st));
	st->fd = -1;
	st->parentfd = -1;
	st->force = force;
	snprintf(st->base, sizeof(st->base), "%s", slash ? slash + 1 : name);
	if (slash) {
		char parent[CP_NAME_MAX + 1];

		snprintf(parent, sizeof(parent), "%.*s", (int)(slash - name), name);
		/* RESOLVE_BENEATH: no "..", absolute or symlink way out of DIR. */
		fd = openat2_beneath(dirfd, parent, O_RDONLY | O_DIRECTORY, 0);
		if (fd < 0)
			return fail(io_err(-fd), why, why_len, "directory", parent, -fd);
	} else {
		fd = dup(dirfd);
		if (fd < 0)
			return fail(CP_E_IO, why, why_len, "dup of", "DIR", errno);
	}
	st->parentfd = fd;
	if (fstatat(fd, st->base, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (!force || S_ISDIR(sb.st_mode))) {
		cp_store_abort(st);
		return fail(CP_E_EXISTS, why, why_len, "refusing to replace", name, EEXIST);
	}
	fd = openat2_beneath(st->parentfd, ".", O_WRONLY | O_TMPFILE, 0644);
	if (fd == -EOPNOTSUPP || fd == -EISDIR || fd == -EINVAL)
		fd = open_named_tmp(st);
	if (fd < 0) {
		cp_store_abort(st);
		return fail(io_err(-fd), why, why_len, "cannot create", name, -fd);
	}
	st->fd = fd;
	return 0;
}

/* Rename the named temp file to the final name, never replacing unless forced. */
static int rename_tmp(struct cp_store *st)
{
	if (syscall(SYS_renameat2, st->parentfd, st->tmp, st->parentfd, st->base,
		    st->force ? 0 : RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL || st->force)
		return -errno;
	/* No RENAME_NOREPLACE here: link() refuses an existing name too. */
	if (linkat(st->parentfd, st->tmp, st->parentfd, st->base, 0))
		return -errno;
	unlinkat(st->parentfd, st->tmp, 0);
	return 0;
}

int cp_store_commit(struct cp_store *st, char *why, size_t why_len)
{
	char path[64];
	int rc;

	if (st->tmp_named) {
		rc = rename_tmp(st);
	} else {
		/* Give the O_TMPFILE a name: directly, or a temp one to rename over. */
		snprintf(path, sizeof(path), "/proc/self/fd/%d", st->fd);
		if (!st->force) {
			rc = linkat(AT_FDCWD, path, st->parentfd, st->base, AT_SYMLINK_FOLLOW) ? -errno
											      : 0;
		} else {
			rc = -EEXIST;
			for (int tries = 0; tries < 16 && rc == -EEXIST; tries++) {
				unsigned int r = 0;

				if (getrandom(&r, sizeof(r), 0) != sizeof(r))
					r = (unsigned int)tries;
				snprintf(st->tmp, sizeof(st->tmp), ".%.200s.rrcp-%08x", st->base, r);
				rc = linkat(AT_FDCWD, path, st->parentfd, st->tmp, AT_SYMLINK_FOLLOW)
					     ? -errno
					     : 0;
			}
			if (!rc) {
				st->tmp_named = true;
				rc = rename_tmp(st);
			}
		}
	}
	if (rc)
		return fail(io_err(-rc), why, why_len, "cannot name", st->base, -rc);
	st->tmp_named = false;
	/* The new name must survive a crash as well as the data. */
	if (fsync(st->parentfd))
		rc = errno;
	close(st->fd);
	st->fd = -1;
	close(st->parentfd);
	st->parentfd = -1;
	if (rc && rc != EINVAL)
		return fail(CP_E_IO, why, why_len, "fsync of the directory of", st->base, rc);
	return 0;
}

void cp_store_abort(struct cp_store *st)
{
	if (st->tmp_named && st->parentfd >= 0)
		unlinkat(st->parentfd, st->tmp, 0);
	st->tmp_named = false;
	if (st->fd >= 0)
		close(st->fd);
	st->fd = -1;
	if (st->parentfd >= 0)
		close(st->parentfd);
	st->parentfd = -1;
}
