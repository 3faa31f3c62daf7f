/* SPDX-License-Identifier: MIT */
/* An intrusive doubly linked list, used by every layer. */
#ifndef RR_LIST_H
#define RR_LIST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct rr__list {
	struct rr__list *next, *prev;
};

static inline void rr__list_init(struct rr__list *l)
{
	l->next = l->prev = l;
}

static inline bool rr__list_empty(const struct rr__list *l)
{
	return l->next == l;
}

static inline void rr__list_add_tail(struct rr__list *l, struct rr__list *n)
{
	n->prev = l->prev;
	n->next = l;
	l->prev->next = n;
	l->prev = n;
}

static inline void rr__list_add(struct rr__list *l, struct rr__list *n)
{
	rr__list_add_tail(l->next, n);
}

/* Safe on a node that is on no list, once initialized. */
static inline void rr__list_del(struct rr__list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}

/*
 * An inbox: other threads push onto it without a lock; the one thread that
 * owns it takes everything at once, oldest first.
 */
struct rr__inbox_node {
	struct rr__inbox_node *next;
};

typedef _Atomic(struct rr__inbox_node *) rr__inbox;

static inline void rr__inbox_push(rr__inbox *in, struct rr__inbox_node *n)
{
	n->next = atomic_load(in);
	while (!atomic_compare_exchange_weak(in, &n->next, n)) {
	}
}

static inline struct rr__inbox_node *rr__inbox_take(rr__inbox *in)
{
	struct rr__inbox_node *n = atomic_exchange(in, NULL), *old = NULL;

	while (n) {
		struct rr__inbox_node *next = n->next;

		n->next = old;
		old = n;
		n = next;
	}
	return old;
}

#define rr__container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

#endif
