// SPDX-License-Identifier: MIT
/* ringrdma-cp serve: the gate before authentication (see gate.h). */
#include <netinet/in.h>
#include <string.h>

#include "gate.h"

#define NS 1000000000ull

void cp_gate_init(struct cp_gate *g, unsigned int max_pending)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->mu, NULL);
	g->max_pending = max_pending ? max_pending : 1;
	g->log_tokens = GATE_LOG_BURST;
}

void cp_gate_fini(struct cp_gate *g)
{
	pthread_mutex_destroy(&g->mu);
}

static void unlink_ticket(struct cp_gate *g, struct cp_gate_ticket *t)
{
	if (t->prev)
		t->prev->next = t->next;
	else
		g->head = t->next;
	if (t->next)
		t->next->prev = t->prev;
	else
		g->tail = t->prev;
	t->prev = t->next = NULL;
	t->listed = false;
	g->pending--;
}

/* The oldest half-open ticket, else the oldest established one. */
static struct cp_gate_ticket *victim(struct cp_gate *g)
{
	for (struct cp_gate_ticket *t = g->head; t; t = t->next)
		if (!t->established)
			return t;
	return g->head;
}

/* Enter @t; the victim, and in *@own whether @t's owner holds it too. */
static struct cp_gate_ticket *enter(struct cp_gate *g, struct cp_gate_ticket *t, uint64_t now_ns,
				    bool *own)
{
	struct cp_gate_ticket *v = NULL;

	*own = false;
	t->born_ns = now_ns;
	t->established = false;
	atomic_store(&t->evicted, false);
	pthread_mutex_lock(&g->mu);
	if (g->pending >= g->max_pending) {
		v = victim(g);
		if (v) {
			unlink_ticket(g, v);
			atomic_store(&v->evicted, true);
			*own = t->owner && v->owner == t->owner;
		}
	}
	/* Oldest first: requests enter in the order of their time. */
	t->prev = g->tail;
	t->next = NULL;
	if (g->tail)
		g->tail->next = t;
	else
		g->head = t;
	g->tail = t;
	t->listed = true;
	g->pending++;
	pthread_mutex_unlock(&g->mu);
	return v;
}

struct cp_gate_ticket *cp_gate_enter(struct cp_gate *g, struct cp_gate_ticket *t, uint64_t now_ns)
{
	bool own;

	t->owner = NULL;
	return enter(g, t, now_ns, &own);
}

struct cp_gate_ticket *cp_gate_enter_own(struct cp_gate *g, struct cp_gate_ticket *t,
					 const void *owner, uint64_t now_ns)
{
	struct cp_gate_ticket *v;
	bool own;

	t->owner = owner;
	v = enter(g, t, now_ns, &own);
	return own ? v : NULL;
}

void cp_gate_established(struct cp_gate *g, struct cp_gate_ticket *t)
{
	pthread_mutex_lock(&g->mu);
	t->established = true;
	pthread_mutex_unlock(&g->mu);
}

void cp_gate_leave(struct cp_gate *g, struct cp_gate_ticket *t)
{
	pthread_mutex_lock(&g->mu);
	if (t->listed)
		unlink_ticket(g, t);
	pthread_mutex_unlock(&g->mu);
}

unsigned int cp_gate_pending(struct cp_gate *g)
{
	unsigned int n;

	pthread_mutex_lock(&g->mu);
	n = g->pending;
	pthread_mutex_unlock(&g->mu);
	return n;
}

/*
 * @sa's source as 16 bytes; false for another family. IPv4 (or IPv4
 * mapped into IPv6): its address, mapped. IPv6: its /64, what one host
 * or link commonly holds and rotates through (privacy addresses), so
 * that each new address is no new source with free tries; byte 8 marks
 * it apart from the mapped ones.
 */
static bool key_of(const struct sockaddr *sa, uint8_t key[16])
{
	if (sa && sa->sa_family == AF_INET) {
		memset(key, 0, 10);
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return true;
	}
	if (sa && sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a)) {
			memcpy(key, a, 16);
			return true;
		}
		memcpy(key, a, 8);
		memset(key + 8, 0, 8);
		key[8] = 64;
		return true;
	}
	return false;
}

