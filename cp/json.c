// SPDX-License-Identifier: MIT
/* ringrdma-cp --json FILE: the run's summary, written when it ends. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cp.h"
#include "json.h"
#include "ranks.h"
#include "xxh.h"

void cp_tally_add(struct cp_tally *to, const struct cp_tally *from)
{
	if (from->files)
		to->checksum = from->checksum;
	to->files += from->files;
	to->bytes += from->bytes;
	to->chunks += from->chunks;
	to->connections += from->connections;
	to->failures += from->failures;
	to->refused += from->refused;
	to->files_ahead += from->files_ahead;
	to->resumed += from->resumed;
	to->ranges += from->ranges;
	to->ranges_held += from->ranges_held;
	to->ranges_cut += from->ranges_cut;
	to->bytes_after_cut += from->bytes_after_cut;
}

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

/* One member of the object but the last: its value as @fmt says. */
static void __attribute__((format(printf, 3, 4)))
member(FILE *f, const char *key, const char *fmt, ...)
{
	va_list ap;

	fprintf(f, "  \"%s\": ", key);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputs(",\n", f);
}

static int write_summary(FILE *f, const struct cp_opts *o, const struct cp_summary *s)
{
	const struct cp_tally *n = &s->n;
	double secs = (double)(cp_now_ns() - s->start_ns) / 1e9;
	int rc = 0;

	fputs("{\n", f);
	member(f, "mode", "\"%s\"", s->mode);
	member(f, "exit_code", "%d", s->exit_code);
	fputs("  \"error\": ", f);
	if (s->error)
		put_string(f, s->error);
	else
		fputs("null", f);
	fputs(",\n", f);
	member(f, "files", "%llu", (unsigned long long)n->files);
	member(f, "bytes", "%llu", (unsigned long long)n->bytes);
	member(f, "chunks", "%llu", (unsigned long long)n->chunks);
	if (!strcmp(s->mode, "send")) {
		member(f, "bytes_resumed", "%llu", (unsigned long long)n->resumed);
		member(f, "ranges", "%llu", (unsigned long long)n->ranges);
		member(f, "ranges_held", "%llu", (unsigned long long)n->ranges_held);
		member(f, "ranges_cut", "%llu", (unsigned long long)n->ranges_cut);
		member(f, "bytes_after_cut", "%llu", (unsigned long long)n->bytes_after_cut);
	}
	member(f, "connections", "%u", n->connections);
	member(f, "failures", "%u", n->failures);
	member(f, "refused", "%u", n->refused);
	member(f, "seconds", "%.6f", secs);
	member(f, "mb_per_s", "%.3f", secs > 0 ? (double)n->bytes / 1e6 / secs : 0.0);
	if (s->data_ns) {
		member(f, "data_seconds", "%.6f", (double)s->data_ns / 1e9);
		member(f, "data_mb_per_s", "%.3f", (double)n->bytes * 1e3 / (double)s->data_ns);
	}
	member(f, "cpu_seconds", "%.6f", cp_cpu_seconds());
	if (n->files)
		member(f, "checksum", "\"xxh3:%016llx\"", (unsigned long long)n->checksum);
	else
		member(f, "checksum", "null");
	member(f, "hash_impl", "\"%s\"", cp_xxh()->name);
	if (s->threads) {
		member(f, "threads", "%u", s->threads);
		fputs("  \"thread_conns\": [", f);
		for (unsigned int i = 0; i < s->threads; i++)
			fprintf(f, "%s%u", i ? ", " : "", s->thread_conns[i]);
		fputs("],\n", f);
	}
	if (s->ranks) {
		/* --mpi: each rank's own figures, rank 0 first */
		member(f, "ranks", "%u", s->ranks);
		fputs("  \"rank_figs\": [", f);
		for (unsigned int r = 0; r < s->ranks; r++) {
			const struct cp_rank_figs *k = &s->rank_figs[r];

			fprintf(f, "%s\n    {\"rank\": %u, \"host\": ", r ? "," : "", r);
			put_string(f, k->host);
			fprintf(f,
				", \"exit_code\": %d, \"files\": %llu, \"bytes\": %llu, "
				"\"ranges\": %llu, \"chunks\": %llu, \"connections\": %u, "
				"\"mpi_requests\": %llu, ",
				k->exit_code, (unsigned long long)k->n.files,
				(unsigned long long)k->n.bytes, (unsigned long long)k->n.ranges,
				(unsigned long long)k->n.chunks, k->n.connections,
				(unsigned long long)k->requests);
			if (!strcmp(s->mode, "send"))
				fprintf(f, "\"walked\": %llu, ", (unsigned long long)k->walked);
			fprintf(f, "\"data_seconds\": %.6f}",
				(double)(k->data_end - k->data_start) / 1e9);
		}
		fputs("],\n", f);
	}
	if (s->threads && strcmp(s->mode, "send")) {
		member(f, "files_ahead", "%llu", (unsigned long long)n->files_ahead);
	}
	member(f, "chunk", "%u", o->chunk);
	member(f, "window", "%u", o->window);
	fprintf(f, "  \"peak_rss_bytes\": %llu\n}\n", (unsigned long long)cp_peak_rss_bytes());
	if (ferror(f))
		rc = -EIO;
	if (fclose(f) && !rc)
		rc = -errno;
	return rc;
}

/*
 * Written to a new file of its own next to @path (O_EXCL, mode 0600),
 * then renamed over @path: whatever @path is, a symbolic link planted
 * there included, it is replaced, never followed or written through.
 */
static int write_file(const char *path, const struct cp_opts *o, const struct cp_summary *s)
{
	char tmp[PATH_MAX];
	FILE *f;
	int fd, rc;

	if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	f = fdopen(fd, "w");
	if (!f) {
		rc = -errno;
		close(fd);
		unlink(tmp);
		return rc;
	}
	rc = write_summary(f, o, s);
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}

void cp_json_report(const struct cp_opts *o, const struct cp_summary *s)
{
	int rc;

	if (!o->json)
		return;
	rc = write_file(o->json, o, s);
	if (rc)
		cp_log("%s: writing %s: %s", s->mode, o->json, strerror(-rc));
}
