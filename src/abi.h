/* SPDX-License-Identifier: MIT */
/*
 * Structs that cross the ABI with their size, used by every public entry
 * point that takes or fills an options or stats struct. The caller passes
 * sizeof its struct as it was compiled; a struct only ever grows at its end,
 * so a smaller caller has the older prefix and a larger caller has members
 * this library does not know.
 */
#ifndef RR_ABI_H
#define RR_ABI_H

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "ringrdma.h"

#define rr__offsetofend(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* Each options struct as the first release of libringrdma.so.1 (0.8.0) had it:
 * the smallest size a caller may pass. These never change. */
#define RR__BRIDGE_OPTS_SIZE_0_8 rr__offsetofend(struct rr_bridge_opts, data)
#define RR__CQ_OPTS_SIZE_0_8	 rr__offsetofend(struct rr_cq_opts, data)
#define RR__EP_OPTS_SIZE_0_8	 rr__offsetofend(struct rr_ep_opts, flags)

/* No options or stats struct will ever be larger than a page: a caller that
 * says so passed a wrong size, and scanning or zeroing that far would touch
 * what it never granted. (The kernel's copy_struct_from_user() says -E2BIG
 * too.) */
#define RR__STRUCT_SIZE_MAX 4096

/* The flags each release knows; asking for another is an error, as a
 * newer struct's members are. */
#define RR__BRIDGE_FLAGS_KNOWN                                                                     \
	(RR_BRIDGE_SINGLESHOT | RR_BRIDGE_GROUP | RR_BRIDGE_NO_MSG_RING | RR_BRIDGE_RING_READ |    \
	 RR_BRIDGE_LOOP_WAITS)
#define RR__EP_FLAGS_KNOWN (RR_EP_SHARED_CQ | RR_EP_OWN_PD | RR_EP_SRQ | RR_EP_POST_NOW)

/*
 * Copy a caller's options into @dst (@dst_size bytes, zeroed first so that
 * members the caller does not have read as "default"). @src NULL: all
 * defaults. A caller smaller than @min_size (the struct of the first
 * release of this soname) did not use this ABI: -EINVAL; one larger than
 * RR__STRUCT_SIZE_MAX: -E2BIG, unread. Members beyond ours must be zero, so
 * that asking for a feature this library lacks is an error rather than
 * silently ignored: -E2BIG, as the kernel's copy_struct_from_user()
 * answers.
 */
static inline int rr__opts_in(void *dst, size_t dst_size, const void *src, size_t src_size,
			      size_t min_size)
{
	const unsigned char *tail;

	memset(dst, 0, dst_size);
	if (!src)
		return 0;
	if (src_size < min_size)
		return -EINVAL;
	if (src_size > RR__STRUCT_SIZE_MAX)
		return -E2BIG;
	tail = (const unsigned char *)src + dst_size;
	for (size_t i = dst_size; i < src_size; i++, tail++)
		if (*tail)
			return -E2BIG;
	memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
	return 0;
}

/*
 * Fill a caller's struct of @out_size bytes from ours: a smaller caller gets
 * its prefix (counters are only ever added at the end, so any prefix is
 * whole counters), a larger one zeroes where we have nothing. One larger
 * than RR__STRUCT_SIZE_MAX: -E2BIG, untouched, as for options.
 */
static inline int rr__stats_out(void *out, size_t out_size, const void *src, size_t src_size)
{
	if (!out)
		return -EINVAL;
	if (out_size > RR__STRUCT_SIZE_MAX)
		return -E2BIG;
	memset(out, 0, out_size);
	memcpy(out, src, out_size < src_size ? out_size : src_size);
	return 0;
}

#endif
