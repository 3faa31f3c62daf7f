// SPDX-License-Identifier: MIT
/* ringrdma-cp: bytes, rate and ETA on one line of a terminal. */
#include <stdio.h>
#include <unistd.h>

#include "cp.h"
#include "progress.h"

#define REDRAW_NS 200000000ull

void cp_progress_init(struct cp_progress *p, int mode, uint64_t total)
{
	p->on = mode > 0 || (mode < 0 && isatty(STDERR_FILENO));
	p->total = total;
	p->start_ns = p->last_ns = cp_now_ns();
	p->drawn = false;
}

static void human(char *buf, size_t len, double v)
{
	const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	unsigned int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, units[u]);
}

void cp_progress_update(struct cp_progress *p, uint64_t done, bool final)
{
	uint64_t now = cp_now_ns();
	double secs = (double)(now - p->start_ns) / 1e9;
	double rate = secs > 0 ? (double)done / secs : 0;
	char d[32], t[32], eta[32] = "";

	if (!p->on || (!final && now - p->last_ns < REDRAW_NS))
		return;
	p->last_ns = now;
	human(d, sizeof(d), (double)done);
	if (p->total) {
		human(t, sizeof(t), (double)p->total);
		if (rate > 0 && done < p->total) {
			unsigned long s = (unsigned long)((double)(p->total - done) / rate);

			snprintf(eta, sizeof(eta), "  ETA %lu:%02lu", s / 60, s % 60);
		}
		fprintf(stderr, "\r%5.1f%%  %s / %s  %.1f MB/s%s\033[K",
			100.0 * (double)done / (double)p->total, d, t, rate / 1e6, eta);
	} else {
		fprintf(stderr, "\r%s  %.1f MB/s\033[K", d, rate / 1e6);
	}
	if (final)
		fputc('\n', stderr);
	p->drawn = true;
	fflush(stderr);
}
