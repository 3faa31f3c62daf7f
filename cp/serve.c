// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp serve: listen for RDMA connections and store what each one
 * sends under DIR; rx.c does the per-connection work.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "serve.h"
#include "store.h"

#define RING_ENTRIES 1024

static void on_qp_ready(rr_ep *ep, int status, void *data)
{
	struct serve *s = data;
	struct rx *r;

	if (!s->closing && s->unauth >= s->o->max_pending && !rx_evict_oldest(s)) {
		if (!s->o->quiet)
			cp_log("serve: connection request refused: %u not yet authenticated "
			       "(--max-pending)",
			       s->unauth);
		s->refused++;
		rr_ep_destroy(ep);
		return;
	}
	if (s->closing || !(r = rx_create(s, ep))) {
		/* Refused before it exists: the library drops the request. */
		rr_ep_destroy(ep);
		return;
	}
	rx_set_next(r, s->conns);
	s->conns = r;
}

static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct serve *s = data;
	struct rx *r = rr_ep_data(ep);

	/* Not admitted yet: rx.c counts it once its token was checked. */
	rx_accepted(r);
	if (s->closing)
		rx_abort(r, "receiver shutting down");
}

static void serve_poll(struct cp_loop *lp)
{
	struct serve *s = (struct serve *)lp;
	struct rx *r, *prev = NULL, *next;

	for (r = s->conns; r; r = next) {
		enum rx_poll_res pr;
		int result = 0;

		next = rx_next(r); /* rx_poll() may free r */
		pr = rx_poll(r, &result);
		if (pr == RX_ALIVE) {
			prev = r;
			continue;
		}
		if (prev)
			rx_set_next(prev, next);
		else
			s->conns = next;
		if (pr == RX_REFUSED)
			s->refused++;
		if (pr == RX_ENDED) {
			s->active--;
			s->ended++;
			if (result) {
				s->failures++;
				if (!s->result)
					s->result = result;
			}
		}
	}
	/* --count admitted connections all ended: only strangers are left. */
	if (s->o->count && s->admitted >= s->o->count && !s->active && !s->closing) {
		s->closing = true;
		for (r = s->conns; r; r = rx_next(r))
			rx_abort(r, "receiver done (--count reached)");
	}
	if (s->closing && !s->conns)
		lp->stop = true;
}

static void serve_signal(struct cp_loop *lp, int signo)
{
	struct serve *s = (struct serve *)lp;

	if (s->closing) {
		lp->stop = true; /* a second signal: leave now */
		return;
	}
	cp_log("serve: %s, closing", strsignal(signo));
	s->closing = true;
	s->result = CP_EXIT_INTERRUPTED;
	for (struct rx *r = s->conns; r; r = rx_next(r))
		rx_abort(r, "receiver interrupted");
}

int cp_serve(const struct cp_opts *o)
{
	struct rr_ep_opts eo = {
		.max_send_wr = 2 * o->window + RX_SENDS, /* a bind and a shut per slot */
		.max_recv_wr = o->window + RX_SPARE_RECVS,
		.on_qp_ready = on_qp_ready,
	};
	struct cp_summary sum = {.mode = "serve", .chunk = o->chunk, .window = o->window};
	char host[256];
	uint16_t port;
	struct serve *s;
	int rc, ret;

	if (cp_parse_hostport(o->listen, host, sizeof(host), &port)) {
		cp_log("serve: --listen wants ADDR:PORT, got \"%s\"", o->listen);
		return CP_EXIT_USAGE;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		cp_log("serve: out of memory");
		return CP_EXIT_FAIL;
	}
	s->o = o;
	s->start_ns = cp_now_ns();
	s->dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0) {
		cp_log("serve: cannot open directory %s: %s", o->dir, strerror(errno));
		ret = CP_EXIT_LOCAL_IO;
		goto out_free;
	}
	if (o->direct && cp_store_direct_ok(s->dirfd)) {
		cp_log("serve: --direct: the file system of %s takes no O_DIRECT writes", o->dir);
		ret = CP_EXIT_LOCAL_IO;
		goto out_dir;
	}
	if (cp_loop_init(&s->lp, RING_ENTRIES)) {
		ret = CP_EXIT_FAIL;
		goto out_dir;
	}
	if (!cp_store_supported(&s->lp)) {
		cp_log("serve: this kernel's io_uring lacks openat2, statx, linkat, renameat or "
		       "unlinkat (Linux 5.15 or later has them)");
		ret = CP_EXIT_FAIL;
		goto out_loop;
	}
	s->lp.poll = serve_poll;
	s->lp.on_signal = serve_signal;
	rc = rr_listen(s->lp.b, host, port, &eo, on_accept, s, &s->l);
	if (rc) {
		cp_log("serve: cannot listen on %s:%u: %s", host, port, strerror(-rc));
		ret = CP_EXIT_NET;
		goto out_loop;
	}
	printf(CP_PROG ": serve: listening on %s:%u, storing into %s\n", host, port, o->dir);
	fflush(stdout);
	rc = cp_loop_run(&s->lp);
	ret = rc ? CP_EXIT_FAIL : s->result;
	rr_listener_destroy(s->l);
	/* A second signal stops the loop early: still end every connection
	 * (temp files removed, MRs deregistered) before the bridge goes. */
	if (s->conns) {
		uint64_t end = cp_now_ns() + 10000000000ull;

		s->closing = true;
		for (struct rx *r = s->conns; r; r = rx_next(r))
			rx_abort(r, "receiver exiting");
		while (s->conns && cp_now_ns() < end && cp_loop_pass(&s->lp, 100) >= 0)
			serve_poll(&s->lp);
		if (s->conns)
			cp_log("serve: connections still open at exit");
		for (struct rx *r = s->conns; r; r = rx_next(r))
			rx_free_windows(r);
	}
out_loop:
	cp_loop_fini(&s->lp);
out_dir:
	close(s->dirfd);
	sum.exit_code = ret;
	sum.files = s->files;
	sum.bytes = s->bytes;
	sum.checksum = s->last_checksum;
	sum.connections = s->ended;
	sum.refused = s->refused;
	sum.chunks = s->chunks;
	sum.failures = s->failures;
	sum.start_ns = s->first_ns ? s->first_ns : s->start_ns;
	if (o->json) {
		rc = cp_json_write(o->json, &sum);
		if (rc)
			cp_log("serve: writing %s: %s", o->json, strerror(-rc));
	}
out_free:
	free(s);
	return ret;
}
