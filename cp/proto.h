/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp wire format: the control messages both sides exchange with
 * SEND/RECV, and the rule that admits a data chunk written into the
 * receiver's window with RDMA WRITE with immediate.
 *
 * Every message is a fixed header (magic, version, type, payload length)
 * and a payload whose layout depends on the type; all integers are little
 * endian. The decoder trusts nothing: any length, value or name outside
 * the rules below is an error, never a crash. It is pure (no I/O, no
 * allocation) so the fuzzer and the unit suite can drive it directly.
 */
#ifndef CP_PROTO_H
#define CP_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CP_MAGIC      0x50435252u /* "RRCP" on the wire */
#define CP_VERSION    9
#define CP_HDR_LEN    8
#define CP_MSG_MAX    512 /* every receive buffer holds this much */
#define CP_NAME_MAX   255
#define CP_TOKEN_MAX  128
#define CP_TOKEN_MIN  16 /* what a --token-file must hold */
#define CP_NONCE_LEN  32 /* HELLO's and CHALLENGE's random bytes */
#define CP_PROOF_LEN  32 /* HMAC-SHA256 over both nonces, keyed by the token */
#define CP_TEXT_MAX   200
#define CP_TARGET_MAX 224 /* a symbolic link's target: SYMLINK fits CP_MSG_MAX */

#define CP_CHUNK_MIN	  4096u
#define CP_CHUNK_MAX	  (16u << 20)
#define CP_WINDOW_MAX	  256u
#define CP_GRANT_KEYS_MAX 120u /* keys in one GRANT: it fits CP_MSG_MAX */

enum cp_type {
	CP_HELLO = 1,	   /* sender: proposal and nonce (the token never crosses) */
	CP_WELCOME = 2,	   /* receiver: window address and geometry */
	CP_FILE_START = 3, /* sender: name and size of the next file */
	/* 4 was FILE_READY (version 2): chunks now follow FILE_START at once */
	CP_GRANT = 5,	  /* receiver: seqs below the limit may be written, and their keys */
	CP_FILE_END = 6,  /* sender: byte count and checksum of the file */
	CP_FILE_DONE = 7, /* receiver: verified, synced and under its final name */
	CP_ERROR = 8,	  /* either side: why it gives up; it disconnects next */
	/* Tree entries (version 5): each answered by FILE_DONE with 0 bytes
	 * and checksum 0, in order with the files. */
	CP_MKDIR = 9,	   /* sender: create the directory name (mode 0700 until DIR_META) */
	CP_SYMLINK = 10,   /* sender: a symbolic link, its target stored verbatim or refused */
	CP_DIR_META = 11,  /* sender: the directory's mode and mtime, after its contents */
	CP_FILE_HAVE = 12, /* receiver: what it holds of a CP_START_RESUME file */
	CP_FILE_FROM = 13, /* sender: where that file's chunks begin */
	/* Mutual authentication (version 6): the token never crosses the
	 * wire. HELLO carries the sender's nonce; CHALLENGE the receiver's;
	 * AUTH the sender's proof; WELCOME the receiver's (cp/auth.h). */
	CP_CHALLENGE = 14, /* receiver: its nonce */
	CP_AUTH = 15,	   /* sender: its proof of the token */
	/* Ranges (version 8): a striped file is named once every range of it
	 * was stored; answered by FILE_DONE with the size and folded sum. */
	CP_FILE_COMMIT = 16, /* sender: name, size, mode, mtime, stripe, sum */
	/* Version 9: a receiver at work on its own files (a commit's reread
	 * of a big file, a long fsync) says so while it sends nothing else,
	 * so that the sender's --timeout counts silence, not work. */
	CP_BUSY = 17, /* receiver: still at work, for how long */
};

/* enum cp_err: what an ERROR message reports, and the exit code it means. */
enum cp_err {
	CP_E_PROTO = 1,	   /* malformed or out-of-order message */
	CP_E_AUTH = 2,	   /* token missing or wrong */
	CP_E_NAME = 3,	   /* name refused: absolute, "..", escapes DIR */
	CP_E_EXISTS = 4,   /* the final name exists and --force was not given */
	CP_E_IO = 5,	   /* the receiver could not store the file */
	CP_E_NOSPC = 6,	   /* the receiver's file system is full */
	CP_E_CHECKSUM = 7, /* checksum or length mismatch */
	CP_E_BUSY = 8,	   /* too many connections */
	CP_E_ABORT = 9,	   /* the peer gave up for a reason of its own */
	CP_E_MAX = 9,
};

#define CP_START_STREAM 1u /* size unknown: chunks may be short */
#define CP_START_META	8u /* mode and mtime apply; without it both are zero */

/* Sized files only: the receiver keeps what it got if the transfer is cut,
 * and answers FILE_HAVE with what it already holds; chunks wait for the
 * sender's FILE_FROM. */
#define CP_START_RESUME 2u

/* One range of a striped file (version 8, docs/ringrdma-cp.md "Ranges"):
 * size stays the whole file's; range_off, range_len and stripe follow the
 * mtime. Only with CP_START_RESUME (a range always goes into the partial),
 * never a stream; the range is the layout's: at a multiple of the stripe,
 * a whole stripe or the file's tail, and the file more than one stripe
 * with at most CP_RANGES_MAX ranges. */
