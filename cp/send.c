// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp send FILE... ADDR:PORT: the files in order over one connection,
 * or over --conns N side by side, each taking the next file when its last
 * one is sent (one file ahead of the receiver's FILE_DONE).
 */
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

struct sender;

/* One connection; its files go in turn, the connections' side by side. */
struct sconn {
	struct sender *s;
	struct tx *t;
	int fd;		/* the file being sent on it */
	uint64_t acked; /* tx_bytes() when it ended */
	uint64_t chunks;
	uint64_t resumed; /* tx_resumed() */
};

struct sender {
	struct cp_loop lp;
	const struct cp_opts *o;
	struct cp_opts conn_opts; /* o, with each connection's share of the rate */
	struct sconn c[CP_SEND_CONNS_MAX];
	unsigned int nconns, live;
	int next_file;
	uint64_t total;
	struct cp_tally n;	       /* files, bytes, checksum as they are stored */
	uint64_t data_start, data_end; /* first WELCOME, last FILE_DONE */
	struct cp_progress prog;
	int result; /* the first connection that failed says it */
	char msg[256];
};

static bool next_file(struct tx *t, struct tx_src *src, void *data)
{
	struct sconn *c = data;
	struct sender *s = c->s;
	const char *path, *base;
	struct stat sb;

	if (c->fd >= 0)
		close(c->fd); /* its FILE_END went: every read of it ended */
	c->fd = -1;
	if (s->next_file == s->o->nfiles)
		return false;
	path = s->o->files[s->next_file++];
	c->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (c->fd < 0 || fstat(c->fd, &sb)) {
		snprintf(s->msg, sizeof(s->msg), "cannot open %s: %s", path, strerror(errno));
		tx_abort(t, CP_EXIT_LOCAL_IO, s->msg);
		return false;
	}
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	src->fd = c->fd;
	src->size = (uint64_t)sb.st_size;
	src->label = path;
	snprintf(src->name, sizeof(src->name), "%s", s->o->as ? s->o->as : base);
	return true;
}

/* Bytes the receiver acknowledged, over every connection. */
static uint64_t acked(const struct sender *s)
{
	uint64_t n = 0;

	for (unsigned int i = 0; i < s->nconns; i++)
		n += s->c[i].t ? tx_bytes(s->c[i].t) : s->c[i].acked;
	return n;
}

static void file_done(struct tx *t, const struct tx_src *src, uint64_t bytes, uint64_t sum,
		      void *data)
{
	char l[CP_ESC_LEN(256)], n[CP_ESC_LEN(CP_NAME_MAX)];
	struct sconn *c = data;
	struct sender *s = c->s;

	s->n.files++;
	s->data_end = cp_now_ns();
	if (!s->data_start || tx_welcome_ns(t) < s->data_start)
		s->data_start = tx_welcome_ns(t);
	c->chunks = tx_chunks(t);
	c->resumed = tx_resumed(t);
	s->n.bytes += bytes;
	s->n.checksum = sum;
	if (!s->o->quiet) {
		cp_progress_update(&s->prog, acked(s), false);
		if (s->prog.drawn)
			fputs("\r\033[K", stderr);
		printf(CP_PROG ": sent %s as %s: %llu bytes, xxh3 %016llx\n",
		       cp_esc(src->label, l, sizeof(l)), cp_esc(src->name, n, sizeof(n)),
		       (unsigned long long)bytes, (unsigned long long)sum);
		fflush(stdout);
	}
}

/* Poll every live connection; a failure ends the others. */
static void poll_conns(struct sender *s)
{
	for (unsigned int i = 0; i < s->nconns; i++) {
		struct sconn *c = &s->c[i];
		char msg[256];
		int result = 0;

		if (!c->t)
			continue;
		c->acked = tx_bytes(c->t);
		c->chunks = tx_chunks(c->t);
		c->resumed = tx_resumed(c->t);
		if (tx_poll(c->t, &result, msg, sizeof(msg)) != TX_ENDED)
			continue;
		c->t = NULL;
		s->live--;
		if (!result || s->result)
			continue;
		s->result = result;
		snprintf(s->msg, sizeof(s->msg), "%s", msg);
		for (unsigned int k = 0; k < s->nconns; k++)
			if (s->c[k].t)
				tx_abort(s->c[k].t, result, "another connection failed");
	}
}

static void send_poll(struct cp_loop *lp)
{
	struct sender *s = (struct sender *)lp;

	if (!s->live)
		return;
	poll_conns(s);
	if (!s->live) {
		lp->stop = true;
		return;
	}
	if (!s->o->quiet)
		cp_progress_update(&s->prog, acked(s), false);
}

static void send_signal(struct cp_loop *lp, int signo)
{
	struct sender *s = (struct sender *)lp;

	for (unsigned int i = 0; i < s->nconns; i++)
		if (s->c[i].t)
			tx_abort(s->c[i].t, CP_EXIT_INTERRUPTED, "sender interrupted");
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
	/* No more connections than files: each would only say goodbye. */
	s->nconns = o->conns ? o->conns : 1;
	if (s->nconns > (unsigned int)o->nfiles)
		s->nconns = (unsigned int)o->nfiles;
	for (unsigned int i = 0; i < CP_SEND_CONNS_MAX; i++)
		s->c[i] = (struct sconn){.s = s, .fd = -1};
	s->conn_opts = *o;
	if (o->rate)
		s->conn_opts.rate = o->rate / s->nconns ? o->rate / s->nconns : 1;
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
	for (unsigned int i = 0; i < s->nconns; i++) {
		h.data = &s->c[i];
		s->c[i].t = tx_start(&s->lp, &s->conn_opts, host, port, &h);
		if (!s->c[i].t) {
			cp_log("send: out of memory");
			ret = CP_EXIT_FAIL;
			for (unsigned int k = 0; k < i; k++)
				tx_abort(s->c[k].t, CP_EXIT_FAIL, "out of memory");
			break;
		}
		s->live++;
	}
	rc = s->live == s->nconns ? cp_loop_run(&s->lp) : -1;
	if (s->live) {
		/* The loop broke: still end the connections before the bridge. */
		for (unsigned int i = 0; i < s->nconns; i++)
			if (s->c[i].t)
				tx_abort(s->c[i].t, CP_EXIT_FAIL, "event loop failed");
		while (s->live && cp_loop_pass(&s->lp, 100) >= 0)
			poll_conns(s);
	}
	ret = ret ? ret : rc ? CP_EXIT_FAIL : s->result;
	if (!o->quiet && s->prog.drawn)
		cp_progress_update(&s->prog, s->n.bytes, true);
	if (ret)
		cp_log("send: %s", s->msg[0] ? s->msg : "failed");
	cp_loop_fini(&s->lp);
out:
	for (unsigned int i = 0; i < CP_SEND_CONNS_MAX; i++)
		if (s->c[i].fd >= 0)
			close(s->c[i].fd);
	for (unsigned int i = 0; i < s->nconns; i++) {
		s->n.chunks += s->c[i].chunks;
		s->n.resumed += s->c[i].resumed;
	}
	s->n.connections = s->nconns;
	s->n.failures = ret != 0;
	sum.exit_code = ret;
	sum.error = ret && s->msg[0] ? s->msg : NULL;
	sum.n = s->n;
	sum.data_ns = s->n.files ? s->data_end - s->data_start : 0;
	cp_json_report(o, &sum);
	free(s);
	return ret;
}
