// SPDX-License-Identifier: MIT
/*
 * cp/store.c on the host: a received file opened and named through the
 * loop's ring, step by step, as serve does it. No RDMA needed.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loop.h"
#include "proto.h"
#include "range.h"
#include "scratch.h"
#include "store.h"
#include "tree.h"

static struct cp_loop lp;
static char dir[64];
static int dirfd_, calls, last_code;
/* The directories "this transfer" made, as a receiver keeps them. */
static struct cp_dirs made = CP_DIRS_INIT;
static bool left;

static void setup(void)
{
	scratch_make(dir, "store");
	dirfd_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(dirfd_, 0);
	cr_assert_eq(cp_loop_init(&lp, 64), 0);
	if (!cp_store_supported(&lp))
		cr_skip_test("this kernel's io_uring lacks a file system opcode");
	calls = 0;
}

static void teardown(void)
{
	cp_loop_fini(&lp);
	cp_dirs_free(&made);
	close(dirfd_);
	scratch_remove(dir);
}

static void on_done(struct cp_store *st, int code)
{
	(void)st;
	calls++;
	last_code = code;
}

/* Run the loop until the store reported once more; its code. */
static int await(int want_calls)
{
	for (int i = 0; i < 100 && calls < want_calls; i++)
		cr_assert_geq(cp_loop_pass(&lp, 100), 0);
	cr_assert_eq(calls, want_calls, "the store reported %d times, not %d", calls, want_calls);
	return last_code;
}

/* Open @name, write @text, fsync, commit; the cp_err code of the first
 * failure (0: stored). */
static int store(const char *name, const char *text, bool force)
{
	struct cp_store st;
	int code = cp_store_open(&st, &lp, dirfd_, name, force ? CP_STORE_FORCE : 0, on_done);

	if (code)
		return code;
	code = await(calls + 1);
	if (code)
		return code;
	cr_assert_eq(write(st.fd, text, strlen(text)), (ssize_t)strlen(text));
	cr_assert_eq(fsync(st.fd), 0);
	code = cp_store_commit(&st, on_done);
	if (!code)
		code = await(calls + 1);
	cp_store_abort(&st);
	return code;
}

static void expect_file(const char *name, const char *text)
{
	char path[512], buf[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s missing", path);
	cr_expect_not_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	cr_expect_str_eq(buf, text);
}

/* Nothing but @n entries in @sub (no temp file left). */
static void expect_entries(const char *sub, int n)
{
	char cmd[256], out[16] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd), "ls -A %s/%s | wc -l", dir, sub);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	cr_expect_not_null(fgets(out, sizeof(out), p));
	pclose(p);
	cr_expect_eq(atoi(out), n, "%d entries in %s/%s, wanted %d", atoi(out), dir, sub, n);
}

TestSuite(store, .init = setup, .fini = teardown, .timeout = 30);

Test(store, a_file_is_named_only_when_committed)
{
	cr_assert_eq(store("a", "one\n", false), 0);
	expect_file("a", "one\n");
	expect_entries("", 1);
}

Test(store, an_existing_name_is_refused_before_any_data)
{
	struct cp_store st;

	cr_assert_eq(store("a", "one\n", false), 0);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "a", 0, on_done), 0);
	cr_expect_eq(await(calls + 1), CP_E_EXISTS);
	cr_expect_neq(strstr(st.why, "refusing to replace a"), NULL, "%s", st.why);
	cr_expect_eq(st.fd, -1);
	cr_expect_eq(st.parentfd, -1);
	expect_file("a", "one\n");
	expect_entries("", 1);
}

