// SPDX-License-Identifier: MIT
/* ringrdma-cp: control messages over SEND/RECV (see ctl.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

int cp_ctl_alloc(struct cp_ctl *c, unsigned int nrecv, unsigned int nsend)
{
	size_t len = (size_t)(nrecv + nsend) * CP_MSG_MAX;

	if (nsend > CP_CTL_SENDS_MAX)
		return -EINVAL;
	c->nrecv = nrecv;
	c->nsend = nsend;
	c->mem = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	if (!c->mem)
		return -ENOMEM;
	memset(c->mem, 0, len);
	return 0;
}

int cp_ctl_reg(struct cp_ctl *c, rr_ep *ep)
{
	return rr_ep_reg_mr(ep, c->mem, (size_t)(c->nrecv + c->nsend) * CP_MSG_MAX, 0, &c->mr);
}

uint8_t *cp_ctl_recv_buf(const struct cp_ctl *c, unsigned int i)
{
	return c->mem + (size_t)i * CP_MSG_MAX;
}

int cp_ctl_recv(struct cp_ctl *c, rr_ep *ep, uint8_t *buf, rr_req_cb done)
{
	return rr_ep_post_recv(ep, buf, CP_MSG_MAX, c->mr, done, buf);
}

int cp_ctl_send(struct cp_ctl *c, rr_ep *ep, const struct cp_msg *m, rr_req_cb done)
{
	unsigned int i;
	uint8_t *buf;
	size_t len;
	int rc;

	for (i = 0; i < c->nsend && c->send_type[i]; i++)
		;
	if (i == c->nsend)
		return -ENOBUFS;
	buf = c->mem + (size_t)(c->nrecv + i) * CP_MSG_MAX;
	len = cp_encode(m, buf, CP_MSG_MAX);
	if (!len)
		return -EINVAL;
	rc = rr_ep_post_send(ep, buf, (uint32_t)len, c->mr, done, (void *)(uintptr_t)i);
	if (rc)
		return rc;
	c->send_type[i] = m->type;
	return 0;
}

uint8_t cp_ctl_sent(struct cp_ctl *c, void *data)
{
	unsigned int i = (unsigned int)(uintptr_t)data;
	uint8_t type = c->send_type[i];

	c->send_type[i] = 0;
	return type;
}

void cp_ctl_free(struct cp_ctl *c)
{
	rr_mr_dereg(c->mr);
	c->mr = NULL;
	free(c->mem);
	c->mem = NULL;
}
