// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp: copy files over RDMA through one io_uring.
 *
 *   ringrdma-cp serve --listen ADDR:PORT --dir DIR [OPTIONS]
 *   ringrdma-cp send [OPTIONS] [-r] FILE... ADDR:PORT
 *   ringrdma-cp proxy --tcp-listen ADDR:PORT --to ADDR:PORT [OPTIONS]
 *
 * This file only parses the command line; see docs/man/ringrdma-cp.1.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cp.h"
#include "ranks.h"
#include "optab.h"

#define DEFAULT_CHUNK	    (1u << 20)
#define DEFAULT_STRIPE	    (64ull << 20) /* CP_STRIPE_DEFAULT */
#define DEFAULT_WINDOW	    64u
#define DEFAULT_TIMEOUT	    60u
#define DEFAULT_CONNS	    16u
#define DEFAULT_PENDING	    16u
#define DEFAULT_HELLO	    5u
#define DEFAULT_CLIENTS	    16u
#define DEFAULT_MIN_RATE    1024u
#define DEFAULT_PARTIAL_AGE (7u * 86400) /* a week */
#define CP_THREADS_MAX	    64
#define CP_STR_(x)	    #x
#define CP_STR(x)	    CP_STR_(x)

enum { CP_SERVE = 1, CP_SEND = 2, CP_PROXY = 4, CP_ALL = 7 };

static const struct {
	const char *name;
	unsigned int bit;
	const char *what;
} cp_modes[] = {
	{"serve", CP_SERVE, "store files sent over RDMA under DIR"},
	{"send", CP_SEND, "copy FILEs to a serve peer"},
	{"proxy", CP_PROXY, "forward each TCP client's byte stream to a serve peer as a file"},
};

static const struct optab cp_optab[];

static void usage(FILE *f)
{
	fputs("usage: " CP_PROG " serve --listen ADDR:PORT --dir DIR [OPTIONS]\n"
	      "       " CP_PROG " send [OPTIONS] [-r] FILE... ADDR:PORT\n"
	      "       " CP_PROG " proxy --tcp-listen ADDR:PORT --to ADDR:PORT [OPTIONS]\n"
	      "\n",
	      f);
	for (size_t i = 0; i < sizeof(cp_modes) / sizeof(cp_modes[0]); i++) {
		fprintf(f, "%s: %s\n", cp_modes[i].name, cp_modes[i].what);
		optab_usage(f, cp_optab, cp_modes[i].bit, 19);
	}
	fputs("all modes:\n", f);
	optab_usage(f, cp_optab, CP_ALL, 19);
	fputs("\n"
	      "Exit status: 0 ok, 1 other failure, 2 usage, 3 local file error, 4 network\n"
	      "error, 5 refused by the peer, 6 checksum or protocol error, 7 the receiver\n"
	      "could not store the data, 130 interrupted. Without an RDMA device, serve, send\n"
	      "and proxy refuse to run; a ringrdma checkout's tools/cp-lab copies through its\n"
	      "lab (Soft-RoCE under QEMU).\n",
	      f);
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;
	int shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		shift = 10;
		end++;
		break;
	case 'm':
	case 'M':
		shift = 20;
		end++;
		break;
	case 'g':
	case 'G':
		shift = 30;
		end++;
		break;
	default:
		break;
	}
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	v <<= shift;
	if (v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* The secret: the file's bytes without trailing white space. */
static int load_token(struct cp_opts *o, const char *path)
{
	char buf[CP_TOKEN_MAX + 64];
	struct stat st;
	ssize_t n = 0, got = 1;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0) {
		fprintf(stderr, CP_PROG ": --token-file %s: %s\n", path, strerror(errno));
		return -1;
	}
	/* As ssh with a private key: a secret others can read is no secret,
	 * and one others can write is theirs. */
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		fprintf(stderr, CP_PROG ": --token-file %s: not a regular file\n", path);
		close(fd);
		return -1;
	}
	if (st.st_uid != geteuid()) {
		fprintf(stderr,
			CP_PROG ": --token-file %s: owned by uid %u, not by the user running "
				"(uid %u): its owner may read and change it\n",
			path, (unsigned int)st.st_uid, (unsigned int)geteuid());
		close(fd);
		return -1;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		fprintf(stderr,
			CP_PROG ": --token-file %s: permissions %04o are too open: the token "
				"must not be readable or writable by group or others; run: chmod "
				"600 %s\n",
			path, (unsigned int)(st.st_mode & 07777), path);
		close(fd);
		return -1;
	}
	/* To its end: white space is stripped from the end of the file, not
	 * of what one read brought (a longer file must not pass). */
	while (got > 0 && n < (ssize_t)sizeof(buf)) {
		got = read(fd, buf + n, sizeof(buf) - (size_t)n);
		if (got > 0)
			n += got;
	}
	close(fd);
	if (got < 0) {
		fprintf(stderr, CP_PROG ": --token-file %s: %s\n", path, strerror(errno));
		return -1;
	}
	/* A full buffer is too long, whatever white space it ends with. */
	while (n > 0 && n < (ssize_t)sizeof(buf) &&
	       (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
		buf[n - 1] == '\t'))
		n--;
	/* A guessable secret is none: 16 bytes at least, as from
	 * "head -c 24 /dev/urandom | base64". */
	if (n < CP_TOKEN_MIN || n > CP_TOKEN_MAX) {
		fprintf(stderr,
			CP_PROG ": --token-file %s: the token must be at least %d bytes (and at "
				"most %d); make one with: head -c 24 /dev/urandom | base64 > %s\n",
			path, CP_TOKEN_MIN, CP_TOKEN_MAX, path);
		return -1;
	}
	memcpy(o->token, buf, (size_t)n);
	o->token_len = (uint16_t)n;
	o->have_token = true;
	return 0;
}

