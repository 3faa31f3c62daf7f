/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp ranges (docs/ringrdma-cp.md, "Ranges (protocol 8)"): a file
 * above the stripe size goes as ranges of one stripe each (the last one
 * shorter) that any connection may take, and the receiver writes each
 * at its offset into the file's one partial.
 *
 * The layout both sides compute, the checks the receiver makes of a range
 * a sender declares, and the whole-file checksum folded from the ranges'
 * own are pure (no I/O). The calls on a partial's descriptor below them
 * are the receiver's: a range claimed by one connection at a time (an
 * open file description lock over its bytes), what a cut range already
 * holds (its bytes up to the first hole), and the commit's reread of the partial, range by range,
 * on a connection's hashing thread.
 */
#ifndef CP_RANGE_H
#define CP_RANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h" /* CP_RANGES_MAX */

struct cp_hasher;

#define CP_STRIPE_DEFAULT (64ull << 20)

/*
 * cp_stripe_for() - the stripe a file of @size goes with, for a sender
 * asked for @stripe bytes (0: never striped) with chunks of @chunk: a
 * whole number of chunks, raised until the file has at most
 * CP_RANGES_MAX ranges; 0 when the file goes whole (off, or no more than
 * one stripe).
 */
uint64_t cp_stripe_for(uint64_t size, uint64_t stripe, uint32_t chunk);
/* cp_range_count() - ranges of a file of @size with @stripe (> 0). */
uint32_t cp_range_count(uint64_t size, uint64_t stripe);
/* cp_range_at() - range @i of them: its offset and length. */
void cp_range_at(uint64_t size, uint64_t stripe, uint32_t i, uint64_t *off, uint64_t *len);

/*
 * cp_range_check() - may @len bytes at @off of a file declared @size
 * bytes be received as a range, with chunks of @chunk? Not empty, not
 * past the declared size, starting on a chunk and ending on one or at
 * the file's end (so chunks never straddle two ranges). 0, or -ERANGE
 * with the reason in @why.
 */
int cp_range_check(uint64_t size, uint64_t off, uint64_t len, uint32_t chunk, char *why,
		   size_t why_len);

/*
 * cp_range_held() - how much of a range of @len bytes at @off a partial
 * holds, whose first hole at or after @off is at @hole (SEEK_HOLE; the
 * end of the file counts as one): the bytes up to it, whole chunks of
 * @chunk only unless they reach the range's end.
 */
uint64_t cp_range_held(uint64_t off, uint64_t len, uint64_t hole, uint32_t chunk);

/*
 * The whole-file checksum of a striped file: XXH3-64 over the ranges'
 * own XXH3-64 values, each as 8 bytes little endian, in range order
 * whatever order they arrived in. Fed one range at a time.
 */
struct cp_range_fold {
	void *st;
	uint32_t n; /* ranges folded in */
};

int cp_range_fold_init(struct cp_range_fold *f); /* 0 or -ENOMEM */
void cp_range_fold_add(struct cp_range_fold *f, uint64_t range_sum);
uint64_t cp_range_fold_sum(const struct cp_range_fold *f);
void cp_range_fold_free(struct cp_range_fold *f);

/*
 * On the receiver's partial (@fd, one open file description per
 * connection):
 *
 * cp_range_hold() - hold the partial: shared (@alone false), as each of
 * a file's ranges does, or alone, as a whole file, a commit and an
 * expiry do. An OFD lock over CP_RANGE_HOLD_OFF, the one byte no range
 * can reach, without waiting. Byte-range locks alone carry the hold and
 * the claims, so they mean the same wherever such locks do: NFS and 9p
 * turn flock() into a lock over the whole file, which would collide
 * with every range's. 0; -EBUSY when another description holds the
 * partial otherwise; -errno else (-EBADF: @alone false wants @fd
 * readable).
 *
 * cp_range_claim() - claim @len bytes at @off for this description: an
 * OFD write lock over them, without waiting. 0; -EBUSY when another
 * description holds any of those bytes (another connection's range that
 * overlaps); -errno else. Closing the description (or
 * cp_range_unclaim()) gives it back, so a connection that dies never
 * holds a range.
 */
#define CP_RANGE_HOLD_OFF ((uint64_t)INT64_MAX)
int cp_range_hold(int fd, bool alone);
int cp_range_claim(int fd, uint64_t off, uint64_t len);
int cp_range_unclaim(int fd, uint64_t off, uint64_t len);
/*
 * cp_range_still_partial() - after a claim: is @fd still the partial
 * @part in @dirfd (the same file, one link)? A commit has the partial
 * alone (cp_store_open_range()) until the partial's name is gone, so a
 * range claimed and checked here is never written into a committed file. 0, -ESTALE, or
 * -errno of the lookup.
 */
int cp_range_still_partial(int fd, int dirfd, const char *part);
/* cp_range_have() - cp_range_held() of the partial @fd, through
 * SEEK_DATA and SEEK_HOLE. 0 and *held, or -errno. */
int cp_range_have(int fd, uint64_t off, uint64_t len, uint32_t chunk, uint64_t *held);
/*
 * The commit's check of a partial: every range read back on the
 * connection's hashing thread (never on the loop), each hashed on its
 * own and folded in range order. A range that never arrived reads as a
 * hole's zeros and a partial shorter than @size as an error, so both
 * fail the comparison with the sender's folded checksum.
 */
struct cp_range_verify {
	struct cp_hasher *h;
	struct cp_range_fold fold;
	int fd;
	uint64_t size, stripe;
	uint32_t next, n; /* ranges queued so far, ranges in all */
};

/*
 * cp_range_verify_start() - read the partial @fd of @size bytes in ranges
 * of @stripe through @h (caught up; it is reset). 0, or -errno with
 * nothing queued.
 */
int cp_range_verify_start(struct cp_range_verify *v, struct cp_hasher *h, int fd, uint64_t size,
			  uint64_t stripe);
/*
 * cp_range_verify_step() - from @h's progress hook: 1 while reading; 0
 * when done, the folded checksum in *sum; -errno of a read (-ENODATA: the
 * partial ended first) or of a queue. Either end frees @v's fold.
 */
int cp_range_verify_step(struct cp_range_verify *v, uint64_t *sum);
/* cp_range_verify_cancel() - drop it; only while @h is caught up. */
void cp_range_verify_cancel(struct cp_range_verify *v);

#endif
