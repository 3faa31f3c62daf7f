// SPDX-License-Identifier: MIT
/* Stub verbs for the host unit suite; see fake_verbs.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>

#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_verbs.h"

unsigned int fake_unacked_at_destroy;
unsigned int fake_cqs_live, fake_channels_live;
unsigned int fake_event_reads;

static struct fake_stats stats;

/* One lock for everything: rdma_cm calls, posts and polls come from the
 * library's group threads at once. Recursive: a post completes work on
 * the peer, which raises events, all under it. */
static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

void fake_lock(void)
{
	pthread_mutex_lock(&lock);
}

void fake_unlock(void)
{
	pthread_mutex_unlock(&lock);
}

bool fake_wait(pthread_cond_t *cv, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return pthread_cond_timedwait(cv, &lock, &ts) == 0;
}

struct fake_stats *fake_stats_raw(void)
{
	return &stats;
}

struct fake_stats fake_stats_get(void)
{
	struct fake_stats s;

	fake_lock();
	s = stats;
	fake_unlock();
	return s;
}

/* ---- the fake device ---- */

struct fake_mr {
	struct ibv_mr mr; /* first */
	uint64_t iova;
	int access;
	struct fake_mr *next;
};

struct fake_mw {
	struct ibv_mw mw; /* first */
	bool bound;
	struct ibv_qp *qp; /* type 2: the QP it was bound through */
	uint64_t addr, len;
	unsigned int access;
	struct fake_mw *next;
};

struct fake_rwqe {
	struct fake_rwqe *next;
	uint64_t wr_id;
	int nsge;
	struct ibv_sge sge[4];
};

/* A post op's record, and a refusal armed for its next call. */
struct fake_postq {
	struct fake_posts n;
	bool fail;
	unsigned int fail_at;
	int fail_err;
};

struct fake_srq {
	struct ibv_srq srq; /* first */
	struct fake_postq posts;
	uint32_t max_wr;
	uint32_t used; /* slots taken: posted, and (mlx5) consumed until polled */
	unsigned int nqps;
	struct fake_rwqe *head, **tail;
};

struct fake_wqe {
	struct fake_wqe *next;
	uint64_t wr_id;
	enum ibv_wr_opcode op;
	bool signalled;
	uint32_t seq;
	int nsge;
	struct ibv_sge sge[4];
	uint8_t *inl; /* IBV_SEND_INLINE: the bytes, copied at post time */
	uint32_t inl_len;
	uint64_t raddr;
	uint32_t rkey;
	uint32_t imm;
	struct ibv_mw *mw;
	uint32_t mw_rkey;
	struct ibv_mw_bind_info bind;
	uint32_t inv_rkey;
};

struct fake_qp {
	struct ibv_qp qp;      /* first */
	struct fake_qp *next;  /* live QPs */
	struct fake_qp *hnext; /* qp_hash[] */
	struct fake_qp *peer;
	struct fake_srq *srq;
	bool sig_all;
	uint32_t max_send, max_recv, max_inline;
	uint32_t sq_posted, sq_freed; /* WQE sequence numbers */
	uint32_t rq_used;
	struct fake_wqe *sq, **sq_tail; /* not yet done, in order */
	struct fake_rwqe *rq, **rq_tail;
	struct fake_postq send_posts, recv_posts;
};

struct fake_device {
	struct ibv_context ctx; /* first */
	bool ready;
	enum fake_provider prov;
	struct ibv_device_attr attr;
	bool dead;
};

static struct fake_device dev;
static struct fake_qp *qps;
/* Live QPs by number: a poll finds a completion's QP as a provider's
 * table does, at a cost that does not grow with the QPs (tests/cost). */
#define QP_HASH 65536
static struct fake_qp *qp_hash[QP_HASH];
static struct fake_mr *mrs;
static struct fake_mw *mws;
static uint32_t next_qpn = 0x11, next_key = 0x100;

static bool is_dev(struct ibv_context *ctx)
{
	return ctx == &dev.ctx;
}

static bool mlx5(struct ibv_context *ctx)
{
	return is_dev(ctx) && dev.prov == FAKE_MLX5;
}

static void async_push(struct ibv_context *ctx, struct ibv_async_event ev);

/*
 * rxe's arms and posts are commands written to the uverbs fd, mlx5's are
 * doorbells in user space (rdma-core providers/rxe, providers/mlx5): the
 * rxe personality makes one write(2) for each, so syscalls counted by the
 * kernel (tests/cost) are a real device's. A write to no fd: the kernel
 * counts it and it changes nothing.
 */
static void doorbell(struct ibv_context *ctx)
{
	static const char cmd;

	if (is_dev(ctx) ? !mlx5(ctx) : !ctx->ops._compat_cq_event) {
		if (write(-1, &cmd, 0) != -1)
			abort();
	}
}

/* Post calls and event reads, numbered in the order they happen. */
static unsigned int fake_steps;

/* ---- CQs ---- */

static void raise_event(struct fake_cq *fc)
{
	struct fake_channel *ch = (struct fake_channel *)fc->cq.channel;
	uint64_t handle = (uintptr_t)&fc->cq;
	char c = 1;

	fc->armed = false;
	fc->events++;
	fc->fired = true;
	fc->fired_sn = fc->arm_sn;
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

/* A new completion is visible: an armed CQ raises its event. */
static void notify(struct fake_cq *fc)
{
	if (!fc->armed || !fc->cq.channel)
		return;
	if (fc->late_event) {
		fc->armed = false; /* the arm is used up; the event comes later */
		fc->late_pending++;
		return;
	}
	raise_event(fc);
}

static void push_cqe(struct fake_cq *fc, const struct fake_cqe *e)
{
	if (is_dev(fc->cq.context) && fc->tail - fc->head >= (unsigned int)fc->cq.cqe) {
		/* The hardware would lose it and report the CQ in error. */
		fc->overruns++;
		stats.cq_overruns++;
		fprintf(stderr, "fake_verbs: CQ %p overrun (%d entries)\n", (void *)fc, fc->cq.cqe);
		async_push(fc->cq.context,
			   (struct ibv_async_event){.element.cq = &fc->cq,
						    .event_type = IBV_EVENT_CQ_ERR});
	}
	if (fc->tail - fc->head >= FAKE_MAX_WC) {
		fprintf(stderr, "fake_verbs: CQ %p holds %u completions, the fake's limit\n",
			(void *)fc, FAKE_MAX_WC);
		abort();
	}
	fc->q[fc->tail++ % FAKE_MAX_WC] = *e;
	notify(fc);
}

void fake_complete(struct fake_cq *fc, unsigned int n, uint64_t first)
{
	fake_lock();
	for (unsigned int i = 0; i < n; i++) {
		struct fake_cqe e = {.wc = {.wr_id = first + i,
					    .qp_num = (uint32_t)((first + i) >> 32),
					    .status = IBV_WC_SUCCESS,
					    .opcode = IBV_WC_SEND}};

		if (fc->tail - fc->head >= FAKE_MAX_WC)
			abort();
		fc->q[fc->tail++ % FAKE_MAX_WC] = e;
	}
	if (n)
		notify(fc);
	fake_unlock();
}

void fake_raise_late(struct fake_cq *fc)
{
	fake_lock();
	for (; fc->late_pending; fc->late_pending--)
		raise_event(fc);
	fake_unlock();
}

static struct fake_qp *qp_by_num(uint32_t qpn)
{
	for (struct fake_qp *q = qp_hash[qpn % QP_HASH]; q; q = q->hnext)
		if (q->qp.qp_num == qpn)
			return q;
	return NULL;
}

/* mlx5 frees SQ and SRQ slots only when a completion is polled: every
 * WQE up to the polled one goes back (unsignalled ones included). */
static void polled(struct ibv_context *ctx, const struct fake_cqe *e)
{
	struct fake_qp *q;

	if (!mlx5(ctx))
		return;
	if (e->srq) {
		e->srq->used--;
		return;
	}
	if (e->send && (q = qp_by_num(e->wc.qp_num)) && (int32_t)(e->sq_seq + 1 - q->sq_freed) > 0)
		q->sq_freed = e->sq_seq + 1;
}

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
	struct fake_cq *fc = fake_cq_of(cq);
	int n = 0;

	fake_lock();
	fc->polls++;
	while (n < num && fc->head != fc->tail) {
		struct fake_cqe *e = &fc->q[fc->head++ % FAKE_MAX_WC];

		wc[n++] = e->wc;
		polled(cq->context, e);
	}
	fake_unlock();
	return n;
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct fake_cq *fc = fake_cq_of(cq);

	fake_lock();
	/* A completion landing between the caller's last poll and this arm
	 * raises no event: the caller has to poll again to see it. */
	if (fc->inject_on_arm) {
		for (int i = 0; i < fc->inject_on_arm; i++)
			fc->q[fc->tail++ % FAKE_MAX_WC] = (struct fake_cqe){
				.wc = {.wr_id = 1000000 + (unsigned int)i, .opcode = IBV_WC_SEND}};
		fc->inject_on_arm = 0;
	}
	fc->arms++;
	doorbell(cq->context);
	if (mlx5(cq->context) && fc->fired && fc->fired_sn == fc->arm_sn) {
		/* The doorbell carries the same sequence number as the arm
		 * that fired: the hardware takes it for that one. */
		fc->ignored_arms++;
		stats.ignored_arms++;
		fake_unlock();
		return 0;
	}
	fc->armed = true;
	/* mlx5 arms at the consumer index: completions not polled yet
	 * raise the event at once. rxe waits for the next one. */
	if (mlx5(cq->context) && fc->head != fc->tail)
		notify(fc);
	fake_unlock();
	return 0;
}

