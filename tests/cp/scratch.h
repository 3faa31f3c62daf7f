/* SPDX-License-Identifier: MIT */
/* A scratch directory under /tmp for a host test of ringrdma-cp. */
#ifndef RR_TESTS_CP_SCRATCH_H
#define RR_TESTS_CP_SCRATCH_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

/* Make /tmp/rr-@name.XXXXXX, its path into @dir. */
static inline void scratch_make(char dir[64], const char *name)
{
	snprintf(dir, 64, "/tmp/rr-%s.XXXXXX", name);
	cr_assert_not_null(mkdtemp(dir));
}

/* Remove it and all it holds. */
static inline void scratch_remove(const char *dir)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

#endif
