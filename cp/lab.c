// SPDX-License-Identifier: MIT
/*
 * tools/cp-lab [--hosts 1|2] [OPTIONS] FILE... DIR: the checkout's
 * ringrdma-cp serves --dir DIR and is sent FILE..., where RDMA works.
 * Built as ringrdma-cp-lab and never installed: it knows the checkout
 * (labhost) and the ringrdma-cp built next to it (RR_CP_EXE).
 *
 * On the host with no RDMA device this boots tools/rdma-lab and runs
 * itself again inside, where RDMA_LAB is set; there (or next to a real
 * device) it starts serve (here, or on the second VM through --peer-cmd),
 * waits until it listens and runs send. The lab shares the checkout
 * writable at its own path, the host root read-only and gives each VM its
 * own /tmp, so DIR must lie in the checkout and no FILE in the host's /tmp.
 * Serve's output and the JSON summary go through a stage directory in the
 * checkout, which both VMs and the host see.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cp.h"
#include "labhost.h"

#define LAB_PROG "cp-lab"

#define LAB_PORT      7539
#define LAB_TIMEOUT_S "3600"
#define LISTEN_WAIT_S 120
#define SERVE_WAIT_S  30

struct lab {
	int hosts;
	const char *json;
	/* options handed on: to send only, and to both (with their values) */
	const char *fwd_both[16];
	int nboth;
	const char *as;
	bool force, quiet;
	char **files;
	int nfiles;
	const char *dir;
	char self[PATH_MAX];
	const char *cp; /* the built ringrdma-cp */
	char stage[PATH_MAX];
	bool own_stage;
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, LAB_PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* 'S' for bash -c, whatever S holds. */
static int shq(char *out, size_t len, const char *s)
{
	size_t n = 0;

	if (len < 3)
		return -ENAMETOOLONG;
	out[n++] = '\'';
	for (; *s; s++) {
		const char *piece = *s == '\'' ? "'\\''" : NULL;
		size_t pl = piece ? 4 : 1;

		if (n + pl + 2 > len)
			return -ENAMETOOLONG;
		if (piece)
			memcpy(out + n, piece, pl);
		else
			out[n] = *s;
		n += pl;
	}
	out[n++] = '\'';
	out[n] = 0;
	return 0;
}

static bool under(const char *path, const char *root)
{
	size_t l = strlen(root);

	return !strncmp(path, root, l) && (path[l] == '/' || path[l] == 0);
}

/* What the lab can see: refuse before booting it, not after. */
static int check_paths(const struct lab *l)
{
	char root[PATH_MAX], real[PATH_MAX];
	struct stat sb;

	if (!realpath(labhost_root(), root)) {
		say("%s: %s", labhost_root(), strerror(errno));
		return CP_EXIT_FAIL;
	}
	if (!realpath(l->dir, real) || stat(real, &sb) || !S_ISDIR(sb.st_mode)) {
		say("%s: not a directory", l->dir);
		return CP_EXIT_LOCAL_IO;
	}
	if (!under(real, root)) {
		say("DIR %s is outside the checkout %s.\n"
		    "  The lab's VMs may write only there (the rest of the host is read-only in\n"
		    "  them): give a DIR inside it, e.g. %s/out, and move the files afterwards",
		    l->dir, root, root);
		return CP_EXIT_USAGE;
	}
	for (int i = 0; i < l->nfiles; i++) {
		const char *f = l->files[i];

		if (!realpath(f, real) || stat(real, &sb)) {
			say("%s: %s", f, strerror(errno));
			return CP_EXIT_LOCAL_IO;
		}
		if (!S_ISREG(sb.st_mode)) {
			say("%s: not a regular file", f);
			return CP_EXIT_LOCAL_IO;
		}
		if (!under(real, root) && (under(real, "/tmp") || under(real, "/run"))) {
			say("%s is under the host's %s, which the lab's VMs do not see (they have\n"
			    "  their own): put it in the checkout %s or elsewhere",
			    f, under(real, "/tmp") ? "/tmp" : "/run", root);
			return CP_EXIT_USAGE;
		}
	}
	return 0;
}

static void stage_path(const struct lab *l, char *out, size_t len, const char *name)
{
	snprintf(out, len, "%s/%s", l->stage, name);
}

