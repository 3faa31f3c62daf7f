// SPDX-License-Identifier: MIT
/* The run-time version matches the headers the library was built with. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include <ringrdma.h>

Test(version, string_matches_header)
{
	char want[32];

	snprintf(want, sizeof(want), "%d.%d.%d", RR_VERSION_MAJOR, RR_VERSION_MINOR,
		 RR_VERSION_PATCH);
	cr_assert_str_eq(rr_version(), want);
	cr_assert_str_eq(rr_version(), RR_VERSION_STRING);
}

Test(version, check_accepts_own_and_older_minor)
{
	cr_assert_eq(rr_version_check(RR_VERSION_MAJOR, RR_VERSION_MINOR), 0);
	if (RR_VERSION_MINOR > 0)
		cr_assert_eq(rr_version_check(RR_VERSION_MAJOR, RR_VERSION_MINOR - 1), 0);
}

Test(version, check_rejects_other_major_and_newer_minor)
{
	cr_assert_eq(rr_version_check(RR_VERSION_MAJOR + 1, 0), -ENOTSUP);
	cr_assert_eq(rr_version_check(RR_VERSION_MAJOR, RR_VERSION_MINOR + 1), -ENOTSUP);
}
