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

Test(version, check_accepts_own_and_older_minor_of_the_same_abi)
{
	cr_assert_eq(rr_version_check(RR_VERSION_MAJOR, RR_VERSION_MINOR), 0);
	/* libringrdma.so.1 began with 0.8.0. */
	cr_assert_eq(rr_version_check(0, 8), 0);
}

/* Headers before 0.8 pass their structs without a size: a program built
 * against one needs libringrdma.so.0, and this library must say so. */
Test(version, check_rejects_headers_of_the_previous_abi)
{
	for (int minor = 0; minor < 8; minor++)
		cr_assert_eq(rr_version_check(0, minor), -ENOTSUP, "0.%d", minor);
}

Test(version, check_rejects_other_major_and_newer_minor)
{
	cr_assert_eq(rr_version_check(RR_VERSION_MAJOR + 1, 0), -ENOTSUP);
	cr_assert_eq(rr_version_check(RR_VERSION_MAJOR, RR_VERSION_MINOR + 1), -ENOTSUP);
	cr_assert_eq(rr_version_check(-1, 9), -ENOTSUP);
}
