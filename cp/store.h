/* SPDX-License-Identifier: MIT */
/*
 * Where a received file lives until it is complete: an unnamed O_TMPFILE
 * (or, where the file system has none, a hidden temp name) opened with
 * openat2(RESOLVE_BENEATH) under the served directory, linked or renamed
 * to its final name only after fsync, without replacing anything unless
 * --force was given; with --direct it is written with O_DIRECT. Every file
 * system call goes through the loop's ring
 * (IORING_OP_OPENAT2, _STATX, _LINKAT, _RENAMEAT, _UNLINKAT, _FSYNC), one
 * step at a time, and the mode and time on the loop's worker, so a slow
 * directory stalls only its own connection.
 */
#ifndef CP_STORE_H
#define CP_STORE_H

#include <limits.h>
#include <pthread.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "loop.h"

struct cp_store;
struct cp_time;
/* The end of cp_store_open() or cp_store_commit(): 0 or an enum cp_err
 * code, the reason in why[]. */
typedef void (*cp_store_fn)(struct cp_store *st, int code);

struct cp_store {
	int fd;	      /* the data, -1 when closed */
	int parentfd; /* the directory the file goes into */
	bool force;
	bool same;	       /* CP_STORE_SAME */
	bool direct;	       /* fd has O_DIRECT (dropped for an unaligned tail) */
	bool tmp_named;	       /* tmp[] exists in parentfd */
	bool busy;	       /* a step is in flight: abort must wait for done */
	bool exists;	       /* CP_STORE_SAME: a regular file has the name already */
	uint64_t exist_size;   /* its size */
	bool partial;	       /* CP_STORE_PARTIAL: fd is the partial part[] */
	bool part_named;       /* part[] names fd in parentfd (as far as we know) */
	bool part_fresh;       /* what was in part[]'s way went: create it anew */
	bool keep;	       /* abort keeps the partial, synced (default) */
	uint64_t partial_size; /* what it held when opened */
	bool range;	       /* cp_store_open_range(): a range of the partial */
	uint64_t range_off, range_len;
	char base[NAME_MAX + 1];
	char tmp[NAME_MAX + 1];
	char part[NAME_MAX + 1];
	char why[400]; /* "what NAME: error", NAME up to NAME_MAX */
	/* private: the step in flight and what it reads until its CQE */
	struct cp_op op[2]; /* a step is one SQE or two */
	int res[2], pending;
	struct cp_loop *lp;
	cp_store_fn done;
	int step, tries;
	int drop_flags; /* S_PART_DROP: 0 or AT_REMOVEDIR */
	int dirfd;	/* DIR, borrowed while its subdirectory is opened */
	bool opening;	/* a failed open leaves nothing open */
	struct open_how how;
	struct statx stx;
	struct cp_work work; /* cp_store_meta() */
	mode_t meta_mode;
	bool meta_time;
	struct timespec meta_ts[2];
	char parent[256]; /* CP_NAME_MAX + 1 */
	char path[64];
};

/* The longest last component that has a partial: ".NAME.rrcp-partial"
 * must fit in NAME_MAX. */
#define CP_STORE_PART_MAX (NAME_MAX - 14)

/* cp_store_reserved() - is @base (a last component) a name of the store's
 * own, a partial's or a temp file's, which no sender may make? */
bool cp_store_reserved(const char *base);

/*
 * cp_store_expire() - remove the partials under @dirfd, at any depth and
 * through no symbolic link, last changed more than @max_age_s seconds
 * before @now: regular files of this user's named ".NAME.rrcp-partial",
 * one link, not locked by a connection. Their number in *removed. 0, or
 * -errno of the first directory that could not be read (the rest done).
 */
int cp_store_expire(int dirfd, uint64_t max_age_s, int64_t now, unsigned int *removed);

/* cp_store_supported() - does @lp's kernel have every opcode above,
 * and those of cp/tree.h? */
bool cp_store_supported(struct cp_loop *lp);

