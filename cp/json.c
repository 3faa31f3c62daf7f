// SPDX-License-Identifier: MIT
/* ringrdma-cp --json FILE: the run's summary, written when it ends. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cp.h"
#include "json.h"

/* cp_esc() makes it printable ASCII; JSON then only needs '"' and '\\' quoted. */
static void put_string(FILE *f, const char *s)
{
	char esc[CP_ESC_LEN(512)];

	fputc('"', f);
	for (const char *p = cp_esc(s, esc, sizeof(esc)); *p; p++) {
		if (*p == '"' || *p == '\\')
			fputc('\\', f);
		fputc(*p, f);
	}
	fputc('"', f);
}

int cp_json_write(const char *path, const struct cp_summary *s)
{
	double secs = (double)(cp_now_ns() - s->start_ns) / 1e9;
	FILE *f = fopen(path, "w");
	int rc = 0;

	if (!f)
		return -errno;
	fprintf(f, "{\n  \"mode\": \"%s\",\n  \"exit_code\": %d,\n  \"error\": ", s->mode,
		s->exit_code);
	if (s->error)
		put_string(f, s->error);
	else
		fputs("null", f);
	fprintf(f, ",\n  \"files\": %llu,\n  \"bytes\": %llu,\n", (unsigned long long)s->files,
		(unsigned long long)s->bytes);
	fprintf(f, "  \"chunks\": %llu,\n", (unsigned long long)s->chunks);
	fprintf(f, "  \"connections\": %u,\n  \"failures\": %u,\n", s->connections, s->failures);
	fprintf(f, "  \"refused\": %u,\n", s->refused);
	fprintf(f, "  \"seconds\": %.6f,\n  \"mb_per_s\": %.3f,\n", secs,
		secs > 0 ? (double)s->bytes / 1e6 / secs : 0.0);
	if (s->data_ns)
		fprintf(f, "  \"data_seconds\": %.6f,\n  \"data_mb_per_s\": %.3f,\n",
			(double)s->data_ns / 1e9, (double)s->bytes * 1e3 / (double)s->data_ns);
	fprintf(f, "  \"cpu_seconds\": %.6f,\n", cp_cpu_seconds());
	if (s->files)
		fprintf(f, "  \"checksum\": \"xxh3:%016llx\",\n", (unsigned long long)s->checksum);
	else
		fputs("  \"checksum\": null,\n", f);
	if (s->threads) {
		fprintf(f, "  \"threads\": %u,\n  \"thread_conns\": [", s->threads);
		for (unsigned int i = 0; i < s->threads; i++)
			fprintf(f, "%s%u", i ? ", " : "", s->thread_conns[i]);
		fputs("],\n", f);
		fprintf(f, "  \"files_ahead\": %llu,\n", (unsigned long long)s->files_ahead);
	}
	fprintf(f, "  \"chunk\": %u,\n  \"window\": %u,\n", s->chunk, s->window);
	fprintf(f, "  \"peak_rss_bytes\": %llu\n}\n", (unsigned long long)cp_peak_rss_bytes());
	if (ferror(f))
		rc = -EIO;
	if (fclose(f) && !rc)
		rc = -errno;
	return rc;
}