static void clean_stage(const struct lab *l)
{
	static const char *const names[] = {"serve.out", "serve.err", "serve.rc", "serve.rc.tmp",
					    "send.json"};
	char p[PATH_MAX + 32];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		stage_path(l, p, sizeof(p), names[i]);
		unlink(p);
	}
	rmdir(l->stage);
}

static int run_wait(char **av)
{
	int st;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		execv(av[0], av);
		fprintf(stderr, LAB_PROG ": cannot run %s: %s\n", av[0], strerror(errno));
		_exit(127);
	}
	if (pid < 0)
		return -errno;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The host side: boot the lab and run this command again inside. */
/* serve checks a token only when given one; the lab's network is its own. */
static const char *serve_auth(const struct lab *l)
{
	for (int i = 0; i < l->nboth; i++)
		if (!strcmp(l->fwd_both[i], "--token-file"))
			return NULL;
	return "--no-auth";
}

static int boot(struct lab *l, int argc, char **argv)
{
	char tool[PATH_MAX], peer[4 * PATH_MAX], q[3][2 * PATH_MAX], json[PATH_MAX + 32],
		env_stage[PATH_MAX + 32], env_port[48], from[PATH_MAX + 32];
	char **av = calloc((size_t)argc + 24, sizeof(char *));
	int n = 0, rc, port = 20000 + (int)(getpid() % 20000);
	size_t pl;

	if (!av)
		return CP_EXIT_FAIL;
	if (labhost_tool(tool, sizeof(tool))) {
		say("no RDMA device and no lab: %s is missing; run from a ringrdma checkout", tool);
		rc = CP_EXIT_FAIL;
		goto out;
	}
	rc = check_paths(l);
	if (rc)
		goto out;
	snprintf(l->stage, sizeof(l->stage), "%s/.cp-lab.XXXXXX", labhost_root());
	if (!mkdtemp(l->stage)) {
		say("cannot create a stage directory in %s: %s", labhost_root(), strerror(errno));
		rc = CP_EXIT_LOCAL_IO;
		goto out;
	}
	snprintf(env_stage, sizeof(env_stage), "RR_CP_LAB_STAGE=%s", l->stage);
	snprintf(env_port, sizeof(env_port), "RR_CP_LAB_PORT=%d", port);
	av[n++] = tool;
	av[n++] = "run";
	av[n++] = "--timeout";
	av[n++] = LAB_TIMEOUT_S;
	if (l->hosts == 2) {
		/* Serve on the second VM; its output and status land in the stage. */
		if (shq(q[0], sizeof(q[0]), l->cp) || shq(q[1], sizeof(q[1]), l->dir) ||
		    shq(q[2], sizeof(q[2]), l->stage)) {
			say("path too long");
			rc = CP_EXIT_USAGE;
			goto out_stage;
		}
		pl = (size_t)snprintf(peer, sizeof(peer),
				      "%s serve --listen \"$RDMA_LAB_ADDR:%d\" --dir %s --count 1",
				      q[0], port, q[1]);
		if (serve_auth(l))
			pl += (size_t)snprintf(peer + pl, sizeof(peer) - pl, " %s", serve_auth(l));
		if (l->force)
			pl += (size_t)snprintf(peer + pl, sizeof(peer) - pl, " --force");
		for (int i = 0; i < l->nboth && pl < sizeof(peer); i++) {
			char a[2 * PATH_MAX];

			if (shq(a, sizeof(a), l->fwd_both[i])) {
				pl = sizeof(peer);
				break;
			}
			pl += (size_t)snprintf(peer + pl, sizeof(peer) - pl, " %s", a);
		}
		if (pl < sizeof(peer))
			pl += (size_t)snprintf(
				peer + pl, sizeof(peer) - pl,
				" >%s/serve.out 2>%s/serve.err; echo $? >%s/serve.rc.tmp"
				" && mv %s/serve.rc.tmp %s/serve.rc",
				q[2], q[2], q[2], q[2], q[2]);
		if (pl >= sizeof(peer)) {
			say("command line too long");
			rc = CP_EXIT_USAGE;
			goto out_stage;
		}
		av[n++] = "--hosts";
		av[n++] = "2";
		av[n++] = "--peer-cmd";
		av[n++] = peer;
	}
	av[n++] = "--";
	av[n++] = "env";
	av[n++] = env_stage;
	av[n++] = env_port;
	av[n++] = l->self;
	if (l->hosts == 2) {
		av[n++] = "--hosts";
		av[n++] = "2";
	}
	if (l->json) {
		snprintf(json, sizeof(json), "--json=%s/send.json", l->stage);
		av[n++] = json;
	}
	if (l->as) {
		av[n++] = "--as";
		av[n++] = (char *)l->as;
	}
	if (l->quiet)
		av[n++] = "--quiet";
	for (int i = 0; i < l->nboth; i++)
		av[n++] = (char *)l->fwd_both[i];
	if (l->force)
		av[n++] = "--force";
	av[n++] = "--";
	for (int i = 0; i < l->nfiles; i++)
		av[n++] = l->files[i];
	av[n++] = (char *)l->dir;
	av[n] = NULL;
	(void)argv;
	say("booting the RDMA lab (Soft-RoCE under QEMU%s)",
	    l->hosts == 2 ? ", two VMs: serve on the second" : ", one VM");
	rc = run_wait(av);
	if (rc < 0) {
		say("cannot run %s: %s", tool, strerror(-rc));
		rc = CP_EXIT_FAIL;
	} else if (rc == 124 || rc == 125) {
		say("the lab itself failed (tools/rdma-lab exit %d)", rc);
	}
	if (l->json) {
		int e;

		stage_path(l, from, sizeof(from), "send.json");
		e = access(from, F_OK) ? 0 : labhost_copy_file(from, l->json);
		if (e) {
			say("%s: %s", l->json, strerror(-e));
			rc = rc ? rc : CP_EXIT_LOCAL_IO;
		}
	}
out_stage:
	clean_stage(l);
out:
	free(av);
	return rc;
}