enum {
	CP_STORE_FORCE = 1 << 0,  /* replace an existing file */
	CP_STORE_DIRECT = 1 << 1, /* write around the page cache (O_DIRECT) */
	/* An existing regular file is no refusal: exists and exist_size say
	 * so and the caller decides (its content may be the same). */
	CP_STORE_SAME = 1 << 2,
	/*
	 * Write into the named partial ".NAME.rrcp-partial" (created, or
	 * opened with what it holds: partial_size), locked against a second
	 * connection. What is found there is adopted only if it is a regular
	 * file of this user's, mode 0600, with one link; anything else (a
	 * link, a directory, someone's file) is removed and the partial
	 * created anew. Commit links the open file itself under NAME (never
	 * whatever the partial's name holds by then), then removes the
	 * partial's name if it still is that file; abort keeps it, synced,
	 * unless keep was cleared. A NAME of over CP_STORE_PART_MAX bytes
	 * has no partial: it is received as without this flag, holding 0.
	 */
	CP_STORE_PARTIAL = 1 << 3,
};

/*
 * cp_store_open() - start a file @name (already checked by cp_name_ok())
 * under the directory @dirfd, with CP_STORE_* @flags. Returns 0 and calls
 * @done once, later, with the outcome; or returns a cp_err code (reason in
 * why[]) and never calls it. A failed open leaves nothing open.
 */
int cp_store_open(struct cp_store *st, struct cp_loop *lp, int dirfd, const char *name,
		  unsigned int flags, cp_store_fn done);
/*
 * cp_store_open_range() - as cp_store_open() with CP_STORE_PARTIAL, for
 * @len bytes at @off of the file (docs/ringrdma-cp.md, "Ranges"): the
 * partial is shared with the file's other ranges (cp_range_hold() shared,
 * where a whole file holds it alone, so a file is never received whole and in
 * ranges at once, and a commit's open waits for every range to end), and
 * the range is claimed for this store alone (cp_range_claim()): another
 * claim of any of its bytes is CP_E_BUSY, as is a partial named while
 * it was being opened. Closing the store gives the range back. A name
 * too long for a partial is refused.
 */
int cp_store_open_range(struct cp_store *st, struct cp_loop *lp, int dirfd, const char *name,
			unsigned int flags, uint64_t off, uint64_t len, cp_store_fn done);
/* cp_store_aligned() - can @len bytes at @off be written as the file's
 * O_DIRECT (if any) wants: whole 4 KiB blocks at a block offset? */
bool cp_store_aligned(const struct cp_store *st, uint64_t off, uint32_t len);
/*
 * cp_store_unaligned() - the next write of @len bytes at @off cannot go
 * around the page cache: drop O_DIRECT for the rest of the file. Writes
 * prepared but not yet submitted would lose it too: call it with none.
 * 0 or -errno.
 */
int cp_store_unaligned(struct cp_store *st, uint64_t off, uint32_t len);
/* cp_store_direct_ok() - can files under @dirfd be written with O_DIRECT?
 * 0, or -EINVAL where the file system refuses it. */
int cp_store_direct_ok(int dirfd);
/* cp_store_commit() - after fsync: give the file its name; as above. */
int cp_store_commit(struct cp_store *st, cp_store_fn done);
/*
 * cp_store_release() - a range is stored (and synced): the store forgets
 * its partial without touching it and hands back the descriptor, for the
 * caller to close (which gives the range and the shared lock back); its
 * directory is closed by cp_store_abort() as ever.
 */
int cp_store_release(struct cp_store *st);
/* cp_store_abort() - close and remove whatever is left (a partial with
 * keep set is synced and kept); safe to repeat; not while busy. */
void cp_store_abort(struct cp_store *st);

/*
 * cp_store_meta() - the open file's mode (its permission bits, less the
 * process's umask: never setuid, setgid or sticky) and modification time
 * (@mtime NULL: left as it is), set before its fsync, on the loop's
 * worker (io_uring has no fchmod or futimens). Until then the file is
 * 0600. As cp_store_open(): 0 and @done later, or a cp_err code.
 */
int cp_store_meta(struct cp_store *st, uint32_t mode, const struct cp_time *mtime,
		  cp_store_fn done);

/* Shared with cp/tree.c: the cp_err code of a failed call's errno; a
 * sender's mode as stored (permission bits less the umask); a fresh temp
 * name ".BASE.rrcp-XXXXXXXX" for @base in @tmp (NAME_MAX + 1 bytes),
 * @salt varying it where getrandom() fails. */
int cp_store_io_err(int err);
mode_t cp_store_perm(uint32_t mode);
void cp_store_tmp_name(char *tmp, const char *base, unsigned int salt);

#endif