/* The provider's cq_event op, which libibverbs calls for each event
 * ibv_get_cq_event() returns: mlx5 advances its arm sequence number. */
static void fake_cq_event(struct ibv_cq *cq)
{
	struct fake_cq *fc = fake_cq_of(cq);

	fc->cq_event_calls++;
	fc->arm_sn++;
	stats.cq_event_calls++;
}

/* Through void (*)(void): the ops table's type is a placeholder. */
#define CQ_EVENT_OP ((void *(*)(void))(void (*)(void))fake_cq_event)

struct ibv_context fake_ctx = {
	.ops = {.poll_cq = fake_poll_cq,
		.req_notify_cq = fake_req_notify_cq,
		._compat_cq_event = CQ_EVENT_OP},
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
int __wrap_ibv_resize_cq(struct ibv_cq *cq, int cqe);
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
	/* The kernel's channels carry handles; fake_ctx's bytes are older. */
	ch->handles = ctx == &fake_ctx_rr || is_dev(ctx);
	fake_lock();
	fake_channels_live++;
	fake_unlock();
	return &ch->ch;
}

int __wrap_ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct fake_channel *ch = (struct fake_channel *)channel;

	fake_lock();
	close(ch->ch.fd);
	if (ch->wfd >= 0)
		close(ch->wfd);
	free(ch);
	fake_channels_live--;
	fake_unlock();
	return 0;
}

/* mlx5 rounds a CQ up to a power of two, one entry kept back. */
static int cq_size(struct ibv_context *ctx, int cqe)
{
	int n = 1;

	if (!mlx5(ctx))
		return cqe;
	while (n < cqe + 1)
		n <<= 1;
	return n - 1;
}

struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	struct fake_cq *fc;

	/* As the kernel: a vector the device does not have is refused. */
	if (ctx->num_comp_vectors && (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors)) {
		errno = EINVAL;
		return NULL;
	}
	if (is_dev(ctx) && (cqe < 1 || cqe > dev.attr.max_cqe)) {
		errno = EINVAL;
		return NULL;
	}
	fc = calloc(1, sizeof(*fc));
	if (fc)
		fc->q = calloc(FAKE_MAX_WC, sizeof(*fc->q));
	if (!fc || !fc->q) {
		free(fc);
		errno = ENOMEM;
		return NULL;
	}
	fc->cq.context = ctx;
	fc->cq.cq_context = cq_context;
	fc->cq.channel = channel;
	fc->cq.cqe = cq_size(ctx, cqe);
	fc->comp_vector = comp_vector;
	fake_lock();
	fake_cqs_live++;
	fake_unlock();
	return &fc->cq;
}

int __wrap_ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	struct fake_cq *fc = fake_cq_of(cq);
	int rc = 0;

	fake_lock();
	if (cqe < 1 || (is_dev(cq->context) && cqe > dev.attr.max_cqe) ||
	    (unsigned int)cqe < fc->tail - fc->head)
		rc = EINVAL;
	else
		cq->cqe = cq_size(cq->context, cqe);
	fake_unlock();
	return rc;
}

int __wrap_ibv_destroy_cq(struct ibv_cq *cq)
{
	struct fake_cq *fc = fake_cq_of(cq);
	struct fake_channel *ch = (struct fake_channel *)cq->channel;

	fake_lock();
	if (fc->nqps) {
		fake_unlock();
		return EBUSY; /* QPs still use it */
	}
	if (ch && ch->handles) {
		/* Read by anyone, ibv_get_cq_event() or the ring. */
		fake_unacked_at_destroy = fc->events - drop_handles(ch, fc) - fc->acked;
	} else {
		fake_unacked_at_destroy = fc->delivered - fc->acked;
		/* As the kernel does: events not yet read go with the CQ. */
		for (unsigned int i = ch ? ch->head : 0; ch && i != ch->tail; i++)
			if (ch->fired[i % FAKE_MAX_WC] == fc)
				ch->fired[i % FAKE_MAX_WC] = NULL;
	}
	free(fc->q);
	free(fc);
	fake_cqs_live--;
	fake_unlock();
	return 0;
}

/* libibverbs calls the provider's cq_event op for every event. */
static struct fake_cq *delivered(struct fake_cq *fc)
{
	void *(*op)(void) = fc->cq.context->ops._compat_cq_event;

	fc->delivered++;
	fc->delivered_step = ++fake_steps;
	stats.cq_events_delivered++;
	if (op)
		((void (*)(struct ibv_cq *))(void (*)(void))op)(&fc->cq);
	return fc;
}

int __wrap_ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct fake_channel *ch = (struct fake_channel *)channel;
	struct fake_cq *fc;
	uint64_t h;
	char c;

	/* libibverbs reads before anything else, without a lock: an empty
	 * channel costs the read(2) alone (errno EAGAIN, non-blocking). */
	__atomic_fetch_add(&fake_event_reads, 1, __ATOMIC_RELAXED);
	if (ch->fail_errno) {
		errno = ch->fail_errno;
		return -1;
	}
	if (ch->handles) {
		if (read(ch->ch.fd, &h, sizeof(h)) != sizeof(h))
			return -1;
		fake_lock();
		fc = delivered(fake_cq_of((struct ibv_cq *)(uintptr_t)h));
		*cq = &fc->cq;
		*cq_context = fc->cq.cq_context;
		fake_unlock();
		return 0;
	}
	if (read(ch->ch.fd, &c, 1) != 1)
		return -1;
	fake_lock();
	/* One byte per entry; a dropped event's entry is NULL. */
	while (!(fc = ch->fired[ch->head++ % FAKE_MAX_WC]))
		if (read(ch->ch.fd, &c, 1) != 1)
			goto fail;
	delivered(fc);
	*cq = &fc->cq;
	*cq_context = fc->cq.cq_context;
	fake_unlock();
	return 0;
