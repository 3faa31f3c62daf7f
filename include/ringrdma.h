/* SPDX-License-Identifier: MIT */
/*
 * ringrdma: RDMA completions, connection events and device events delivered
 * through one io_uring.
 *
 * This is the only header an application includes. It compiles on its own
 * as C (gnu11 or later) and C++.
 *
 * Conventions (see ringrdma(7)):
 *  - Public names start with rr_ / RR_; the library never touches fields
 *    named `data`.
 *  - Every function that can fail returns 0 (or a count) on success and a
 *    negative errno value on failure. When a call fails, the callback it was
 *    given is never called.
 */
#ifndef RINGRDMA_H
#define RINGRDMA_H

#include <ringrdma_version.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * rr_version() - version of the library loaded at run time.
 *
 * Return: a static "MAJOR.MINOR.PATCH" string; compare with
 * RR_VERSION_STRING to detect a header/library mismatch.
 */
const char *rr_version(void);

/**
 * rr_version_check() - is the loaded library compatible with a header version?
 * @major: RR_VERSION_MAJOR the caller was compiled against.
 * @minor: RR_VERSION_MINOR the caller was compiled against.
 *
 * Return: 0 when the library has the same major version and at least the
 * given minor version, -ENOTSUP otherwise.
 */
int rr_version_check(int major, int minor);

#ifdef __cplusplus
}
#endif

#endif /* RINGRDMA_H */
