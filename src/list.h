/* SPDX-License-Identifier: MIT */
/* An intrusive doubly linked list, used by every layer. */
#ifndef RR_LIST_H
#define RR_LIST_H

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

/* Safe on a node that is on no list, once initialized. */
static inline void rr__list_del(struct rr__list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}

#define rr__container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

#endif