fail:
	fake_unlock();
	return -1;
}

void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	struct fake_cq *fc = fake_cq_of(cq);

	fake_lock();
	fc->acked += nevents;
	fc->ack_calls++;
	fake_unlock();
}

int fake_cq_comp_vector(struct ibv_cq *cq)
{
	return fake_cq_of(cq)->comp_vector;
}

unsigned int fake_cq_pending(struct ibv_cq *cq)
{
	struct fake_cq *fc = fake_cq_of(cq);
	unsigned int n;

	fake_lock();
	n = fc->tail - fc->head;
	fake_unlock();
	return n;
}

/* ---- devices: PD and async events ---- */

unsigned int fake_pds_live;

struct fake_async {
	int wfd;
	struct ibv_async_event q[256];
	bool dropped[256];
	unsigned int head, tail;
};

/* One queue per context, as each real context has its own async fd. */
static struct fake_async ctx_async = {.wfd = -1}, rr_async = {.wfd = -1}, dev_async = {.wfd = -1};

static struct fake_async *async_of(struct ibv_context *ctx)
{
	return is_dev(ctx) ? &dev_async : ctx == &fake_ctx_rr ? &rr_async : &ctx_async;
}

struct ibv_pd *__wrap_ibv_alloc_pd(struct ibv_context *ctx);
int __wrap_ibv_dealloc_pd(struct ibv_pd *pd);
int __wrap_ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev);
void __wrap_ibv_ack_async_event(struct ibv_async_event *ev);

/* A real context always has an async fd, and the library polls it for
 * every bridge with a CQ on the context: so do fake_ctx and fake_ctx_rr,
 * from the start. */
static void async_pipe(struct ibv_context *ctx, struct fake_async *a)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC))
		abort();
	ctx->async_fd = p[0];
	a->wfd = p[1];
	a->head = a->tail = 0;
}

__attribute__((constructor)) static void async_init(void)
{
	async_pipe(&fake_ctx, &ctx_async);
	async_pipe(&fake_ctx_rr, &rr_async);
}

/* Nothing queued on fake_ctx's async fd. */
int fake_async_open(void)
{
	char c;

	fake_lock();
	while (ctx_async.head != ctx_async.tail && read(fake_ctx.async_fd, &c, 1) == 1)
		ctx_async.head++;
	ctx_async.head = ctx_async.tail = 0;
	fake_unlock();
	return 0;
}

void fake_async_close(void)
{
	fake_async_open();
}

static void async_push(struct ibv_context *ctx, struct ibv_async_event ev)
{
	struct fake_async *a = async_of(ctx);
	char c = 1;

	if (a->wfd < 0)
		return; /* disassociated: nothing more comes */
	if (a->tail - a->head >= 256)
		abort();
	a->dropped[a->tail % 256] = false;
	a->q[a->tail++ % 256] = ev;
	if (write(a->wfd, &c, 1) != 1)
		abort();
}

void fake_async_event(enum ibv_event_type type)
{
	fake_async_event_on(&fake_ctx, type);
}

void fake_async_event_on(struct ibv_context *ctx, enum ibv_event_type type)
{
	fake_lock();
	async_push(ctx, (struct ibv_async_event){.event_type = type});
	fake_unlock();
}

void fake_device_async_event(enum ibv_event_type type, void *element)
{
	struct ibv_async_event ev = {.event_type = type};

	ev.element.qp = element; /* a union: the QP, CQ or SRQ */
	fake_lock();
	async_push(fake_device(), ev);
	fake_unlock();
}

unsigned int fake_device_async_queued(void)
{
	unsigned int n = 0;

	fake_device();
	fake_lock();
	for (unsigned int i = dev_async.head; i != dev_async.tail; i++)
		if (!dev_async.dropped[i % 256])
			n++;
	fake_unlock();
	return n;
}

/* As uverbs does when a QP goes: its events not read yet go with it. */
static void async_drop_qp(struct ibv_qp *qp)
{
	struct fake_async *a = &dev_async;
	char c;

	for (unsigned int i = a->head; i != a->tail; i++) {
		struct ibv_async_event *ev = &a->q[i % 256];

		if (a->dropped[i % 256] || ev->element.qp != qp)
			continue;
		switch (ev->event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_COMM_EST:
		case IBV_EVENT_SQ_DRAINED:
		case IBV_EVENT_PATH_MIG:
		case IBV_EVENT_PATH_MIG_ERR:
		case IBV_EVENT_QP_LAST_WQE_REACHED:
			a->dropped[i % 256] = true;
			stats.async_dropped++;
			if (read(dev.ctx.async_fd, &c, 1) != 1)
				abort();
			break;
		default:
			break;
		}
	}
}

struct ibv_pd *__wrap_ibv_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));

	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->context = ctx;
	fake_lock();
	fake_pds_live++;
	fake_unlock();
	return pd;
}

static bool pd_in_use(struct ibv_pd *pd)
{
	for (struct fake_mr *m = mrs; m; m = m->next)
		if (m->mr.pd == pd)
			return true;
	for (struct fake_mw *w = mws; w; w = w->next)
		if (w->mw.pd == pd)
			return true;
	for (struct fake_qp *q = qps; q; q = q->next)
		if (q->qp.pd == pd)
			return true;
	return false;
}

int __wrap_ibv_dealloc_pd(struct ibv_pd *pd)
{
	fake_lock();
	if (pd_in_use(pd)) {
		stats.pd_busy++;
		fake_unlock();
		return EBUSY;
	}
	free(pd);
	fake_pds_live--;
	fake_unlock();
	return 0;
}

int __wrap_ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct fake_async *a = async_of(ctx);
	ssize_t r;
	char c;

	fake_lock();
	r = read(ctx->async_fd, &c, 1);
	if (r != 1) {
		if (r == 0)
			errno = EIO; /* disassociated: the fd is hung up */
		fake_unlock();
		return -1; /* errno EAGAIN from the non-blocking pipe */
	}
	while (a->dropped[a->head % 256])
		a->head++;
	*ev = a->q[a->head++ % 256];
	fake_unlock();
	return 0;
}

void __wrap_ibv_ack_async_event(struct ibv_async_event *ev)
{
}

/* ---- the fake device ---- */

static bool mw_supported = true;

static struct ibv_mw *fake_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
static int fake_dealloc_mw(struct ibv_mw *mw);
static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int fake_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			      struct ibv_recv_wr **bad);

