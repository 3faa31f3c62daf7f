// SPDX-License-Identifier: MIT
/*
 * An embedding loop written the way liburing users write one, and no
 * rr_bridge_flush(): io_uring_submit_and_wait(), io_uring_for_each_cqe(),
 * rr_bridge_handle_cqe(), io_uring_cq_advance(). On a 4-entry ring the
 * application keeps long-lived requests in flight (reads of pipes nobody
 * writes until later, a TCP echo on 127.0.0.1) and, in the callback of
 * each RDMA ping-pong round, fills the SQ with file reads: the bridge then
 * meets a full SQ whenever it must write an SQE. It used to owe that SQE
 * to a flush that never came and wait for ever; a missing flush must cost
 * latency at most. A watchdog turns a hang (a period without a round)
 * into a failure.
 *
 * Built twice: for the unit suite over the fake provider (RR_TEST_FAKE,
 * on 127.0.0.1) and for the rdma suite on a real device. Both run per
 * ring flavour (RR_TEST_RING_FLAGS, see tests/support/test_ring.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <ringrdma.h>

#include "test_ring.h"
#ifndef RR_TEST_FAKE
#include "require.h"
#define ROUNDS_DEFAULT 2000 /* TCG and Soft-RoCE: slow rounds */
/* Seconds without a round that count as a hang. */
#define WATCHDOG_S 120
#else
#define ROUNDS_DEFAULT 20000
#define WATCHDOG_S     30
#endif

#define RING_ENTRIES 4
#define MSG	     64
#define NPIPES	     3
#define NBUFS	     16 /* per kind of in-flight application request */
#define FILE_WORDS   512

/* Application user_data: kind << 32 | index; small, never the tag. */
enum {
	UD_PIPE = 1,
	UD_B_RECV, /* the echo server's receive */
	UD_B_SEND, /* its echo */
	UD_A_RECV, /* the client's receive of the echo */
	UD_A_SEND, /* the client's message, one a round */
	UD_FILE,   /* a file read */
};

#define UD(kind, i) (((uint64_t)(kind) << 32) | (uint32_t)(i))

static struct {
	struct io_uring ring;
	rr_bridge *b;
	rr_listener *l;
	rr_ep *cli, *srv;
	struct ibv_mr *mr;
	uint8_t *buf; /* 4 slots: cli send, cli recv, srv recv, srv send */
	int connects, connect_status;
	volatile unsigned int rounds;
	unsigned int target;
	const char *failed;
	volatile sig_atomic_t hung;
	unsigned int seen; /* progress() at the last alarm */
	/* the application's own work */
	int pipes[NPIPES][2];
	char pipe_buf[NPIPES];
	int tcp_a, tcp_b;
	uint8_t b_buf[MSG], a_buf[MSG];
	uint8_t echo[NBUFS][MSG];
	unsigned int echoes, echoes_inflight;
	uint64_t sent[NBUFS];
	unsigned int a_sends, a_sends_inflight;
	uint64_t tcp_sent, tcp_echoed; /* bytes */
	int file_fd;
	uint64_t file_buf[NBUFS];
	unsigned int file_reads, file_inflight, file_done;
	unsigned int pipe_reads;
} L;

static unsigned int progress(void)
{
	return L.rounds + (unsigned int)L.connects + (L.srv != NULL);
}

/*
 * A hang is a period without progress, whatever the pace (an SQPOLL
 * thread on a loaded machine is slow, not stuck). No SA_RESTART: the
 * loop's wait returns -EINTR and reports where it hung; if it does not
 * come back, the next alarm ends the process.
 */
static void watchdog(int sig)
{
	static const char msg[] = "watchdog: the loop did not come back\n";

	(void)sig;
	if (L.hung) {
		if (write(2, msg, sizeof(msg) - 1) < 0) {
		}
		abort();
	}
	if (progress() == L.seen)
		L.hung = 1;
	L.seen = progress();
	alarm(L.hung ? 10 : WATCHDOG_S);
}

static void arm_watchdog(void)
{
	struct sigaction sa = {.sa_handler = watchdog};

	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGALRM, &sa, NULL), 0);
	alarm(WATCHDOG_S);
}

static void fail(const char *why)
{
	if (!L.failed)
		L.failed = why;
}

/* The liburing idiom: no SQE free, submit and take one. */
static struct io_uring_sqe *app_sqe(void)
{
	struct io_uring_sqe *sqe;