static struct cp_gate_src *find_src(struct cp_gate *g, const uint8_t key[16])
{
	for (unsigned int i = 0; i < g->nsrc; i++)
		if (!memcmp(g->src[i].addr, key, 16))
			return &g->src[i];
	return NULL;
}

/* Is @a less worth keeping than @b? */
static bool less_worth(const struct cp_gate_src *a, const struct cp_gate_src *b, uint64_t now_ns)
{
	bool al = a->until_ns > now_ns, bl = b->until_ns > now_ns;

	if (al != bl)
		return !al;
	if (a->fails != b->fails)
		return a->fails < b->fails;
	return a->last_ns < b->last_ns;
}

/*
 * Room for a new source: a free entry, else the least worth keeping: one
 * not held back before one that is, then the fewest failures, then the
 * oldest. Sources that only ever failed once (what a spoofing flood makes)
 * replace each other and leave a source that keeps failing where it is.
 */
static struct cp_gate_src *new_src(struct cp_gate *g, const uint8_t key[16], uint64_t now_ns)
{
	struct cp_gate_src *v;

	if (g->nsrc < GATE_SOURCES) {
		v = &g->src[g->nsrc++];
	} else {
		v = &g->src[0];
		for (unsigned int i = 1; i < GATE_SOURCES; i++)
			if (less_worth(&g->src[i], v, now_ns))
				v = &g->src[i];
	}
	memset(v, 0, sizeof(*v));
	memcpy(v->addr, key, 16);
	return v;
}

static unsigned int secs_left(uint64_t until_ns, uint64_t now_ns)
{
	return until_ns > now_ns ? (unsigned int)((until_ns - now_ns + NS - 1) / NS) : 0;
}

unsigned int cp_gate_held(struct cp_gate *g, const struct sockaddr *sa, uint64_t now_ns)
{
	struct cp_gate_src *s;
	unsigned int left = 0;
	uint8_t key[16];

	if (!key_of(sa, key))
		return 0;
	pthread_mutex_lock(&g->mu);
	s = find_src(g, key);
	if (s)
		left = secs_left(s->until_ns, now_ns);
	pthread_mutex_unlock(&g->mu);
	return left;
}

unsigned int cp_gate_failed(struct cp_gate *g, const struct sockaddr *sa, uint64_t now_ns)
{
	struct cp_gate_src *s;
	unsigned int left = 0;
	uint8_t key[16];

	if (!key_of(sa, key))
		return 0;
	pthread_mutex_lock(&g->mu);
	s = find_src(g, key);
	if (!s)
		s = new_src(g, key, now_ns);
	if (s->fails && now_ns - s->last_ns > GATE_FORGET_S * NS)
		s->fails = 0;
	s->fails++;
	s->last_ns = now_ns;
	if (s->fails > GATE_FREE_FAILS) {
		unsigned int k = s->fails - GATE_FREE_FAILS;
		uint64_t secs = k >= 6 ? GATE_LOCK_MAX_S : 1ull << k;

		if (secs > GATE_LOCK_MAX_S)
			secs = GATE_LOCK_MAX_S;
		s->until_ns = now_ns + secs * NS;
		left = (unsigned int)secs;
	}
	pthread_mutex_unlock(&g->mu);
	return left;
}

void cp_gate_passed(struct cp_gate *g, const struct sockaddr *sa)
{
	struct cp_gate_src *s;
	uint8_t key[16];

	if (!key_of(sa, key))
		return;
	pthread_mutex_lock(&g->mu);
	s = find_src(g, key);
	if (s) {
		s->fails = 0;
		s->until_ns = 0;
	}
	pthread_mutex_unlock(&g->mu);
}

bool cp_gate_log_ok(struct cp_gate *g, uint64_t now_ns, unsigned int *skipped)
{
	bool ok = false;

	pthread_mutex_lock(&g->mu);
	if (g->log_ns) {
		g->log_tokens += (double)(now_ns - g->log_ns) / NS;
		if (g->log_tokens > GATE_LOG_BURST)
			g->log_tokens = GATE_LOG_BURST;
	}
	g->log_ns = now_ns;
	if (g->log_tokens >= 1) {
		g->log_tokens -= 1;
		*skipped = g->log_skipped;
		g->log_skipped = 0;
		ok = true;
	} else {
		g->log_skipped++;
	}
	pthread_mutex_unlock(&g->mu);
	return ok;
}
