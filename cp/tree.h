/* SPDX-License-Identifier: MIT */
/*
 * The entries of a directory tree, each under the served directory and
 * never through a symbolic link: the directory an entry goes into is
 * opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), the last
 * component is never followed. Like files (cp/store.h), each is a chain
 * of steps through the loop's ring (IORING_OP_OPENAT2, _MKDIRAT,
 * _SYMLINKAT, _RENAMEAT, _UNLINKAT, _STATX); what io_uring has no op for
 * (a mode, a time) runs on the loop's worker (cp_loop_work()), so a
 * stuck file system stalls only the connection that waits on it.
 */
#ifndef CP_TREE_H
#define CP_TREE_H

#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "loop.h"
#include "proto.h"

/* The directories made by a run's MKDIRs (serve keeps one set). */
struct cp_dirs {
	pthread_mutex_t mu; /* serve's threads (and their workers) share one */
	uint64_t *v;	    /* open addressing; 0 is empty */
	size_t cap, n;
};
#define CP_DIRS_INIT                                                                               \
	{                                                                                          \
		.mu = PTHREAD_MUTEX_INITIALIZER                                                    \
	}
void cp_dirs_free(struct cp_dirs *d);

enum {
	CP_LINK_FORCE = 1 << 0,	   /* replace an existing symbolic link */
	CP_LINK_ANYWHERE = 1 << 1, /* store any target, absolute ones too */
};

struct cp_entry;
/* The end of an entry: 0 (then syncfd is the directory to fsync, then
 * close, for the change to last) or a cp_err code, the reason in why[]. */
typedef void (*cp_entry_fn)(struct cp_entry *e, int code);

struct cp_entry {
	int syncfd;
	bool left; /* DIR_META: not made by this transfer, left as it is */
	char why[400];
	/* private: the step in flight and what it reads until its end */
	struct cp_op op;
	struct cp_work work;
	struct cp_loop *lp;
	cp_entry_fn done;
	int kind, step, err;
	const char *what; /* the worker's failed call, for why[] */
	int dirfd, fd;
	unsigned int flags;
	bool force;
	struct cp_dirs *made;
	mode_t mode;
	struct timespec ts[2];
	struct open_how how;
	struct statx stx;
	char name[CP_NAME_MAX + 1];
	char parent[CP_NAME_MAX + 1];
	char base[NAME_MAX + 1];
	char tmp[NAME_MAX + 1];
	char target[CP_TARGET_MAX + 1];
	char check[CP_NAME_MAX + CP_TARGET_MAX + 2]; /* "": no ".." to resolve */
	int tries;
};

/*
 * Each starts an entry @name (checked by cp_name_ok()) under @dirfd on
 * @lp's ring: 0, and @done is called once, later, on the loop thread;
 * or a cp_err code (reason in why[]) and @done is never called. @e is
 * the caller's until then, and nothing of it is open after a failure.
 *
 * cp_entry_mkdir() - create @name with mode 0700 (cp_entry_dir_meta()
 * sets its own once its contents are in); an existing directory is used
 * as it is, anything else there is refused. One it created is added to
 * @made (if not NULL).
 * cp_entry_symlink() - @name as a symbolic link to @target with @mtime.
 * Unless CP_LINK_ANYWHERE, a target that is absolute is refused
 * (CP_E_NAME), and so is one whose part up to its last ".." does not
 * resolve, from where the link lies, through directories only, beneath
 * the directory given to serve (a link there, a name not there, or a ".."
 * out of it): serve never follows a link, but others reading DIR would.
 * An existing name is refused unless CP_LINK_FORCE, and then only
 * another symbolic link is replaced, never a file or directory.
 * cp_entry_dir_meta() - the directory @name's mode (less the umask) and
 * modification time; only for a directory in @made (made by a transfer
 * to this serve), or any with @force; another is left as it is, left set.
 */
int cp_entry_mkdir(struct cp_entry *e, struct cp_loop *lp, int dirfd, const char *name,
		   struct cp_dirs *made, cp_entry_fn done);
int cp_entry_symlink(struct cp_entry *e, struct cp_loop *lp, int dirfd, const char *name,
		     const char *target, const struct cp_time *mtime, unsigned int flags,
		     cp_entry_fn done);
int cp_entry_dir_meta(struct cp_entry *e, struct cp_loop *lp, int dirfd, const char *name,
		      uint32_t mode, const struct cp_time *mtime, struct cp_dirs *made, bool force,
		      cp_entry_fn done);

#endif
