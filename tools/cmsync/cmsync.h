/* SPDX-License-Identifier: MIT */
/*
 * Blocking rdma_cm steps, shared by ringrdma-bench and the rdma tests'
 * helpers (tests/support/rdma_sync.c): look an address up, and wait for
 * the next connection-manager event of an expected type. Independent of
 * libringrdma, so the lab and the verbs stack can be checked on their own.
 */
#ifndef RR_CMSYNC_H
#define RR_CMSYNC_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/rdma_cma.h>

#define CMSYNC_MAX_PRIV 256

/* What an awaited event carried; its private data is copied, since the
 * event itself is acknowledged (and freed) before cmsync_wait() returns. */
struct cmsync_event {
	struct rdma_cm_id *id;
	enum rdma_cm_event_type type;
	int status;
	uint8_t priv_len; /* 0: no private data */
	uint8_t priv[CMSYNC_MAX_PRIV];
};

/* rdma_getaddrinfo() for TCP port space; 0 or -EINVAL, reason in err. */
int cmsync_lookup(const char *addr, uint16_t port, int passive, struct rdma_addrinfo **res,
		  char *err, size_t errlen);

/*
 * Wait up to timeout_ms (-1: for ever) for the next event, skipping
 * TIMEWAIT_EXIT. 0 if it is `want` (*ev filled when ev is not NULL);
 * otherwise -ECONNREFUSED (rejected), -EHOSTUNREACH (unreachable),
 * -EADDRNOTAVAIL (address or route error), -ECONNABORTED (connect error),
 * -ENODEV (device removed), -EPROTO (another event), as libringrdma
 * reports them (src/cm_errno.h); or -ETIMEDOUT, or the errno of
 * poll()/rdma_get_cm_event(); with a reason in err.
 */
int cmsync_wait(struct rdma_event_channel *ec, enum rdma_cm_event_type want, int timeout_ms,
		struct cmsync_event *ev, char *err, size_t errlen);

#endif
