// SPDX-License-Identifier: MIT
/* Blocking rdma_cm steps; see cmsync.h. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "cm_errno.h"
#include "cmsync.h"

int cmsync_lookup(const char *addr, uint16_t port, int passive, struct rdma_addrinfo **res,
		  char *err, size_t errlen)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP};
	char ps[8];
	int rc;

	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	snprintf(ps, sizeof(ps), "%u", port);
	rc = rdma_getaddrinfo(addr, ps, &hints, res);
	if (!rc)
		return 0;
	snprintf(err, errlen, "rdma_getaddrinfo(%s:%u): %s", addr ? addr : "*", port,
		 rc == -1 ? strerror(errno) : gai_strerror(rc));
	return -EINVAL;
}

int cmsync_wait(struct rdma_event_channel *ec, enum rdma_cm_event_type want, int timeout_ms,
		struct cmsync_event *ev, char *err, size_t errlen)
{
	struct pollfd pfd = {.fd = ec->fd, .events = POLLIN};
	struct cmsync_event got;
	struct rdma_cm_event *e;
	int n;

	for (;;) {
		n = poll(&pfd, 1, timeout_ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "poll on the CM channel: %s", strerror(errno));
			return -errno;
		}
		if (n == 0) {
			snprintf(err, errlen, "timed out waiting for %s", rdma_event_str(want));
			return -ETIMEDOUT;
		}
		if (rdma_get_cm_event(ec, &e)) {
			if (errno == EAGAIN)
				continue; /* a non-blocking channel, drained meanwhile */
			snprintf(err, errlen, "rdma_get_cm_event: %s", strerror(errno));
			return -errno;
		}
		memset(&got, 0, sizeof(got));
		got.id = e->id;
		got.type = e->event;
		got.status = e->status;
		if (e->param.conn.private_data) {
			got.priv_len = e->param.conn.private_data_len;
			memcpy(got.priv, e->param.conn.private_data, got.priv_len);
		}
		rdma_ack_cm_event(e);
		/* A finished connection's QP leaving timewait is no news here. */
		if (got.type != RDMA_CM_EVENT_TIMEWAIT_EXIT || want == got.type)
			break;
	}
	if (ev)
		*ev = got;
	if (got.type != want) {
		snprintf(err, errlen, "expected %s, got %s (status %d)", rdma_event_str(want),
			 rdma_event_str(got.type), got.status);
		return rr__cm_event_errno(got.type);
	}
	return 0;
}