	while (!(sqe = io_uring_get_sqe(&L.ring))) {
		int rc = io_uring_submit(&L.ring);

		if (rc < 0 && rc != -EAGAIN && rc != -EBUSY && rc != -EINTR)
			cr_assert_fail("io_uring_submit: %s", strerror(-rc));
		if (L.ring.flags & IORING_SETUP_SQPOLL)
			io_uring_sqring_wait(&L.ring);
	}
	return sqe;
}

static void queue_pipe_read(int i)
{
	struct io_uring_sqe *sqe = app_sqe();

	io_uring_prep_read(sqe, L.pipes[i][0], &L.pipe_buf[i], 1, (uint64_t)-1);
	io_uring_sqe_set_data64(sqe, UD(UD_PIPE, i));
}

static void queue_recv(int fd, uint8_t *buf, int kind)
{
	struct io_uring_sqe *sqe = app_sqe();

	io_uring_prep_recv(sqe, fd, buf, MSG, 0);
	io_uring_sqe_set_data64(sqe, UD(kind, 0));
}

static void queue_send(int fd, const void *buf, size_t len, int kind)
{
	struct io_uring_sqe *sqe = app_sqe();

	io_uring_prep_send(sqe, fd, buf, len, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, UD(kind, 0));
}

static void queue_file_read(void)
{
	unsigned int i = L.file_reads++ % NBUFS;
	unsigned int word = (L.file_reads * 7) % FILE_WORDS;
	struct io_uring_sqe *sqe = app_sqe();

	L.file_buf[i] = ~0ull;
	io_uring_prep_read(sqe, L.file_fd, &L.file_buf[i], sizeof(uint64_t),
			   (uint64_t)word * sizeof(uint64_t));
	io_uring_sqe_set_data64(sqe, UD(UD_FILE, i | word << 8));
	L.file_inflight++;
}

/* Work the application does each round: wake one pipe reader (later
 * than its read was queued), a TCP message to echo, and file reads in
 * every SQE left, so the SQ is full when the callback returns. */
static void app_round(void)
{
	unsigned int s = L.a_sends++ % NBUFS;

	if (write(L.pipes[L.rounds % NPIPES][1], "x", 1) != 1)
		fail("pipe write");
	if (L.a_sends_inflight >= NBUFS)
		fail("TCP sends pile up");
	L.sent[s] = L.rounds;
	L.a_sends_inflight++;
	queue_send(L.tcp_a, &L.sent[s], sizeof(uint64_t), UD_A_SEND);
	L.tcp_sent += sizeof(uint64_t);
	while (io_uring_sq_space_left(&L.ring) && L.file_inflight < NBUFS)
		queue_file_read();
}

static void app_cqe(const struct io_uring_cqe *cqe)
{
	unsigned int kind = (unsigned int)(cqe->user_data >> 32);
	unsigned int idx = (uint32_t)cqe->user_data;
	unsigned int e;

	switch (kind) {
	case UD_PIPE:
		if (cqe->res != 1)
			fail("pipe read");
		L.pipe_reads++;
		queue_pipe_read((int)idx);
		break;
	case UD_B_RECV:
		if (cqe->res <= 0) {
			fail("echo server recv");
			break;
		}
		/* Echo what came, from a buffer of its own. */
		if (L.echoes_inflight >= NBUFS) {
			fail("echoes pile up");
			break;
		}
		e = L.echoes++ % NBUFS;
		memcpy(L.echo[e], L.b_buf, (size_t)cqe->res);
		L.echoes_inflight++;
		queue_send(L.tcp_b, L.echo[e], (size_t)cqe->res, UD_B_SEND);
		queue_recv(L.tcp_b, L.b_buf, UD_B_RECV);
		break;
	case UD_B_SEND:
		L.echoes_inflight--;
		if (cqe->res <= 0)
			fail("echo send");
		break;
	case UD_A_RECV:
		if (cqe->res <= 0) {
			fail("echo recv");
			break;
		}
		L.tcp_echoed += (uint64_t)cqe->res;
		queue_recv(L.tcp_a, L.a_buf, UD_A_RECV);
		break;
	case UD_A_SEND:
		L.a_sends_inflight--;
		if (cqe->res != sizeof(uint64_t))
			fail("TCP send");
		break;
	case UD_FILE:
		L.file_inflight--;
		L.file_done++;
		if (cqe->res != sizeof(uint64_t) || L.file_buf[idx & 0xff] != (idx >> 8) * 3 + 1)
			fail("file read");
		break;
	default:
		fail("an application CQE nobody queued");
	}
}

