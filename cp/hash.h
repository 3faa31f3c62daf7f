/* SPDX-License-Identifier: MIT */
/*
 * XXH3-64 of a file (through cp_xxh()), computed on a thread of its own,
 * one per connection.
 * The loop thread serves every connection of the process (and on rxe also
 * does the device's copies and packet CRCs in its posts), so a hash fed in
 * file order goes where it holds up no other connection. The thread says
 * how far it got through an eventfd the loop reads in its ring, like any
 * other I/O. Chunks of at most CP_HASH_INLINE bytes are
 * hashed at once on the loop thread when nothing is queued: a thread hop
 * would cost small files more than their hash.
 */
#ifndef CP_HASH_H
#define CP_HASH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loop.h"
#include "proto.h"
#include "xxh.h"

#define CP_HASH_INLINE (64u << 10)
/* The hashing thread runs this much nicer than the thread that starts it. */
#define CP_HASH_NICE 10

struct cp_hasher {
	struct cp_loop *lp;
	/* Called on the loop thread when cp_hasher_done() has grown. */
	void (*progress)(struct cp_hasher *h);
	/* private */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop, started;
	struct {
		const void *buf;
		size_t len;
		int fd; /* >= 0: read @len bytes at @off of it, not @buf */
		uint64_t off;
	} q[CP_WINDOW_MAX];
	uint64_t queued, done;	  /* jobs given, jobs hashed; under mu */
	int err;		  /* a file job's read failed: -errno; under mu */
	uint8_t *rbuf;		  /* the thread's, for file jobs */
	const struct cp_xxh *xxh; /* cp_xxh(), the process's */
	void *state;		  /* the thread's while queued != done */
	int efd;
	bool armed; /* a read of efd is in the ring */
	struct cp_op op;
	uint64_t ev;
};

/* cp_hasher_init() - start the thread; 0 or -errno. */
int cp_hasher_init(struct cp_hasher *h, struct cp_loop *lp, void (*progress)(struct cp_hasher *h));
/* cp_hasher_reset() - a new file; only while cp_hasher_caught_up(). */
void cp_hasher_reset(struct cp_hasher *h);
/*
 * cp_hasher_add() - hash @len bytes at @buf next, in order; @buf must stay
 * as it is until cp_hasher_done() exceeds the returned job number. Returns
 * the job number (>= 0), or -errno if the ring had no room (nothing queued).
 */
int64_t cp_hasher_add(struct cp_hasher *h, const void *buf, size_t len);
/*
 * cp_hasher_add_fd() - hash @len bytes of @fd from @off next, read by the
 * thread (a file's first bytes, to resume a cut transfer: gigabytes are
 * never read on the loop), in up to 32 jobs (each heard of as it is done):
 * only with fewer than CP_WINDOW_MAX - 32 jobs queued. @fd must stay open
 * until it is done. Returns the last job's number or -errno as
 * cp_hasher_add(); a read that fails or finds the file shorter sets
 * cp_hasher_error().
 */
int64_t cp_hasher_add_fd(struct cp_hasher *h, int fd, uint64_t off, uint64_t len);
/* cp_hasher_error() - 0, or the -errno of a file job since the last reset
 * (-ENODATA: the file ended first). */
int cp_hasher_error(struct cp_hasher *h);
/* cp_hasher_kick() - from the loop's tick: make sure queued jobs will be
 * heard of (arms the eventfd read if the ring had no room before). */
void cp_hasher_kick(struct cp_hasher *h);
/* cp_hasher_done() - jobs hashed so far: jobs 0 .. done-1. */
uint64_t cp_hasher_done(struct cp_hasher *h);
/* cp_hasher_caught_up() - everything given was hashed: digest and reset
 * may be called. */
bool cp_hasher_caught_up(struct cp_hasher *h);
/* cp_hasher_idle() - everything given was hashed and no read is in the
 * ring: destroy may be called. */
bool cp_hasher_idle(struct cp_hasher *h);
/* cp_hasher_digest() - the hash of the file so far; only while caught up. */
uint64_t cp_hasher_digest(struct cp_hasher *h);
/* cp_hasher_destroy() - stop and join the thread; only while idle. */
void cp_hasher_destroy(struct cp_hasher *h);

#endif
