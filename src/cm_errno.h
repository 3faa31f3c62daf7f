/* SPDX-License-Identifier: MIT */
/*
 * Why an rdma_cm event that is not the one a step waited for ended it, as
 * a negative errno. Shared by the connection manager and tools/cmsync,
 * which links nothing of libringrdma: hence a header alone, which needs
 * only librdmacm's.
 */
#ifndef RR_CM_ERRNO_H
#define RR_CM_ERRNO_H

#include <errno.h>

#include <rdma/rdma_cma.h>

static inline int rr__cm_event_errno(enum rdma_cm_event_type t)
{
	switch (t) {
	case RDMA_CM_EVENT_REJECTED:
		return -ECONNREFUSED;
	case RDMA_CM_EVENT_UNREACHABLE:
		return -EHOSTUNREACH;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return -EADDRNOTAVAIL;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return -ECONNABORTED;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return -ENODEV;
	case RDMA_CM_EVENT_DISCONNECTED:
		/* A connection made earlier went down while a step waited
		 * for something else (the peer gave up or its CM sent a
		 * DREQ): a reset, as the connection manager says of a
		 * disconnect while accepting, not a protocol error. */
		return -ECONNRESET;
	default:
		/* No failure of its own (ESTABLISHED, CONNECT_REQUEST,
		 * TIMEWAIT_EXIT...) or one unknown here: out of turn. */
		return -EPROTO;
	}
}

#endif
