/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp send: the one list of entries every connection takes from,
 * of every sender thread (--threads) alike, and the rules of when an
 * entry may go (docs/ringrdma-cp.md, "Trees" and "Sender threads"):
 *
 * - in list order, except that a DIR_META or a striped file's
 *   CP_FILE_COMMIT waiting for its turn lets later entries pass, and so
 *   do up to 256 entries waiting for another connection's MKDIR;
 * - an entry only once the MKDIR of its directory was stored, or went on
 *   the same connection (the receiver keeps a connection's order);
 * - DIR_META only once everything beneath its directory was stored, on
 *   the connection its MKDIR went on (so to the receiver that made it);
 * - CP_FILE_COMMIT only once every range of its file was stored, with
 *   the ranges' sums folded in range order.
 *
 * Pure bookkeeping (no I/O), under one mutex of its own: cp_sendq_take()
 * and cp_sendq_stored() may be called from any thread.
 */
#ifndef CP_SENDQ_H
#define CP_SENDQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

/* One thing to send: a file, or with -r a directory entry. */
struct cp_sendq_entry {
	char *path;   /* local */
	char *name;   /* on the receiver */
	char *target; /* CP_SYMLINK */
	uint8_t kind; /* 0: a file; CP_MKDIR, CP_SYMLINK, CP_DIR_META, CP_FILE_COMMIT */
	uint32_t mode;
	struct cp_time mtime;
	int dir;  /* the MKDIR of the directory it is in, -1: none */
	int own;  /* CP_DIR_META: its directory's MKDIR */
	int left; /* CP_MKDIR: entries beneath it not yet stored */
	int conn; /* the connection it went on, -1: not yet */
	bool done;
	/* A striped file: an entry per range (range set: its bytes, and
	 * @commit, the index of the file's CP_FILE_COMMIT entry after them),
	 * then that entry, which goes once every range was stored (@left
	 * counts them) with the ranges' sums folded in range order. */
	bool range;
	uint32_t index; /* a range's number in its file */
	int commit;
	uint64_t size; /* a file: as walked; a range: its whole file's */
	uint64_t range_off, range_len, stripe;
	uint64_t *sums; /* CP_FILE_COMMIT: each range's, as stored */
	/* A file: what the walk found, the only file sent under its path;
	 * in_tree: found by -r's walk (no link as its last component),
	 * path + rel beneath the tree's top directory, tops[top]. */
	dev_t dev;
	ino_t ino;
	bool in_tree;
	int top;
	size_t rel;
};

struct cp_sendq {
	pthread_mutex_t mu; /* over what follows, once connections run */
	struct cp_sendq_entry *e;
	int ne, cap;
	int first; /* every entry before it went */
};

void cp_sendq_init(struct cp_sendq *q);
/* Every entry's strings and sums, and the list. */
void cp_sendq_free(struct cp_sendq *q);

/*
 * cp_sendq_add() - append @e (its strings taken over, freed on failure)
 * in the directory of MKDIR @e.dir: its index, or -1 out of memory.
 * Before any connection runs (no lock taken).
 */
int cp_sendq_add(struct cp_sendq *q, struct cp_sendq_entry e);
/*
 * cp_sendq_add_striped() - the file @e of @size bytes (mode and mtime in
 * @e) as cp_range_count() ranges of @stripe (> 0) and its CP_FILE_COMMIT
 * after them: 0, or -1 out of memory (@e's strings freed).
 */
int cp_sendq_add_striped(struct cp_sendq *q, struct cp_sendq_entry e, uint64_t size,
			 uint64_t stripe);

/*
 * cp_sendq_take() - the next entry connection @conn may send, marked as
 * gone on it: its index; -1 when every entry went; -2 when the ones left
 * must wait for others to be stored.
 */
int cp_sendq_take(struct cp_sendq *q, int conn);
/* cp_sendq_stored() - entry @i was stored by the receiver, with @sum:
 * true if an entry waiting for that may go now (a MKDIR, the last entry
 * beneath a directory, the last range of a file), false if none can. */
bool cp_sendq_stored(struct cp_sendq *q, int i, uint64_t sum);
/*
 * cp_sendq_pack() - the list as walked (before any connection runs) in
 * one buffer, *@buf (malloc'd, @len bytes), for cp_sendq_unpack() in
 * another process of the same program: 0, or -ENOMEM.
 */
int cp_sendq_pack(const struct cp_sendq *q, char **buf, size_t *len);
/*
 * cp_sendq_unpack() - the list packed in @buf into the empty @q: 0;
 * -EINVAL when @buf is not one whole packed list whose entries point
 * within it (@q left empty), -ENOMEM.
 */
int cp_sendq_unpack(struct cp_sendq *q, const char *buf, size_t len);
/* cp_sendq_commit_sum() - a CP_FILE_COMMIT entry @i taken: its ranges'
 * sums folded in range order into *sum. 0, or -ENOMEM. */
int cp_sendq_commit_sum(struct cp_sendq *q, int i, uint64_t *sum);

#endif
