// SPDX-License-Identifier: MIT
/* ringrdma-cp's one escaping helper, cp_esc(), on the host. */
#include <string.h>

#include <criterion/criterion.h>

#include "cp.h"

Test(esc, printable_ascii_unchanged)
{
	char buf[CP_ESC_LEN(64)];

	cr_assert_str_eq(cp_esc("plain name/with spaces~!", buf, sizeof(buf)),
			 "plain name/with spaces~!");
	/* A backslash stays: text the peer escaped once is not escaped twice. */
	cr_assert_str_eq(cp_esc("a\\x1b", buf, sizeof(buf)), "a\\x1b");
}

Test(esc, control_del_and_8bit)
{
	char buf[CP_ESC_LEN(64)];

	cr_assert_str_eq(cp_esc("\x1b[2J\n\t\x7f", buf, sizeof(buf)), "\\x1b[2J\\x0a\\x09\\x7f");
	cr_assert_str_eq(cp_esc("n\x9b[31m\xff\xfe", buf, sizeof(buf)), "n\\x9b[31m\\xff\\xfe");
}

Test(esc, idempotent)
{
	char a[CP_ESC_LEN(16)], b[CP_ESC_LEN(64)];

	cp_esc("\x01\x80z\\", a, sizeof(a));
	cr_assert_str_eq(cp_esc(a, b, sizeof(b)), a);
}

Test(esc, worst_case_fits_and_truncation_stays_printable)
{
	char in[CP_NAME_MAX + 1], buf[CP_ESC_LEN(CP_NAME_MAX)], small[12];

	memset(in, 0xff, CP_NAME_MAX);
	in[CP_NAME_MAX] = '\0';
	cr_assert_eq(strlen(cp_esc(in, buf, sizeof(buf))), 4u * CP_NAME_MAX);
	cp_esc(in, small, sizeof(small));
	cr_assert_lt(strlen(small), sizeof(small));
	cr_assert(strstr(small, "..."), "truncated: \"%s\"", small);
	for (size_t i = 0; small[i]; i++)
		cr_assert(small[i] >= 0x20 && small[i] < 0x7f);
	cp_esc("abc", small, 1);
	cr_assert_str_eq(small, "");
}
