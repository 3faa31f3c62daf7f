/* SPDX-License-Identifier: MIT */
/*
 * The lab smoke exchange: the server offers a registered window, the client
 * RDMA-WRITEs a pattern into it and SENDs a message with a second pattern,
 * the server checks both byte for byte and SENDs back the verdict.
 */
#ifndef RR_TESTS_SMOKE_H
#define RR_TESTS_SMOKE_H

#include <stddef.h>
#include <stdint.h>

#define SMOKE_WRITE_LEN	 (64 * 1024 + 13) /* odd on purpose */
#define SMOKE_TIMEOUT_MS 20000

/* Called once the server listens, with the port it listens on. */
typedef void (*smoke_ready_fn)(uint16_t port, void *arg);

/* Serve `rounds` connections on addr:port (port 0: any); 0 or -errno, with
 * a message in err. */
int smoke_server(const char *addr, uint16_t port, int rounds, int use_events, smoke_ready_fn ready,
		 void *arg, char *err, size_t errlen);

/* One exchange against addr:port; 0 when the server verified everything.
 * connect_ms bounds the retries while nobody listens there yet. */
int smoke_client(const char *addr, uint16_t port, uint32_t seed, int use_events, int connect_ms,
		 char *err, size_t errlen);

#endif