static void device_init(void)
{
	const char *p = getenv("RR_FAKE_PROVIDER");
	int fds[2];

	if (p && strcmp(p, "mlx5") && strcmp(p, "rxe")) {
		fprintf(stderr, "fake_verbs: RR_FAKE_PROVIDER=%s: rxe or mlx5\n", p);
		abort();
	}
	dev.prov = p && !strcmp(p, "mlx5") ? FAKE_MLX5 : FAKE_RXE;
	dev.ctx.ops.poll_cq = fake_poll_cq;
	dev.ctx.ops.req_notify_cq = fake_req_notify_cq;
	dev.ctx.ops.post_send = fake_post_send;
	dev.ctx.ops.post_recv = fake_post_recv;
	dev.ctx.ops.post_srq_recv = fake_post_srq_recv;
	dev.ctx.ops.alloc_mw = fake_alloc_mw;
	dev.ctx.ops.dealloc_mw = fake_dealloc_mw;
	if (pipe(fds))
		abort();
	dev.ctx.async_fd = fds[0];
	dev_async.wfd = fds[1];
	dev.attr.phys_port_cnt = 1;
	dev.attr.max_pd = 1 << 20;
	dev.attr.max_mr_size = UINT64_MAX;
	if (dev.prov == FAKE_MLX5) {
		/* A ConnectX-5's figures (mlx5_query_device_ex over the
		 * kernel's mlx5_ib_query_device). */
		dev.ctx.ops._compat_cq_event = CQ_EVENT_OP;
		dev.ctx.num_comp_vectors = 4;
		dev.attr.vendor_id = 0x02c9;
		dev.attr.vendor_part_id = 4119;
		dev.attr.max_qp = 1 << 18;
		dev.attr.max_qp_wr = 32768;
		dev.attr.max_sge = 30;
		dev.attr.max_cq = 1 << 24;
		dev.attr.max_cqe = 4194303;
		dev.attr.max_mr = 1 << 24;
		dev.attr.max_qp_rd_atom = 16;
		dev.attr.max_qp_init_rd_atom = 16;
		dev.attr.max_res_rd_atom = 1 << 22;
		dev.attr.max_srq = 1 << 23;
		dev.attr.max_srq_wr = 32767;
		dev.attr.max_srq_sge = 31;
		dev.attr.atomic_cap = IBV_ATOMIC_HCA;
	} else {
		/* The kernel's rxe_param.h. */
		dev.ctx.num_comp_vectors = 1;
		dev.attr.vendor_id = 0xffffff;
		dev.attr.max_qp = 0x10000;
		dev.attr.max_qp_wr = 0x100000;
		dev.attr.max_sge = 32;
		dev.attr.max_cq = 0x4000;
		dev.attr.max_cqe = (1 << 15) - 1;
		dev.attr.max_mr = 0x40000;
		dev.attr.max_qp_rd_atom = 128;
		dev.attr.max_qp_init_rd_atom = 128;
		dev.attr.max_res_rd_atom = 0x3f000;
		dev.attr.max_srq = 0x4000;
		dev.attr.max_srq_wr = 0x100000;
		dev.attr.max_srq_sge = 27;
		dev.attr.atomic_cap = IBV_ATOMIC_HCA;
	}
	dev.ready = true;
}

struct ibv_context *fake_device(void)
{
	fake_lock();
	if (!dev.ready)
		device_init();
	fake_unlock();
	return &dev.ctx;
}

enum fake_provider fake_provider(void)
{
	fake_device();
	return dev.prov;
}

const char *fake_provider_name(void)
{
	return fake_provider() == FAKE_MLX5 ? "mlx5" : "rxe";
}

bool fake_device_dead(void)
{
	return dev.dead;
}

void fake_device_disassociate(void)
{
	fake_lock();
	fake_device();
	if (!dev.dead) {
		async_push(&dev.ctx,
			   (struct ibv_async_event){.element.port_num = 1,
						    .event_type = IBV_EVENT_DEVICE_FATAL});
		/* The read end now says POLLHUP for good, and reads fail. */
		close(dev_async.wfd);
		dev_async.wfd = -1;
		dev.dead = true;
	}
	fake_unlock();
}

void fake_set_mw_supported(bool on)
{
	fake_lock();
	fake_device();
	mw_supported = on;
	dev.ctx.ops.alloc_mw = on ? fake_alloc_mw : NULL;
	fake_unlock();
}

int __wrap_ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr);

int __wrap_ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	if (!is_dev(ctx))
		return EOPNOTSUPP; /* fake_ctx and fake_ctx_rr have no attributes */
	fake_lock();
	*attr = dev.attr;
	fake_unlock();
	return 0;
}

/* ---- memory regions and windows ---- */

struct ibv_mr *__wrap_ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				       unsigned int access);
int __wrap_ibv_dereg_mr(struct ibv_mr *mr);

struct ibv_mr *__wrap_ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				       unsigned int access)
{
	struct fake_mr *m;

	/* The verbs rule: remote write needs local write. */
	if (!pd || !length ||
	    ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	     !(access & IBV_ACCESS_LOCAL_WRITE))) {
		errno = EINVAL;
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	fake_lock();
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.lkey = next_key << 8;
	m->mr.rkey = (next_key << 8) | 0x80;
	next_key++;
	m->iova = iova;
	m->access = (int)access;
	m->next = mrs;
	mrs = m;
	stats.mrs_live++;
	fake_unlock();
	return &m->mr;
}

int __wrap_ibv_dereg_mr(struct ibv_mr *mr)
{
	struct fake_mr **p;

	fake_lock();
	for (p = &mrs; *p && &(*p)->mr != mr; p = &(*p)->next) {
	}
	if (!*p) {
		fprintf(stderr, "fake_verbs: ibv_dereg_mr(%p): no such MR\n", (void *)mr);
		abort();
	}
	for (struct fake_mw *w = mws; w; w = w->next)
		if (w->bound && w->addr >= (*p)->iova && w->addr < (*p)->iova + mr->length) {
			fake_unlock();
			return EBUSY; /* a window is bound to it */
		}
	*p = (*p)->next;
	stats.mrs_live--;
	fake_unlock();
	free(mr);
	return 0;
}

static struct ibv_mw *fake_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct fake_mw *w;

	if (!mw_supported) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		errno = ENOMEM;
		return NULL;
	}
	fake_lock();
	w->mw.context = pd->context;
	w->mw.pd = pd;
	w->mw.rkey = next_key++ << 8;
	w->mw.type = type;
	w->next = mws;
	mws = w;
	stats.mws_live++;
	fake_unlock();
	return &w->mw;
}

static int fake_dealloc_mw(struct ibv_mw *mw)
{
	struct fake_mw **p;

	fake_lock();
	for (p = &mws; *p && &(*p)->mw != mw; p = &(*p)->next) {
	}
	if (!*p) {
		fprintf(stderr, "fake_verbs: ibv_dealloc_mw(%p): no such window\n", (void *)mw);
		abort();
	}
	*p = (*p)->next;
	stats.mws_live--;
	fake_unlock();
	free(mw);
	return 0;
}

static struct fake_mr *mr_by_lkey(struct ibv_pd *pd, uint32_t lkey)
{
	for (struct fake_mr *m = mrs; m; m = m->next)
		if (m->mr.lkey == lkey && m->mr.pd == pd)
			return m;
	return NULL;
}

/* The bytes at raddr/rkey that QP q may touch with @access, or NULL. */
static uint8_t *remote(struct fake_qp *q, uint64_t raddr, uint32_t rkey, size_t len, int access)
{
	for (struct fake_mr *m = mrs; m; m = m->next) {
		if (m->mr.rkey != rkey || m->mr.pd != q->qp.pd || !(m->access & access))
			continue;
		if (raddr < m->iova || raddr - m->iova > m->mr.length ||
		    len > m->mr.length - (raddr - m->iova))
			return NULL;
		return (uint8_t *)m->mr.addr + (raddr - m->iova);
	}
	for (struct fake_mw *w = mws; w; w = w->next) {
		if (!w->bound || w->mw.rkey != rkey || w->mw.pd != q->qp.pd ||
		    !(w->access & (unsigned int)access) || w->qp != &q->qp)
			continue;
		if (raddr < w->addr || raddr - w->addr > w->len || len > w->len - (raddr - w->addr))
			return NULL;
		return (uint8_t *)(uintptr_t)raddr;
	}
	return NULL;
}

/* ---- SRQs ---- */

struct ibv_srq *__wrap_ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
int __wrap_ibv_destroy_srq(struct ibv_srq *srq);

struct ibv_srq *__wrap_ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct fake_srq *s;
	uint32_t n = attr->attr.max_wr;

	if (!is_dev(pd->context) || !n || n > (uint32_t)dev.attr.max_srq_wr ||
	    attr->attr.max_sge > (uint32_t)dev.attr.max_srq_sge) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	if (dev.prov == FAKE_MLX5) {
		/* mlx5 rounds up to a power of two, one WQE kept back. */
		uint32_t p = 1;

		while (p < n + 1)
			p <<= 1;
		n = p - 1;
	}
	attr->attr.max_wr = n;
	s->srq.context = pd->context;
	s->srq.pd = pd;
	s->srq.srq_context = attr->srq_context;
	s->max_wr = n;
	s->tail = &s->head;
	fake_lock();
	stats.srqs_live++;
	fake_unlock();
	return &s->srq;
}

