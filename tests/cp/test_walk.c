// SPDX-License-Identifier: MIT
/*
 * cp_open_walked() on the host: send -r reopens each file its walk found,
 * later, by its path. Issue 40, proven 1 (the class of rsync's
 * CVE-2024-12747): a local user who can write part of the tree swaps a
 * file or a directory for a link after the walk, and the sender sent what
 * the link led to under the walked name; a FIFO swapped in blocked it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cp.h"
#include "scratch.h"

static char dir[64];

static void setup(void)
{
	scratch_make(dir, "walk");
}

static void teardown(void)
{
	scratch_remove(dir);
}

TestSuite(walk, .init = setup, .fini = teardown, .timeout = 10);

static void put(const char *rel, const char *text)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	f = fopen(p, "w");
	cr_assert_not_null(f, "%s", p);
	fputs(text, f);
	fclose(f);
}

static struct stat walked(const char *rel)
{
	char p[256];
	struct stat sb;

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	cr_assert_eq(lstat(p, &sb), 0);
	return sb;
}

/* Open @rel as send -r does: beneath the tree's top, dir. */
static int open_walked(const char *rel, const struct stat *sb)
{
	int top = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC), fd;

	cr_assert_geq(top, 0);
	fd = cp_open_walked(top, rel, sb->st_dev, sb->st_ino, true);
	close(top);
	return fd;
}

static int reopen(const char *rel, const struct stat *sb)
{
	int fd = open_walked(rel, sb);

	if (fd >= 0)
		close(fd);
	return fd < 0 ? fd : 0;
}

Test(walk, the_walked_file_is_what_is_sent)
{
	struct stat sb;

	cr_assert_eq(mkdir(strcat(strcpy((char[128]){0}, dir), "/d"), 0700), 0);
	put("d/f", "mine");
	sb = walked("d/f");
	cr_expect_eq(reopen("d/f", &sb), 0);
}

Test(walk, a_file_swapped_for_a_link_is_not_sent)
{
	char p[256];
	struct stat sb;

	put("f", "mine");
	put("secret", "theirs");
	sb = walked("f");
	snprintf(p, sizeof(p), "%s/f", dir);
	cr_assert_eq(unlink(p), 0);
	cr_assert_eq(symlink("secret", p), 0);
	cr_expect_lt(reopen("f", &sb), 0, "sent what the link led to");
}

/* d/f walked, then d moved away and made a link to outside/ (which has
 * an f of its own): what the walk saw of d/f. */
static struct stat walk_then_swap_d(void)
{
	char d[256], moved[256], out[256];
	struct stat sb;

	snprintf(d, sizeof(d), "%s/d", dir);
	snprintf(moved, sizeof(moved), "%s/moved", dir);
	snprintf(out, sizeof(out), "%s/outside", dir);
	cr_assert_eq(mkdir(d, 0700), 0);
	cr_assert_eq(mkdir(out, 0700), 0);
	put("d/f", "mine");
	put("outside/f", "theirs");
	sb = walked("d/f");
	cr_assert_eq(rename(d, moved), 0);
	cr_assert_eq(symlink(out, d), 0);
	return sb;
}

Test(walk, a_directory_swapped_for_a_link_is_not_followed)
{
	struct stat sb = walk_then_swap_d();

	cr_expect_lt(reopen("d/f", &sb), 0, "sent a file from outside the tree");
}

Test(walk, a_fifo_swapped_in_does_not_block)
{
	char p[256];
	struct stat sb;

	put("f", "mine");
	sb = walked("f");
	snprintf(p, sizeof(p), "%s/f", dir);
	cr_assert_eq(unlink(p), 0);
	cr_assert_eq(mkfifo(p, 0600), 0);
	cr_expect_lt(reopen("f", &sb), 0); /* the suite's timeout: no block */
}

/*
 * Issue 49: the file was opened again by its full path, so a directory
 * part swapped for a link was followed, and what it led to opened before
 * the device and inode check refused it: an open can block (FUSE) or act
 * (a tape rewinds). Opened beneath the tree's own directory, through no
 * link, the file outside is never opened at all (inotify would see it).
 */
Test(walk, a_swapped_directory_part_leads_to_no_open_outside)
{
	char f[256], ev[4096];
	struct stat sb = walk_then_swap_d();
	int in, fd;
	ssize_t n;

	snprintf(f, sizeof(f), "%s/outside/f", dir);
	in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	cr_assert_geq(in, 0);
	cr_assert_geq(inotify_add_watch(in, f, IN_OPEN), 0);
	fd = open_walked("d/f", &sb);
	cr_expect_lt(fd, 0, "sent a file from outside the tree");
	if (fd >= 0)
		close(fd);
	n = read(in, ev, sizeof(ev));
	cr_expect_lt(n, 0, "the file outside the tree was opened (%zd bytes of events)", n);
	close(in);
}