static int bad_value(const char *opt, const char *val, const char *want)
{
	fprintf(stderr, CP_PROG ": --%s %s: %s\n", opt, val, want);
	return -1;
}

/* A number in the row's range into its field; the error names the range
 * unless the row says what it wants. */
static int cp_num(const struct optab *d, const char *arg, void *o)
{
	uint64_t v;
	char want[64];

	if (parse_u64(arg, d->min, d->max, &v)) {
		if (d->want)
			return bad_value(d->name, arg, d->want);
		snprintf(want, sizeof(want), "want %llu to %llu%s", (unsigned long long)d->min,
			 (unsigned long long)d->max, strcmp(d->arg, "SECS") ? "" : " seconds");
		return bad_value(d->name, arg, want);
	}
	optab_store(d, o, v);
	return 0;
}

static int cp_chunk(const struct optab *d, const char *arg, void *o)
{
	uint64_t v;

	if (parse_u64(arg, d->min, d->max, &v) || v % 4096)
		return bad_value(d->name, arg, d->want);
	optab_store(d, o, v);
	return 0;
}

static int cp_window(const struct optab *d, const char *arg, void *o)
{
	uint64_t v;

	if (parse_u64(arg, d->min, d->max, &v) || (v & (v - 1)))
		return bad_value(d->name, arg, d->want);
	optab_store(d, o, v);
	return 0;
}

static int cp_tcp_allow(const struct optab *d, const char *arg, void *ctx)
{
	struct cp_opts *o = ctx;

	if (o->n_tcp_allow >= CP_TCP_ALLOW_MAX)
		return bad_value(d->name, arg, "at most " CP_STR(CP_TCP_ALLOW_MAX) " of them");
	o->tcp_allow[o->n_tcp_allow++] = arg;
	return 0;
}

static int cp_token(const struct optab *d, const char *arg, void *o)
{
	(void)d;
	return load_token(o, arg) ? -1 : 0;
}

static int cp_help(const struct optab *d, const char *arg, void *o)
{
	(void)d, (void)arg, (void)o;
	usage(stdout);
	exit(0);
}

#define F(f)	       OPTAB_FIELD(struct cp_opts, f)
#define FLAG(f)	       .parse = optab_flag, F(f), .min = 1
#define STR(f)	       .parse = optab_string, F(f)
#define NUM(f, lo, hi) .parse = cp_num, F(f), .min = (lo), .max = (hi)

/*
 * Every option of ringrdma-cp, in the order of its usage: a new option is
 * a row here (and its entry in docs/man/ringrdma-cp.1.md, which the test
 * cp-options checks). Rows of one mode are printed under its heading,
 * those of all modes under "all modes".
 */