static void free_rwqes(struct fake_rwqe *r)
{
	while (r) {
		struct fake_rwqe *n = r->next;

		free(r);
		r = n;
	}
}

int __wrap_ibv_destroy_srq(struct ibv_srq *srq)
{
	struct fake_srq *s = (struct fake_srq *)srq;

	fake_lock();
	if (s->nqps) {
		fake_unlock();
		return EBUSY;
	}
	/* Its receives go without a completion. */
	free_rwqes(s->head);
	stats.srqs_live--;
	fake_unlock();
	free(s);
	return 0;
}

unsigned int fake_srq_posted(struct ibv_srq *srq)
{
	unsigned int n = 0;

	fake_lock();
	for (struct fake_rwqe *r = ((struct fake_srq *)srq)->head; r; r = r->next)
		n++;
	fake_unlock();
	return n;
}

unsigned int fake_srq_room(struct ibv_srq *srq)
{
	struct fake_srq *s = (struct fake_srq *)srq;
	unsigned int n;

	fake_lock();
	n = s->max_wr - s->used;
	fake_unlock();
	return n;
}

/* ---- QPs and the wire between two of them ---- */

static struct fake_qp *fqp(struct ibv_qp *qp)
{
	return (struct fake_qp *)qp;
}

enum ibv_qp_state fake_qp_state(struct ibv_qp *qp)
{
	return qp->state;
}

static struct fake_posts posts_of(struct fake_postq *pq)
{
	struct fake_posts n;

	fake_lock();
	n = pq->n;
	fake_unlock();
	return n;
}

struct fake_posts fake_qp_send_posts(struct ibv_qp *qp)
{
	return posts_of(&fqp(qp)->send_posts);
}

struct fake_posts fake_qp_recv_posts(struct ibv_qp *qp)
{
	return posts_of(&fqp(qp)->recv_posts);
}

struct fake_posts fake_srq_posts(struct ibv_srq *srq)
{
	return posts_of(&((struct fake_srq *)srq)->posts);
}

static void arm_refusal(struct fake_postq *pq, unsigned int at, int err)
{
	fake_lock();
	pq->fail = true;
	pq->fail_at = at;
	pq->fail_err = err;
	fake_unlock();
}

void fake_refuse_send(struct ibv_qp *qp, unsigned int at, int err)
{
	arm_refusal(&fqp(qp)->send_posts, at, err);
}

void fake_refuse_recv(struct ibv_qp *qp, unsigned int at, int err)
{
	arm_refusal(&fqp(qp)->recv_posts, at, err);
}

void fake_refuse_srq_recv(struct ibv_srq *srq, unsigned int at, int err)
{
	arm_refusal(&((struct fake_srq *)srq)->posts, at, err);
}

unsigned int fake_qp_sq_waiting(struct ibv_qp *qp)
{
	unsigned int n = 0;

	fake_lock();
	for (struct fake_wqe *w = fqp(qp)->sq; w; w = w->next)
		n++;
	fake_unlock();
	return n;
}

struct ibv_qp *fake_qp_create(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct fake_qp *q;
	struct ibv_qp_cap *cap = &attr->cap;

	if (!pd || !is_dev(pd->context) || !attr->send_cq || !attr->recv_cq ||
	    attr->qp_type != IBV_QPT_RC || cap->max_send_wr > (uint32_t)dev.attr.max_qp_wr ||
	    cap->max_recv_wr > (uint32_t)dev.attr.max_qp_wr ||
	    cap->max_send_sge > (uint32_t)dev.attr.max_sge ||
	    cap->max_recv_sge > (uint32_t)dev.attr.max_sge || cap->max_inline_data > 512) {
		errno = EINVAL;
		return NULL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	fake_lock();
	q->qp.context = pd->context;
	q->qp.qp_context = attr->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.srq = attr->srq;
	q->qp.qp_num = next_qpn++;
	q->qp.state = IBV_QPS_INIT; /* rdma_create_qp() takes it to INIT */
	q->qp.qp_type = IBV_QPT_RC;
	q->srq = (struct fake_srq *)attr->srq;
	q->sig_all = attr->sq_sig_all;
	if (dev.prov == FAKE_MLX5) {
		/* Rounded up to powers of two, as mlx5's WQ sizes. */
		uint32_t s = 1, r = 1;

		while (s < cap->max_send_wr)
			s <<= 1;
		while (r < cap->max_recv_wr)
			r <<= 1;
		cap->max_send_wr = s;
		cap->max_recv_wr = attr->srq ? 0 : r;
	}
	q->max_send = cap->max_send_wr;
	q->max_recv = attr->srq ? 0 : cap->max_recv_wr;
	q->max_inline = cap->max_inline_data;
	q->sq_tail = &q->sq;
	q->rq_tail = &q->rq;
	fake_cq_of(attr->send_cq)->nqps++;
	fake_cq_of(attr->recv_cq)->nqps++;
	if (q->srq)
		q->srq->nqps++;
	q->next = qps;
	qps = q;
	q->hnext = qp_hash[q->qp.qp_num % QP_HASH];
	qp_hash[q->qp.qp_num % QP_HASH] = q;
	stats.qps_live++;
	stats.qps_created++;
	fake_unlock();
	return &q->qp;
}

static void push(struct fake_qp *q, struct ibv_cq *cq, struct fake_cqe e)
{
	e.wc.qp_num = q->qp.qp_num;
	push_cqe(fake_cq_of(cq), &e);
}

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case IBV_WR_BIND_MW:
		return IBV_WC_BIND_MW;
	case IBV_WR_LOCAL_INV:
		return IBV_WC_LOCAL_INV;
	default:
		return IBV_WC_SEND;
	}
}

/* The SQ's oldest WQE is done: its completion if it asked for one (an
 * error always makes one); rxe frees its slot now, mlx5 at the poll. */
static void send_done(struct fake_qp *q, enum ibv_wc_status status, uint32_t byte_len)
{
	struct fake_wqe *w = q->sq;

	q->sq = w->next;
	if (!q->sq)
		q->sq_tail = &q->sq;
	if (w->signalled || q->sig_all || status != IBV_WC_SUCCESS)
		push(q, q->qp.send_cq,
		     (struct fake_cqe){.wc = {.wr_id = w->wr_id,
					      .status = status,
					      .opcode = wc_opcode(w->op),
					      .byte_len = byte_len},
				       .send = true,
				       .sq_seq = w->seq});
	if (dev.prov == FAKE_RXE)
		q->sq_freed++;
	free(w->inl);
	free(w);
}

/* Receive completions held back (fake_hold_recvs()). */
#define FAKE_HELD_RECVS 16
static bool hold_recvs;
static struct {
	struct fake_qp *q;
	struct fake_cqe e;
} held_recvs[FAKE_HELD_RECVS];
static unsigned int nheld_recvs;

void fake_hold_recvs(bool on)
{
	fake_lock();
	hold_recvs = on;
	fake_unlock();
}

void fake_release_recvs(void)
{
	fake_lock();
	for (unsigned int i = 0; i < nheld_recvs; i++) {
		struct fake_qp *q = held_recvs[i].q;

		if (fake_qp_alive(&q->qp))
			push(q, q->qp.recv_cq, held_recvs[i].e);
	}
	nheld_recvs = 0;
	fake_unlock();
}

