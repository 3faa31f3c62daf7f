/* SPDX-License-Identifier: MIT */
/* ringrdma-cp --json: one summary object per run. */
#ifndef CP_JSON_H
#define CP_JSON_H

#include <stdbool.h>
#include <stdint.h>

struct cp_summary {
	const char *mode; /* "send", "serve" or "proxy" */
	int exit_code;
	const char *error; /* last error message, or NULL */
	uint64_t files, bytes;
	uint64_t chunks; /* data chunks sent or received */
	unsigned int connections, failures;
	unsigned int refused; /* serve: never admitted; proxy: TCP clients over the cap */
	uint64_t start_ns;    /* the clock starts here */
	uint64_t data_ns;     /* send: first WELCOME to last FILE_DONE, 0 if none */
	uint64_t checksum;    /* of the last file, when files > 0 */
	uint32_t chunk, window;
	/* serve: its threads, and the connections each one ended */
	unsigned int threads;
	const unsigned int *thread_conns;
	uint64_t files_ahead; /* serve: FILE_STARTs before the last file was stored */
};

/* Fill in seconds, CPU and peak RSS now and write @path; 0 or -errno. */
int cp_json_write(const char *path, const struct cp_summary *s);

#endif
