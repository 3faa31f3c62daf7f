/* SPDX-License-Identifier: MIT */
/* ringrdma-cp --json: one summary object per run. */
#ifndef CP_JSON_H
#define CP_JSON_H

#include "cp.h"

struct cp_rank_figs; /* ranks.h */

struct cp_summary {
	const char *mode; /* "send", "serve" or "proxy" */
	int exit_code;
	const char *error; /* last error message, or NULL */
	struct cp_tally n;
	uint64_t start_ns; /* the clock starts here */
	uint64_t data_ns;  /* send: first WELCOME to last FILE_DONE, 0 if none */
	/* serve: its threads, and the connections each one ended; send
	 * --threads N (N > 1): its threads and the connections each one ran */
	unsigned int threads;
	const unsigned int *thread_conns;
	/* --mpi: the job's ranks, and what each one did */
	unsigned int ranks;
	const struct cp_rank_figs *rank_figs;
};

/* @to gets @from's counts added, and its checksum if it has files. */
void cp_tally_add(struct cp_tally *to, const struct cp_tally *from);

/* With --json: fill in seconds, CPU and peak RSS now, with @o's chunk and
 * window, and write the summary; a failure is logged. */
void cp_json_report(const struct cp_opts *o, const struct cp_summary *s);

#endif