static const struct optab cp_optab[] = {
	{"listen", 0, "ADDR:PORT", CP_SERVE, STR(listen), .help = "RDMA address to listen on"},
	{"dir", 0, "DIR", CP_SERVE, STR(dir),
	 .help = "where files go; peers cannot write outside it"},
	{"force", 0, NULL, CP_SERVE, FLAG(force), .help = "replace existing files"},
	{"direct", 0, NULL, CP_SERVE, FLAG(direct),
	 .help = "write files with O_DIRECT, around the page cache"},
	{"count", 0, "N", CP_SERVE, NUM(count, 1, 1000000),
	 .help = "exit after N authenticated connections ended"},
	{"max-conns", 0, "N", CP_SERVE, NUM(max_conns, 1, 4096),
	 .help = "refuse authenticated connections beyond N at once\n(default 16)"},
	{"max-pending", 0, "N", CP_SERVE, NUM(max_pending, 1, 4096),
	 .help = "connections not yet authenticated at once (default 16;\n"
		 "beyond, the oldest without HELLO is dropped)"},
	{"hello-timeout", 0, "SECS", CP_SERVE, NUM(hello_timeout_s, 1, 3600),
	 .help = "drop a connection without HELLO after SECS (default 5)"},
	{"threads", 0, "N", CP_SERVE, NUM(threads, 1, CP_THREADS_MAX),
	 .help = "spread connections over N threads, each with its own\nring (default 1)"},
	{"no-auth", 0, NULL, CP_SERVE, FLAG(no_auth),
	 .help = "check no token: any host that reaches ADDR:PORT may\n"
		 "store files (serve needs this or --token-file)"},
	{"require-mw", 0, NULL, CP_SERVE, FLAG(require_mw),
	 .help = "refuse to run on a device without memory windows"},
	{"any-links", 0, NULL, CP_SERVE, FLAG(any_links),
	 .help = "store link targets as sent: absolute ones and those\n"
		 "leading out of DIR too (refused by default)"},
	{"max-size", 0, "BYTES", CP_SERVE, NUM(max_size, 1, UINT64_MAX),
	 .want = "want a positive byte count",
	 .help = "refuse a file (or stream) larger than BYTES"},
	{"min-free", 0, "BYTES", CP_SERVE, NUM(min_free, 0, UINT64_MAX),
	 .want = "want a byte count",
	 .help = "refuse a file that would leave less than BYTES free"},
	{"partial-age", 0, "SECS", CP_SERVE, NUM(partial_age_s, 0, UINT32_MAX),
	 .want = "want seconds, 0 to keep them",
	 .help = "at start, remove partials unchanged for SECS (default\n"
		 "604800, a week; 0 keeps them)"},

	{"mpi", 0, NULL, CP_SERVE, FLAG(mpi),
	 .help = "run as a rank of an MPI job (mpirun, srun): listen on\n"
		 "PORT plus the rank's number on its host"},

	{"recursive", 'r', NULL, CP_SEND, FLAG(recursive),
	 .help = "a FILE that is a directory goes as a tree: its\n"
		 "subdirectories, files, modes and mtimes"},
	{"links", 0, NULL, CP_SEND, FLAG(links),
	 .help = "(-r) symbolic links in a tree go as links (by\n"
		 "default they are skipped, with a message)"},
	{"as", 0, "NAME", CP_SEND, STR(as),
	 .help = "name of the single FILE (or directory) on the receiver"},
	{"limit-rate", 0, "BYTES", CP_SEND, NUM(rate, 1, UINT64_MAX),
	 .want = "want a positive byte count", .help = "at most BYTES per second (suffix K, M, G)"},
	{"conns", 0, "N", CP_SEND, NUM(conns, 1, CP_SEND_CONNS_MAX),
	 .help = "send over N connections side by side, each file over\n"
		 "one (default 1; each holds chunk x window bytes)"},
	{"threads", 0, "N", CP_SEND,
	 .help = "send from N threads, each with its own ring and a share\n"
		 "of max(N, --conns) connections (default 1; at most "
		 "16)"},
	{"stripe", 0, "BYTES", CP_SEND, NUM(stripe, 0, UINT64_MAX),
	 .want = "want a byte count, 0 for off",
	 .help = "a file above BYTES goes as ranges of BYTES that any\n"
		 "connection takes, each resumed on its own (default\n"
		 "64M; 0: every file whole)"},
	{"no-resume", 0, NULL, CP_SEND, FLAG(no_resume),
	 .help = "send every file whole: never continue a partial the\n"
		 "receiver kept from a cut transfer"},
	{"mpi", 0, NULL, CP_SEND,
	 .help = "run as a rank of an MPI job (mpirun, srun): the ranks\n"
		 "share the entries, connection k of rank r going to the\n"
		 "(r x conns + k)th ADDR:PORT of the list"},
	{"progress", 0, NULL, CP_SEND, FLAG(progress)},
	{"no-progress", 0, NULL, CP_SEND, .parse = optab_flag, F(progress), .min = 0,
	 .help = "force the progress line on or off"},

	{"tcp-listen", 0, "ADDR:PORT", CP_PROXY, STR(tcp_listen),
	 .help = "TCP address to accept clients on"},
	{"to", 0, "ADDR:PORT", CP_PROXY, STR(to), .help = "the serve peer"},
	{"prefix", 0, "NAME", CP_PROXY, STR(prefix),
	 .help = "file names NAME-TIME-PID-N (default \"stream\")"},
	{"count", 0, "N", CP_PROXY, .help = "exit after N clients were handled"},
	{"max-clients", 0, "N", CP_PROXY, NUM(max_clients, 1, 4096),
	 .help = "refuse TCP clients beyond N at once (default 16)"},
	{"tcp-allow", 0, "CIDR", CP_PROXY, .parse = cp_tcp_allow,
	 .help = "also take TCP clients from CIDR (repeatable; loopback\n"
		 "only by default, and a non-loopback --tcp-listen needs it)"},
	{"min-rate", 0, "BYTES", CP_PROXY, NUM(min_rate, 0, UINT32_MAX),
	 .want = "want a byte count per second",
	 .help = "drop a client that sends less than BYTES/s over 10 s\n"
		 "while the proxy waits for it (default 1K; 0: never)"},
	{"max-time", 0, "SECS", CP_PROXY, NUM(max_time_s, 0, 30 * 86400),
	 .help = "drop a client still sending after SECS (default 0: never)"},

	{"chunk", 0, "BYTES", CP_ALL, .parse = cp_chunk, F(chunk), .min = CP_CHUNK_MIN,
	 .max = CP_CHUNK_MAX, .want = "want a multiple of 4096 from 4K to 16M",
	 .help = "chunk size (multiple of 4096, default 1M; the receiver\n"
		 "uses the smaller of both sides' values)"},
	{"window", 0, "N", CP_ALL, .parse = cp_window, F(window), .min = 1, .max = CP_WINDOW_MAX,
	 .want = "want a power of two from 1 to 256",
	 .help = "chunks in flight, a power of two <= 256 (default 64)"},
	{"token-file", 0, "FILE", CP_ALL, .parse = cp_token,
	 .help = "shared secret the receiver checks before any data (a\n"
		 "regular file no one else may read or write: chmod 600)"},
	{"timeout", 0, "SECS", CP_ALL, NUM(timeout_s, 0, 86400),
	 .help = "give up after SECS without progress (default 60; 0: never)"},
	{"json", 0, "FILE", CP_ALL, STR(json),
	 .help = "write a summary (bytes, seconds, MB/s, CPU, RSS)"},
	{"quiet", 0, NULL, CP_ALL, FLAG(quiet), .help = "only errors"},
	{"help", 'h', NULL, CP_ALL, .parse = cp_help, .help = "this text"},
	{.name = NULL},
};

