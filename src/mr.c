// SPDX-License-Identifier: MIT
/*
 * Memory regions and memory windows of an endpoint's PD (its own with
 * RR_EP_OWN_PD, else the process's PD of its device), and the check that
 * a buffer handed to a post lies in the MR given with it.
 */
#include <errno.h>

#include "ep_internal.h"

/* The endpoint's own PD, or the process's PD of its device. */
static struct ibv_pd *ep_pd(const rr_ep *ep)
{
	return ep->own_pd ? ep->own_pd : ep->dev ? ep->dev->pd : NULL;
}

struct ibv_pd *rr_ep_pd(rr_ep *ep)
{
	return ep_pd(ep);
}

int rr_ep_reg_mr(rr_ep *ep, void *buf, size_t len, int access, struct ibv_mr **out)
{
	struct ibv_mr *mr;

	if (!ep || !buf || !len || !out)
		return -EINVAL;
	if (!ep->dev)
		return -ENOTCONN;
	mr = ibv_reg_mr(ep_pd(ep), buf, len, access | IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return errno ? -errno : -ENOMEM;
	*out = mr;
	return 0;
}

int rr_mr_dereg(struct ibv_mr *mr)
{
	int rc;

	if (!mr)
		return 0;
	rc = ibv_dereg_mr(mr);
	return rc ? -rc : 0;
}

int rr__mr_check_buf(struct ibv_mr *mr, const void *buf, size_t len)
{
	uintptr_t p = (uintptr_t)buf, start, end;

	if (!mr || !buf)
		return -EINVAL;
	start = (uintptr_t)mr->addr;
	end = start + mr->length;
	if (p < start || p > end || len > end - p)
		return -EINVAL;
	return 0;
}

int rr_ep_alloc_mw(rr_ep *ep, struct ibv_mw **out)
{
	struct ibv_mw *mw;

	if (!ep || !out)
		return -EINVAL;
	if (!ep->dev)
		return -ENOTCONN;
	mw = ibv_alloc_mw(ep_pd(ep), IBV_MW_TYPE_2);
	if (!mw)
		return errno ? -errno : -ENOMEM;
	*out = mw;
	return 0;
}

int rr_mw_dealloc(struct ibv_mw *mw)
{
	int rc;

	if (!mw)
		return 0;
	rc = ibv_dealloc_mw(mw);
	return rc ? -rc : 0;
}
