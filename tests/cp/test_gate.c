// SPDX-License-Identifier: MIT
/* ringrdma-cp serve's gate before authentication (cp/gate.c), on the host:
 * eviction order, the per-source hold back, its bounded table, the log
 * rate limit. The time is passed in, so nothing here waits. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include <criterion/criterion.h>

#include "gate.h"

#define S 1000000000ull

static struct sockaddr_in v4(uint32_t host)
{
	struct sockaddr_in a = {.sin_family = AF_INET};

	a.sin_addr.s_addr = htonl(host);
	return a;
}

#define SA(a) ((const struct sockaddr *)&(a))

Test(gate, counts_until_full_then_evicts_half_open_first)
{
	struct cp_gate g;
	struct cp_gate_ticket t[4] = {0};

	cp_gate_init(&g, 3);
	cr_assert_null(cp_gate_enter(&g, &t[0], 1));
	cr_assert_null(cp_gate_enter(&g, &t[1], 2));
	cr_assert_null(cp_gate_enter(&g, &t[2], 3));
	/* t[0] established (waits for HELLO), t[1] and t[2] half-open. */
	cp_gate_established(&g, &t[0]);
	cr_assert_eq(cp_gate_enter(&g, &t[3], 4), &t[1], "the oldest half-open one goes first");
	cr_assert(atomic_load(&t[1].evicted));
	cr_assert_eq(cp_gate_pending(&g), 3);
	cp_gate_leave(&g, &t[1]); /* its holder drops it: nothing more to count */
	cr_assert_eq(cp_gate_pending(&g), 3);
	cp_gate_fini(&g);
}

Test(gate, evicts_oldest_established_when_none_half_open)
{
	struct cp_gate g;
	struct cp_gate_ticket t[3] = {0};

	cp_gate_init(&g, 2);
	cp_gate_enter(&g, &t[0], 1);
	cp_gate_enter(&g, &t[1], 2);
	cp_gate_established(&g, &t[1]);
	cp_gate_established(&g, &t[0]);
	cr_assert_eq(cp_gate_enter(&g, &t[2], 3), &t[0]);
	cp_gate_leave(&g, &t[1]); /* admitted */
	cr_assert_eq(cp_gate_pending(&g), 1);
	cp_gate_leave(&g, &t[2]);
	cp_gate_leave(&g, &t[2]); /* idempotent */
	cr_assert_eq(cp_gate_pending(&g), 0);
	cp_gate_fini(&g);
}

Test(gate, failures_hold_a_source_back_doubling)
{
	struct cp_gate g;
	struct sockaddr_in a = v4(0x0a000001), b = v4(0x0a000002);
	uint64_t now = 100 * S;

	cp_gate_init(&g, 16);
	for (int i = 0; i < GATE_FREE_FAILS; i++)
		cr_assert_eq(cp_gate_failed(&g, SA(a), now), 0, "failure %d is free", i + 1);
	cr_assert_eq(cp_gate_held(&g, SA(a), now), 0);
	cr_assert_eq(cp_gate_failed(&g, SA(a), now), 2);
	cr_assert_eq(cp_gate_held(&g, SA(a), now + S / 2), 2);
	cr_assert_eq(cp_gate_held(&g, SA(b), now), 0, "another address is not held back");
	cr_assert_eq(cp_gate_held(&g, SA(a), now + 2 * S), 0);
	cr_assert_eq(cp_gate_failed(&g, SA(a), now + 3 * S), 4);
	for (int i = 0; i < 10; i++)
		cp_gate_failed(&g, SA(a), now + 4 * S);
	cr_assert_eq(cp_gate_held(&g, SA(a), now + 4 * S), GATE_LOCK_MAX_S, "bounded");
	/* The right token starts it over. */
	cp_gate_passed(&g, SA(a));
	cr_assert_eq(cp_gate_held(&g, SA(a), now + 4 * S), 0);
	cr_assert_eq(cp_gate_failed(&g, SA(a), now + 5 * S), 0);
	cp_gate_fini(&g);
}

Test(gate, forgets_after_a_quiet_time)
{
	struct cp_gate g;
	struct sockaddr_in a = v4(0x0a000001);

	cp_gate_init(&g, 16);
	for (int i = 0; i < GATE_FREE_FAILS; i++)
		cp_gate_failed(&g, SA(a), S);
	cr_assert_eq(cp_gate_failed(&g, SA(a), (GATE_FORGET_S + 2) * S), 0);
	cp_gate_fini(&g);
}

