/* SPDX-License-Identifier: MIT */
/*
 * An in-process rdma_cm for host unit tests, linked with -Wl,--wrap over
 * the fake device of fake_verbs.h: event channels are pipes (one byte per
 * queued event, so the fd is readable exactly while events wait), ids on
 * 127.0.0.0/8 resolve to fake_device(), and a connect finds the listener
 * on its port in the same process and connects the two QPs.
 *
 * Private data is padded as on RoCE: 56 bytes with a request, 196 with an
 * acceptance, 148 with a rejection. A connect to a port nobody listens on
 * is rejected (status 8, invalid service id), as the remote CM does.
 *
 * What would be a use after free or a hang in librdmacm aborts with a
 * message instead, deterministically and without a sanitizer: a call on
 * an id whose event channel was destroyed, a second rdma_destroy_id(),
 * rdma_destroy_id() or rdma_migrate_id() with events of the id read and
 * never acknowledged. Destroyed ids and channels are kept (their public
 * part poisoned) so that these checks stay exact.
 */
#ifndef RR_TESTS_FAKE_CM_H
#define RR_TESTS_FAKE_CM_H

#include <stdbool.h>

#include <rdma/rdma_cma.h>

#include "fake_verbs.h"

/* Is @ch an event channel not destroyed yet? */
bool fake_cm_channel_alive(const struct rdma_event_channel *ch);
/* Events queued on @ch and not read yet. */
unsigned int fake_cm_channel_queued(const struct rdma_event_channel *ch);
/* While @late, an accepted passive id's ESTABLISHED (the RTU) waits until
 * rdma_notify(IBV_EVENT_COMM_EST) on it, or until this is called with
 * false, which delivers those still held: data may beat the RTU. */
void fake_cm_rtu_late(bool late);
/* rdma_notify() calls since the last fake_cm_rtu_late(). */
extern unsigned int fake_notifies;
/* Close the writing end of @ch's pipe: its fd polls POLLHUP for good, as
 * a broken channel's would, and events queued from now on stay in the
 * queue without making the fd readable. No SIGPIPE: nothing writes to a
 * pipe whose reader is gone. */
void fake_cm_channel_hang_up(struct rdma_event_channel *ch);
/* RDMA_CM_EVENT_DEVICE_REMOVAL to every id on the fake device. */
void fake_cm_device_removal(void);

#endif
