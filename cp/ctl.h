/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp: a connection's control messages (proto.h) as SEND/RECV, on
 * either side: one registered buffer holding `nrecv` receive buffers, then
 * `nsend` send buffers, each send buffer busy from its post to its
 * completion.
 */
#ifndef CP_CTL_H
#define CP_CTL_H

#include <ringrdma.h>

#include "proto.h"

#define CP_CTL_SENDS_MAX 8

struct cp_ctl {
	uint8_t *mem;
	struct ibv_mr *mr;
	unsigned int nrecv, nsend;
	uint8_t send_type[CP_CTL_SENDS_MAX]; /* what each send buffer carries; 0: free */
};

/* The buffers, zeroed, not yet registered; 0 or -ENOMEM. */
int cp_ctl_alloc(struct cp_ctl *c, unsigned int nrecv, unsigned int nsend);
/* Register them on @ep's device (local access only); 0 or -errno. */
int cp_ctl_reg(struct cp_ctl *c, rr_ep *ep);
/* Receive buffer @i, CP_MSG_MAX bytes. */
uint8_t *cp_ctl_recv_buf(const struct cp_ctl *c, unsigned int i);
/* RECV into @buf, a receive buffer; @done gets @buf as its data. */
int cp_ctl_recv(struct cp_ctl *c, rr_ep *ep, uint8_t *buf, rr_req_cb done);
/* SEND @m from a free send buffer; @done gets its completion, and hands
 * its data to cp_ctl_sent(). Returns 0, -ENOBUFS when every buffer is
 * busy, or a negative errno. */
int cp_ctl_send(struct cp_ctl *c, rr_ep *ep, const struct cp_msg *m, rr_req_cb done);
/* The SEND with @data completed: its buffer is free; returns the type it carried. */
uint8_t cp_ctl_sent(struct cp_ctl *c, void *data);
/* Deregister and free (the endpoint's requests all completed). */
void cp_ctl_free(struct cp_ctl *c);

#endif
