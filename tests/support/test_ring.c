// SPDX-License-Identifier: MIT
/* Rings set up per flavour; see test_ring.h. */
#include <stdlib.h>

#include "test_ring.h"

static unsigned int env_uint(const char *name, unsigned int dflt)
{
	const char *e = getenv(name);

	return e && *e ? (unsigned int)strtoul(e, NULL, 0) : dflt;
}

unsigned int rr_test_ring_flags(void)
{
	return env_uint("RR_TEST_RING_FLAGS", 0);
}

unsigned int rr_test_count(const char *name, unsigned int dflt, unsigned int least)
{
	unsigned int n = env_uint(name, dflt);

	return n < least ? least : n;
}

unsigned int rr_test_bridge_flags(void)
{
	return env_uint("RR_TEST_BRIDGE_FLAGS", 0);
}

const struct rr_bridge_opts *rr_test_bridge_opts(void)
{
	static struct rr_bridge_opts o;

	o.flags = rr_test_bridge_flags();
	return &o;
}

int rr_test_ring_init(struct io_uring *ring, unsigned int default_entries)
{
	/* No skip on an old kernel: a flavour that cannot be set up fails. */
	return io_uring_queue_init(env_uint("RR_TEST_SQ_ENTRIES", default_entries), ring,
				   rr_test_ring_flags());
}
