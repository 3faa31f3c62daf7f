/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp serve, one receiving connection: what its files share.
 * Private to the receiver; rx.h is its interface.
 *
 *   rx.c         the connection: HELLO and the token, messages, receives,
 *                its end (rx_poll()); the top, calls everything below
 *   rx_file.c    files and tree entries: open, verify, sync, name
 *   rx_resume.c  what we hold of a file to resume: FILE_HAVE, FILE_FROM
 *   rx_win.c     the window: slots, memory windows, GRANTs, chunks into
 *                stages and on to the file
 *   rx_conn.c    log lines, control SENDs, failure and disconnect
 *
 * Calls go down that list only. Up, only through the hooks in struct rx
 * (grant_sent, progress) and the completion callbacks each file hands to
 * the ring, the library, the store and the hashing thread.
 */
#ifndef CP_RX_INT_H
#define CP_RX_INT_H

#include <arpa/inet.h>
#include <stdatomic.h>

#include "auth.h"
#include "ctl.h"
#include "gate.h"
#include "hash.h"
#include "range.h"
#include "rx.h"
#include "store.h"
#include "tree.h"

#define RX_GRANTS_OUT 2
#define RX_STAGES     4 /* file writes in flight per connection */
#define FLUSH_MS      3000
#define CLOSE_MS      5000
/* A refused stranger's ERROR gets this long to go out, then its QP goes. */
#define REFUSE_MS 500
/* Receives flushed without a disconnect: the QP is in error, unless a
 * disconnect says otherwise by then (it comes with its flushes). */
#define LOST_MS 250
/* At work on our own files (a commit's reread, a long fsync) and silent
 * this long: say BUSY, so that the sender's --timeout (60 s by default)
 * counts a silent peer, not a big file. */
#define RX_BUSY_MS 5000

/* RX_OPEN: FILE_START arrived, its file is being opened. RX_SCAN: a file
 * to resume, what it holds is being hashed; RX_FROM: FILE_HAVE went, the
 * sender's FILE_FROM is due. RX_SAME: received in full, the file already
 * under its name is being hashed: the same content is a success. RX_ENTRY:
 * a tree entry (MKDIR, SYMLINK, DIR_META) was made, its directory is being
 * synced. */
enum rx_state {
	RX_HELLO,
	RX_AUTH, /* CHALLENGE sent, the sender's AUTH is due */
	RX_IDLE,
	RX_OPEN,
	RX_SCAN,
	RX_FROM,
	RX_TRUNC, /* FILE_FROM 0: the partial is being emptied */
	RX_FILE,
	RX_SAME,
	RX_VERIFY, /* FILE_COMMIT: the partial is being reread, range by range */
	RX_SYNC,
	RX_ENTRY,
	RX_CLOSING
};

struct rx_slot {
	struct rx *r;
	struct ibv_mw *mw; /* the slot's only remote access; NULL: the region's */
	bool arrived;	   /* admitted, not yet copied out */
	bool binding;	   /* bound for the next grant, not yet done */
	bool invalidating; /* its chunk arrived, the window is being shut */
	uint32_t len;
};

/* A private copy of one chunk on its way to the file. */
struct rx_stage {
	struct cp_op op;
	struct rx *r;
	uint8_t *buf;
	bool busy;    /* until written and hashed */
	bool written; /* all of it reached the file */
	uint32_t len, done;
	uint64_t off;
	uint64_t job; /* its number at the hashing thread */
};

struct rx {
	struct rx *next;
	/* Hooks up: a GRANT went out (rx_send_grant()); a write or FILE_FROM
	 * made progress, the file may be complete (rx_maybe_finish()). */
	void (*grant_sent)(struct rx *r);
	void (*progress)(struct rx *r);
	struct rx_env *env;
	rr_ep *ep;
	char peer[INET6_ADDRSTRLEN];
	struct sockaddr_storage src; /* the peer's address, for the gate */
	enum rx_state state;
	bool accepted, orphan, down;
	bool gone; /* evicted on its own thread: its endpoint destroyed */
	/* The QP went into error with no disconnect: receives flushed (no
	 * status: a bad RDMA access of the peer's, on rxe), or on_disconnect
	 * with an error; the connection is lost. */
	bool lost;
	int lost_status;
	uint64_t lost_at;
	bool authed; /* the token was good and it was admitted */
	uint8_t client_nonce[CP_NONCE_LEN], server_nonce[CP_NONCE_LEN];
	uint8_t server_id[CP_SERVER_ID_LEN]; /* our address as the sender reached it */
	uint32_t want_chunk, want_window;    /* HELLO's */
	bool error_out;			     /* an ERROR is being sent */
	struct cp_gate_ticket gt;	     /* in env->gate until admitted or freed */
	uint64_t born_at; /* its connect request: the HELLO deadline runs from here */
	uint64_t down_at, closing_at, last_activity;
	uint64_t last_sent; /* our last message sent, for BUSY */
	int result;