/* Options that make no sense in a mode are refused rather than ignored. */
static int only(uint64_t seen, unsigned int mode, const char *name)
{
	const char *opt = optab_misplaced(cp_optab, seen, mode);

	if (!opt)
		return 0;
	fprintf(stderr, CP_PROG ": --%s does not apply to %s\n", opt, name);
	return -1;
}

/* serve or send, as a rank of an MPI job with --mpi. */
static int with_mpi(const struct cp_opts *o, int (*run)(const struct cp_opts *))
{
	int ret;

	if (!o->mpi)
		return run(o);
	if (cp_mpi_init(NULL, NULL))
		return CP_EXIT_FAIL;
	ret = run(o);
	cp_mpi_fini();
	return ret;
}

int main(int argc, char **argv)
{
	struct cp_opts o = {
		.chunk = DEFAULT_CHUNK,
		.stripe = DEFAULT_STRIPE,
		.window = DEFAULT_WINDOW,
		.timeout_s = DEFAULT_TIMEOUT,
		.max_conns = DEFAULT_CONNS,
		.max_pending = DEFAULT_PENDING,
		.hello_timeout_s = DEFAULT_HELLO,
		.partial_age_s = DEFAULT_PARTIAL_AGE,
		.threads = 1,
		.max_clients = DEFAULT_CLIENTS,
		.min_rate = DEFAULT_MIN_RATE,
		.progress = -1,
		.prefix = "stream",
	};
	uint64_t seen = 0;
	const char *mode;

	if (argc < 2) {
		usage(stderr);
		return CP_EXIT_USAGE;
	}
	mode = argv[1];
	if (!strcmp(mode, "-h") || !strcmp(mode, "--help")) {
		usage(stdout);
		return 0;
	}
	/* For the test that holds the man page to the table. */
	if (!strcmp(mode, "--list-options")) {
		const char *names[3];

		for (int i = 0; i < 3; i++)
			names[i] = cp_modes[i].name; /* bit i */
		optab_list(stdout, cp_optab, names, 3);
		return 0;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	optind = 2;
	if (optab_parse(cp_optab, argc, argv, &o, &seen))
		goto bad;
	if (!strcmp(mode, "serve")) {
		if (only(seen, CP_SERVE, mode))
			goto bad;
		if (!o.listen || !o.dir || optind != argc) {
			fprintf(stderr,
				CP_PROG ": serve needs --listen and --dir and no operands\n");
			goto bad;
		}
		/* Open to anyone only when asked for in so many words. */
		if (o.have_token == o.no_auth) {
			fprintf(stderr,
				o.no_auth ? CP_PROG ": serve takes --token-file or --no-auth, "
						    "not both\n"
					  : CP_PROG ": serve needs --token-file FILE (a shared "
						    "secret senders must present), or --no-auth to "
						    "take files from anyone who can reach it\n");
			goto bad;
		}
		if (o.mpi && !cp_mpi_built()) {
			fprintf(stderr,
				CP_PROG ": --mpi: this ringrdma-cp was built without MPI\n");
			goto bad;
		}
		if (!cp_have_device())
			return cp_no_device(mode);
		return with_mpi(&o, cp_serve);
	}
	if (!strcmp(mode, "send")) {
		if (only(seen, CP_SEND, mode))
			goto bad;
		if (o.threads > CP_SEND_CONNS_MAX) {
			fprintf(stderr, CP_PROG ": --threads %u: want 1 to %d in send\n", o.threads,
				CP_SEND_CONNS_MAX);
			goto bad;
		}
		if (o.links && !o.recursive) {
			fprintf(stderr, CP_PROG ": --links needs -r\n");
			goto bad;
		}
		if (argc - optind < 2) {
			fprintf(stderr, CP_PROG ": send needs FILE... and ADDR:PORT\n");
			goto bad;
		}
		o.files = argv + optind;
		o.nfiles = argc - optind - 1;
		o.to = argv[argc - 1];
		if (o.as && o.nfiles != 1) {
			fprintf(stderr, CP_PROG ": --as needs exactly one FILE or directory\n");
			goto bad;
		}
		if (o.as && (!*o.as || strlen(o.as) > CP_NAME_MAX)) {
			fprintf(stderr, CP_PROG ": --as wants 1 to %d bytes\n", CP_NAME_MAX);
			goto bad;
		}
		if (o.mpi && !cp_mpi_built()) {
			fprintf(stderr,
				CP_PROG ": --mpi: this ringrdma-cp was built without MPI\n");
			goto bad;
		}
		if (!cp_have_device())
			return cp_no_device(mode);
		return with_mpi(&o, cp_send);
	}
	if (!strcmp(mode, "proxy")) {
		if (only(seen, CP_PROXY, mode))
			goto bad;
		if (!o.tcp_listen || !o.to || optind != argc) {
			fprintf(stderr,
				CP_PROG ": proxy needs --tcp-listen and --to and no operands\n");
			goto bad;
		}
		if (!cp_name_ok(o.prefix, strlen(o.prefix)) || strchr(o.prefix, '/') ||
		    strlen(o.prefix) > 200) {
			fprintf(stderr, CP_PROG ": --prefix wants a plain file name\n");
			goto bad;
		}
		if (!cp_have_device())
			return cp_no_device(mode);
		return cp_proxy(&o);
	}
	fprintf(stderr, CP_PROG ": unknown mode \"%s\"\n", mode);
bad:
	fprintf(stderr, "Try '" CP_PROG " --help'.\n");
	return CP_EXIT_USAGE;
}
