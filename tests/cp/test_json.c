// SPDX-License-Identifier: MIT
/* cp/json.c on the host: --json FILE is written, never through a link. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "scratch.h"

static char dir[64];

static void setup(void)
{
	scratch_make(dir, "json");
}

static void teardown(void)
{
	scratch_remove(dir);
}

TestSuite(json, .init = setup, .fini = teardown, .timeout = 30);

static void report(const char *path)
{
	struct cp_opts o = {.json = path, .chunk = 4096, .window = 4};
	struct cp_summary s = {.mode = "serve", .start_ns = cp_now_ns()};

	cp_json_report(&o, &s);
}

/* Issue 40: a link planted at FILE (in /tmp, say) made --json write the
 * summary through it, over whatever it led to. */
Test(json, a_link_at_the_path_is_replaced_not_followed)
{
	char path[128], victim[128], buf[8] = "";
	struct stat sb;
	FILE *f;

	snprintf(path, sizeof(path), "%s/out.json", dir);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	f = fopen(victim, "w");
	cr_assert_not_null(f);
	fputs("keep", f);
	fclose(f);
	cr_assert_eq(symlink(victim, path), 0);
	report(path);
	cr_assert_eq(lstat(path, &sb), 0);
	cr_expect(S_ISREG(sb.st_mode), "the summary is not a file of its own");
	f = fopen(victim, "r");
	cr_assert_not_null(f);
	cr_expect_not_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	cr_expect_str_eq(buf, "keep", "written through the link");

	/* A dangling one: nothing created where it leads. */
	cr_assert_eq(unlink(path), 0);
	cr_assert_eq(unlink(victim), 0);
	cr_assert_eq(symlink(victim, path), 0);
	report(path);
	cr_expect_neq(lstat(victim, &sb), 0, "created through the link");
	f = fopen(path, "r");
	cr_assert_not_null(f);
	cr_expect_eq(fgetc(f), '{');
	fclose(f);
}