Test(store, force_replaces_a_file_also_in_a_subdirectory)
{
	char sub[128];

	snprintf(sub, sizeof(sub), "%s/sub", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	cr_assert_eq(store("a", "one\n", false), 0);
	cr_assert_eq(store("sub/b", "one\n", false), 0);
	cr_assert_eq(store("a", "two\n", true), 0);
	cr_assert_eq(store("sub/b", "two\n", true), 0);
	expect_file("a", "two\n");
	expect_file("sub/b", "two\n");
	expect_entries("", 2);
	expect_entries("sub", 1);
}

Test(store, a_directory_is_never_replaced_even_forced)
{
	char sub[128];

	snprintf(sub, sizeof(sub), "%s/d", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	cr_expect_eq(store("d", "x\n", true), CP_E_EXISTS);
	expect_entries("d", 0);
}

Test(store, a_symbolic_link_cannot_lead_out_of_dir)
{
	char link[128];

	snprintf(link, sizeof(link), "%s/out", dir);
	cr_assert_eq(symlink("/tmp", link), 0);
	cr_expect_eq(store("out/x", "x\n", false), CP_E_NAME);
	cr_expect_eq(store("missing/x", "x\n", false), CP_E_NAME);
	expect_entries("", 1);
}

/* What a closing connection does: abort after open, nothing left. */
Test(store, abort_after_open_leaves_nothing)
{
	struct cp_store st;

	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "a", 0, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_assert_geq(st.fd, 0);
	cp_store_abort(&st);
	cp_store_abort(&st);
	cr_expect_eq(st.fd, -1);
	expect_entries("", 0);
}

/* The process's umask as serve applies it to modes that come over. */
static mode_t umask_now(void)
{
	mode_t m = umask(022);

	umask(m);
	return m;
}

static struct stat lstat_in(const char *name)
{
	char path[512];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	cr_assert_eq(lstat(path, &sb), 0, "%s missing", path);
	return sb;
}

static struct cp_entry ent;
static int ent_calls, ent_code;

static void ent_done(struct cp_entry *e, int code)
{
	(void)e;
	ent_calls++;
	ent_code = code;
}

/* Run the loop until the entry started with @code (0: it ends later)
 * ended; fsync and close what it hands back; its cp_err code. */
static int entry(int code)
{
	ent_calls = 0;
	if (!code) {
		for (int i = 0; i < 100 && !ent_calls; i++)
			cr_assert_geq(cp_loop_pass(&lp, 100), 0);
		cr_assert_eq(ent_calls, 1, "the entry ended %d times", ent_calls);
		code = ent_code;
	}
	if (!code) {
		cr_assert_geq(ent.syncfd, 0);
		cr_expect_eq(fsync(ent.syncfd), 0);
		close(ent.syncfd);
	}
	return code;
}

static int mkdir_(const char *name)
{
	return entry(cp_entry_mkdir(&ent, &lp, dirfd_, name, &made, ent_done));
}

static int link_(const char *name, const char *target, unsigned int flags)
{
	struct cp_time t = {1000000000, 5};

	return entry(cp_entry_symlink(&ent, &lp, dirfd_, name, target, &t, flags, ent_done));
}

static int symlink_(const char *name, const char *target, bool force)
{
	return link_(name, target, force ? CP_LINK_FORCE : 0);
}

static int dir_meta_(const char *name, uint32_t mode, int64_t sec, bool force)
{
	struct cp_time t = {sec, 123456789};
	int code =
		entry(cp_entry_dir_meta(&ent, &lp, dirfd_, name, mode, &t, &made, force, ent_done));

	left = ent.left;
	return code;
}

static int dir_meta(const char *name, uint32_t mode, int64_t sec)
{
	return dir_meta_(name, mode, sec, false);
}

Test(store, a_tree_is_made_with_its_modes_times_and_links)
{
	struct cp_time t = {1500000000, 987654321};
	struct cp_store st;
	char target[64] = "";
	struct stat sb;

	cr_assert_eq(mkdir_("top"), 0);
	cr_expect_eq(lstat_in("top").st_mode & 07777, 0700);
	cr_assert_eq(mkdir_("top"), 0, "an existing directory is used as it is");
	cr_assert_eq(mkdir_("top/sub"), 0);
	cr_assert_eq(symlink_("top/l", "sub/../../top/./f", false), 0);
	cr_assert_eq(readlinkat(dirfd_, "top/l", target, sizeof(target) - 1), 17);
	cr_expect_str_eq(target, "sub/../../top/./f", "the target is stored verbatim");
	sb = lstat_in("top/l");
	cr_expect(S_ISLNK(sb.st_mode));
	cr_expect_eq(sb.st_mtim.tv_sec, 1000000000);
	cr_expect_eq(sb.st_mtim.tv_nsec, 5);
	cr_expect_eq(symlink_("top/l", "x", false), CP_E_EXISTS);
	cr_assert_eq(symlink_("top/l", "x", true), 0, "--force replaces a link");
	cr_expect_eq(readlinkat(dirfd_, "top/l", target, sizeof(target) - 1), 1);
	cr_expect_eq(symlink_("top/sub", "x", true), CP_E_EXISTS, "never over a directory");
	cr_expect(S_ISDIR(lstat_in("top/sub").st_mode));
	/* A file's mode: permission bits less the umask, never setuid. */
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "top/f", 0, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_assert_eq(cp_store_meta(&st, 04777, &t, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_assert_eq(cp_store_commit(&st, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	sb = lstat_in("top/f");
	cr_expect_eq(sb.st_mode & 07777, 0777 & ~umask_now(), "mode %o", sb.st_mode & 07777);
	cr_expect_eq(sb.st_mtim.tv_sec, t.sec);
	cr_expect_eq(sb.st_mtim.tv_nsec, t.nsec);
	/* A directory's own, last: read-only, with an old time. */
	cr_assert_eq(dir_meta("top/sub", 0555, 1400000000), 0);
	cr_assert_eq(dir_meta("top", 0750, 1300000000), 0);
	sb = lstat_in("top");
	cr_expect_eq(sb.st_mode & 07777, 0750 & ~umask_now());
	cr_expect_eq(sb.st_mtim.tv_sec, 1300000000);
	cr_expect_eq(sb.st_mtim.tv_nsec, 123456789);
	cr_expect_eq(lstat_in("top/sub").st_mode & 07777, 0555 & ~umask_now());
	cr_expect_eq(mkdir_("top/f"), CP_E_EXISTS, "a file is no directory");
	cr_expect_eq(dir_meta("top/f", 0755, 1), CP_E_NAME);
}

/*
 * A link planted in DIR that leads out (or anywhere): no directory, link
 * or file is made through it, none replaces it, and the directory it
 * points to keeps its mode.
 */
Test(store, a_planted_link_is_never_followed_by_tree_entries)
{
	char out[64], link[128], in[128], probe[192];
	struct stat before, after;

	strcpy(out, "/tmp/rr-store-out.XXXXXX");
	cr_assert_not_null(mkdtemp(out));
	cr_assert_eq(stat(out, &before), 0);
	snprintf(link, sizeof(link), "%s/out", dir);
	cr_assert_eq(symlink(out, link), 0);
	cr_assert_eq(mkdir_("real"), 0);
	snprintf(in, sizeof(in), "%s/in", dir);
	cr_assert_eq(symlink("real", in), 0); /* even one that stays inside */

	cr_expect_eq(mkdir_("out/x"), CP_E_NAME);
	cr_expect_eq(mkdir_("in/x"), CP_E_NAME);
	cr_expect_eq(mkdir_("out"), CP_E_EXISTS, "a link is not an existing directory");
	cr_expect_eq(symlink_("out/l", "t", true), CP_E_NAME);
	cr_expect_eq(symlink_("out", "t", false), CP_E_EXISTS);
	cr_expect_eq(dir_meta("out", 0777, 1), CP_E_NAME);
	cr_expect_eq(dir_meta("in", 0777, 1), CP_E_NAME);
	cr_expect_eq(store("out/f", "x\n", false), CP_E_NAME);
	cr_assert_eq(stat(out, &after), 0);
	cr_expect_eq(after.st_mode, before.st_mode);
	cr_expect_eq(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
	cr_expect_eq(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
	snprintf(probe, sizeof(probe), "ls -A %s | wc -l | grep -qx 0", out);
	cr_expect_eq(system(probe), 0, "something was made in %s", out);
	cr_expect(S_ISLNK(lstat_in("out").st_mode));
	expect_entries("real", 0);
	rmdir(out);
}

/* CP_STORE_SAME: an existing regular file is reported, not refused (the
 * receiver compares contents); a directory still is. */
Test(store, same_reports_an_existing_file)
{
	struct cp_store st;
	char sub[128];

	cr_assert_eq(store("a", "one\n", false), 0);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "a", CP_STORE_SAME, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_expect(st.exists);
	cr_expect_eq(st.exist_size, 4);
	cp_store_abort(&st);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "b", CP_STORE_SAME, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_expect(!st.exists);
	cp_store_abort(&st);
	snprintf(sub, sizeof(sub), "%s/d", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "d", CP_STORE_SAME, on_done), 0);
	cr_expect_eq(await(calls + 1), CP_E_EXISTS);
	expect_entries("", 2);
}

/* Let the ring run what abort queued (a kept partial's fsync and close). */
static void settle(void)
{
	for (int i = 0; i < 5; i++)
		cr_assert_geq(cp_loop_pass(&lp, 20), 0);
}

/* A cut transfer's partial: kept with its bytes by abort, found again by
 * the next open (locked against a second one meanwhile), named by commit. */
Test(store, a_partial_is_kept_found_again_and_named)
{
	struct cp_store st, st2;

	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "p", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_expect_eq(st.partial_size, 0);
	cr_assert_eq(pwrite(st.fd, "hello ", 6, 0), 6);
	/* A second connection for the same name: busy, the partial untouched. */
	cr_assert_eq(cp_store_open(&st2, &lp, dirfd_, "p", CP_STORE_PARTIAL, on_done), 0);
	cr_expect_eq(await(calls + 1), CP_E_BUSY);
	cp_store_abort(&st);
	settle();
	expect_file(".p.rrcp-partial", "hello ");
	expect_entries("", 1);

	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "p", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_expect_eq(st.partial_size, 6);
	cr_assert_eq(pwrite(st.fd, "world\n", 6, 6), 6);
	cr_assert_eq(cp_store_commit(&st, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cp_store_abort(&st);
	expect_file("p", "hello world\n");
	expect_entries("", 1);
}

/*
 * Ranges of one file (protocol 8): each connection's store shares the one
 * partial and holds its own range alone; a whole-file receive or a commit
 * has to wait for every range to end; ranges land at their offsets.
 */
Test(store, ranges_share_one_partial_and_each_is_claimed_once)
{
	struct cp_store a, b, c, w;

	cr_assert_eq(cp_store_open_range(&a, &lp, dirfd_, "r", 0, 8, 8, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_assert_eq(cp_store_open_range(&b, &lp, dirfd_, "r", 0, 0, 8, on_done), 0);
	cr_assert_eq(await(calls + 1), 0, "another range of the same file: %s", b.why);
	/* Out of order: the second range first. */
	cr_assert_eq(pwrite(a.fd, "ranges!\n", 8, 8), 8);
	cr_assert_eq(pwrite(b.fd, "two sep ", 8, 0), 8);
	/* The same range again, or one overlapping it: busy, nothing written. */
	cr_assert_eq(cp_store_open_range(&c, &lp, dirfd_, "r", 0, 8, 8, on_done), 0);
	cr_expect_eq(await(calls + 1), CP_E_BUSY, "a range claimed twice");
	cr_expect(strstr(c.why, "receives this range"), "%s", c.why);
	cr_assert_eq(cp_store_open_range(&c, &lp, dirfd_, "r", 0, 4, 8, on_done), 0);
	cr_expect_eq(await(calls + 1), CP_E_BUSY, "an overlapping range");
	/* The whole file (a resume, or the commit's open) while ranges are held. */
	cr_assert_eq(cp_store_open(&w, &lp, dirfd_, "r", CP_STORE_PARTIAL, on_done), 0);
	cr_expect_eq(await(calls + 1), CP_E_BUSY, "the whole file while ranges are held");
	cp_store_abort(&a);
	cp_store_abort(&b);
	settle();
	expect_entries("", 1);
	/* Every range ended: the commit's open has the partial alone. */
	cr_assert_eq(cp_store_open(&w, &lp, dirfd_, "r", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_expect_eq(w.partial_size, 16);
	/* ... and no range gets it meanwhile. */
	cr_assert_eq(cp_store_open_range(&c, &lp, dirfd_, "r", 0, 0, 8, on_done), 0);
	cr_expect_eq(await(calls + 1), CP_E_BUSY, "a range while the file is committed");
	cr_assert_eq(cp_store_commit(&w, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cp_store_abort(&w);
	expect_file("r", "two sep ranges!\n");
	expect_entries("", 1);
}

/* A range needs a partial: a name too long for one is refused. */
Test(store, a_range_without_a_partial_name_is_refused)
{
	struct cp_store st;
	char name[NAME_MAX + 1];

	memset(name, 'n', CP_STORE_PART_MAX + 1);
	name[CP_STORE_PART_MAX + 1] = 0;
	cr_assert_eq(cp_store_open_range(&st, &lp, dirfd_, name, 0, 0, 4096, on_done), CP_E_NAME);
	expect_entries("", 0);
}

static mode_t mode_of(const char *name)
{
	struct stat sb;

	cr_assert_eq(fstatat(dirfd_, name, &sb, AT_SYMLINK_NOFOLLOW), 0, "%s", name);
	return sb.st_mode & 07777;
}

/* What is on its way is readable by the owner alone, a cut transfer's
 * partial too; the mode comes with cp_store_meta(), before the name. */
Test(store, a_file_is_private_until_its_mode_is_set)
{
	mode_t um = umask(022);
	struct cp_store st;

	umask(um);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "p", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_assert_eq(pwrite(st.fd, "secret", 6, 0), 6);
	cr_expect_eq(mode_of(".p.rrcp-partial"), 0600);
	cp_store_abort(&st);
	settle();
	cr_expect_eq(mode_of(".p.rrcp-partial"), 0600, "a kept partial stays private");

	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "p", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_assert_eq(cp_store_meta(&st, 0644, NULL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_assert_eq(cp_store_commit(&st, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cp_store_abort(&st);
	cr_expect_eq(mode_of("p"), 0644 & ~um);

	/* Without a partial: an O_TMPFILE, or a named temp file. */
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "q", 0, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_assert_eq(pwrite(st.fd, "x", 1, 0), 1);
	cr_assert_eq(cp_store_commit(&st, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cp_store_abort(&st);
	cr_expect_eq(mode_of("q"), 0600, "no mode given: the file stayed private");
}

/* A partial that failed its check goes (keep cleared); a symbolic link,
 * or a file with a second link, at its name is never written through:
 * the link goes and a new partial takes its place. */
Test(store, a_partial_is_dropped_or_replaced)
{
	struct cp_store st;
	char path[256], other[256];
	struct stat sb;

	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "p", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	st.keep = false;
	cp_store_abort(&st);
	settle();
	expect_entries("", 0);

	snprintf(path, sizeof(path), "%s/.q.rrcp-partial", dir);
	snprintf(other, sizeof(other), "%s/victim", dir);
	cr_assert_eq(symlink(other, path), 0);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "q", CP_STORE_PARTIAL, on_done), 0);
	cr_expect_eq(await(calls + 1), 0);
	cr_assert_eq(pwrite(st.fd, "x", 1, 0), 1);
	st.keep = false;
	cp_store_abort(&st);
	settle();
	cr_expect_neq(lstat(other, &sb), 0, "created through the symbolic link");
	cr_expect_neq(lstat(path, &sb), 0);

	cr_assert_eq(close(open(other, O_WRONLY | O_CREAT, 0600)), 0);
	cr_assert_eq(link(other, path), 0);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "q", CP_STORE_PARTIAL, on_done), 0);
	cr_expect_eq(await(calls + 1), 0);
	cr_assert_eq(pwrite(st.fd, "x", 1, 0), 1);
	cp_store_abort(&st);
	settle();
	cr_assert_eq(stat(other, &sb), 0);
	cr_expect_eq(sb.st_size, 0);
	cr_expect_eq(sb.st_nlink, 1);
}

/* The names of partials and temp files are the store's own: no sender
 * may make one, as a file, a directory or a link (issue 40: a partial
 * planted under such a name was adopted, or renamed over another's). */
Test(store, the_store_s_own_names_are_refused)
{
	cr_expect_eq(store(".big.rrcp-partial", "planted\n", false), CP_E_NAME);
	cr_expect_eq(store(".big.rrcp-0badf00d", "planted\n", true), CP_E_NAME);
	cr_expect_eq(mkdir_(".big.rrcp-partial"), CP_E_NAME);
	cr_expect_eq(symlink_(".big.rrcp-partial", "elsewhere", false), CP_E_NAME);
	cr_assert_eq(mkdir_("sub"), 0);
	cr_expect_eq(store("sub/.x.rrcp-partial", "planted\n", false), CP_E_NAME);
	expect_entries("", 1);
	/* Names that only look alike are anybody's. */
	cr_expect_eq(store("big.rrcp-partial", "fine\n", false), 0);
	cr_expect_eq(store(".big.rrcp-partial2", "fine\n", false), 0);
}

static void plant(const char *name, const char *text, mode_t mode)
{
	int fd = openat(dirfd_, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);

	cr_assert_geq(fd, 0, "%s: %s", name, strerror(errno));
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	cr_assert_eq(fchmod(fd, mode), 0);
	close(fd);
}

/* Whatever is found under a partial's name and is not a private regular
 * file of ours with one link is replaced by a fresh one, never adopted,
 * written through or left in the way. */
Test(store, a_planted_partial_is_replaced_never_adopted)
{
	struct cp_store st;
	char other[256];
	struct stat sb;

	plant(".big.rrcp-partial", "planted", 0644);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "big", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_expect_eq(st.partial_size, 0, "a world-readable partial was adopted");
	cr_expect_eq(mode_of(".big.rrcp-partial"), 0600);
	cp_store_abort(&st);
	settle();

	/* An empty directory there: removed, not in the way for good. */
	cr_assert_eq(mkdirat(dirfd_, ".d.rrcp-partial", 0755), 0);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "d", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_expect_eq(st.partial_size, 0);
	cr_expect_eq(mode_of(".d.rrcp-partial"), 0600);
	cp_store_abort(&st);
	settle();

	/* A link, symbolic or hard: the link goes, what it leads to stays. */
	snprintf(other, sizeof(other), "%s/victim", dir);
	plant("victim", "victim", 0644);
	cr_assert_eq(symlinkat(other, dirfd_, ".s.rrcp-partial"), 0);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "s", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_expect_eq(st.partial_size, 0);
	cr_expect_eq(mode_of(".s.rrcp-partial"), 0600);
	cp_store_abort(&st);
	settle();
	cr_assert_eq(linkat(dirfd_, "victim", dirfd_, ".h.rrcp-partial", 0), 0);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "h", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_expect_eq(st.partial_size, 0);
	cp_store_abort(&st);
	settle();
	cr_assert_eq(stat(other, &sb), 0);
	cr_expect_eq(sb.st_nlink, 1);
	expect_file("victim", "victim");
}

/* Commit names the file it wrote, whatever lies under the partial's
 * name by then. */
Test(store, commit_names_the_file_written_not_the_partial_s_name)
{
	struct cp_store st;

	for (int force = 0; force < 2; force++) {
		const char *name = force ? "y" : "x";
		char part[64], moved[64];

		snprintf(part, sizeof(part), ".%s.rrcp-partial", name);
		snprintf(moved, sizeof(moved), "moved-%s", name);
		cr_assert_eq(cp_store_open(&st, &lp, dirfd_, name,
					   CP_STORE_PARTIAL | (force ? CP_STORE_FORCE : 0),
					   on_done),
			     0);
		cr_assert_eq(await(calls + 1), 0);
		cr_assert_eq(pwrite(st.fd, "mine", 4, 0), 4);
		cr_assert_eq(renameat(dirfd_, part, dirfd_, moved), 0);
		plant(part, "theirs", 0600);
		cr_assert_eq(cp_store_commit(&st, on_done), 0);
		cr_assert_eq(await(calls + 1), 0);
		cp_store_abort(&st);
		settle();
		expect_file(name, "mine");
		expect_file(part, "theirs");
	}
}

/* Names longer than a partial's name can hold share no partial. */
Test(store, long_names_share_no_partial)
{
	char a[256], b[256];
	struct cp_store st;

	memset(a, 'n', 250);
	a[250] = 0;
	memcpy(b, a, sizeof(b));
	a[249] = 'a';
	b[249] = 'b';
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, a, CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_assert_eq(pwrite(st.fd, "aaa", 3, 0), 3);
	cp_store_abort(&st);
	settle();
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, b, CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	cr_expect_eq(st.partial_size, 0, "%s resumed %s's bytes", "b", "a");
	cp_store_abort(&st);
	settle();
}

/* Issue 40, proven 6: DIR_META set the mode and time of any directory
 * under DIR, an operator's included, without --force. */
Test(store, dir_meta_changes_only_directories_this_transfer_made)
{
	struct stat before;

	cr_assert_eq(mkdirat(dirfd_, "ops", 0755), 0);
	before = lstat_in("ops");
	cr_assert_eq(dir_meta("ops", 0777, 1), 0);
	cr_expect(left, "an operator's directory was changed");
	cr_expect_eq(lstat_in("ops").st_mode, before.st_mode);
	cr_expect_eq(lstat_in("ops").st_mtim.tv_sec, before.st_mtim.tv_sec);
	/* Used by a MKDIR, it still is not this transfer's. */
	cr_assert_eq(mkdir_("ops"), 0);
	cr_assert_eq(dir_meta("ops", 0, 1), 0);
	cr_expect_eq(lstat_in("ops").st_mode, before.st_mode);
	/* One it made: set. --force: any. */
	cr_assert_eq(mkdir_("new"), 0);
	cr_assert_eq(dir_meta("new", 0750, 7), 0);
	cr_expect_not(left);
	cr_expect_eq(lstat_in("new").st_mode & 07777, 0750 & ~umask_now());
	cr_assert_eq(dir_meta_("ops", 0700, 7, true), 0);
	cr_expect_eq(lstat_in("ops").st_mode & 07777, 0700);
}

/* Issue 40, proven 7: link targets were stored as sent, absolute ones
 * included, and with --force a link replaced a file. */
Test(store, links_stay_inside_dir_and_never_replace_a_file)
{
	char target[64] = "";

	cr_assert_eq(mkdir_("top"), 0);
	cr_expect_eq(link_("abs", "/etc/passwd", 0), CP_E_NAME);
	cr_expect_eq(link_("top/up2", "../../x", 0), CP_E_NAME);
	cr_expect_eq(link_("dd", "a/../../x", 0), CP_E_NAME);
	cr_expect_eq(link_("top/deep", "./../top/../../x", 0), CP_E_NAME);
	expect_entries("", 1);
	cr_expect_eq(link_("top/up1", "../x", 0), 0, "top/../x is in DIR");
	cr_expect_eq(link_("top/in", "a/b/../c", 0), CP_E_NAME, "top/a could be made a link");
	cr_assert_eq(mkdir_("top/a"), 0);
	cr_assert_eq(mkdir_("top/a/b"), 0);
	cr_expect_eq(link_("top/in", "a/b/../c", 0), 0, "through directories only");
	cr_expect_eq(link_("abs", "/etc/passwd", CP_LINK_ANYWHERE), 0, "unless asked for");
	cr_assert_eq(readlinkat(dirfd_, "abs", target, sizeof(target) - 1), 11);
	/* Forced: over a link, never over a file. */
	cr_assert_eq(store("f", "file\n", false), 0);
	cr_expect_eq(link_("f", "top", CP_LINK_FORCE), CP_E_EXISTS);
	expect_file("f", "file\n");
	cr_expect_eq(link_("top/in", "c", CP_LINK_FORCE), 0);
}

/*
 * Issue 49, proven P1: the ".." of a target were counted in its text,
 * but the kernel follows each part before them, which may be a link a
 * token holder stored just before: l1 -> . passed, l2 -> l1/.. passed
 * and was DIR's parent. Whatever a ".." follows must be a directory
 * beneath DIR now, never a link or a name not there yet.
 */
Test(store, a_target_never_leaves_dir_through_another_link)
{
	char deep[256] = "", up[128] = "", esc[512] = "up";
	int fd;

	cr_expect_eq(link_("l1", ".", 0), 0, "l1 is DIR itself");
	cr_expect_eq(link_("l2", "l1/..", 0), CP_E_NAME, "DIR's parent through l1");
	cr_expect_eq(link_("l3", "l1/x", 0), 0, "no \"..\" after l1");
	/* The other order: a name that is not there yet, made a link later. */
	cr_expect_eq(link_("l4", "later/..", 0), CP_E_NAME);
	cr_expect_eq(link_("later", ".", 0), 0);
	/* 16 levels down: up is DIR, then esc climbs 16 more from it. */
	for (int i = 0; i < 16; i++) {
		snprintf(deep + strlen(deep), sizeof(deep) - strlen(deep), "%sd", i ? "/" : "");
		cr_assert_eq(mkdir_(deep), 0);
		snprintf(up + strlen(up), sizeof(up) - strlen(up), "%s..", i ? "/" : "");
		strcat(esc, "/..");
	}
	strcat(esc, "/etc/passwd");
	strcat(deep, "/up");
	cr_expect_eq(link_(deep, up, 0), 0, "up is DIR");
	strcpy(strrchr(deep, '/'), "/esc");
	cr_expect_eq(link_(deep, esc, 0), CP_E_NAME, "esc leads out through up");
	cr_expect_eq(link_(deep, "../../../../../../../../../../../../../../../../../x", 0),
		     CP_E_NAME, "17 up from 16 down");
	/* Whatever got stored resolves beneath DIR. */
	fd = openat(dirfd_, "l2", O_RDONLY | O_PATH | O_CLOEXEC);
	cr_expect_lt(fd, 0, "l2 was stored");
	if (fd >= 0)
		close(fd);
	cr_expect_lt(faccessat(dirfd_, deep, F_OK, AT_SYMLINK_NOFOLLOW), 0, "esc was stored");
}

/* Is a temporary name of the link @base's in DIR? */
static bool tmp_of(const char *base)
{
	char pre[64];
	struct dirent *de;
	bool found = false;
	DIR *d = opendir(dir);

	cr_assert_not_null(d);
	snprintf(pre, sizeof(pre), ".%s.rrcp-", base);
	while ((de = readdir(d)))
		found |= !strncmp(de->d_name, pre, strlen(pre));
	closedir(d);
	return found;
}

/*
 * Issue 49: under --force a link replaced only another link, but the name
 * was checked to be one and then renamed over without a second look: a
 * file another token holder committed there in between was replaced by
 * the link. Here that file comes (renamed over the old link, as a forced
 * store commits) once the new link's temporary name exists, before its
 * rename was submitted (one loop pass at a time). It must stay; the link
 * is refused.
 */
Test(store, a_forced_link_never_replaces_a_file_committed_meanwhile)
{
	struct cp_time t = {1000000000, 5};
	char path[128], tmp[128];
	bool planted = false;
	int code, fd;

	cr_assert_eq(link_("l", "old", 0), 0);
	ent_calls = 0;
	code = cp_entry_symlink(&ent, &lp, dirfd_, "l", "new", &t, CP_LINK_FORCE, ent_done);
	cr_assert_eq(code, 0);
	for (int i = 0; i < 200 && !ent_calls; i++) {
		cr_assert_geq(cp_loop_pass(&lp, 10), 0);
		if (!planted && tmp_of("l")) {
			snprintf(tmp, sizeof(tmp), "%s/l.theirs", dir);
			snprintf(path, sizeof(path), "%s/l", dir);
			fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
			cr_assert_geq(fd, 0);
			cr_assert_eq(write(fd, "theirs\n", 7), 7);
			close(fd);
			cr_assert_eq(rename(tmp, path), 0);
			planted = true;
		}
	}
	cr_assert(planted, "the link never had a temporary name");
	cr_assert_eq(ent_calls, 1);
	if (!ent_code) {
		fsync(ent.syncfd);
		close(ent.syncfd);
	}
	cr_expect_eq(ent_code, CP_E_EXISTS, "code %d: %s", ent_code, ent.why);
	cr_expect(S_ISREG(lstat_in("l").st_mode), "the file committed meanwhile was replaced");
	expect_file("l", "theirs\n");
	cr_expect(!tmp_of("l"), "a temporary name is left");
}

static void aged(const char *name, int64_t sec)
{
	struct timespec ts[2] = {{.tv_sec = sec}, {.tv_sec = sec}};

	cr_assert_eq(utimensat(dirfd_, name, ts, AT_SYMLINK_NOFOLLOW), 0, "%s", name);
}

/* Issue 40: partials never expired. Old ones of ours go at serve's
 * start; new ones, other files, links and locked ones stay. */
Test(store, stale_partials_expire)
{
	struct cp_store st;
	unsigned int removed = 9;
	int64_t now = 2000000000;

	cr_assert_eq(mkdir_("sub"), 0);
	plant(".old.rrcp-partial", "x", 0600);
	plant("sub/.old2.rrcp-partial", "x", 0600);
	plant(".new.rrcp-partial", "x", 0600);
	plant("old-file", "x", 0600);
	cr_assert_eq(symlinkat("old-file", dirfd_, ".l.rrcp-partial"), 0);
	cr_assert_eq(cp_store_open(&st, &lp, dirfd_, "held", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	for (const char *const *n =
		     (const char *const[]){".old.rrcp-partial", "sub/.old2.rrcp-partial",
					   "old-file", ".l.rrcp-partial", ".held.rrcp-partial",
					   NULL};
	     *n; n++)
		aged(*n, now - 8 * 86400);
	aged(".new.rrcp-partial", now - 3600);
	cr_assert_eq(cp_store_expire(dirfd_, 7 * 86400, now, &removed), 0);
	cr_expect_eq(removed, 2);
	cr_expect_neq(faccessat(dirfd_, ".old.rrcp-partial", F_OK, AT_SYMLINK_NOFOLLOW), 0);
	cr_expect_neq(faccessat(dirfd_, "sub/.old2.rrcp-partial", F_OK, AT_SYMLINK_NOFOLLOW), 0);
	cr_expect_eq(faccessat(dirfd_, ".new.rrcp-partial", F_OK, AT_SYMLINK_NOFOLLOW), 0);
	cr_expect_eq(faccessat(dirfd_, "old-file", F_OK, AT_SYMLINK_NOFOLLOW), 0);
	cr_expect_eq(faccessat(dirfd_, ".l.rrcp-partial", F_OK, AT_SYMLINK_NOFOLLOW), 0);
	cr_expect_eq(faccessat(dirfd_, ".held.rrcp-partial", F_OK, AT_SYMLINK_NOFOLLOW), 0,
		     "a partial being received went");
	cp_store_abort(&st);
	settle();
}

/* Another host's range of a file (on NFS, say): its description holds
 * the partial shared, an OFD read lock over the hold's byte. The hold is
 * that lock alone (no flock(), which such file systems turn into a lock
 * over the whole file), so a whole file and an expiry here wait for it,
 * and a whole file held here keeps that host's range out. */
Test(store, a_partial_is_held_by_byte_range_locks_alone)
{
	struct flock fl = {.l_type = F_RDLCK,
			   .l_whence = SEEK_SET,
			   .l_start = (off_t)CP_RANGE_HOLD_OFF,
			   .l_len = 1};
	int64_t now = 2000000000;
	unsigned int removed = 9;
	struct cp_store w;
	int fd;

	plant(".h.rrcp-partial", "x", 0600);
	fd = openat(dirfd_, ".h.rrcp-partial", O_RDWR | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fcntl(fd, F_OFD_SETLK, &fl), 0);
	cr_assert_eq(cp_store_open(&w, &lp, dirfd_, "h", CP_STORE_PARTIAL, on_done), 0);
	cr_expect_eq(await(calls + 1), CP_E_BUSY, "a whole file while another's range is held");
	aged(".h.rrcp-partial", now - 8 * 86400);
	cr_assert_eq(cp_store_expire(dirfd_, 7 * 86400, now, &removed), 0);
	cr_expect_eq(removed, 0, "a held partial expired");
	close(fd);
	cr_assert_eq(cp_store_open(&w, &lp, dirfd_, "h", CP_STORE_PARTIAL, on_done), 0);
	cr_assert_eq(await(calls + 1), 0);
	fd = openat(dirfd_, ".h.rrcp-partial", O_RDWR | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_expect_eq(fcntl(fd, F_OFD_SETLK, &fl), -1,
		     "another's range while the file is held whole");
	cr_expect(errno == EAGAIN || errno == EACCES, "%s", strerror(errno));
	close(fd);
	cp_store_abort(&w);
	settle();
}
