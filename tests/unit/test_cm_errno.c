// SPDX-License-Identifier: MIT
/*
 * The errno an rdma_cm event gives where another was awaited: one mapping
 * (src/cm_errno.h) for the connection manager and tools/cmsync. A failure
 * event says which; a disconnect is a reset; any other event, or one
 * unknown, is out of turn (-EPROTO), never 0 and never a failure it does
 * not report.
 */
#include <criterion/criterion.h>

#include "cm_errno.h"

Test(cm_errno, failures_say_which)
{
	cr_expect_eq(rr__cm_event_errno(RDMA_CM_EVENT_REJECTED), -ECONNREFUSED);
	cr_expect_eq(rr__cm_event_errno(RDMA_CM_EVENT_UNREACHABLE), -EHOSTUNREACH);
	cr_expect_eq(rr__cm_event_errno(RDMA_CM_EVENT_ADDR_ERROR), -EADDRNOTAVAIL);
	cr_expect_eq(rr__cm_event_errno(RDMA_CM_EVENT_ROUTE_ERROR), -EADDRNOTAVAIL);
	cr_expect_eq(rr__cm_event_errno(RDMA_CM_EVENT_CONNECT_ERROR), -ECONNABORTED);
	cr_expect_eq(rr__cm_event_errno(RDMA_CM_EVENT_DEVICE_REMOVAL), -ENODEV);
}

/* A connection made earlier going down while a client waits for its next
 * one (a server that gave up in a connection storm) reads "Connection reset
 * by peer", not "Protocol error". */
Test(cm_errno, disconnect_is_a_reset)
{
	cr_expect_eq(rr__cm_event_errno(RDMA_CM_EVENT_DISCONNECTED), -ECONNRESET);
}

Test(cm_errno, other_events_are_out_of_turn)
{
	static const enum rdma_cm_event_type others[] = {
		RDMA_CM_EVENT_ADDR_RESOLVED,   RDMA_CM_EVENT_ROUTE_RESOLVED,
		RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_CONNECT_RESPONSE,
		RDMA_CM_EVENT_ESTABLISHED,     RDMA_CM_EVENT_ADDR_CHANGE,
		RDMA_CM_EVENT_TIMEWAIT_EXIT,
	};

	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		cr_expect_eq(rr__cm_event_errno(others[i]), -EPROTO, "%s",
			     rdma_event_str(others[i]));
}

Test(cm_errno, unknown_event_is_out_of_turn)
{
	cr_expect_eq(rr__cm_event_errno((enum rdma_cm_event_type)1000), -EPROTO);
}
