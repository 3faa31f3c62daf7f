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
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cp.h"

#define DEFAULT_CHUNK	(1u << 20)
#define DEFAULT_STRIPE	(64ull << 20) /* CP_STRIPE_DEFAULT */
#define DEFAULT_WINDOW	64u
#define DEFAULT_TIMEOUT 60u
#define DEFAULT_CONNS	16u
#define DEFAULT_PENDING 16u
#define DEFAULT_HELLO	5u
#define DEFAULT_CLIENTS 16u
#define DEFAULT_MIN_RATE 1024u
#define DEFAULT_PARTIAL_AGE (7u * 86400) /* a week */
#define CP_THREADS_MAX	64
#define CP_STR_(x)	#x
#define CP_STR(x)	CP_STR_(x)

static void usage(FILE *f)
{
	fputs("usage: " CP_PROG " serve --listen ADDR:PORT --dir DIR [OPTIONS]\n"
	      "       " CP_PROG " send [OPTIONS] [-r] FILE... ADDR:PORT\n"
	      "       " CP_PROG " proxy --tcp-listen ADDR:PORT --to ADDR:PORT [OPTIONS]\n"
	      "\n"
	      "serve: store files sent over RDMA under DIR\n"
	      "  --listen ADDR:PORT   RDMA address to listen on\n"
	      "  --dir DIR            where files go; peers cannot write outside it\n"
	      "  --force              replace existing files\n"
	      "  --direct             write files with O_DIRECT, around the page cache\n"
	      "  --count N            exit after N authenticated connections ended\n"
	      "  --max-conns N        refuse authenticated connections beyond N at once\n"
	      "                       (default 16)\n"
	      "  --max-pending N      connections not yet authenticated at once (default 16;\n"
	      "                       beyond, the oldest without HELLO is dropped)\n"
	      "  --hello-timeout SECS  drop a connection without HELLO after SECS (default 5)\n"
	      "  --threads N          spread connections over N threads, each with its own\n"
	      "                       ring (default 1)\n"
	      "  --no-auth            check no token: any host that reaches ADDR:PORT may\n"
	      "                       store files (serve needs this or --token-file)\n"
	      "  --require-mw         refuse to run on a device without memory windows\n"
	      "  --any-links          store link targets as sent: absolute ones and those\n"
	      "                       leading out of DIR too (refused by default)\n"
	      "  --max-size BYTES     refuse a file (or stream) larger than BYTES\n"
	      "  --min-free BYTES     refuse a file that would leave less than BYTES free\n"
	      "  --partial-age SECS   at start, remove partials unchanged for SECS (default\n"
	      "                       604800, a week; 0 keeps them)\n"
	      "send: copy FILEs to a serve peer\n"
	      "  -r, --recursive      a FILE that is a directory goes as a tree: its\n"
	      "                       subdirectories, files, modes and mtimes\n"
	      "  --links              (-r) symbolic links in a tree go as links (by\n"
	      "                       default they are skipped, with a message)\n"
	      "  --as NAME            name of the single FILE (or directory) on the receiver\n"
	      "  --limit-rate BYTES   at most BYTES per second (suffix K, M, G)\n"
	      "  --conns N            send over N connections side by side, each file over\n"
	      "                       one (default 1; each holds chunk x window bytes)\n"
	      "  --no-resume          send every file whole: never continue a partial the\n"
	      "                       receiver kept from a cut transfer\n"
	      "  --stripe BYTES       a file above BYTES goes as ranges of BYTES that any\n"
	      "                       connection takes, each resumed on its own (default\n"
	      "                       64M; 0: every file whole)\n"
	      "  --progress, --no-progress   force the progress line on or off\n"
	      "proxy: forward each TCP client's byte stream to a serve peer as a file\n"
	      "  --tcp-listen ADDR:PORT   TCP address to accept clients on\n"
	      "  --to ADDR:PORT       the serve peer\n"
	      "  --prefix NAME        file names NAME-TIME-PID-N (default \"stream\")\n"
	      "  --count N            exit after N clients were handled\n"
	      "  --max-clients N      refuse TCP clients beyond N at once (default 16)\n"
	      "  --tcp-allow CIDR     also take TCP clients from CIDR (repeatable; loopback\n"
	      "                       only by default, and a non-loopback --tcp-listen needs it)\n"
	      "  --min-rate BYTES     drop a client that sends less than BYTES/s over 10 s\n"
	      "                       while the proxy waits for it (default 1K; 0: never)\n"
	      "  --max-time SECS      drop a client still sending after SECS (default 0: never)\n"
	      "all modes:\n"
	      "  --chunk BYTES        chunk size (multiple of 4096, default 1M; the receiver\n"
	      "                       uses the smaller of both sides' values)\n"
	      "  --window N           chunks in flight, a power of two <= 256 (default 64)\n"
	      "  --token-file FILE    shared secret the receiver checks before any data (a\n"
	      "                       regular file no one else may read or write: chmod 600)\n"
	      "  --timeout SECS       give up after SECS without progress (default 60; 0: never)\n"
	      "  --json FILE          write a summary (bytes, seconds, MB/s, CPU, RSS)\n"
	      "  --quiet              only errors\n"
	      "  -h, --help           this text\n"
	      "\n"
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
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
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

enum {
	OPT_LISTEN = 256, OPT_DIR, OPT_FORCE, OPT_COUNT, OPT_MAX_CONNS, OPT_AS, OPT_RATE,
	OPT_PROGRESS, OPT_NO_PROGRESS, OPT_TCP_LISTEN, OPT_TO, OPT_PREFIX, OPT_CHUNK, OPT_WINDOW,
	OPT_TOKEN, OPT_TIMEOUT, OPT_JSON, OPT_QUIET, OPT_MAX_PENDING, OPT_HELLO_TIMEOUT,
	OPT_MAX_CLIENTS, OPT_DIRECT, OPT_THREADS, OPT_CONNS, OPT_NO_AUTH, OPT_TCP_ALLOW,
	OPT_MIN_RATE, OPT_MAX_TIME, OPT_RECURSIVE, OPT_LINKS, OPT_REQUIRE_MW, OPT_NO_RESUME,
	OPT_ANY_LINKS, OPT_PARTIAL_AGE, OPT_MAX_SIZE, OPT_MIN_FREE, OPT_STRIPE,
};

/* Each option is a bit of the "seen" mask. */
_Static_assert(OPT_MIN_FREE - OPT_LISTEN < 64, "too many options for the seen mask");

static const struct option long_opts[] = {
	{"listen", required_argument, NULL, OPT_LISTEN},
	{"dir", required_argument, NULL, OPT_DIR},
	{"force", no_argument, NULL, OPT_FORCE},
	{"direct", no_argument, NULL, OPT_DIRECT},
	{"count", required_argument, NULL, OPT_COUNT},
	{"max-conns", required_argument, NULL, OPT_MAX_CONNS},
	{"as", required_argument, NULL, OPT_AS},
	{"limit-rate", required_argument, NULL, OPT_RATE},
	{"progress", no_argument, NULL, OPT_PROGRESS},
	{"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
	{"tcp-listen", required_argument, NULL, OPT_TCP_LISTEN},
	{"to", required_argument, NULL, OPT_TO},
	{"prefix", required_argument, NULL, OPT_PREFIX},
	{"chunk", required_argument, NULL, OPT_CHUNK},
	{"window", required_argument, NULL, OPT_WINDOW},
	{"token-file", required_argument, NULL, OPT_TOKEN},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"json", required_argument, NULL, OPT_JSON},
	{"quiet", no_argument, NULL, OPT_QUIET},
	{"max-pending", required_argument, NULL, OPT_MAX_PENDING},
	{"hello-timeout", required_argument, NULL, OPT_HELLO_TIMEOUT},
	{"max-clients", required_argument, NULL, OPT_MAX_CLIENTS},
	{"threads", required_argument, NULL, OPT_THREADS},
	{"conns", required_argument, NULL, OPT_CONNS},
	{"no-auth", no_argument, NULL, OPT_NO_AUTH},
	{"tcp-allow", required_argument, NULL, OPT_TCP_ALLOW},
	{"min-rate", required_argument, NULL, OPT_MIN_RATE},
	{"max-time", required_argument, NULL, OPT_MAX_TIME},
	{"recursive", no_argument, NULL, OPT_RECURSIVE},
	{"links", no_argument, NULL, OPT_LINKS},
	{"require-mw", no_argument, NULL, OPT_REQUIRE_MW},
	{"any-links", no_argument, NULL, OPT_ANY_LINKS},
	{"partial-age", required_argument, NULL, OPT_PARTIAL_AGE},
	{"max-size", required_argument, NULL, OPT_MAX_SIZE},
	{"min-free", required_argument, NULL, OPT_MIN_FREE},
	{"stripe", required_argument, NULL, OPT_STRIPE},
	{"no-resume", no_argument, NULL, OPT_NO_RESUME},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static int bad_value(const char *opt, const char *val, const char *want)
{
	fprintf(stderr, CP_PROG ": --%s %s: %s\n", opt, val, want);
	return -1;
}

static int parse_opts(int argc, char **argv, struct cp_opts *o, uint64_t *seen)
{
	uint64_t v;
	int opt;

	while ((opt = getopt_long(argc, argv, "hr", long_opts, NULL)) != -1) {
		if (opt == 'r')
			opt = OPT_RECURSIVE;
		if (opt >= OPT_LISTEN)
			*seen |= 1ull << (opt - OPT_LISTEN);
		switch (opt) {
		case OPT_LISTEN: o->listen = optarg; break;
		case OPT_DIR: o->dir = optarg; break;
		case OPT_FORCE: o->force = true; break;
		case OPT_DIRECT: o->direct = true; break;
		case OPT_NO_AUTH: o->no_auth = true; break;
		case OPT_TCP_ALLOW:
			if (o->n_tcp_allow >= CP_TCP_ALLOW_MAX)
				return bad_value("tcp-allow", optarg,
						 "at most " CP_STR(CP_TCP_ALLOW_MAX) " of them");
			o->tcp_allow[o->n_tcp_allow++] = optarg;
			break;
		case OPT_MIN_RATE:
			if (parse_u64(optarg, 0, UINT32_MAX, &v))
				return bad_value("min-rate", optarg, "want a byte count per second");
			o->min_rate = v;
			break;
		case OPT_MAX_TIME:
			if (parse_u64(optarg, 0, 30 * 86400, &v))
				return bad_value("max-time", optarg, "want 0 to 2592000 seconds");
			o->max_time_s = (unsigned int)v;
			break;
		case OPT_REQUIRE_MW: o->require_mw = true; break;
		case OPT_ANY_LINKS: o->any_links = true; break;
		case OPT_NO_RESUME: o->no_resume = true; break;
		case OPT_AS: o->as = optarg; break;
		case OPT_TCP_LISTEN: o->tcp_listen = optarg; break;
		case OPT_TO: o->to = optarg; break;
		case OPT_PREFIX: o->prefix = optarg; break;
		case OPT_JSON: o->json = optarg; break;
		case OPT_QUIET: o->quiet = true; break;
		case OPT_RECURSIVE: o->recursive = true; break;
		case OPT_LINKS: o->links = true; break;
		case OPT_PROGRESS: o->progress = 1; break;
		case OPT_NO_PROGRESS: o->progress = 0; break;
		case OPT_COUNT:
			if (parse_u64(optarg, 1, 1000000, &v))
				return bad_value("count", optarg, "want 1 to 1000000");
			o->count = (unsigned int)v;
			break;
		case OPT_MAX_CONNS:
			if (parse_u64(optarg, 1, 4096, &v))
				return bad_value("max-conns", optarg, "want 1 to 4096");
			o->max_conns = (unsigned int)v;
			break;
		case OPT_MAX_PENDING:
			if (parse_u64(optarg, 1, 4096, &v))
				return bad_value("max-pending", optarg, "want 1 to 4096");
			o->max_pending = (unsigned int)v;
			break;
		case OPT_HELLO_TIMEOUT:
			if (parse_u64(optarg, 1, 3600, &v))
				return bad_value("hello-timeout", optarg, "want 1 to 3600 seconds");
			o->hello_timeout_s = (unsigned int)v;
			break;
		case OPT_THREADS:
			if (parse_u64(optarg, 1, CP_THREADS_MAX, &v))
				return bad_value("threads", optarg, "want 1 to " CP_STR(CP_THREADS_MAX));
			o->threads = (unsigned int)v;
			break;
		case OPT_CONNS:
			if (parse_u64(optarg, 1, CP_SEND_CONNS_MAX, &v))
				return bad_value("conns", optarg,
						 "want 1 to " CP_STR(CP_SEND_CONNS_MAX));
			o->conns = (unsigned int)v;
			break;
		case OPT_MAX_CLIENTS:
			if (parse_u64(optarg, 1, 4096, &v))
				return bad_value("max-clients", optarg, "want 1 to 4096");
			o->max_clients = (unsigned int)v;
			break;
		case OPT_PARTIAL_AGE:
			if (parse_u64(optarg, 0, UINT32_MAX, &v))
				return bad_value("partial-age", optarg, "want seconds, 0 to keep them");
			o->partial_age_s = v;
			break;
		case OPT_MAX_SIZE:
			if (parse_u64(optarg, 1, UINT64_MAX, &v))
				return bad_value("max-size", optarg, "want a positive byte count");
			o->max_size = v;
			break;
		case OPT_MIN_FREE:
			if (parse_u64(optarg, 0, UINT64_MAX, &v))
				return bad_value("min-free", optarg, "want a byte count");
			o->min_free = v;
			break;
		case OPT_STRIPE:
			if (parse_u64(optarg, 0, UINT64_MAX, &v))
				return bad_value("stripe", optarg, "want a byte count, 0 for off");
			o->stripe = v;
			break;
		case OPT_RATE:
			if (parse_u64(optarg, 1, UINT64_MAX, &v))
				return bad_value("limit-rate", optarg, "want a positive byte count");
			o->rate = v;
			break;
		case OPT_CHUNK:
			if (parse_u64(optarg, CP_CHUNK_MIN, CP_CHUNK_MAX, &v) || v % 4096)
				return bad_value("chunk", optarg, "want a multiple of 4096 from 4K to 16M");
			o->chunk = (uint32_t)v;
			break;
		case OPT_WINDOW:
			if (parse_u64(optarg, 1, CP_WINDOW_MAX, &v) || (v & (v - 1)))
				return bad_value("window", optarg, "want a power of two from 1 to 256");
			o->window = (uint32_t)v;
			break;
		case OPT_TIMEOUT:
			if (parse_u64(optarg, 0, 86400, &v))
				return bad_value("timeout", optarg, "want 0 to 86400 seconds");
			o->timeout_s = (unsigned int)v;
			break;
		case OPT_TOKEN:
			if (load_token(o, optarg))
				return -1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -1;
		}
	}
	return 0;
}

/* Options that make no sense in a mode are refused rather than ignored. */
static int only(uint64_t seen, uint64_t allowed, const char *mode)
{
	uint64_t extra = seen & ~allowed;

	if (!extra)
		return 0;
	for (unsigned int i = 0; long_opts[i].name; i++)
		if (long_opts[i].val >= OPT_LISTEN && (extra & (1ull << (long_opts[i].val - OPT_LISTEN)))) {
			fprintf(stderr, CP_PROG ": --%s does not apply to %s\n", long_opts[i].name,
				mode);
			break;
		}
	return -1;
}

#define B(x) (1ull << ((x) - OPT_LISTEN))
#define COMMON (B(OPT_CHUNK) | B(OPT_WINDOW) | B(OPT_TOKEN) | B(OPT_TIMEOUT) | B(OPT_JSON) | B(OPT_QUIET))

int main(int argc, char **argv)
{
	struct cp_opts o = {
		.chunk = DEFAULT_CHUNK,
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
		.stripe = DEFAULT_STRIPE,
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
	setvbuf(stdout, NULL, _IOLBF, 0);
	optind = 2;
	if (parse_opts(argc, argv, &o, &seen))
		goto bad;
	if (!strcmp(mode, "serve")) {
		if (only(seen, COMMON | B(OPT_LISTEN) | B(OPT_DIR) | B(OPT_FORCE) | B(OPT_COUNT) |
				       B(OPT_DIRECT) | B(OPT_MAX_CONNS) | B(OPT_MAX_PENDING) | B(OPT_HELLO_TIMEOUT) |
				       B(OPT_THREADS) | B(OPT_NO_AUTH) | B(OPT_REQUIRE_MW) | B(OPT_ANY_LINKS) |
				       B(OPT_PARTIAL_AGE) | B(OPT_MAX_SIZE) | B(OPT_MIN_FREE),
			 mode))
			goto bad;
		if (!o.listen || !o.dir || optind != argc) {
			fprintf(stderr, CP_PROG ": serve needs --listen and --dir and no operands\n");
			goto bad;
		}
		/* Open to anyone only when asked for in so many words. */
		if (o.have_token == o.no_auth) {
			fprintf(stderr, o.no_auth ? CP_PROG ": serve takes --token-file or --no-auth, "
							    "not both\n"
						  : CP_PROG ": serve needs --token-file FILE (a shared "
							    "secret senders must present), or --no-auth to "
							    "take files from anyone who can reach it\n");
			goto bad;
		}
		if (!cp_have_device())
			return cp_no_device(mode);
		return cp_serve(&o);
	}
	if (!strcmp(mode, "send")) {
		if (only(seen, COMMON | B(OPT_AS) | B(OPT_RATE) | B(OPT_PROGRESS) |
				       B(OPT_NO_PROGRESS) | B(OPT_CONNS) | B(OPT_RECURSIVE) |
				       B(OPT_LINKS) | B(OPT_NO_RESUME) | B(OPT_STRIPE), mode))
			goto bad;
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
		if (!cp_have_device())
			return cp_no_device(mode);
		return cp_send(&o);
	}
	if (!strcmp(mode, "proxy")) {
		if (only(seen, COMMON | B(OPT_TCP_LISTEN) | B(OPT_TO) | B(OPT_PREFIX) | B(OPT_COUNT) |
				       B(OPT_MAX_CLIENTS) | B(OPT_TCP_ALLOW) | B(OPT_MIN_RATE) |
				       B(OPT_MAX_TIME),
			 mode))
			goto bad;
		if (!o.tcp_listen || !o.to || optind != argc) {
			fprintf(stderr, CP_PROG ": proxy needs --tcp-listen and --to and no operands\n");
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