static bool file_has(const char *path, const char *what)
{
	char line[512];
	bool found = false;
	FILE *f = fopen(path, "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

static void show(const struct lab *l, const char *name)
{
	char p[PATH_MAX + 32], line[1024];
	FILE *f;

	stage_path(l, p, sizeof(p), name);
	f = fopen(p, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		printf("  [serve] %s", line);
	fclose(f);
}

static pid_t start_serve(struct lab *l, const char *addr, int port)
{
	char listen[300], p[PATH_MAX + 32];
	const char *av[40];
	int n = 0;
	pid_t pid;

	snprintf(listen, sizeof(listen), "%s:%d", addr, port);
	av[n++] = l->cp;
	av[n++] = "serve";
	av[n++] = "--listen";
	av[n++] = listen;
	av[n++] = "--dir";
	av[n++] = l->dir;
	av[n++] = "--count";
	av[n++] = "1";
	if (serve_auth(l))
		av[n++] = serve_auth(l);
	if (l->force)
		av[n++] = "--force";
	for (int i = 0; i < l->nboth; i++)
		av[n++] = l->fwd_both[i];
	av[n] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int fd;

		stage_path(l, p, sizeof(p), "serve.out");
		fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0)
			dup2(fd, 1);
		stage_path(l, p, sizeof(p), "serve.err");
		fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		execv(av[0], (char **)av);
		_exit(127);
	}
	return pid;
}

/* serve's exit status: from our child, or from the peer VM's serve.rc. */
static int serve_status(const struct lab *l, pid_t pid, bool block)
{
	char p[PATH_MAX + 32];
	int st;

	if (pid > 0) {
		pid_t r = waitpid(pid, &st, block ? 0 : WNOHANG);

		if (r <= 0)
			return -1;
		return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
	stage_path(l, p, sizeof(p), "serve.rc");
	FILE *f = fopen(p, "re");

	if (!f)
		return -1;
	if (fscanf(f, "%d", &st) != 1)
		st = -1;
	fclose(f);
	return st;
}

/* Inside the lab, or next to a real device: serve, send, report. */
static int inside(struct lab *l, const char *addr)
{
	const char *env = getenv("RR_CP_LAB_STAGE"), *penv = getenv("RR_CP_LAB_PORT");
	const char *av[40];
	char out[PATH_MAX + 32], to[300];
	int port = penv ? atoi(penv) : LAB_PORT, n = 0, send_rc, serve_rc = -1;
	uint64_t bytes = 0;
	pid_t pid = -1;
	struct stat sb;

	if (env) {
		snprintf(l->stage, sizeof(l->stage), "%s", env);
	} else {
		snprintf(l->stage, sizeof(l->stage), "/tmp/rrcp-lab.XXXXXX");
		if (!mkdtemp(l->stage)) {
			say("mkdtemp: %s", strerror(errno));
			return CP_EXIT_LOCAL_IO;
		}
		l->own_stage = true;
	}
	if (l->hosts == 2) {
		addr = getenv("RDMA_LAB_PEER_ADDR");
		if (!addr || !*addr) {
			say("--hosts 2 needs the lab's second VM (run it on the host, not inside)");
			send_rc = CP_EXIT_USAGE;
			goto out;
		}
	} else {
		pid = start_serve(l, addr, port);
		if (pid < 0) {
			say("fork: %s", strerror(errno));
			send_rc = CP_EXIT_FAIL;
			goto out;
		}
	}
	stage_path(l, out, sizeof(out), "serve.out");
	for (int i = 0; !file_has(out, "listening"); i++) {
		serve_rc = serve_status(l, pid, false);
		if (serve_rc >= 0 || i == LISTEN_WAIT_S * 10) {
			say("serve did not start listening%s", serve_rc >= 0 ? "" : " in time");
			show(l, "serve.out");
			show(l, "serve.err");
			send_rc = serve_rc > 0 ? serve_rc : CP_EXIT_FAIL;
			if (pid > 0 && serve_rc < 0) {
				kill(pid, SIGTERM);
				serve_status(l, pid, true);
			}
			goto out;
		}
		sleep_ms(100);
	}
	snprintf(to, sizeof(to), "%s:%d", addr, port);
	av[n++] = l->cp;
	av[n++] = "send";
	if (l->json) {
		av[n++] = "--json";
		av[n++] = l->json;
	}
	if (l->as) {
		av[n++] = "--as";
		av[n++] = l->as;
	}
	if (l->quiet)
		av[n++] = "--quiet";
	for (int i = 0; i < l->nboth; i++)
		av[n++] = l->fwd_both[i];
	av[n++] = "--";
	av[n] = NULL;
	/* FILE... and ADDR:PORT follow; the array grows with the file count. */
	{
		char **full = calloc((size_t)(n + l->nfiles + 2), sizeof(char *));

		if (!full) {
			send_rc = CP_EXIT_FAIL;
			goto out_serve;
		}
		memcpy(full, av, (size_t)n * sizeof(char *));
		for (int i = 0; i < l->nfiles; i++)
			full[n + i] = l->files[i];
		full[n + l->nfiles] = to;
		send_rc = run_wait(full);
		free(full);
	}
	if (send_rc < 0)
		send_rc = CP_EXIT_FAIL;
out_serve:
	/* With --count 1 serve ends after the connection; if send never got
	 * through, it would wait for another one. */
	for (int i = 0; (serve_rc = serve_status(l, pid, false)) < 0; i++) {
		if (i == (send_rc ? 20 : SERVE_WAIT_S * 10)) {
			if (pid > 0) {
				kill(pid, SIGTERM);
				serve_rc = serve_status(l, pid, true);
			}
			break;
		}
		sleep_ms(100);
	}
	show(l, "serve.out");
	show(l, "serve.err");
	for (int i = 0; i < l->nfiles; i++)
		if (!stat(l->files[i], &sb))
			bytes += (uint64_t)sb.st_size;
	if (send_rc == 0)
		printf(LAB_PROG ": copied %d file%s, %llu bytes, into %s over %s (%s); "
				"serve exit %d\n",
		       l->nfiles, l->nfiles == 1 ? "" : "s", (unsigned long long)bytes, l->dir, to,
		       getenv("RDMA_LAB") ? (l->hosts == 2 ? "lab, two VMs" : "lab, one VM")
					  : "local RDMA device",
		       serve_rc);
	else
		printf(LAB_PROG ": send failed with exit %d; serve exit %d; see above\n", send_rc,
		       serve_rc);
out:
	if (l->own_stage)
		clean_stage(l);
	return send_rc;
}

static const struct option lab_opts[] = {
	{"hosts", required_argument, NULL, 'H'},
	{"json", required_argument, NULL, 'j'},
	{"as", required_argument, NULL, 'a'},
	{"quiet", no_argument, NULL, 'q'},
	{"force", no_argument, NULL, 'f'},
	/* handed to both serve and send, which check the values */
	{"chunk", required_argument, NULL, 'B'},
	{"window", required_argument, NULL, 'B'},
	{"token-file", required_argument, NULL, 'B'},
	{"timeout", required_argument, NULL, 'B'},
	{NULL, 0, NULL, 0},
};

static const char *const both_names[] = {"--chunk", "--window", "--token-file", "--timeout"};

static void usage(FILE *f)
{
	fputs("usage: tools/cp-lab [--hosts 1|2] [OPTIONS] FILE... DIR\n"
	      "Copy FILEs into DIR with the checkout's ringrdma-cp (serve --dir DIR, then\n"
	      "send), where RDMA works: on the local RDMA device if there is one, else in\n"
	      "the lab (tools/rdma-lab, Soft-RoCE under QEMU), where DIR must lie inside\n"
	      "the checkout.\n"
	      "  --hosts 2            serve on a second lab VM\n"
	      "  --json FILE          send's summary\n"
	      "  --as NAME, --force, --quiet             as for ringrdma-cp send/serve\n"
	      "  --chunk, --window, --token-file, --timeout   handed to both ends\n"
	      "Exit status: send's (see ringrdma-cp(1)); 124 if the lab timed out, 125 if\n"
	      "the lab itself failed.\n",
	      f);
}

int main(int argc, char **argv)
{
	struct lab *l = calloc(1, sizeof(*l));
	char dev[256];
	ssize_t sl;
	int opt, rc, idx = 0;

	if (!l)
		return CP_EXIT_FAIL;
	l->hosts = 1;
	l->cp = RR_CP_EXE;
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		rc = 0;
		goto out;
	}
	while ((opt = getopt_long(argc, argv, "", lab_opts, &idx)) != -1) {
		switch (opt) {
		case 'H':
			if (strcmp(optarg, "1") && strcmp(optarg, "2")) {
				say("--hosts wants 1 or 2");
				rc = CP_EXIT_USAGE;
				goto out;
			}
			l->hosts = optarg[0] - '0';
			break;
		case 'j':
			l->json = optarg;
			break;
		case 'a':
			l->as = optarg;
			break;
		case 'q':
			l->quiet = true;
			break;
		case 'f':
			l->force = true;
			break;
		case 'B':
			if (l->nboth > 14) {
				say("too many options");
				rc = CP_EXIT_USAGE;
				goto out;
			}
			l->fwd_both[l->nboth++] = both_names[idx - 5];
			l->fwd_both[l->nboth++] = optarg;
			break;
		default:
			usage(stderr);
			rc = CP_EXIT_USAGE;
			goto out;
		}
	}
	if (argc - optind < 2) {
		say("needs FILE... and DIR");
		usage(stderr);
		rc = CP_EXIT_USAGE;
		goto out;
	}
	l->files = argv + optind;
	l->nfiles = argc - optind - 1;
	l->dir = argv[argc - 1];
	sl = readlink("/proc/self/exe", l->self, sizeof(l->self) - 1);
	if (sl < 0) {
		say("/proc/self/exe: %s", strerror(errno));
		rc = CP_EXIT_FAIL;
		goto out;
	}
	l->self[sl] = 0;
	if (access(l->cp, X_OK)) {
		say("%s: %s (build it: meson compile -C BUILD)", l->cp, strerror(errno));
		rc = CP_EXIT_FAIL;
		goto out;
	}
	if (getenv("RDMA_LAB")) {
		const char *a = getenv("RDMA_LAB_ADDR");

		rc = inside(l, a && *a ? a : "192.0.2.1");
		goto out;
	}
	if (l->hosts == 1 && labhost_device_addr(dev, sizeof(dev)) == 0) {
		printf(LAB_PROG ": using the local RDMA device at %s, no lab needed\n", dev);
		rc = inside(l, dev);
		goto out;
	}
	rc = boot(l, argc, argv);
out:
	free(l);
	return rc;
}