static void recv_done(struct fake_qp *q, struct fake_rwqe *r, struct fake_cqe e)
{
	e.wc.wr_id = r->wr_id;
	if (q->srq) {
		/* rxe frees the SRQ slot once taken; mlx5 at the poll. */
		if (dev.prov == FAKE_RXE)
			q->srq->used--;
		else
			e.srq = q->srq;
	} else {
		q->rq_used--;
	}
	free(r);
	if (hold_recvs) {
		if (nheld_recvs == FAKE_HELD_RECVS)
			abort();
		held_recvs[nheld_recvs].q = q;
		held_recvs[nheld_recvs++].e = e;
		return;
	}
	push(q, q->qp.recv_cq, e);
}

void fake_qp_to_error(struct ibv_qp *qp)
{
	struct fake_qp *q = fqp(qp);
	bool was;

	fake_lock();
	was = qp->state == IBV_QPS_ERR;
	qp->state = IBV_QPS_ERR;
	/* Everything queued is flushed, each with a completion. */
	while (q->sq)
		send_done(q, IBV_WC_WR_FLUSH_ERR, 0);
	while (q->rq) {
		struct fake_rwqe *r = q->rq;

		q->rq = r->next;
		recv_done(q, r,
			  (struct fake_cqe){
				  .wc = {.status = IBV_WC_WR_FLUSH_ERR, .opcode = IBV_WC_RECV}});
	}
	q->rq_tail = &q->rq;
	/* mlx5: the SRQ's receives are not ours to flush; the last WQE
	 * this QP took from it is reported instead. */
	if (!was && q->srq && dev.prov == FAKE_MLX5) {
		stats.last_wqe_events++;
		async_push(qp->context,
			   (struct ibv_async_event){.element.qp = qp,
						    .event_type = IBV_EVENT_QP_LAST_WQE_REACHED});
	}
	fake_unlock();
}

static void both_to_error(struct fake_qp *q, struct fake_qp *peer)
{
	fake_qp_to_error(&q->qp);
	if (peer)
		fake_qp_to_error(&peer->qp);
}

/* Gather the WQE's bytes; false on a local protection error. */
static bool gather(struct fake_qp *q, struct fake_wqe *w, uint8_t **out, uint32_t *len)
{
	uint32_t n = 0, off = 0;
	uint8_t *buf;

	if (w->inl) {
		*out = w->inl;
		*len = w->inl_len;
		w->inl = NULL;
		return true;
	}
	for (int i = 0; i < w->nsge; i++) {
		struct fake_mr *m = mr_by_lkey(q->qp.pd, w->sge[i].lkey);
		uintptr_t a = (uintptr_t)w->sge[i].addr, s;

		if (!m)
			return false;
		s = (uintptr_t)m->mr.addr;
		if (a < s || a - s > m->mr.length || w->sge[i].length > m->mr.length - (a - s))
			return false;
		n += w->sge[i].length;
	}
	buf = malloc(n ? n : 1);
	if (!buf)
		abort();
	for (int i = 0; i < w->nsge; i++) {
		memcpy(buf + off, (void *)(uintptr_t)w->sge[i].addr, w->sge[i].length);
		off += w->sge[i].length;
	}
	*out = buf;
	*len = n;
	return true;
}

/* Scatter into a receive's (or a READ's) SGEs; false if they are too
 * short or not registered. */
static bool scatter(struct fake_qp *q, const struct ibv_sge *sge, int nsge, const uint8_t *buf,
		    uint32_t len)
{
	uint32_t room = 0, off = 0;

	for (int i = 0; i < nsge; i++) {
		struct fake_mr *m = mr_by_lkey(q->qp.pd, sge[i].lkey);
		uintptr_t a = (uintptr_t)sge[i].addr, s;

		if (!m || !(m->access & IBV_ACCESS_LOCAL_WRITE))
			return false;
		s = (uintptr_t)m->mr.addr;
		if (a < s || a - s > m->mr.length || sge[i].length > m->mr.length - (a - s))
			return false;
		room += sge[i].length;
	}
	if (room < len)
		return false;
	for (int i = 0; i < nsge && off < len; i++) {
		uint32_t k = len - off < sge[i].length ? len - off : sge[i].length;

		memcpy((void *)(uintptr_t)sge[i].addr, buf + off, k);
		off += k;
	}
	return true;
}

/* The peer's next receive: from its SRQ or its own RQ. */
static struct fake_rwqe *take_recv(struct fake_qp *p)
{
	struct fake_rwqe *r;

	if (p->srq) {
		r = p->srq->head;
		if (r && !(p->srq->head = r->next))
			p->srq->tail = &p->srq->head;
		return r;
	}
	r = p->rq;
	if (r && !(p->rq = r->next))
		p->rq_tail = &p->rq;
	return r;
}

static bool has_recv(struct fake_qp *p)
{
	return p->srq ? p->srq->head != NULL : p->rq != NULL;
}

/* Execute the SQ's oldest WQE; false when it must wait (RNR: the peer
 * has no receive posted; the QP retries for ever, rnr_retry 7). */
static bool execute(struct fake_qp *q)
{
	struct fake_wqe *w = q->sq;
	struct fake_qp *p = q->peer;
	uint8_t *buf = NULL, *dst;
	uint32_t len = 0;
	struct fake_rwqe *r;

	if (q->qp.state == IBV_QPS_ERR) {
		send_done(q, IBV_WC_WR_FLUSH_ERR, 0);
		return true;
	}
	if (w->op == IBV_WR_BIND_MW) {
		struct fake_mw *mw = (struct fake_mw *)w->mw;

		mw->bound = true;
		mw->qp = &q->qp;
		mw->mw.rkey = w->mw_rkey;
		mw->addr = w->bind.addr;
		mw->len = w->bind.length;
		mw->access = w->bind.mw_access_flags;
		send_done(q, IBV_WC_SUCCESS, 0);
		return true;
	}
	if (w->op == IBV_WR_LOCAL_INV) {
		for (struct fake_mw *mw = mws; mw; mw = mw->next)
			if (mw->bound && mw->mw.rkey == w->inv_rkey && mw->mw.pd == q->qp.pd) {
				mw->bound = false;
				send_done(q, IBV_WC_SUCCESS, 0);
				return true;
			}
		send_done(q, IBV_WC_MW_BIND_ERR, 0);
		fake_qp_to_error(&q->qp);
		return true;
	}
	/* No peer to answer: the transport retries run out. */
	if (!p || p->qp.state == IBV_QPS_ERR || p->qp.state == IBV_QPS_RESET) {
		send_done(q, IBV_WC_RETRY_EXC_ERR, 0);
		fake_qp_to_error(&q->qp);
		return true;
	}
	if ((w->op == IBV_WR_SEND || w->op == IBV_WR_SEND_WITH_IMM ||
	     w->op == IBV_WR_RDMA_WRITE_WITH_IMM) &&
	    !has_recv(p))
		return false;
	if (w->op == IBV_WR_RDMA_READ) {
		uint32_t n = 0;

		for (int i = 0; i < w->nsge; i++)
			n += w->sge[i].length;
		dst = remote(p, w->raddr, w->rkey, n, IBV_ACCESS_REMOTE_READ);
		if (!dst) {
			send_done(q, IBV_WC_REM_ACCESS_ERR, 0);
			both_to_error(q, p);
			return true;
		}
		if (!scatter(q, w->sge, w->nsge, dst, n)) {
			send_done(q, IBV_WC_LOC_PROT_ERR, 0);
			fake_qp_to_error(&q->qp);
			return true;
		}
		send_done(q, IBV_WC_SUCCESS, n);
		return true;
	}
	if (!gather(q, w, &buf, &len)) {
		send_done(q, IBV_WC_LOC_PROT_ERR, 0);
		fake_qp_to_error(&q->qp);
		return true;
	}
	if (w->op == IBV_WR_RDMA_WRITE || w->op == IBV_WR_RDMA_WRITE_WITH_IMM) {
		dst = remote(p, w->raddr, w->rkey, len, IBV_ACCESS_REMOTE_WRITE);
		if (!dst) {
			free(buf);
			send_done(q, IBV_WC_REM_ACCESS_ERR, 0);
			both_to_error(q, p);
			return true;
		}
		memcpy(dst, buf, len);
		free(buf);
		if (w->op == IBV_WR_RDMA_WRITE_WITH_IMM) {
			r = take_recv(p);
			recv_done(p, r,
				  (struct fake_cqe){.wc = {.status = IBV_WC_SUCCESS,
							   .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
							   .byte_len = len,
							   .imm_data = w->imm,
							   .wc_flags = IBV_WC_WITH_IMM,
							   .src_qp = q->qp.qp_num}});
		}
		send_done(q, IBV_WC_SUCCESS, 0);
		return true;
	}
	/* SEND */
	r = take_recv(p);
	if (!scatter(p, r->sge, r->nsge, buf, len)) {
		free(buf);
		recv_done(p, r,
			  (struct fake_cqe){
				  .wc = {.status = IBV_WC_LOC_LEN_ERR, .opcode = IBV_WC_RECV}});
		send_done(q, IBV_WC_REM_INV_REQ_ERR, 0);
		both_to_error(q, p);
		return true;
	}
	free(buf);
	recv_done(p, r,
		  (struct fake_cqe){
			  .wc = {.status = IBV_WC_SUCCESS,
				 .opcode = IBV_WC_RECV,
				 .byte_len = len,
				 .imm_data = w->imm,
				 .wc_flags = w->op == IBV_WR_SEND_WITH_IMM ? IBV_WC_WITH_IMM : 0,
				 .src_qp = q->qp.qp_num}});
	send_done(q, IBV_WC_SUCCESS, 0);
	return true;
}