/* ---- the RDMA ping-pong, both ends on the one bridge ---- */

static uint8_t *slot(int i)
{
	return L.buf + i * MSG;
}

static void req_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (c->status)
		fail("an RDMA request failed");
}

static void ping(void);

static void cli_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	uint64_t got;

	if (c->status) {
		fail("client receive");
		return;
	}
	memcpy(&got, slot(1), sizeof(got));
	if (got != L.rounds)
		fail("pong out of order");
	L.rounds++;
	app_round();
	if (L.rounds < L.target)
		ping();
}

static void srv_recv(rr_ep *ep, const struct rr_completion *c, void *data)
{
	if (c->status) {
		fail("server receive");
		return;
	}
	memcpy(slot(3), slot(2), sizeof(uint64_t));
	if (rr_ep_post_recv(L.srv, slot(2), MSG, L.mr, srv_recv, NULL) ||
	    rr_ep_post_send(L.srv, slot(3), sizeof(uint64_t), L.mr, req_done, NULL))
		fail("server post");
}

static void ping(void)
{
	uint64_t r = L.rounds;

	memcpy(slot(0), &r, sizeof(r));
	if (rr_ep_post_recv(L.cli, slot(1), MSG, L.mr, cli_recv, NULL) ||
	    rr_ep_post_send(L.cli, slot(0), sizeof(r), L.mr, req_done, NULL))
		fail("client post");
}

static void srv_ready(rr_ep *ep, int status, void *data)
{
	if (rr_ep_post_recv(ep, slot(2), MSG, L.mr, srv_recv, NULL))
		fail("server first receive");
}

static void on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	L.srv = ep;
}

static void on_connect(rr_ep *ep, int status, void *data)
{
	L.connects++;
	L.connect_status = status;
}

/* What rr_bridge_destroy() reaps of ours: the long-lived requests. */
static void late_app_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data)
{
}

/* ---- the application's loop: no rr_bridge_flush() anywhere ---- */

static void loop_until(bool (*done)(void))
{
	struct io_uring_cqe *cqe;
	unsigned int head, n;
	int rc;

	while (!done() && !L.failed) {
		if (L.hung)
			cr_assert_fail("watchdog: the loop hung at round %u of %u (ring flags %#x, "
				       "%s)",
				       L.rounds, L.target, rr_test_ring_flags(),
				       L.connects ? "connected" : "connecting");
		rc = io_uring_submit_and_wait(&L.ring, 1);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
			cr_assert_fail("io_uring_submit_and_wait: %s", strerror(-rc));
		n = 0;
		io_uring_for_each_cqe(&L.ring, head, cqe)
		{
			if (!rr_bridge_handle_cqe(L.b, cqe))
				app_cqe(cqe);
			n++;
		}
		io_uring_cq_advance(&L.ring, n);
	}
	cr_assert_null(L.failed, "%s (round %u)", L.failed, L.rounds);
}

static bool connected(void)
{
	return L.connects && L.srv;
}

static bool all_rounds(void)
{
	return L.rounds >= L.target;
}

static void tcp_pair(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(lfd, 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lfd, 1), 0);
	cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	L.tcp_a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(L.tcp_a, 0);
	cr_assert_eq(connect(L.tcp_a, (struct sockaddr *)&sa, sizeof(sa)), 0);
	L.tcp_b = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	cr_assert_geq(L.tcp_b, 0);
	close(lfd);
}

static void app_open(void)
{
	char path[] = "/tmp/rr-noflush-XXXXXX";
	uint64_t words[FILE_WORDS];

	for (int i = 0; i < NPIPES; i++)
		cr_assert_eq(pipe2(L.pipes[i], O_CLOEXEC), 0);
	tcp_pair();
	L.file_fd = mkstemp(path);
	cr_assert_geq(L.file_fd, 0);
	unlink(path);
	for (unsigned int i = 0; i < FILE_WORDS; i++)
		words[i] = (uint64_t)i * 3 + 1;
	cr_assert_eq(write(L.file_fd, words, sizeof(words)), (ssize_t)sizeof(words));
}

static void app_close(void)
{
	for (int i = 0; i < NPIPES; i++) {
		close(L.pipes[i][0]);
		close(L.pipes[i][1]);
	}
	close(L.tcp_a);
	close(L.tcp_b);
	close(L.file_fd);
}

