/* SPDX-License-Identifier: MIT */
/*
 * Where a received file lives until it is complete: an unnamed O_TMPFILE
 * (or, where the file system has none, a hidden temp name) opened with
 * openat2(RESOLVE_BENEATH) under the served directory, linked or renamed
 * to its final name only after fsync, without replacing anything unless
 * --force was given.
 */
#ifndef CP_STORE_H
#define CP_STORE_H

#include <limits.h>
#include <stdbool.h>

struct cp_store {
	int fd;	      /* the data, -1 when closed */
	int parentfd; /* the directory the file goes into */
	bool force;
	bool tmp_named; /* tmp[] exists in parentfd */
	char base[NAME_MAX + 1];
	char tmp[NAME_MAX + 1];
};

/*
 * cp_store_open() - start a file @name (already checked by cp_name_ok())
 * under the directory @dirfd. Returns 0 or an enum cp_err code, with the
 * reason in @why.
 */
int cp_store_open(struct cp_store *st, int dirfd, const char *name, bool force, char *why,
		  size_t why_len);
/* cp_store_commit() - after fsync: give the file its name. 0 or cp_err. */
int cp_store_commit(struct cp_store *st, char *why, size_t why_len);
/* cp_store_abort() - close and remove whatever is left; safe to repeat. */
void cp_store_abort(struct cp_store *st);

#endif