#define CP_START_RANGE 4u
/* Ranges of one file at most: a bigger file gets a bigger stripe. */
#define CP_RANGES_MAX 65536u

/* FILE_HAVE: the bytes are the file under its final name, not a partial. */
#define CP_HAVE_NAMED 1u

/* A modification time as the wire carries it: nsec < 10^9. */
struct cp_time {
	int64_t sec;
	uint32_t nsec;
};

struct cp_msg {
	uint8_t type;
	union {
		struct {
			uint32_t chunk, window;
			uint16_t nonce_len; /* 0 (no token) or CP_NONCE_LEN */
			uint8_t nonce[CP_NONCE_LEN];
		} hello;
		struct {
			uint32_t chunk, window;
			uint64_t addr;
			/* the receiver's proof of the token; zeros without one */
			uint8_t proof[CP_PROOF_LEN];
		} welcome; /* grants nothing yet: GRANTs follow */
		struct {
			uint8_t nonce[CP_NONCE_LEN];
		} challenge;
		struct {
			uint8_t proof[CP_PROOF_LEN];
		} auth;
		struct {
			uint64_t size;
			uint32_t flags;
			uint16_t name_len;
			char name[CP_NAME_MAX + 1]; /* NUL-terminated by the decoder */
			uint32_t mode;		    /* permission bits, <= 0777 */
			struct cp_time mtime;
			/* CP_START_RANGE: this range; FILE_COMMIT: stripe and sum */
			uint64_t range_off, range_len, stripe;
			uint64_t sum; /* FILE_COMMIT: the ranges' folded checksum */
		} start;	      /* FILE_START and FILE_COMMIT (flags: META only) */
		/*
		 * MKDIR, SYMLINK and DIR_META: one layout, each type with its own
		 * rule: MKDIR only a name; SYMLINK a target and an mtime, no
		 * mode; DIR_META a mode (<= 0777) and an mtime, no target.
		 */
		struct {
			uint16_t name_len, target_len;
			char name[CP_NAME_MAX + 1];	/* NUL-terminated by the decoder */
			char target[CP_TARGET_MAX + 1]; /* no NUL inside, as a link can hold */
			uint32_t mode;
			struct cp_time mtime;
		} entry;
		/*
		 * Seqs below @limit may be written; the @nkeys seqs just below it
		 * (exactly those the previous limit did not grant) each with the
		 * key in @keys, in seq order: a slot's key changes every grant.
		 */
		struct {
			uint32_t limit;
			uint16_t nkeys;
			uint32_t keys[CP_GRANT_KEYS_MAX];
		} grant;
		struct {
			uint64_t bytes, checksum;
		} end; /* FILE_END and FILE_DONE */
		struct {
			uint32_t code;
			uint16_t len;
			char text[CP_TEXT_MAX + 1];
		} error;
		/* The first @bytes of the file the receiver holds hash to
		 * @checksum (XXH3-64). */
		struct {
			uint64_t bytes, checksum;
			uint32_t flags; /* CP_HAVE_* */
		} have;
		/*
		 * The chunks that follow begin at byte @offset of the file: 0, or
		 * the FILE_HAVE's bytes when the sender's own first bytes hash the
		 * same (or are the same file: then @offset is its size). FILE_END
		 * counts and hashes the bytes from @offset on.
		 */
		struct {
			uint64_t offset;
		} from;
		struct {
			uint32_t secs; /* since the receiver's last message */
		} busy;
	};
};

/* cp_encode() - @m into @buf; returns the length, or 0 if @m is invalid. */
size_t cp_encode(const struct cp_msg *m, uint8_t *buf, size_t cap);

/*
 * cp_decode() - parse @len bytes. Returns 0; -EACCES for a well-formed
 * FILE_START, MKDIR, SYMLINK or DIR_META whose name cp_name_ok() refuses; -EPROTO for anything else
 * malformed. The reason is in @why (at least 80 bytes recommended).
 */
int cp_decode(const uint8_t *buf, size_t len, struct cp_msg *m, char *why, size_t why_len);

/* cp_name_ok() - is @name a relative path without "..", "." or empty parts? */
bool cp_name_ok(const char *name, size_t len);

const char *cp_type_name(unsigned int type);
const char *cp_err_name(unsigned int code);

/*
 * The receiver's view of the data stream of one connection, used to admit
 * or refuse each RDMA WRITE with immediate. seq counts chunks over the
 * whole connection; the immediate is the seq, the slot is seq % window.
 */
struct cp_rx_window {
	uint32_t chunk, window;
	uint32_t next_seq; /* the only seq that may arrive next */
	uint32_t limit;	   /* seq < limit has been granted */
	bool file_open;	   /* between FILE_START and FILE_END */
	bool stream;	   /* the file's size is unknown */
	uint64_t size;	   /* declared size (sized files) */
	uint64_t got;	   /* bytes admitted for this file */
};

/*
 * cp_rx_admit() - may the chunk with immediate @imm and @len bytes be
 * taken? On success returns 0, sets *slot and advances the state; on
 * -EPROTO the state is unchanged and @why says why.
 */
int cp_rx_admit(struct cp_rx_window *w, uint32_t imm, uint32_t len, uint32_t *slot, char *why,
		size_t why_len);

#endif