/* Run every SQ as far as it goes: a receive posted anywhere may let a
 * waiting SEND through. */
static void progress(void)
{
	bool moved = true;

	while (moved) {
		moved = false;
		for (struct fake_qp *q = qps; q; q = q->next)
			while (q->sq &&
			       (q->qp.state == IBV_QPS_RTS || q->qp.state == IBV_QPS_ERR) &&
			       execute(q))
				moved = true;
	}
}

void fake_qp_connect(struct ibv_qp *a, struct ibv_qp *b)
{
	fake_lock();
	fqp(a)->peer = fqp(b);
	fqp(b)->peer = fqp(a);
	if (a->state != IBV_QPS_ERR)
		a->state = IBV_QPS_RTS;
	if (b->state != IBV_QPS_ERR)
		b->state = IBV_QPS_RTS;
	progress();
	fake_unlock();
}

/* mlx5's __mlx5_cq_clean(): the QP's completions leave the CQ; an SRQ
 * receive among them goes back to the SRQ as a free WQE. */
static void cq_clean(struct fake_cq *fc, uint32_t qpn)
{
	unsigned int k = fc->head;

	for (unsigned int i = fc->head; i != fc->tail; i++) {
		struct fake_cqe *e = &fc->q[i % FAKE_MAX_WC];

		if (e->wc.qp_num != qpn) {
			fc->q[k++ % FAKE_MAX_WC] = *e;
			continue;
		}
		fc->purged++;
		stats.cqes_purged++;
		if (e->srq) {
			e->srq->used--;
			stats.srq_wqes_returned++;
		}
	}
	fc->tail = k;
}

int fake_qp_destroy(struct ibv_qp *qp)
{
	struct fake_qp *q = fqp(qp), **p;

	fake_lock();
	for (p = &qps; *p && *p != q; p = &(*p)->next) {
	}
	if (!*p) {
		fprintf(stderr, "fake_verbs: destroying QP %p that does not exist\n", (void *)qp);
		abort();
	}
	*p = q->next;
	for (p = &qp_hash[qp->qp_num % QP_HASH]; *p != q; p = &(*p)->hnext) {
	}
	*p = q->hnext;
	if (dev.prov == FAKE_MLX5) {
		cq_clean(fake_cq_of(qp->send_cq), qp->qp_num);
		if (qp->recv_cq != qp->send_cq)
			cq_clean(fake_cq_of(qp->recv_cq), qp->qp_num);
	}
	async_drop_qp(qp);
	/* Work still queued goes without a completion. */
	while (q->sq) {
		struct fake_wqe *w = q->sq;

		q->sq = w->next;
		free(w->inl);
		free(w);
	}
	free_rwqes(q->rq);
	if (q->peer)
		q->peer->peer = NULL;
	for (struct fake_mw *w = mws; w; w = w->next)
		if (w->qp == qp)
			w->qp = NULL;
	fake_cq_of(qp->send_cq)->nqps--;
	fake_cq_of(qp->recv_cq)->nqps--;
	if (q->srq)
		q->srq->nqps--;
	stats.qps_live--;
	fake_unlock();
	free(q);
	return 0;
}

bool fake_qp_alive(const struct ibv_qp *qp)
{
	bool alive = false;

	fake_lock();
	for (struct fake_qp *q = qps; q && !alive; q = q->next)
		alive = &q->qp == qp;
	fake_unlock();
	return alive;
}

int __wrap_ibv_destroy_qp(struct ibv_qp *qp);

int __wrap_ibv_destroy_qp(struct ibv_qp *qp)
{
	return fake_qp_destroy(qp);
}

int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);

int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	if (!(mask & IBV_QP_STATE))
		return 0;
	fake_lock();
	if (attr->qp_state == IBV_QPS_ERR)
		fake_qp_to_error(qp);
	else
		qp->state = attr->qp_state;
	progress();
	fake_unlock();
	return 0;
}

static void post_call(struct fake_postq *pq, unsigned int nwr)
{
	pq->n.calls++;
	pq->n.last_step = ++fake_steps;
	if (nwr > pq->n.max_chain)
		pq->n.max_chain = nwr;
}

/* Does the armed refusal hit work request @i of this call? */
static bool refuse_at(struct fake_postq *pq, unsigned int i, int *rc)
{
	if (!pq->fail || pq->fail_at != i)
		return false;
	pq->fail = false;
	*rc = pq->fail_err;
	return true;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fake_qp *q = fqp(qp);
	unsigned int nwr = 0, k = 0;
	int rc = 0;

	doorbell(qp->context);
	fake_lock();
	for (struct ibv_send_wr *x = wr; x; x = x->next) {
		nwr++;
		if (!x->next && !(q->sig_all || (x->send_flags & IBV_SEND_SIGNALED)))
			q->send_posts.n.last_unsignalled++;
	}
	post_call(&q->send_posts, nwr);
	for (; wr; wr = wr->next, k++) {
		struct fake_wqe *w;
		uint32_t len = 0;

		if (refuse_at(&q->send_posts, k, &rc))
			break;
		if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) {
			rc = EINVAL;
			break;
		}
		/* Providers refuse a WQE beyond the SQ's depth. */
		if (q->sq_posted - q->sq_freed >= q->max_send) {
			rc = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || wr->num_sge > 4) {
			rc = EINVAL;
			break;
		}
		for (int i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		if ((wr->send_flags & IBV_SEND_INLINE) && len > q->max_inline) {
			rc = EINVAL;
			break;
		}
		w = calloc(1, sizeof(*w));
		if (!w)
			abort();
		w->wr_id = wr->wr_id;
		w->op = wr->opcode;
		w->signalled = wr->send_flags & IBV_SEND_SIGNALED;
		q->send_posts.n.wrs++;
		if (w->signalled || q->sig_all)
			q->send_posts.n.signalled++;
		w->seq = q->sq_posted++;
		w->nsge = wr->num_sge;
		if (wr->num_sge) /* a bind or invalidate may have no list */
			memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(w->sge[0]));
		w->raddr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		w->imm = wr->imm_data;
		if (wr->opcode == IBV_WR_BIND_MW) {
			w->mw = wr->bind_mw.mw;
			w->mw_rkey = wr->bind_mw.rkey;
			w->bind = wr->bind_mw.bind_info;
		}
		if (wr->opcode == IBV_WR_LOCAL_INV)
			w->inv_rkey = wr->invalidate_rkey;
		if (wr->send_flags & IBV_SEND_INLINE) {
			uint32_t off = 0;

			w->inl = malloc(len ? len : 1);
			if (!w->inl)
				abort();
			for (int i = 0; i < wr->num_sge; i++) {
				memcpy(w->inl + off, (void *)(uintptr_t)wr->sg_list[i].addr,
				       wr->sg_list[i].length);
				off += wr->sg_list[i].length;
			}
			w->inl_len = len;
		}
		*q->sq_tail = w;
		q->sq_tail = &w->next;
	}
	if (rc && bad)
		*bad = wr;
	progress();
	fake_unlock();
	return rc;
}

