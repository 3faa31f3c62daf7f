// SPDX-License-Identifier: MIT
/*
 * optab: getopt_long(), usage, mode checks and the option list of a
 * program, all made from its one table of options (optab.h).
 */
#include "optab.h"

#include <getopt.h>
#include <stdbool.h>
#include <string.h>

/* seen is a 64-bit mask, one bit a row. */
#define OPTAB_MAX 64
#define OPTAB_VAL 256 /* getopt_long()'s value of row i: OPTAB_VAL + i */

void optab_store(const struct optab *d, void *ctx, uint64_t v)
{
	char *p = (char *)ctx + d->off;

	switch (d->size) {
	case 1: {
		uint8_t x = (uint8_t)v;
		memcpy(p, &x, 1);
		break;
	}
	case 2: {
		uint16_t x = (uint16_t)v;
		memcpy(p, &x, 2);
		break;
	}
	case 4: {
		uint32_t x = (uint32_t)v;
		memcpy(p, &x, 4);
		break;
	}
	default:
		memcpy(p, &v, 8);
		break;
	}
}

int optab_flag(const struct optab *d, const char *arg, void *ctx)
{
	(void)arg;
	optab_store(d, ctx, d->min);
	return 0;
}

int optab_string(const struct optab *d, const char *arg, void *ctx)
{
	memcpy((char *)ctx + d->off, &arg, sizeof(arg));
	return 0;
}

/* The row that first used row i's name: the one that parses. */
static int first_row(const struct optab *t, int i)
{
	for (int j = 0; j < i; j++)
		if (!strcmp(t[j].name, t[i].name))
			return j;
	return i;
}

static int rows(const struct optab *t)
{
	int n = 0;

	while (t[n].name)
		n++;
	return n;
}

int optab_parse(const struct optab *t, int argc, char **argv, void *ctx, uint64_t *seen)
{
	struct option lo[OPTAB_MAX + 1];
	char shorts[2 * OPTAB_MAX + 1];
	int n = rows(t), nlo = 0, ns = 0, opt;

	if (n > OPTAB_MAX) {
		fprintf(stderr, "%s: %d option rows, at most %d\n", argv[0], n, OPTAB_MAX);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		if (first_row(t, i) != i)
			continue;
		lo[nlo++] = (struct option){t[i].name, t[i].arg ? required_argument : no_argument,
					    NULL, OPTAB_VAL + i};
		if (t[i].short_name) {
			shorts[ns++] = (char)t[i].short_name;
			if (t[i].arg)
				shorts[ns++] = ':';
		}
	}
	lo[nlo] = (struct option){NULL, 0, NULL, 0};
	shorts[ns] = '\0';
	while ((opt = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		int i = opt - OPTAB_VAL;

		if (opt < OPTAB_VAL)
			for (i = 0; i < n && (opt == '?' || t[i].short_name != opt); i++)
				;
		if (i < 0 || i >= n)
			return -1; /* getopt_long() said why */
		*seen |= 1ull << i;
		if (t[i].parse(&t[i], optarg, ctx))
			return -1;
	}
	return 0;
}

const char *optab_misplaced(const struct optab *t, uint64_t seen, unsigned int modes)
{
	for (int i = 0; t[i].name; i++) {
		unsigned int allowed = 0;

		if (!(seen & (1ull << i)))
			continue;
		for (int j = i; t[j].name; j++)
			if (!strcmp(t[j].name, t[i].name))
				allowed |= t[j].modes;
		if (!(allowed & modes))
			return t[i].name;
	}
	return NULL;
}

void optab_usage(FILE *f, const struct optab *t, unsigned int modes, int width)
{
	char label[256];
	size_t len = 0;

	for (int i = 0; t[i].name; i++) {
		const char *h = t[i].help;
		const char *sep = len ? ", " : "";

		if (t[i].modes != modes)
			continue;
		if (t[i].short_name) {
			len += (size_t)snprintf(label + len, sizeof(label) - len, "%s-%c", sep,
						t[i].short_name);
			sep = ", ";
		}
		if (len < sizeof(label))
			len += (size_t)snprintf(label + len, sizeof(label) - len, "%s--%s%s%s", sep,
						t[i].name, t[i].arg ? " " : "",
						t[i].arg ? t[i].arg : "");
		if (len >= sizeof(label))
			len = sizeof(label) - 1;
		if (!h)
			continue; /* its line is the next row's */
		fprintf(f, "  %-*s  ", width, label);
		for (const char *nl; (nl = strchr(h, '\n')); h = nl + 1)
			fprintf(f, "%.*s\n%*s", (int)(nl - h), h, width + 4, "");
		fprintf(f, "%s\n", h);
		len = 0;
	}
}

void optab_list(FILE *f, const struct optab *t, const char *const *modes, int nmodes)
{
	unsigned int every = (1u << nmodes) - 1;

	for (int i = 0; t[i].name; i++) {
		unsigned int allowed = 0;
		const char *sep = " (";

		if (first_row(t, i) != i)
			continue;
		fprintf(f, "--%s", t[i].name);
		if (t[i].short_name)
			fprintf(f, " -%c", t[i].short_name);
		for (int j = i; t[j].name; j++)
			if (!strcmp(t[j].name, t[i].name))
				allowed |= t[j].modes;
		if (nmodes && (allowed & every) != every) {
			for (int m = 0; m < nmodes; m++)
				if (allowed & (1u << m)) {
					fprintf(f, "%s%s", sep, modes[m]);
					sep = ", ";
				}
			fputc(')', f);
		}
		fputc('\n', f);
	}
}
