// SPDX-License-Identifier: MIT
/* Stub verbs for the host unit suite; see fake_verbs.h. */
#include <errno.h>
#include <time.h>

#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_verbs.h"

unsigned int fake_unacked_at_destroy;
unsigned int fake_cqs_live, fake_channels_live;
unsigned int fake_event_reads;

static void raise_event(struct fake_cq *fc)
{
	struct fake_channel *ch = (struct fake_channel *)fc->cq.channel;
	uint64_t handle = (uintptr_t)&fc->cq;
	char c = 1;

	fc->armed = false;
	fc->events++;
	if (ch->wfd < 0)
		return; /* the channel ended (a test closed it) */
	if (ch->handles) {
		if (write(ch->wfd, &handle, sizeof(handle)) != sizeof(handle))
			abort();
		return;
	}
	ch->fired[ch->tail++ % FAKE_MAX_WC] = fc;
	if (write(ch->wfd, &c, 1) != 1)
		abort();
}

/* As the kernel does when a CQ goes: its events not yet read go with it.
 * Returns how many. */
static unsigned int drop_handles(struct fake_channel *ch, struct fake_cq *fc)
{
	static uint64_t h[FAKE_MAX_WC];
	unsigned int n = 0, kept = 0, dropped = 0;
	ssize_t r;

	while (n < FAKE_MAX_WC && (r = read(ch->ch.fd, &h[n], sizeof(h[n]))) == sizeof(h[n]))
		n++;
	for (unsigned int i = 0; i < n; i++) {
		if (h[i] == (uintptr_t)&fc->cq)
			dropped++;
		else
			h[kept++] = h[i];
	}
	if (kept && write(ch->wfd, h, kept * sizeof(h[0])) != (ssize_t)(kept * sizeof(h[0])))
		abort();
	return dropped;
}

static void push(struct fake_cq *fc, unsigned int n, uint64_t first)
{
	for (unsigned int i = 0; i < n; i++)
		fc->wr_ids[fc->tail++ % FAKE_MAX_WC] = first + i;
}

void fake_complete(struct fake_cq *fc, unsigned int n, uint64_t first)
{
	push(fc, n, first);
	if (!fc->armed || !fc->cq.channel)
		return;
	if (fc->late_event) {
		fc->armed = false; /* the arm is used up; the event comes later */
		fc->late_pending++;
		return;
	}
	raise_event(fc);
}

void fake_raise_late(struct fake_cq *fc)
{
	for (; fc->late_pending; fc->late_pending--)
		raise_event(fc);
}

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
	struct fake_cq *fc = fake_cq_of(cq);
	int n = 0;

	fc->polls++;
	while (n < num && fc->head != fc->tail) {
		memset(&wc[n], 0, sizeof(wc[n]));
		wc[n].wr_id = fc->wr_ids[fc->head++ % FAKE_MAX_WC];
		wc[n].qp_num = (uint32_t)(wc[n].wr_id >> 32);
		wc[n].status = IBV_WC_SUCCESS;
		wc[n].opcode = IBV_WC_SEND;
		n++;
	}
	return n;
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct fake_cq *fc = fake_cq_of(cq);

	/* A completion landing between the caller's last poll and this arm
	 * raises no event: the caller has to poll again to see it. */
	if (fc->inject_on_arm) {
		push(fc, (unsigned int)fc->inject_on_arm, 1000000);
		fc->inject_on_arm = 0;
	}
	fc->arms++;
	fc->armed = true;
	return 0;
}

/* Its presence is what matters: the library never calls it. */
static void *fake_cq_event(void)
{
	abort();
}

struct ibv_context fake_ctx = {
	.ops = {.poll_cq = fake_poll_cq,
		.req_notify_cq = fake_req_notify_cq,
		._compat_cq_event = fake_cq_event},
	.async_fd = -1,
};

struct ibv_context fake_ctx_rr = {
	.ops = {.poll_cq = fake_poll_cq, .req_notify_cq = fake_req_notify_cq},
	.async_fd = -1,
};

struct ibv_comp_channel *__wrap_ibv_create_comp_channel(struct ibv_context *ctx);
int __wrap_ibv_destroy_comp_channel(struct ibv_comp_channel *channel);
struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector);
int __wrap_ibv_destroy_cq(struct ibv_cq *cq);
int __wrap_ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
			    void **cq_context);
void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);

struct ibv_comp_channel *__wrap_ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct fake_channel *ch = calloc(1, sizeof(*ch));
	int p[2];

	if (!ch || pipe(p)) {
		free(ch);
		errno = ENOMEM;
		return NULL;
	}
	ch->ch.fd = p[0];
	ch->wfd = p[1];
	ch->ch.context = ctx;
	ch->handles = ctx == &fake_ctx_rr;
	fake_channels_live++;
	return &ch->ch;
}

int __wrap_ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct fake_channel *ch = (struct fake_channel *)channel;

	close(ch->ch.fd);
	if (ch->wfd >= 0)
		close(ch->wfd);
	free(ch);
	fake_channels_live--;
	return 0;
}

struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	struct fake_cq *fc = calloc(1, sizeof(*fc));

	if (!fc) {
		errno = ENOMEM;
		return NULL;
	}
	fc->cq.context = ctx;
	fc->cq.cq_context = cq_context;
	fc->cq.channel = channel;
	fc->cq.cqe = cqe;
	fake_cqs_live++;
	return &fc->cq;
}

int __wrap_ibv_destroy_cq(struct ibv_cq *cq)
{
	struct fake_cq *fc = fake_cq_of(cq);

	struct fake_channel *ch = (struct fake_channel *)cq->channel;

	if (ch && ch->handles) {
		/* Read by anyone, ibv_get_cq_event() or the ring. */
		fake_unacked_at_destroy = fc->events - drop_handles(ch, fc) - fc->acked;
		free(fc);
		fake_cqs_live--;
		return 0;
	}
	fake_unacked_at_destroy = fc->delivered - fc->acked;
	/* As the kernel does: events not yet read go with the CQ. */
	for (unsigned int i = ch ? ch->head : 0; ch && i != ch->tail; i++)
		if (ch->fired[i % FAKE_MAX_WC] == fc)
			ch->fired[i % FAKE_MAX_WC] = NULL;
	free(fc);
	fake_cqs_live--;
	return 0;
}

int __wrap_ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
			    void **cq_context)
{
	struct fake_channel *ch = (struct fake_channel *)channel;
	struct fake_cq *fc;
	char c;

	fake_event_reads++;
	if (ch->fail_errno) {
		errno = ch->fail_errno;
		return -1;
	}
	if (ch->handles) {
		uint64_t h;

		if (read(ch->ch.fd, &h, sizeof(h)) != sizeof(h))
			return -1;
		fc = fake_cq_of((struct ibv_cq *)(uintptr_t)h);
		fc->delivered++;
		*cq = &fc->cq;
		*cq_context = fc->cq.cq_context;
		return 0;
	}
	do {
		if (read(ch->ch.fd, &c, 1) != 1)
			return -1; /* errno EAGAIN from the non-blocking pipe */
		fc = ch->fired[ch->head++ % FAKE_MAX_WC];
	} while (!fc);
	fc->delivered++;
	*cq = &fc->cq;
	*cq_context = fc->cq.cq_context;
	return 0;
}

void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	struct fake_cq *fc = fake_cq_of(cq);

	fc->acked += nevents;
	fc->ack_calls++;
}

/* ---- devices: PD and async events ---- */

unsigned int fake_pds_live;
static int async_wfd = -1;
static struct ibv_async_event async_q[64];
static unsigned int async_head, async_tail;

struct ibv_pd *__wrap_ibv_alloc_pd(struct ibv_context *ctx);
int __wrap_ibv_dealloc_pd(struct ibv_pd *pd);
int __wrap_ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev);
void __wrap_ibv_ack_async_event(struct ibv_async_event *ev);

int fake_async_open(void)
{
	int p[2];

	if (pipe(p))
		return -errno;
	fake_ctx.async_fd = p[0];
	async_wfd = p[1];
	async_head = async_tail = 0;
	return 0;
}

void fake_async_close(void)
{
	close(fake_ctx.async_fd);
	close(async_wfd);
	fake_ctx.async_fd = async_wfd = -1;
}

void fake_async_event(enum ibv_event_type type)
{
	char c = 1;

	async_q[async_tail++ % 64] = (struct ibv_async_event){.event_type = type};
	if (write(async_wfd, &c, 1) != 1)
		abort();
}

struct ibv_pd *__wrap_ibv_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));

	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->context = ctx;
	fake_pds_live++;
	return pd;
}

int __wrap_ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	fake_pds_live--;
	return 0;
}

int __wrap_ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	char c;

	if (read(ctx->async_fd, &c, 1) != 1)
		return -1; /* errno EAGAIN from the non-blocking pipe */
	*ev = async_q[async_head++ % 64];
	return 0;
}

void __wrap_ibv_ack_async_event(struct ibv_async_event *ev)
{
}

/* Counts the library's clock reads: where the clock is a syscall each one
 * costs about what a hybrid window saves. */
unsigned int fake_clock_reads;

int __real_clock_gettime(clockid_t clk, struct timespec *ts);
int __wrap_clock_gettime(clockid_t clk, struct timespec *ts);

int __wrap_clock_gettime(clockid_t clk, struct timespec *ts)
{
	fake_clock_reads++;
	return __real_clock_gettime(clk, ts);
}

unsigned int fake_get_events;

int __real_io_uring_submit_and_get_events(struct io_uring *ring);
int __wrap_io_uring_submit_and_get_events(struct io_uring *ring);

int __wrap_io_uring_submit_and_get_events(struct io_uring *ring)
{
	fake_get_events++;
	return __real_io_uring_submit_and_get_events(ring);
}