static void init_ring(void)
{
	unsigned int flags = rr_test_ring_flags();
	int rc = rr_test_ring_init(&L.ring, RING_ENTRIES);

#ifdef RR_TEST_FAKE
	/* The host's kernel may refuse a flavour: SQPOLL to an unprivileged
	 * user before 5.11 (-EPERM), a flag it does not know (-EINVAL). In
	 * the lab a flavour that cannot be set up fails. */
	if ((rc == -EPERM && (flags & IORING_SETUP_SQPOLL)) || (rc == -EINVAL && flags))
		cr_skip_test("this kernel refuses io_uring setup flags %#x: %s", flags,
			     strerror(-rc));
#endif
	cr_assert_eq(rc, 0, "io_uring_queue_init(%u, %#x): %s", RING_ENTRIES, flags, strerror(-rc));
}

static void no_flush_case(unsigned int bflags)
{
#ifdef RR_TEST_FAKE
	const char *addr = "127.0.0.1";
#else
	const char *addr = rr_test_require_rdma();
#endif
	struct rr_bridge_opts bo = {.flags = bflags | rr_test_bridge_flags(),
				    .on_app_cqe = late_app_cqe};
	struct rr_ep_opts so = {.on_qp_ready = srv_ready};
	struct rr_bridge_stats st;
	const char *e = getenv("RR_NOFLUSH_ROUNDS");

	memset(&L, 0, sizeof(L));
	L.target = e && *e ? (unsigned int)strtoul(e, NULL, 0) : ROUNDS_DEFAULT;
	arm_watchdog();
	init_ring();
	app_open();
	cr_assert_eq(rr_bridge_create(&L.b, &L.ring, &bo, sizeof(bo)), 0);
	cr_assert_eq(rr_listen(L.b, addr, 0, &so, sizeof(so), on_accept, NULL, &L.l), 0);
	L.buf = aligned_alloc(4096, 4096);
	cr_assert_not_null(L.buf);
	memset(L.buf, 0, 4096);
	cr_assert_eq(rr_listener_reg_mr(L.l, L.buf, 4096, 0, &L.mr), 0);
	cr_assert_eq(rr_connect(L.b, addr, rr_listener_port(L.l), NULL, 0, on_connect, &L.cli), 0);
	loop_until(connected);
	cr_assert_eq(L.connect_status, 0, "connect: %s", strerror(-L.connect_status));

	/* The long-lived requests, then the first ping. */
	for (int i = 0; i < NPIPES; i++)
		queue_pipe_read(i);
	queue_recv(L.tcp_b, L.b_buf, UD_B_RECV);
	queue_recv(L.tcp_a, L.a_buf, UD_A_RECV);
	ping();
	loop_until(all_rounds);
	alarm(0);

	rr_bridge_get_stats(L.b, &st, sizeof(st));
	cr_log_info("%u rounds, ring flags %#x, bridge flags %#x: sq_full %llu, kicks %llu, "
		    "%u file reads, %u pipe reads, %llu TCP bytes echoed",
		    L.rounds, rr_test_ring_flags(), bo.flags, (unsigned long long)st.sq_full,
		    (unsigned long long)st.kicks, L.file_done, L.pipe_reads,
		    (unsigned long long)L.tcp_echoed);
	/* Single-shot polls are re-armed after every event, right after
	 * the callback that filled the SQ. */
	if (bflags & RR_BRIDGE_SINGLESHOT)
		cr_expect_gt(st.sq_full, 0, "the bridge never found the SQ full: not tested");
	cr_expect_gt(L.pipe_reads, 0);
	cr_expect_gt(L.tcp_echoed, 0);

	cr_assert_eq(rr_ep_destroy(L.cli), 0);
	cr_assert_eq(rr_ep_destroy(L.srv), 0);
	cr_assert_eq(rr_mr_dereg(L.mr), 0);
	cr_assert_eq(rr_listener_destroy(L.l), 0);
	cr_assert_eq(rr_bridge_destroy(L.b), 0);
	io_uring_queue_exit(&L.ring);
	free(L.buf);
	app_close();
}

Test(noflush, ping_pong_in_a_loop_that_never_flushes)
{
	no_flush_case(0);
}

/* Every poll re-armed after each event: an SQE owed in every round. */
Test(noflush, ping_pong_in_a_loop_that_never_flushes_single_shot)
{
	no_flush_case(RR_BRIDGE_SINGLESHOT);
}
