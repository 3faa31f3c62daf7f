/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp serve: the gate in front of authentication, shared by every
 * thread of serve. It holds
 *
 *  - the connections not yet admitted (--max-pending), oldest first, from
 *    their connect request on: a full gate makes room for a new request by
 *    evicting the oldest one never established (half-open), else the
 *    oldest established one still unauthenticated, on whichever thread;
 *    a victim of the request's own thread is handed to it, to drop at
 *    once, one of another thread is marked for its own;
 *  - per source address, the failed token checks: after GATE_FREE_FAILS of
 *    them a source is refused for a time that doubles with each further
 *    failure (GATE_LOCK_MAX_S at most), in a table of fixed size;
 *  - a rate limit on the log lines of refusals.
 *
 * Pure bookkeeping under one mutex, with the time passed in: no I/O.
 */
#ifndef CP_GATE_H
#define CP_GATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define GATE_SOURCES	256 /* sources remembered, whatever the peers claim */
#define GATE_FREE_FAILS 3   /* failures before a source is held back */
#define GATE_LOCK_MAX_S 60
#define GATE_FORGET_S	600 /* a source without failure for this long starts over */
#define GATE_LOG_BURST	5   /* refusal lines at once, then one per second */

/* A connection in the gate; embedded in whoever holds the connection. */
struct cp_gate_ticket {
	struct cp_gate_ticket *prev, *next;
	const void *owner;   /* who holds it (a thread's loop), or NULL */
	uint64_t born_ns;    /* its connect request */
	bool listed;	     /* counted in the gate */
	bool established;    /* the connection exists (no longer half-open) */
	atomic_bool evicted; /* made room for a newer one: its holder drops it */
};

struct cp_gate_src {
	uint8_t addr[16]; /* IPv4 mapped into IPv6 */
	unsigned int fails;
	uint64_t last_ns;  /* last failure */
	uint64_t until_ns; /* refused until then */
};

struct cp_gate {
	pthread_mutex_t mu;
	unsigned int max_pending;
	unsigned int pending;
	struct cp_gate_ticket *head, *tail; /* oldest first */
	struct cp_gate_src src[GATE_SOURCES];
	unsigned int nsrc;
	double log_tokens;
	uint64_t log_ns;
	unsigned int log_skipped;
};

void cp_gate_init(struct cp_gate *g, unsigned int max_pending);
void cp_gate_fini(struct cp_gate *g);

/*
 * A connect request: @t is counted from now (@now_ns). When the gate is
 * full the oldest half-open ticket, else the oldest established one, is
 * taken out and marked evicted (its holder must drop it), and returned.
 */
struct cp_gate_ticket *cp_gate_enter(struct cp_gate *g, struct cp_gate_ticket *t, uint64_t now_ns);
/*
 * cp_gate_enter() for a holder that drops a victim of its own at once: @t
 * is held by @owner (one thread). The victim is returned only when @owner
 * holds it too, as decided under the lock: another holder may free its
 * ticket as soon as it sees the mark. A victim of another is marked for
 * its holder, and NULL returned.
 */
struct cp_gate_ticket *cp_gate_enter_own(struct cp_gate *g, struct cp_gate_ticket *t,
					 const void *owner, uint64_t now_ns);
/* The connection of @t is established. */
void cp_gate_established(struct cp_gate *g, struct cp_gate_ticket *t);
/* @t stops counting (admitted, or gone). Idempotent. */
void cp_gate_leave(struct cp_gate *g, struct cp_gate_ticket *t);
unsigned int cp_gate_pending(struct cp_gate *g);

/* Seconds @sa is still refused for (0: not held back). */
unsigned int cp_gate_held(struct cp_gate *g, const struct sockaddr *sa, uint64_t now_ns);
/* A failed token check from @sa; returns the seconds it is now held back. */
unsigned int cp_gate_failed(struct cp_gate *g, const struct sockaddr *sa, uint64_t now_ns);
/* A good token from @sa: it starts over. */
void cp_gate_passed(struct cp_gate *g, const struct sockaddr *sa);

/*
 * May a refusal be logged now? At most GATE_LOG_BURST at once, then one a
 * second. When it may, *skipped says how many were not since the last.
 */
bool cp_gate_log_ok(struct cp_gate *g, uint64_t now_ns, unsigned int *skipped);

#endif
