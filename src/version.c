// SPDX-License-Identifier: MIT
/* Run-time version queries. */
#include <errno.h>

#include "ringrdma.h"

/* The first version of libringrdma.so.1 (src/meson.build's soversion). A
 * header older than this passes its structs without their size; only
 * libringrdma.so.0 takes those. Changes with the soname. */
#define ABI_SINCE_MAJOR 0
#define ABI_SINCE_MINOR 8

static int version_cmp(int amaj, int amin, int bmaj, int bmin)
{
	if (amaj != bmaj)
		return amaj < bmaj ? -1 : 1;
	return amin < bmin ? -1 : amin > bmin;
}

const char *rr_version(void)
{
	return RR_VERSION_STRING;
}

int rr_version_check(int major, int minor)
{
	if (version_cmp(major, minor, ABI_SINCE_MAJOR, ABI_SINCE_MINOR) < 0 ||
	    version_cmp(major, minor, RR_VERSION_MAJOR, RR_VERSION_MINOR) > 0)
		return -ENOTSUP;
	return 0;
}
