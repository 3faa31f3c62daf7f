// SPDX-License-Identifier: MIT
/* Run-time version queries. */
#include <errno.h>

#include "ringrdma.h"

const char *rr_version(void)
{
	return RR_VERSION_STRING;
}

int rr_version_check(int major, int minor)
{
	if (major != RR_VERSION_MAJOR || minor > RR_VERSION_MINOR)
		return -ENOTSUP;
	return 0;
}
