// SPDX-License-Identifier: MIT
#include <stdlib.h>
#include <string.h>

#include "toy.h"

struct toy {
	struct toy_opts o;
	enum toy_mode mode;
#ifdef TOY_PRIVATE
	long grown_privately[4];
#endif
};

int toy_create(struct toy **out, const struct toy_opts *opts)
{
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return -1;
	if (opts)
		(*out)->o = *opts;
	return 0;
}

void toy_destroy(struct toy *t)
{
	free(t);
}

int toy_set_mode(struct toy *t, enum toy_mode mode)
{
	t->mode = mode;
	return 0;
}

int toy_get_stats(struct toy *t, struct toy_stats *out, size_t size)
{
	struct toy_stats st = {.count = 1};

	memcpy(out, &st, size < sizeof(st) ? size : sizeof(st));
	return 0;
}

#ifdef TOY_CHANGE_FN
int toy_get(struct toy *t, long *v)
#else
int toy_get(struct toy *t, int *v)
#endif
{
	*v = t->o.a;
	return 0;
}

#ifdef TOY_ADD_FN
int toy_extra(struct toy *t)
{
	return t->mode;
}
#endif
