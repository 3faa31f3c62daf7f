/* SPDX-License-Identifier: MIT */
/*
 * The programs' side of tools/rdma-lab: where the lab tool is, whether a
 * real RDMA device is here, and copying a result out of the checkout.
 * For programs that are never installed (ringrdma-cp-lab); not part of
 * libringrdma.
 */
#ifndef RR_LABHOST_H
#define RR_LABHOST_H

#include <stddef.h>

/* The checkout this program was built from (its tools/rdma-lab boots the lab). */
const char *labhost_root(void);

/* The path of tools/rdma-lab into `path`; -ENOENT when it is not there. */
int labhost_tool(char *path, size_t len);

/* The IPv4 address of a real local RDMA device (tools/rdma-lab device);
 * -ENODEV when there is none, -ENOENT without the lab tool. */
int labhost_device_addr(char *addr, size_t len);

/* Copy a file (created or truncated, mode 0644); 0 or -errno. */
int labhost_copy_file(const char *from, const char *to);

#endif
