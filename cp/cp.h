/* SPDX-License-Identifier: MIT */
/* ringrdma-cp: what every mode shares: options, exit codes, logging. */
#ifndef CP_CP_H
#define CP_CP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

#define CP_PROG "ringrdma-cp"

/* Exit codes (documented in docs/man/ringrdma-cp.1.md). */
enum cp_exit {
	CP_EXIT_OK = 0,
	CP_EXIT_FAIL = 1,	   /* other failure */
	CP_EXIT_USAGE = 2,	   /* bad command line */
	CP_EXIT_LOCAL_IO = 3,	   /* a local file or directory could not be read or written */
	CP_EXIT_NET = 4,	   /* connection failed, lost or timed out */
	CP_EXIT_REFUSED = 5,	   /* the peer refused: token, name, existing file, busy */
	CP_EXIT_INTEGRITY = 6,	   /* checksum mismatch or protocol violation */
	CP_EXIT_REMOTE_IO = 7,	   /* the receiver could not store the data (e.g. disk full) */
	CP_EXIT_INTERRUPTED = 130, /* SIGINT or SIGTERM */
};

#define CP_SEND_CONNS_MAX 16
#define CP_TCP_ALLOW_MAX  16

struct cp_opts {
	/* serve */
	const char *listen;
	const char *dir;
	bool force;
	bool direct;		      /* O_DIRECT writes */
	unsigned int max_conns;	      /* admitted connections at once */
	unsigned int max_pending;     /* connections not admitted yet, at once */
	unsigned int hello_timeout_s; /* an established connection's HELLO is due */
	unsigned int threads;	      /* poll groups the connections are spread over */
	bool no_auth;		      /* no token: said so, loudly */
	bool require_mw;	      /* refuse to run without memory windows */
	bool any_links;		      /* --any-links: store link targets as sent */
	uint64_t partial_age_s;	      /* --partial-age: at start, older partials go */
	uint64_t max_size;	      /* --max-size: 0, none */
	uint64_t min_free;	      /* --min-free: bytes DIR's file system keeps */
	/* send */
	char **files;
	int nfiles;
	const char *as;	    /* remote name of the single FILE */
	uint64_t rate;	    /* bytes per second, 0: unlimited */
	unsigned int conns; /* connections side by side (0: 1) */
	bool recursive;	    /* -r: directories as trees */
	bool links;	    /* --links: symbolic links in a tree as links */
	bool no_resume;	    /* never continue a partial the receiver kept */
	uint64_t stripe;    /* --stripe: files above it go as ranges; 0: never */
	/* proxy */
	const char *tcp_listen;
	const char *prefix;
	unsigned int max_clients;		 /* TCP clients at once */
	const char *tcp_allow[CP_TCP_ALLOW_MAX]; /* CIDRs beside loopback */
	unsigned int n_tcp_allow;
	uint64_t min_rate;	 /* bytes/s a client must keep up while awaited, 0: any */
	unsigned int max_time_s; /* a client's whole time, 0: unlimited */
	/* send and proxy */
	const char *to;
	/* send and serve: ranks of an MPI job (cp/mpi.h) */
	bool mpi;
	/* all */
	unsigned int count; /* serve: admitted connections; proxy: clients */
	uint32_t chunk, window;
	unsigned int timeout_s; /* no progress for this long: give up */
	const char *json;
	int progress; /* -1 auto (TTY), 0 off, 1 on */
	bool quiet;
	bool have_token;
	uint8_t token[CP_TOKEN_MAX];
	uint16_t token_len;
};

/* What a run counts, whichever the mode: each mode keeps its counts in one. */
struct cp_tally {
	uint64_t files, bytes;
	uint64_t checksum; /* of the last file, when files > 0 */
	uint64_t chunks;   /* data chunks sent or received */
	unsigned int connections, failures;
	unsigned int refused; /* serve: never admitted; proxy: TCP clients over the cap */
	uint64_t files_ahead; /* serve: FILE_STARTs before the last file was stored */
	uint64_t resumed;     /* send: bytes of files the receiver already held */
	/* send: ranges of striped files stored; of them those the receiver
	 * held whole (nothing sent) and those it held in part (cut before,
	 * continued after what it held); the bytes sent of those cut ones */
	uint64_t ranges, ranges_held, ranges_cut, bytes_after_cut;
};

/* A line on stderr, prefixed and escaped with cp_esc() as a whole. */
void cp_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Room for cp_esc() of a string of @n bytes. */
#define CP_ESC_LEN(n) (4 * (n) + 1)

/*
 * cp_esc() - @s as printable ASCII for a log line or JSON: a control byte,
 * DEL or 8-bit byte becomes "\xNN", everything else stays, a backslash too,
 * so that text escaped once (an ERROR text from the peer) is not escaped
 * twice. Truncated to fit @cap (with "..." at the end). Returns @buf. The
 * only escaping: every peer- or user-supplied string goes through it.
 */
const char *cp_esc(const char *s, char *buf, size_t cap);

/* cp_err_exit() - the exit code an ERROR code received from the peer means. */
int cp_err_exit(unsigned int code);

/* Split "HOST:PORT" or "[V6]:PORT"; returns 0 or -EINVAL. */
int cp_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port);

/*
 * cp_open_walked() - open @path for reading as the file a walk found:
 * (@dev, @ino). With @top (>= 0, the walked tree's top directory), @path
 * is relative to it and resolved beneath it through no link at all, so a
 * directory part swapped for a link since leads to no open elsewhere;
 * else @path is opened as it is, never through a link as its last
 * component with @nofollow. Never blocking (a FIFO put there is no
 * regular file), and only if what opened is that very file. The fd, or
 * -errno: -ELOOP a link, -EXDEV out of @top, -EINVAL not a regular file,
 * -ESTALE another file.
 */
int cp_open_walked(int top, const char *path, dev_t dev, ino_t ino, bool nofollow);

uint64_t cp_now_ns(void);
double cp_cpu_seconds(void);
uint64_t cp_peak_rss_bytes(void);

/* device.c: is there an RDMA device? */
bool cp_have_device(void);
/* Prints why @mode cannot run without a device; returns the exit code. */
int cp_no_device(const char *mode);
/* RINGRDMA_CP_NO_MW is set (tests): act as on a device without memory
 * windows. */
bool cp_mw_forced_off(void);
/* cp_mw_check() - does every RDMA device here have type 2 memory windows?
 * 0, or -EOPNOTSUPP naming the first that has none in @dev_name. */
int cp_mw_check(char *dev_name, size_t len);

int cp_serve(const struct cp_opts *o);
int cp_send(const struct cp_opts *o);
int cp_proxy(const struct cp_opts *o);

#endif
