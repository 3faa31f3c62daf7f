// SPDX-License-Identifier: MIT
/*
 * Bells (ring layer): one ring wakes another, as a listener wakes the
 * group it placed a connection on: by IORING_OP_MSG_RING, or through the
 * target's eventfd when MSG_RING is missing or refused.
 */
#include <dirent.h>
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ring.h"

struct side {
	struct io_uring io;
	struct rr__ring r;
	struct rr_bridge_stats stats;
	int rung;
};

static void rung(void *ctx)
{
	((struct side *)ctx)->rung++;
}

static void open_side(struct side *s)
{
	memset(s, 0, sizeof(*s));
	cr_assert_eq(io_uring_queue_init(16, &s->io, 0), 0);
	cr_assert_eq(rr__ring_init(&s->r, &s->io, true, &s->stats), 0);
}

static void close_side(struct side *s)
{
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts = {.tv_nsec = 10000000};

	rr__ring_bell_close(&s->r, rung, s);
	rr__ring_room_timer_close(&s->r); /* opened with the first poll */
	for (int i = 0; i < 100 && !rr__ring_idle(&s->r); i++) {
		rr__ring_flush(&s->r);
		io_uring_submit(&s->io);
		if (!io_uring_wait_cqe_timeout(&s->io, &cqe, &ts)) {
			rr__ring_cqe(&s->r, cqe);
			io_uring_cqe_seen(&s->io, cqe);
		}
	}
	cr_expect(rr__ring_idle(&s->r), "a poll or message of the ring is left");
	rr__ring_fini(&s->r);
	io_uring_queue_exit(&s->io);
}

/* Submit what each side owes, then hand every CQE to its ring; the kinds
 * of the CQEs the target got are or-ed into *kinds. */
static void pump(struct side *from, struct side *to, unsigned int *kinds, bool kinds_wanted)
{
	struct io_uring_cqe *cqe;
	struct side *s[2] = {from, to};
	int was = to->rung;

	/* A generous watchdog: a few rounds after the bell was heard. */
	for (int round = 0, after = 0; round < 200 && after < 4; round++) {
		for (int i = 0; i < 2; i++) {
			struct __kernel_timespec ts = {.tv_nsec = 5000000};

			rr__ring_flush(&s[i]->r);
			io_uring_submit(&s[i]->io);
			while (!io_uring_wait_cqe_timeout(&s[i]->io, &cqe, &ts)) {
				enum rr__ud_kind k = rr__ring_cqe(&s[i]->r, cqe);

				if (s[i] == to)
					*kinds |= 1u << k;

				io_uring_cqe_seen(&s[i]->io, cqe);
			}
		}
		after += to->rung > was || !kinds_wanted;
	}
}

static void ring_once(bool msg_ring)
{
	struct side a, b;
	unsigned int kinds = 0;
	uint32_t peer, again;

	open_side(&a);
	open_side(&b);
	if (!msg_ring)
		rr__ring_no_msg_ring(&a.r);
	cr_assert_eq(rr__ring_peer_add(&a.r, &b.r, &peer), -EINVAL, "no bell yet");
	cr_assert_eq(rr__ring_bell_open(&b.r, rung, &b), 0);
	cr_assert_eq(rr__ring_bell_open(&b.r, rung, &b), -EALREADY);
	cr_assert_eq(rr__ring_peer_add(&a.r, &b.r, &peer), 0);
	cr_assert_eq(rr__ring_peer_add(&a.r, &b.r, &again), 0);
	cr_assert_eq(again, peer, "one peer entry per ring");
	pump(&a, &b, &kinds, false); /* the bell's poll reaches the kernel */
	kinds = 0;
	rr__ring_peer_ring(&a.r, peer);
	rr__ring_peer_ring(&a.r, peer); /* one owed message is enough */
	pump(&a, &b, &kinds, true);
	cr_assert_geq(b.rung, 1, "the bell was not heard (CQE kinds %#x)", kinds);
	if (msg_ring) {
		cr_expect(kinds & (1u << RR__UD_MSG), "not rung by MSG_RING (kinds %#x)", kinds);
	} else {
		cr_expect(kinds & (1u << RR__UD_POLL), "not rung by the eventfd (kinds %#x)",
			  kinds);
		cr_expect(!(kinds & (1u << RR__UD_MSG)), "MSG_RING used although refused");
	}
	close_side(&a);
	close_side(&b);
}

Test(bell, msg_ring_wakes_the_other_ring)
{
	struct io_uring io;
	struct io_uring_probe *p;
	bool has;

	cr_assert_eq(io_uring_queue_init(4, &io, 0), 0);
	p = io_uring_get_probe_ring(&io);
	has = p && io_uring_opcode_supported(p, IORING_OP_MSG_RING);
	io_uring_free_probe(p);
	io_uring_queue_exit(&io);
	if (!has)
		cr_skip_test("the kernel has no IORING_OP_MSG_RING (5.18+)");
	ring_once(true);
}

Test(bell, eventfd_wakes_the_other_ring_without_msg_ring)
{
	ring_once(false);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	cr_assert_not_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* A ring that outlives the rings it rang lets go of their descriptors
 * (and so of the rings themselves) when it next meets a new one. */
Test(bell, a_gone_peer_is_let_go)
{
	struct side a, b, c;
	uint32_t pb, pc;
	int fds;

	open_side(&a);
	open_side(&b);
	cr_assert_eq(rr__ring_bell_open(&b.r, rung, &b), 0);
	cr_assert_eq(rr__ring_peer_add(&a.r, &b.r, &pb), 0);
	fds = count_fds();
	close_side(&b); /* its ring fd and eventfd: a still holds copies */
	open_side(&c);
	cr_assert_eq(rr__ring_bell_open(&c.r, rung, &c), 0);
	cr_assert_eq(rr__ring_peer_add(&a.r, &c.r, &pc), 0);
	cr_expect_eq(count_fds(), fds, "descriptors: %d, then %d with b's copies kept", fds,
		     count_fds());
	cr_expect_eq(pc, pb, "the gone peer's place is reused");
	rr__ring_peer_ring(&a.r, pb == pc ? UINT32_MAX : pb); /* a gone peer: nothing */
	close_side(&c);
	close_side(&a);
}