	struct cp_ctl ctl; /* window + RX_SPARE_RECVS receives, RX_SENDS sends */
	unsigned int recvs_posted;
	uint8_t *pending; /* a message that arrived before on_accept */
	uint32_t pending_len;
	unsigned int grants_out;

	uint8_t *win;
	size_t win_len;
	struct ibv_mr *win_mr;
	struct rx_slot *slots;
	struct cp_rx_window w;
	uint32_t released; /* every seq below was copied out of the window */
	uint32_t bound;	   /* every seq below has its slot bound (or binding) */
	uint32_t limit_sent;

	uint8_t *stage_mem;
	struct rx_stage stages[RX_STAGES];
	unsigned int nstages;

	unsigned int io_inflight, writes;
	struct cp_store st;
	bool file_active, end_seen;
	uint32_t end_seq; /* end_seen: the first seq past this file */
	bool committing;  /* verified and synced, being named */
	char name[CP_NAME_MAX + 1];
	bool meta; /* FILE_START gave the file's mode and mtime */
	uint32_t mode;
	struct cp_time mtime;
	/* The file being stored: as FILE_START said, and resumed how */
	bool cur_resume, cur_stream;
	uint64_t cur_size;
	/* A range of a striped file (CP_START_RANGE): received into the
	 * shared partial at range_off, synced and left there at its end. Or
	 * FILE_COMMIT: the partial reread (rv), then named. */
	bool cur_range, cur_commit;
	uint64_t range_off, range_len, stripe;
	struct cp_range_verify rv;
	uint64_t have;	      /* FILE_HAVE: bytes the partial holds */
	int same_fd;	      /* RX_SCAN of a named file, RX_SAME: its fd */
	int pad_fd;	      /* RX_SAME: the received file, read past the named one's end */
	uint64_t w_off;	      /* where the chunks the window admits begin */
	struct cp_work trunc; /* RX_TRUNC: ftruncate(trunc_fd), on the worker */
	int trunc_fd;
	struct cp_hasher hs;
	uint64_t file_off, end_bytes, end_sum;
	struct cp_op sync_op;
	struct cp_entry ent;   /* RX_ENTRY: the entry being made */
	uint8_t entry_type;    /* its message: CP_MKDIR, CP_SYMLINK, CP_DIR_META */
	struct cp_op entry_op; /* RX_ENTRY: then the fsync of entry_fd */
	int entry_fd;
	/* The next file, begun after end_seen: the window admits its chunks,
	 * opened once this one is named (commit_done) */
	struct {
		bool on, end_seen, resume, stream, range;
		uint32_t end_seq;
		uint64_t bytes, sum, size;
		uint64_t range_off, range_len, stripe;
		char name[CP_NAME_MAX + 1];
		bool meta;
		uint32_t mode;
		struct cp_time mtime;
	} q;
};

static inline bool rx_quiet(const struct rx *r)
{
	return r->env->o->quiet;
}

/* Between FILE_START and FILE_DONE: a lost sender loses this file. */
static inline bool rx_in_file(const struct rx *r)
{
	return r->state >= RX_OPEN && r->state <= RX_ENTRY;
}

/* rx_conn.c */
int rx_send(struct rx *r, const struct cp_msg *m);
bool rx_send_failed(int rc);
void rx_log(struct rx *r, const char *msg);
void rx_disconnect(struct rx *r);
void rx_fail(struct rx *r, unsigned int code, int result, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int rx_err_result(unsigned int code);
void rx_store_failed(struct rx *r, int code);

/* rx_win.c */
int rx_win_setup(struct rx *r);
void rx_release_regions(struct rx *r);
void rx_send_grant(struct rx *r);
void rx_bind_slots(struct rx *r);
void rx_stage_chunks(struct rx *r);
void rx_write_done(struct cp_op *op, int res);
void rx_on_chunk(struct rx *r, uint32_t imm, uint32_t len);

/* rx_resume.c */
int rx_open_named(struct rx *r);
void rx_close_named(struct rx *r);
void rx_start_scan(struct rx *r);
void rx_scan_done(struct rx *r);
void rx_on_from(struct rx *r, const struct cp_msg *m);

/* rx_file.c */
void rx_maybe_finish(struct rx *r);
void rx_hashed(struct cp_hasher *h);
void rx_sync_done(struct cp_op *op, int res);
void rx_entry_synced(struct cp_op *op, int res);
void rx_on_start(struct rx *r, const struct cp_msg *m);
void rx_on_end(struct rx *r, const struct cp_msg *m);
void rx_on_commit(struct rx *r, const struct cp_msg *m);
void rx_on_entry(struct rx *r, const struct cp_msg *m);

#endif
