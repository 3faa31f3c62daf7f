// SPDX-License-Identifier: MIT
/* Test harness: one bridge, one listener, one client; see bridge_pair.h. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bridge_pair.h"

uint64_t bp_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int bp_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -errno;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

long bp_rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static struct bp_side *side_of(rr_ep *ep)
{
	return rr_ep_data(ep);
}

static void on_down(rr_ep *ep, int status, void *data)
{
	struct bp_side *s = side_of(ep);

	s->down_status = status;
	s->down_calls++;
}

static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	struct bridge_pair *p = data;

	p->accepts++;
	if (p->srv.ep) {
		rr_ep_destroy(ep); /* one server endpoint per pair */
		return;
	}
	p->srv.ep = ep;
	p->srv.connect_status = 0;
	p->srv.connect_calls++;
	rr_ep_set_data(ep, &p->srv);
	rr_ep_set_on_disconnect(ep, on_down);
}

static void on_connect(rr_ep *ep, int status, void *data)
{
	struct bp_side *s = data;

	s->connect_status = status;
	s->connect_calls++;
}

static bool both_up(void *arg)
{
	struct bridge_pair *p = arg;

	return p->srv.ep && p->cli.connect_calls;
}

int bp_run_pred(rr_bridge *b, bool (*pred)(void *), void *arg, int timeout_ms)
{
	uint64_t deadline = bp_now_ms() + (uint64_t)timeout_ms;
	int rc;

	while (!pred(arg)) {
		if (bp_now_ms() > deadline)
			return -ETIMEDOUT;
		rc = rr_bridge_run_once(b, 50);
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
	return 0;
}

static bool flag_set(void *arg)
{
	return *(const volatile int *)arg != 0;
}

int bp_run_until(struct bridge_pair *p, const volatile int *flag, int timeout_ms)
{
	return bp_run_pred(p->b, flag_set, (void *)flag, timeout_ms);
}

int bp_open(struct bridge_pair *p, const char *addr, const struct rr_ep_opts *opts)
{
	return bp_open2(p, addr, opts, opts);
}

int bp_open2(struct bridge_pair *p, const char *addr, const struct rr_ep_opts *srv_opts,
	     const struct rr_ep_opts *cli_opts)
{
	struct rr_ep_opts o = srv_opts ? *srv_opts : (struct rr_ep_opts){0};
	int rc;

	memset(p, 0, sizeof(*p));
	p->srv.connect_status = p->cli.connect_status = 1;
	p->srv.down_status = p->cli.down_status = 1;
	rc = rr_test_ring_init(&p->ring, 256);
	if (rc)
		return rc;
	rc = rr_bridge_create(&p->b, &p->ring, rr_test_bridge_opts(),
			      sizeof(struct rr_bridge_opts));
	if (rc)
		return rc;
	rc = rr_listen(p->b, addr, 0, &o, sizeof(o), on_accept, p, &p->l);
	if (rc)
		return rc;
	o = cli_opts ? *cli_opts : (struct rr_ep_opts){0};
	o.data = &p->cli;
	o.on_disconnect = on_down;
	rc = rr_connect(p->b, addr, rr_listener_port(p->l), &o, sizeof(o), on_connect, &p->cli.ep);
	if (rc)
		return rc;
	rc = bp_run_pred(p->b, both_up, p, 20000);
	if (rc)
		return rc;
	return p->cli.connect_status;
}

void bp_close(struct bridge_pair *p)
{
	if (p->b)
		rr_bridge_destroy(p->b);
	p->b = NULL;
	io_uring_queue_exit(&p->ring);
}
