// SPDX-License-Identifier: MIT
/* ringrdma-cp send FILE... ADDR:PORT: every file over one connection, in order. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "progress.h"
#include "tx.h"

#define RING_ENTRIES 512

struct sender {
	struct cp_loop lp;
	const struct cp_opts *o;
	struct tx *t;
	int next_file;
	int fd; /* the file being sent */
	uint64_t total, files, bytes, last_sum, chunks;
	struct cp_progress prog;
	int result;
	char msg[256];
};

static bool next_file(struct tx *t, struct tx_src *src, void *data)
{
	struct sender *s = data;
	const char *path, *base;
	struct stat sb;

	if (s->fd >= 0)
		close(s->fd); /* its FILE_DONE came: no read of it is in flight */
	s->fd = -1;
	if (s->next_file == s->o->nfiles)
		return false;
	path = s->o->files[s->next_file++];
	s->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (s->fd < 0 || fstat(s->fd, &sb)) {
		snprintf(s->msg, sizeof(s->msg), "cannot open %s: %s", path, strerror(errno));
		tx_abort(t, CP_EXIT_LOCAL_IO, s->msg);
		return false;
	}
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	src->fd = s->fd;
	src->size = (uint64_t)sb.st_size;
	src->label = path;
	snprintf(src->name, sizeof(src->name), "%s", s->o->as ? s->o->as : base);
	return true;
}

static void file_done(struct tx *t, const struct tx_src *src, uint64_t bytes, uint64_t sum,
		      void *data)
{
	char l[CP_ESC_LEN(256)], n[CP_ESC_LEN(CP_NAME_MAX)];
	struct sender *s = data;

	s->files++;
	s->chunks = tx_chunks(t);
	s->bytes += bytes;
	s->last_sum = sum;
	if (!s->o->quiet) {
		cp_progress_update(&s->prog, tx_bytes(t), false);
		if (s->prog.drawn)
			fputs("\r\033[K", stderr);
		printf(CP_PROG ": sent %s as %s: %llu bytes, xxh3 %016llx\n",
		       cp_esc(src->label, l, sizeof(l)), cp_esc(src->name, n, sizeof(n)),
		       (unsigned long long)bytes, (unsigned long long)sum);
		fflush(stdout);
	}
}

static void send_poll(struct cp_loop *lp)
{
	struct sender *s = (struct sender *)lp;

	if (!s->t)
		return;
	if (tx_poll(s->t, &s->result, s->msg, sizeof(s->msg)) == TX_ENDED) {
		s->t = NULL;
		lp->stop = true;
		return;
	}
	if (!s->o->quiet)
		cp_progress_update(&s->prog, tx_bytes(s->t), false);
}

static void send_signal(struct cp_loop *lp, int signo)
{
	struct sender *s = (struct sender *)lp;

	if (s->t)
		tx_abort(s->t, CP_EXIT_INTERRUPTED, "sender interrupted");
}

/* Every file must be a readable regular file before anything moves. */
static int check_files(struct sender *s)
{
	for (int i = 0; i < s->o->nfiles; i++) {
		const char *path = s->o->files[i];
		struct stat sb;

		if (stat(path, &sb) || access(path, R_OK))
			snprintf(s->msg, sizeof(s->msg), "%s: %s", path, strerror(errno));
		else if (!S_ISREG(sb.st_mode))
			snprintf(s->msg, sizeof(s->msg), "%s: not a regular file", path);
		if (s->msg[0]) {
			cp_log("send: %s", s->msg); /* and in --json */
			return CP_EXIT_LOCAL_IO;
		}
		s->total += (uint64_t)sb.st_size;
	}
	return 0;
}

int cp_send(const struct cp_opts *o)
{
	struct tx_hooks h = {.next = next_file, .file_done = file_done};
	struct cp_summary sum = {.mode = "send", .start_ns = cp_now_ns()};
	struct sender *s;
	char host[256];
	uint16_t port;
	int ret, rc;

	if (cp_parse_hostport(o->to, host, sizeof(host), &port)) {
		cp_log("send: the destination must be ADDR:PORT, got \"%s\"", o->to);
		return CP_EXIT_USAGE;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		cp_log("send: out of memory");
		return CP_EXIT_FAIL;
	}
	s->o = o;
	s->fd = -1;
	ret = check_files(s);
	if (ret)
		goto out;
	if (cp_loop_init(&s->lp, RING_ENTRIES)) {
		ret = CP_EXIT_FAIL;
		goto out;
	}
	s->lp.poll = send_poll;
	s->lp.on_signal = send_signal;
	cp_progress_init(&s->prog, o->quiet ? 0 : o->progress, s->total);
	h.data = s;
	s->t = tx_start(&s->lp, o, host, port, &h);
	if (!s->t) {
		cp_log("send: out of memory");
		ret = CP_EXIT_FAIL;
		goto out_loop;
	}
	rc = cp_loop_run(&s->lp);
	if (s->t) {
		/* The loop broke: still end the connection before the bridge. */
		tx_abort(s->t, CP_EXIT_FAIL, "event loop failed");
		while (tx_poll(s->t, &s->result, s->msg, sizeof(s->msg)) == TX_ALIVE &&
		       cp_loop_pass(&s->lp, 100) >= 0)
			;
	}
	ret = rc ? CP_EXIT_FAIL : s->result;
	if (!o->quiet && s->prog.drawn)
		cp_progress_update(&s->prog, s->bytes, true);
	if (ret)
		cp_log("send: %s", s->msg[0] ? s->msg : "failed");
out_loop:
	cp_loop_fini(&s->lp);
out:
	if (s->fd >= 0)
		close(s->fd);
	sum.exit_code = ret;
	sum.error = ret && s->msg[0] ? s->msg : NULL;
	sum.files = s->files;
	sum.chunks = s->chunks;
	sum.bytes = s->bytes;
	sum.checksum = s->last_sum;
	sum.connections = 1;
	sum.failures = ret != 0;
	sum.chunk = o->chunk;
	sum.window = o->window;
	if (o->json) {
		rc = cp_json_write(o->json, &sum);
		if (rc)
			cp_log("send: writing %s: %s", o->json, strerror(-rc));
	}
	free(s);
	return ret;
}
