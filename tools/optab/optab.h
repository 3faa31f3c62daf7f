/* SPDX-License-Identifier: MIT */
/*
 * optab: a program's command-line options as one table, shared by
 * ringrdma-cp and ringrdma-bench. Each row is an option's name, its
 * argument, the modes it applies to, its parser and its help; the
 * getopt_long() array, the usage text, the mode checks and the list the
 * man-page test reads (--list-options) are all made from it, so adding an
 * option is adding a row.
 */
#ifndef RR_OPTAB_H
#define RR_OPTAB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct optab;

/* Stores what arg says into the options struct ctx; 0 or -1 (having
 * printed why). */
typedef int (*optab_parse_fn)(const struct optab *d, const char *arg, void *ctx);

struct optab {
	const char *name;   /* long name; NULL ends the table */
	int short_name;	    /* one-letter form, or 0 */
	const char *arg;    /* the argument's name in the help; NULL: none */
	unsigned int modes; /* the modes it applies to (programs with modes) */
	optab_parse_fn parse;
	size_t off, size;  /* the field parse fills: OPTAB_FIELD() */
	uint64_t min, max; /* its range (a flag stores min) */
	const char *want;  /* the error's words for a value out of range */
	/*
	 * Help, lines after the first indented by the usage; NULL: this row
	 * shares the next row's line ("--json FILE, --csv FILE"). A name a
	 * row has already used gives that option another help line, under
	 * other modes ("--count" in serve and in proxy): only its modes and
	 * help count, the first row parses.
	 */
	const char *help;
};

#define OPTAB_FIELD(type, f) .off = offsetof(type, f), .size = sizeof(((type *)0)->f)

/* Store v into the row's field, whatever its size. */
void optab_store(const struct optab *d, void *ctx, uint64_t v);

/* Parsers that need nothing of their program: a flag stores d->min, a
 * string keeps the pointer into argv. */
int optab_flag(const struct optab *d, const char *arg, void *ctx);
int optab_string(const struct optab *d, const char *arg, void *ctx);

/*
 * Run getopt_long() from optind over the table; each option's row
 * parses it. *seen gets a bit per option given (the row of its first
 * use). -1 on an unknown option (getopt_long said which) or a bad value.
 */
int optab_parse(const struct optab *t, int argc, char **argv, void *ctx, uint64_t *seen);

/* The first option in seen that applies to none of modes, or NULL. */
const char *optab_misplaced(const struct optab *t, uint64_t seen, unsigned int modes);

/* The help of the rows whose modes are exactly modes, the help text
 * starting at column width + 4. */
void optab_usage(FILE *f, const struct optab *t, unsigned int modes, int width);

/*
 * Every option, one a line (--list-options): "--name", its short form and
 * the modes it applies to unless it applies to all, as the man pages
 * write them: "--recursive -r (send)". modes names bit m of a row's
 * modes; nmodes 0 for a program without modes.
 */
void optab_list(FILE *f, const struct optab *t, const char *const *modes, int nmodes);

#endif