static struct fake_rwqe *rwqe(const struct ibv_recv_wr *wr)
{
	struct fake_rwqe *r;

	if (wr->num_sge < 0 || wr->num_sge > 4)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		abort();
	r->wr_id = wr->wr_id;
	r->nsge = wr->num_sge;
	if (wr->num_sge)
		memcpy(r->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(r->sge[0]));
	return r;
}

static unsigned int recv_chain_len(const struct ibv_recv_wr *wr)
{
	unsigned int n = 0;

	for (; wr; wr = wr->next)
		n++;
	return n;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fake_qp *q = fqp(qp);
	unsigned int i = 0;
	int rc = 0;

	doorbell(qp->context);
	fake_lock();
	post_call(&q->recv_posts, recv_chain_len(wr));
	for (; wr; wr = wr->next, i++) {
		struct fake_rwqe *r;

		if (refuse_at(&q->recv_posts, i, &rc))
			break;
		if (q->srq || qp->state == IBV_QPS_RESET) {
			rc = EINVAL;
			break;
		}
		if (q->rq_used >= q->max_recv) {
			rc = ENOMEM;
			break;
		}
		r = rwqe(wr);
		if (!r) {
			rc = EINVAL;
			break;
		}
		q->rq_used++;
		q->recv_posts.n.wrs++;
		*q->rq_tail = r;
		q->rq_tail = &r->next;
		if (qp->state == IBV_QPS_ERR) {
			/* Flushed at once, as on a QP in error. */
			q->rq = NULL;
			q->rq_tail = &q->rq;
			recv_done(q, r,
				  (struct fake_cqe){.wc = {.status = IBV_WC_WR_FLUSH_ERR,
							   .opcode = IBV_WC_RECV}});
		}
	}
	if (rc && bad)
		*bad = wr;
	progress();
	fake_unlock();
	return rc;
}

static int fake_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fake_srq *s = (struct fake_srq *)srq;
	unsigned int i = 0;
	int rc = 0;

	doorbell(srq->context);
	fake_lock();
	post_call(&s->posts, recv_chain_len(wr));
	for (; wr; wr = wr->next, i++) {
		struct fake_rwqe *r;

		if (refuse_at(&s->posts, i, &rc))
			break;
		if (s->used >= s->max_wr) {
			rc = ENOMEM;
			break;
		}
		r = rwqe(wr);
		if (!r) {
			rc = EINVAL;
			break;
		}
		s->used++;
		s->posts.n.wrs++;
		*s->tail = r;
		s->tail = &r->next;
	}
	if (rc && bad)
		*bad = wr;
	progress();
	fake_unlock();
	return rc;
}

/* Counts the library's clock reads: where the clock is a syscall each one
 * costs about what a hybrid window saves. */
unsigned int fake_clock_reads;

int __real_clock_gettime(clockid_t clk, struct timespec *ts);
int __wrap_clock_gettime(clockid_t clk, struct timespec *ts);

static uint64_t clock_offset_ns; /* fake_clock_advance() */

void fake_clock_advance(uint64_t ns)
{
	__atomic_fetch_add(&clock_offset_ns, ns, __ATOMIC_RELAXED);
}

int __wrap_clock_gettime(clockid_t clk, struct timespec *ts)
{
	uint64_t off = __atomic_load_n(&clock_offset_ns, __ATOMIC_RELAXED);
	int rc;

	__atomic_fetch_add(&fake_clock_reads, 1, __ATOMIC_RELAXED);
	rc = __real_clock_gettime(clk, ts);
	if (rc == 0 && off && clk == CLOCK_MONOTONIC) {
		uint64_t ns = (uint64_t)ts->tv_nsec + off % 1000000000u;

		ts->tv_sec += (time_t)(off / 1000000000u + ns / 1000000000u);
		ts->tv_nsec = (long)(ns % 1000000000u);
	}
	return rc;
}

unsigned int fake_get_events;

int __real_io_uring_submit_and_get_events(struct io_uring *ring);
int __wrap_io_uring_submit_and_get_events(struct io_uring *ring);

int __wrap_io_uring_submit_and_get_events(struct io_uring *ring)
{
	__atomic_fetch_add(&fake_get_events, 1, __ATOMIC_RELAXED);
	return __real_io_uring_submit_and_get_events(ring);
}

unsigned int fake_waits;

int __real_io_uring_submit_and_wait(struct io_uring *ring, unsigned int wait_nr);
int __wrap_io_uring_submit_and_wait(struct io_uring *ring, unsigned int wait_nr);
int __real_io_uring_submit_and_wait_timeout(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
					    unsigned int wait_nr, struct __kernel_timespec *ts,
					    sigset_t *sigmask);
int __wrap_io_uring_submit_and_wait_timeout(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
					    unsigned int wait_nr, struct __kernel_timespec *ts,
					    sigset_t *sigmask);

void (*fake_before_wait)(void);

int __wrap_io_uring_submit_and_wait(struct io_uring *ring, unsigned int wait_nr)
{
	__atomic_fetch_add(&fake_waits, 1, __ATOMIC_RELAXED);
	if (fake_before_wait)
		fake_before_wait();
	return __real_io_uring_submit_and_wait(ring, wait_nr);
}

int __wrap_io_uring_submit_and_wait_timeout(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
					    unsigned int wait_nr, struct __kernel_timespec *ts,
					    sigset_t *sigmask)
{
	__atomic_fetch_add(&fake_waits, 1, __ATOMIC_RELAXED);
	if (fake_before_wait)
		fake_before_wait();
	return __real_io_uring_submit_and_wait_timeout(ring, cqe_ptr, wait_nr, ts, sigmask);
}

/* The library's own min-wait io_uring_enter() (6.12): a wait like the two
 * above; with IORING_ENTER_GETEVENTS only, as the library makes no other
 * io_uring_enter2() call. */
int __real_io_uring_enter2(unsigned int fd, unsigned int to_submit, unsigned int min_complete,
			   unsigned int flags, sigset_t *sig, size_t sz);
int __wrap_io_uring_enter2(unsigned int fd, unsigned int to_submit, unsigned int min_complete,
			   unsigned int flags, sigset_t *sig, size_t sz);

int __wrap_io_uring_enter2(unsigned int fd, unsigned int to_submit, unsigned int min_complete,
			   unsigned int flags, sigset_t *sig, size_t sz)
{
	if (flags & IORING_ENTER_GETEVENTS) {
		__atomic_fetch_add(&fake_waits, 1, __ATOMIC_RELAXED);
		if (fake_before_wait)
			fake_before_wait();
	}
	return __real_io_uring_enter2(fd, to_submit, min_complete, flags, sig, sz);
}
