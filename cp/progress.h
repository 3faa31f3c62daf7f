/* SPDX-License-Identifier: MIT */
/* ringrdma-cp: a one-line progress display on a terminal, nothing otherwise. */
#ifndef CP_PROGRESS_H
#define CP_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct cp_progress {
	bool on;
	uint64_t total; /* 0: unknown */
	uint64_t start_ns, last_ns;
	bool drawn;
};

/* @mode: -1 on when stderr is a terminal, 0 off, 1 on. */
void cp_progress_init(struct cp_progress *p, int mode, uint64_t total);
/* Redraw at most 5 times a second, or now when @final (then end the line). */
void cp_progress_update(struct cp_progress *p, uint64_t done, bool final);

#endif