Test(gate, table_is_bounded_and_keeps_a_persistent_guesser)
{
	static struct cp_gate g;
	struct sockaddr_in bad = v4(0xc0a80001);
	struct sockaddr_in6 six = {.sin6_family = AF_INET6};
	uint64_t now = 10 * S;

	cp_gate_init(&g, 16);
	for (int i = 0; i < GATE_FREE_FAILS + 3; i++)
		cp_gate_failed(&g, SA(bad), now);
	cr_assert_gt(cp_gate_held(&g, SA(bad), now), 0);
	/* A flood of one failure each from 100,000 other sources. */
	for (uint32_t i = 0; i < 100000; i++) {
		struct sockaddr_in x = v4(0x0b000000 + i);

		cp_gate_failed(&g, SA(x), now);
	}
	cr_assert_eq(g.nsrc, GATE_SOURCES);
	cr_assert_gt(cp_gate_held(&g, SA(bad), now), 0, "the guesser is still held back");
	/* IPv6 sources share the table. */
	six.sin6_addr.s6_addr[15] = 1;
	for (int i = 0; i < GATE_FREE_FAILS + 1; i++)
		cp_gate_failed(&g, SA(six), now);
	cr_assert_gt(cp_gate_held(&g, SA(six), now), 0);
	cr_assert_eq(g.nsrc, GATE_SOURCES);
	cp_gate_fini(&g);
}

/* One host of IPv6 has a /64 to rotate through: its addresses share a
 * hold (issue 40); another /64 does not. An IPv4-mapped address counts
 * as the IPv4 address it is. */
Test(gate, ipv6_sources_are_held_back_by_their_64)
{
	struct cp_gate g;
	struct sockaddr_in6 a = {.sin6_family = AF_INET6}, b, other;
	uint64_t now = 10 * S;

	cp_gate_init(&g, 16);
	a.sin6_addr.s6_addr[0] = 0x20;
	a.sin6_addr.s6_addr[1] = 0x01;
	b = a;
	other = a;
	other.sin6_addr.s6_addr[7] = 1;
	for (int i = 0; i < GATE_FREE_FAILS + 1; i++) {
		a.sin6_addr.s6_addr[15] = (uint8_t)i;
		a.sin6_addr.s6_addr[9] = (uint8_t)(i * 7);
		cp_gate_failed(&g, SA(a), now);
	}
	b.sin6_addr.s6_addr[15] = 0xee;
	b.sin6_addr.s6_addr[8] = 0x55;
	cr_expect_gt(cp_gate_held(&g, SA(b), now), 0, "a fresh address of the /64 got free tries");
	cr_expect_eq(cp_gate_held(&g, SA(other), now), 0, "another /64 is held back");
	cp_gate_fini(&g);
}

Test(gate, mapped_ipv4_is_its_ipv4)
{
	struct cp_gate g;
	struct sockaddr_in a = v4(0x0a000001), c = v4(0x0a000002);
	struct sockaddr_in6 m = {.sin6_family = AF_INET6};
	uint64_t now = 10 * S;

	cp_gate_init(&g, 16);
	m.sin6_addr.s6_addr[10] = m.sin6_addr.s6_addr[11] = 0xff;
	memcpy(&m.sin6_addr.s6_addr[12], &a.sin_addr, 4);
	for (int i = 0; i < GATE_FREE_FAILS + 1; i++)
		cp_gate_failed(&g, SA(m), now);
	cr_expect_gt(cp_gate_held(&g, SA(a), now), 0);
	cr_expect_eq(cp_gate_held(&g, SA(c), now), 0, "its /64 is not a bucket");
	cp_gate_fini(&g);
}

Test(gate, log_lines_burst_then_one_a_second)
{
	struct cp_gate g;
	unsigned int skipped = 99, ok = 0;

	cp_gate_init(&g, 16);
	for (int i = 0; i < 100; i++)
		ok += cp_gate_log_ok(&g, S + (uint64_t)i * 1000, &skipped);
	cr_assert_eq(ok, GATE_LOG_BURST);
	cr_assert(cp_gate_log_ok(&g, 2 * S + 100000, &skipped));
	cr_assert_eq(skipped, 100 - GATE_LOG_BURST, "the next line says how many were not");
	cp_gate_fini(&g);
}
