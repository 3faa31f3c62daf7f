// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for ringrdma-cp's receiving side: the real rx.c (and
 * ctl.c, store.c, hash.c, loop.c, the real library) over the fake device
 * and in-process rdma_cm of tests/unit (fake_verbs.c, fake_cm.c). A
 * listener creates a receiver per connection as serve.c does; a scripted
 * peer, the fuzzer's input, connects to it and acts:
 *
 *   byte 0      the receiver's options (window, chunk, memory windows or
 *               not, token, --force, busy), and whether a crowd comes
 *   then ops    op byte % 10, each with its own parameters:
 *     0 HELLO        1 byte: chunk, window, right/wrong/no token
 *     1 FILE_START   2 bytes: name, stream flag, size
 *     2 chunk        2 bytes: the next seq, its granted key, at its slot
 *     3 FILE_END     1 byte: the right byte count and checksum, or not
 *     4 WRITE_IMM    1+2+2 (+4 +4) bytes: any imm, key, length, offset
 *     5 raw SEND     2 bytes of length, then that many bytes (any)
 *     6 ERROR        1 byte: code
 *     7 disconnect   (ends the script)
 *     8 wait         1 byte: passes of both loops
 *     9 time passes  1 byte: seconds (fake_clock_advance())
 *
 * With the crowd bit (0x40 without 0x80) CROWD other connection requests
 * arrive at once after the script; they never say HELLO.
 *
 * After every step the loops run until quiet, and these must hold (an
 * abort() otherwise, which libFuzzer and the replay test both catch):
 * a write the device accepted lies inside a slot granted to the peer, by
 * the key of that grant, before its chunk arrived (or, without memory
 * windows, inside the window); every FILE_DONE and every stored file has
 * the byte count and checksum the peer declared for it; an ERROR from
 * the receiver means a non-zero result; the receiver side never holds
 * more QPs than --max-pending plus one (an admitted connection), not even
 * while a request of the crowd is being set up; a receiver whose QP a
 * refused write of the peer's put into error (the peer stays connected)
 * is gone within LOST_S seconds, well before --timeout. At the end every
 * receiver ends exactly once, none is still counted as waiting for its
 * HELLO, and no file descriptor is left open (LeakSanitizer sees the
 * memory).
 *
 * Built with -fsanitize=fuzzer by tools/fuzz-cp; without it (RX_REPLAY)
 * main() replays every file of the directories it is given: the cp-rx
 * host test replays tests/cp/corpus-rx so that every find stays covered.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "auth.h"
#include "fake_cm.h"
#include "gate.h"
#include "loop.h"
#include "proto.h"
#include "range.h"
#include "rx.h"

#define NRECV	   16
#define NSEND	   16
#define DATA_MAX   (2 * 8192 + 4096) /* any write: up to two chunks */
#define FILE_MAX   (64u << 10)	     /* what the peer keeps of a file */
#define MAX_KEYS   4096		     /* grants remembered */
#define MAX_DECL   64		     /* FILE_ENDs remembered */
#define MAX_WRITES 256		     /* writes posted in one run */
#define SETTLE_MAX 20000	     /* passes before a step is a hang */
#define END_TICKS  40		     /* simulated seconds to end in */
#define TOKEN	   "fuzz-token"
#define CROWD	   8  /* other requests at once (cfg 0x40) */
#define LOST_S	   10 /* a receiver whose QP is in error is gone by then */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("fuzz-rx: invariant broken: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/* A grant the peer received: seq may be written into its slot with key. */
struct grant {
	uint32_t seq, key;
};

/* A write the peer posted, as it learns how it went. */
struct write {
	uint64_t raddr;
	uint32_t len, key, imm;
};

struct decl {
	char name[CP_NAME_MAX + 1];
	uint64_t bytes, sum;
};

struct harness {
	struct cp_opts o;
	struct cp_loop lp;
	struct rx_env env;
	struct cp_tally n;
	struct cp_gate gate;
	struct cp_dirs made; /* what its MKDIRs made: DIR_META sets those */
	int dirfd;
	char dir[64];
	rr_listener *l;
	struct rx *rx;
	unsigned int rx_made, rx_ended;
	enum rx_poll_res how;
	int result;
	bool busy;
	bool mw_off; /* the device has no memory windows */
	unsigned int stored;
	/* the crowd: its endpoints (the peer's side) and their receivers */
	bool crowd;
	rr_ep *crowd_ep[CROWD];
	struct rx *crowd_rx[CROWD];
	unsigned int crowd_alive;
	unsigned int crowd_made; /* receivers made for the crowd's requests */

	/* the peer */
	struct io_uring ring;
	rr_bridge *b;
	rr_ep *ep;
	bool connected, down, conn_failed;
	struct ibv_mr *mr;
	uint8_t *mem; /* NRECV receive buffers, NSEND send buffers, data */
	bool send_busy[NSEND];
	unsigned int recvs;
	bool tearing;
	/* what the receiver said */
	bool welcomed;
	uint64_t addr;
	uint32_t chunk, window, limit;
	struct grant grants[MAX_KEYS];
	unsigned int ngrants;
	uint32_t arrived; /* seqs below were written with imm == seq */
	unsigned int errors, dones;
	/* the peer's file */
	uint32_t seq; /* the next chunk's seq */
	bool in_file, stream;
	char name[CP_NAME_MAX + 1];
	uint64_t size, wrote;
	uint8_t *content; /* FILE_MAX bytes: what the peer wrote of it */
	struct decl decl[MAX_DECL];
	unsigned int ndecl;
	struct write writes[MAX_WRITES];
	unsigned int nwrites;
	uint64_t broke_ns; /* a write of the peer's was refused: both QPs in error */
	/* FILE_HAVE: how many, and the last one */
	unsigned int haves;
	unsigned int busies; /* BUSYs received */
	uint64_t have_bytes, have_sum;
	uint8_t have_flags;
	/* the handshake: our nonce, the receiver's, the proof we sent */
	uint8_t client_nonce[CP_NONCE_LEN], server_nonce[CP_NONCE_LEN];
	uint8_t sent_auth[CP_PROOF_LEN];
	bool challenged;
	char last_error[CP_TEXT_MAX + 1]; /* the receiver's last ERROR text */
	/* Names the peer sent ranges of: their partials stay (other ranges,
	 * a resume), named for none. */
	char ranged[8][CP_NAME_MAX + 1];
	unsigned int nranged;
};

/* Set: op_hello answers CHALLENGE with this proof, recorded before. */
static const uint8_t *replay_auth;
/* Set: op_hello's proofs name another address than the one dialled,
 * as a sender's relayed by a server that is not the real one would. */
static bool relayed;
/* Set: op_hello calls it between CHALLENGE and its AUTH. */
static void (*before_auth)(void);
/* The receiver's compares of a sender's proof (cp_auth_check() is
 * wrapped: -Wl,--wrap). */
static unsigned int client_checks;

/* A scenario of the replay (RX_REPLAY): what is in DIR before the
 * receiver starts, and what must hold after the script (before
 * teardown's own checks, which see only the receiver's files: it
 * removes what it planted). */
static void (*scenario_plant)(int dirfd);
static void (*scenario_opts)(struct cp_opts *o);
static void (*scenario_verify)(struct harness *h);

static struct harness *H;

/*
 * A file system that hangs, for one call: the first call of stall.call
 * (libc's, through -Wl,--wrap) after it is armed waits until the test
 * releases it, or STALL_S seconds: a watchdog for a call that came on
 * the loop's own thread, which the test drives and so cannot release it.
 */
#define STALL_S 30
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const char *call; /* armed for this call; NULL: none */
	bool held;	  /* a call is waiting */
	bool released, timed_out, on_loop;
	pthread_t loop; /* the thread that runs both loops */
} stall = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void stall_if(const char *call)
{
	struct timespec end;

	pthread_mutex_lock(&stall.mu);
	if (!stall.call || strcmp(stall.call, call)) {
		pthread_mutex_unlock(&stall.mu);
		return;
	}
	stall.call = NULL; /* the first one only */
	stall.held = true;
	stall.on_loop = pthread_equal(pthread_self(), stall.loop);
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += STALL_S;
	while (!stall.released && !stall.timed_out)
		stall.timed_out = pthread_cond_timedwait(&stall.cv, &stall.mu, &end) == ETIMEDOUT;
	stall.held = false;
	pthread_mutex_unlock(&stall.mu);
}

int __real_mkdirat(int dirfd, const char *path, mode_t mode);
int __real_symlinkat(const char *target, int dirfd, const char *path);
int __real_fchmod(int fd, mode_t mode);
int __real_utimensat(int dirfd, const char *path, const struct timespec ts[2], int flags);
int __real_ftruncate64(int fd, off_t len);
int __wrap_mkdirat(int dirfd, const char *path, mode_t mode);
int __wrap_symlinkat(const char *target, int dirfd, const char *path);
int __wrap_fchmod(int fd, mode_t mode);
int __wrap_utimensat(int dirfd, const char *path, const struct timespec ts[2], int flags);
int __wrap_ftruncate64(int fd, off_t len);

int __wrap_mkdirat(int dirfd, const char *path, mode_t mode)
{
	stall_if("mkdirat");
	return __real_mkdirat(dirfd, path, mode);
}

int __wrap_symlinkat(const char *target, int dirfd, const char *path)
{
	stall_if("symlinkat");
	return __real_symlinkat(target, dirfd, path);
}

int __wrap_fchmod(int fd, mode_t mode)
{
	stall_if("fchmod");
	return __real_fchmod(fd, mode);
}

int __wrap_utimensat(int dirfd, const char *path, const struct timespec ts[2], int flags)
{
	stall_if("utimensat");
	return __real_utimensat(dirfd, path, ts, flags);
}

/* ftruncate() is ftruncate64 with a 64-bit off_t (meson's default). */
int __wrap_ftruncate64(int fd, off_t len)
{
	stall_if("ftruncate");
	return __real_ftruncate64(fd, len);
}

bool __real_cp_auth_check(const uint8_t *token, size_t len, enum cp_auth_role who, const uint8_t *c,
			  const uint8_t *s, const uint8_t *id, const uint8_t *proof);
bool __wrap_cp_auth_check(const uint8_t *token, size_t len, enum cp_auth_role who, const uint8_t *c,
			  const uint8_t *s, const uint8_t *id, const uint8_t *proof);

bool __wrap_cp_auth_check(const uint8_t *token, size_t len, enum cp_auth_role who, const uint8_t *c,
			  const uint8_t *s, const uint8_t *id, const uint8_t *proof)
{
	if (who == CP_AUTH_CLIENT)
		client_checks++;
	return __real_cp_auth_check(token, len, who, c, s, id, proof);
}

/* Bytes the receiver's hashing thread read from files (pread() is
 * wrapped: -Wl,--wrap; meson's 64-bit off_t makes it pread64). */
static _Atomic unsigned long long pread_bytes;
ssize_t __real_pread64(int fd, void *buf, size_t len, off_t off);
ssize_t __wrap_pread64(int fd, void *buf, size_t len, off_t off);

ssize_t __wrap_pread64(int fd, void *buf, size_t len, off_t off)
{
	ssize_t n = __real_pread64(fd, buf, len, off);

	if (n > 0)
		pread_bytes += (unsigned long long)n;
	return n;
}

/* The receiver's address as the peer dialled it (auth.h), or a rogue's. */
static void server_id(uint8_t id[CP_SERVER_ID_LEN])
{
	if (cp_auth_server_id(rdma_get_peer_addr(rr_ep_cm_id(H->ep)), id))
		fail("no address dialled");
	if (relayed)
		id[16] ^= 0x40; /* the same host, another port: another server */
}

static uint8_t *recv_buf(unsigned int i)
{
	return H->mem + (size_t)i * CP_MSG_MAX;
}

static uint8_t *send_buf(unsigned int i)
{
	return H->mem + (size_t)(NRECV + i) * CP_MSG_MAX;
}

static uint8_t *data_buf(void)
{
	return H->mem + (size_t)(NRECV + NSEND) * CP_MSG_MAX;
}

/* ---- the receiver, held as serve.c holds it ---- */

static int admit(void *data, char *why, size_t len)
{
	struct harness *h = data;

	if (h->busy) {
		snprintf(why, len, "refused: busy");
		return -EBUSY;
	}
	return 0;
}

static const struct decl *declared(const char *name, uint64_t bytes, uint64_t sum)
{
	for (unsigned int i = 0; i < H->ndecl; i++)
		if ((!name || !strcmp(H->decl[i].name, name)) && H->decl[i].bytes == bytes &&
		    H->decl[i].sum == sum)
			return &H->decl[i];
	return NULL;
}

static void stored(void *data, uint64_t bytes, uint64_t sum)
{
	struct harness *h = data;

	if (!declared(NULL, bytes, sum))
		fail("stored %llu bytes with checksum %016llx: the peer declared no such file",
		     (unsigned long long)bytes, (unsigned long long)sum);
	h->stored++;
}

static bool qp_alive(rr_ep *ep)
{
	struct ibv_qp *qp = ep ? rr_ep_qp(ep) : NULL;

	return qp && fake_qp_alive(qp);
}

/* The receiver side's QPs: the device's, less the peer side's. */
static unsigned int receiver_qps(void)
{
	unsigned int n = fake_stats_get().qps_live;

	n -= qp_alive(H->ep);
	for (unsigned int i = 0; i < CROWD; i++)
		n -= qp_alive(H->crowd_ep[i]);
	return n;
}

/* The scripted peer's connection first; then the crowd's, as many
 * receivers as serve.c would hold. */
static void rx_qp_ready(rr_ep *ep, int status, void *data)
{
	struct harness *h = data;
	struct rx *r;
	unsigned int qps;

	if (!h->rx_made) {
		if (!(h->rx = rx_create(&h->env, ep))) {
			rr_ep_destroy(ep);
			return;
		}
		h->rx_made++;
		return;
	}
	if (!h->crowd || !(r = rx_create(&h->env, ep))) {
		rr_ep_destroy(ep);
		return;
	}
	for (unsigned int i = 0; i < CROWD; i++)
		if (!h->crowd_rx[i]) {
			h->crowd_rx[i] = r;
			h->crowd_alive++;
			h->crowd_made++;
			break;
		}
	/* Every one of them before its HELLO (--max-pending), and the
	 * scripted one, maybe admitted: a request makes room before its
	 * callback returns, whatever is left for the next pass. */
	qps = receiver_qps();
	if (qps > h->o.max_pending + 1)
		fail("the receiver holds %u QPs with --max-pending %u", qps, h->o.max_pending);
}

static void rx_on_accept(rr_listener *l, rr_ep *ep, void *data)
{
	rx_accepted(rr_ep_data(ep));
}

static void poll_rx(void)
{
	enum rx_poll_res pr;
	int result = 0;

	if (!H->rx)
		return;
	pr = rx_poll(H->rx, &result);
	if (pr == RX_ALIVE)
		return;
	H->rx = NULL;
	H->rx_ended++;
	H->how = pr;
	H->result = result;
	if (H->rx_ended > 1)
		fail("the receiver ended %u times", H->rx_ended);
	if (!H->crowd_alive && cp_gate_pending(&H->gate))
		fail("the receiver ended still counted in the gate");
	if (pr == RX_ENDED && H->errors && !result)
		fail("the receiver sent an ERROR and ended with result 0");
	if (pr != RX_ENDED && H->welcomed)
		fail("a receiver that sent WELCOME ended as never admitted (%d)", pr);
}

/* The crowd's receivers: never admitted (no HELLO), each ends once. */
static void poll_crowd(void)
{
	for (unsigned int i = 0; i < CROWD; i++) {
		enum rx_poll_res pr;
		int result = 0;

		if (!H->crowd_rx[i])
			continue;
		pr = rx_poll(H->crowd_rx[i], &result);
		if (pr == RX_ALIVE)
			continue;
		if (pr == RX_ENDED)
			fail("a connection that never said HELLO ended as admitted");
		H->crowd_rx[i] = NULL;
		H->crowd_alive--;
	}
}

/* ---- the peer ---- */

static const struct grant *grant_of_key(uint32_t key)
{
	for (unsigned int i = H->ngrants; i-- > 0;)
		if (H->grants[i].key == key)
			return &H->grants[i];
	return NULL;
}

static const struct grant *grant_of_seq(uint32_t seq)
{
	for (unsigned int i = H->ngrants; i-- > 0;)
		if (H->grants[i].seq == seq)
			return &H->grants[i];
	return NULL;
}

static void peer_recv_done(rr_ep *ep, const struct rr_completion *c, void *data);

static void peer_post_recv(unsigned int i)
{
	if (rr_ep_post_recv(H->ep, recv_buf(i), CP_MSG_MAX, H->mr, peer_recv_done,
			    (void *)(uintptr_t)i) == 0)
		H->recvs++;
}

static bool welcome_proved(const uint8_t *proof)
{
	uint8_t id[CP_SERVER_ID_LEN];

	server_id(id);
	return cp_auth_check((const uint8_t *)TOKEN, sizeof(TOKEN) - 1, CP_AUTH_SERVER,
			     H->client_nonce, H->server_nonce, id, proof);
}

static void on_message(const uint8_t *buf, uint32_t len)
{
	struct cp_msg m;
	char why[160];

	if (cp_decode(buf, len, &m, why, sizeof(why)))
		fail("the receiver sent a malformed message: %s", why);
	switch (m.type) {
	case CP_CHALLENGE:
		if (H->challenged || !H->o.have_token)
			fail("a CHALLENGE %s", H->challenged ? "again" : "without a token");
		H->challenged = true;
		memcpy(H->server_nonce, m.challenge.nonce, CP_NONCE_LEN);
		break;
	case CP_WELCOME:
		if (H->welcomed)
			fail("a second WELCOME");
		/* With a token, only after our proof checked, and with the
		 * receiver's own. */
		if (H->o.have_token && (!H->challenged || !welcome_proved(m.welcome.proof)))
			fail("WELCOME without the receiver's proof of the token");
		H->welcomed = true;
		H->addr = m.welcome.addr;
		H->chunk = m.welcome.chunk;
		H->window = m.welcome.window;
		break;
	case CP_GRANT:
		if (!H->welcomed)
			fail("GRANT before WELCOME");
		if (m.grant.limit - H->limit != m.grant.nkeys || m.grant.nkeys > H->window)
			fail("GRANT of limit %u with %u keys after limit %u", m.grant.limit,
			     m.grant.nkeys, H->limit);
		for (unsigned int i = 0; i < m.grant.nkeys && H->ngrants < MAX_KEYS; i++)
			H->grants[H->ngrants++] = (struct grant){
				.seq = H->limit + i,
				.key = m.grant.keys[i],
			};
		H->limit = m.grant.limit;
		break;
	case CP_FILE_DONE:
		if (!declared(NULL, m.end.bytes, m.end.checksum))
			fail("FILE_DONE of %llu bytes, %016llx: not what the peer declared",
			     (unsigned long long)m.end.bytes, (unsigned long long)m.end.checksum);
		H->dones++;
		break;
	case CP_ERROR:
		H->errors++;
		snprintf(H->last_error, sizeof(H->last_error), "%.*s", (int)m.error.len,
			 m.error.text);
		if (getenv("FUZZ_RX_VERBOSE"))
			fprintf(stderr, "fuzz-rx: ERROR %u %.*s\n", m.error.code, (int)m.error.len,
				m.error.text);
		break;
	case CP_BUSY:
		if (!H->welcomed)
			fail("BUSY before WELCOME");
		H->busies++;
		break;
	case CP_FILE_HAVE:
		H->haves++;
		H->have_bytes = m.have.bytes;
		H->have_sum = m.have.checksum;
		H->have_flags = m.have.flags;
		break;
	default:
		fail("the receiver sent %s", cp_type_name(m.type));
	}
}

static void peer_recv_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	unsigned int i = (unsigned int)(uintptr_t)data;

	H->recvs--;
	if (c->status)
		return;
	if (c->has_imm)
		fail("the receiver wrote to the sender");
	on_message(recv_buf(i), c->byte_len);
	if (!H->tearing && !H->down)
		peer_post_recv(i);
}

static void peer_send_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	H->send_busy[(uintptr_t)data] = false;
}

/* A write landed: inside a slot granted by its key and not used up yet
 * (without memory windows: inside the window). */
static void peer_write_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	const struct write *w = &H->writes[(uintptr_t)data];
	const struct grant *g;
	uint64_t lo;

	if (c->status == -EACCES && !H->broke_ns)
		H->broke_ns = cp_now_ns(); /* remote access error */
	if (c->status)
		return;
	if (!H->welcomed)
		fail("a write landed before WELCOME");
	if (H->mw_off) {
		if (w->raddr < H->addr ||
		    w->raddr + w->len > H->addr + (uint64_t)H->chunk * H->window)
			fail("a write of %u bytes at window+%lld landed outside the window", w->len,
			     (long long)(w->raddr - H->addr));
	} else {
		g = grant_of_key(w->key);
		if (!g)
			fail("a write with key %#x landed: never granted", w->key);
		if ((int32_t)(g->seq - H->arrived) < 0)
			fail("a write with the key of seq %u landed after that chunk arrived",
			     g->seq);
		lo = H->addr + (uint64_t)(g->seq % H->window) * H->chunk;
		if (w->raddr < lo || w->raddr + w->len > lo + H->chunk)
			fail("a write of %u bytes at slot+%lld landed outside its slot %u", w->len,
			     (long long)(w->raddr - lo), g->seq % H->window);
	}
	if (w->imm == H->arrived)
		H->arrived++;
}

static void peer_qp_ready(rr_ep *ep, int status, void *data)
{
	size_t len = (size_t)(NRECV + NSEND) * CP_MSG_MAX + DATA_MAX;

	H->ep = ep;
	if (rr_ep_reg_mr(ep, H->mem, len, 0, &H->mr))
		fail("cannot register the peer's buffers");
	for (unsigned int i = 0; i < NRECV; i++)
		peer_post_recv(i);
}

static void peer_connected(rr_ep *ep, int status, void *data)
{
	if (status)
		H->conn_failed = true;
	else
		H->connected = true;
}

static void peer_down(rr_ep *ep, int status, void *data)
{
	H->down = true;
}

/* ---- driving both sides ---- */

static int pump(unsigned int wait_ms)
{
	int n, m;

	n = cp_loop_pass(&H->lp, wait_ms);
	if (n < 0)
		fail("cp_loop_pass: %s", strerror(-n));
	poll_rx();
	poll_crowd();
	m = rr_bridge_run_once(H->b, 0);
	if (m < 0)
		fail("rr_bridge_run_once: %s", strerror(-m));
	poll_rx();
	poll_crowd();
	return n + m;
}

/* Until nothing moves for a few passes, each waiting a little, and no
 * file I/O of the receiver's is in flight: each step is judged on what
 * it led to. */
static void settle(void)
{
	unsigned int idle = 0;

	for (unsigned int i = 0; i < SETTLE_MAX && (idle < 3 || H->lp.inflight); i++)
		idle = pump(idle && H->lp.inflight ? 1 : 0) ? 0 : idle + 1;
}

static int free_send(void)
{
	for (int i = 0; i < NSEND; i++)
		if (!H->send_busy[i])
			return i;
	return -1;
}

/* A range's FILE_START among the peer's bytes: its name's partial may
 * stay. */
static void note_range(const uint8_t *buf, size_t len)
{
	struct cp_msg m;
	char why[160];

	if (cp_decode(buf, len, &m, why, sizeof(why)) || m.type != CP_FILE_START ||
	    !(m.start.flags & CP_START_RANGE) || H->nranged == 8)
		return;
	for (unsigned int i = 0; i < H->nranged; i++)
		if (!strcmp(H->ranged[i], m.start.name))
			return;
	snprintf(H->ranged[H->nranged++], sizeof(H->ranged[0]), "%s", m.start.name);
}

/* Is @base in directory @prefix the partial of a name sent in ranges? */
static bool range_partial(const char *prefix, const char *base)
{
	size_t n = strlen(base), sfx = strlen(".rrcp-partial");
	char name[2 * CP_NAME_MAX + 2];

	if (n <= sfx + 1 || base[0] != '.' || strcmp(base + n - sfx, ".rrcp-partial"))
		return false;
	snprintf(name, sizeof(name), "%s%.*s", prefix, (int)(n - sfx - 1), base + 1);
	for (unsigned int i = 0; i < H->nranged; i++)
		if (!strcmp(H->ranged[i], name))
			return true;
	return false;
}

static void send_bytes(const uint8_t *buf, size_t len)
{
	int i = free_send();

	if (i < 0 || H->down || !H->ep || len > CP_MSG_MAX)
		return;
	note_range(buf, len);
	memcpy(send_buf((unsigned int)i), buf, len);
	if (rr_ep_post_send(H->ep, send_buf((unsigned int)i), (uint32_t)len, H->mr, peer_send_done,
			    (void *)(uintptr_t)i) == 0)
		H->send_busy[i] = true;
}

static void send_msg(const struct cp_msg *m)
{
	uint8_t buf[CP_MSG_MAX];
	size_t len = cp_encode(m, buf, sizeof(buf));

	if (len)
		send_bytes(buf, len);
}

static void write_imm(uint64_t raddr, uint32_t len, uint32_t key, uint32_t imm)
{
	unsigned int i = H->nwrites;

	if (H->down || !H->ep || i == MAX_WRITES || len > DATA_MAX)
		return;
	H->writes[i] = (struct write){.raddr = raddr, .len = len, .key = key, .imm = imm};
	if (rr_ep_post_write_imm(H->ep, data_buf(), len, H->mr, raddr, key, imm, peer_write_done,
				 (void *)(uintptr_t)i) == 0)
		H->nwrites++;
}

/* ---- the script ---- */

struct script {
	const uint8_t *p, *end;
};

static uint8_t byte(struct script *s)
{
	return s->p < s->end ? *s->p++ : 0;
}

static uint16_t u16(struct script *s)
{
	uint16_t v = byte(s);

	return (uint16_t)(v | byte(s) << 8);
}

static uint32_t u32(struct script *s)
{
	uint32_t v = u16(s);

	return v | (uint32_t)u16(s) << 16;
}

static const char *const names[] = {
	"a", "b", "dir/c", "a", "..", "x/../y", "\x01\xff", "stream",
};

static void op_hello(struct script *s)
{
	static const uint32_t chunks[] = {4096, 8192, 16384, 12288};
	static const uint32_t windows[] = {1, 2, 4, 8, 16, 32, 3, 0};
	uint8_t p = byte(s);
	struct cp_msg m = {.type = CP_HELLO};

	m.hello.chunk = chunks[p & 3];
	m.hello.window = windows[(p >> 2) & 7];
	/* A nonce of its own (the same for the same byte: runs repeat),
	 * then, if challenged, the proof of the right token or a wrong one,
	 * or a recorded one (replay_auth), or no token at all. */
	if (((p >> 5) & 3) != 2) {
		memset(H->client_nonce, p, CP_NONCE_LEN);
		H->client_nonce[0] ^= 0x5a;
		m.hello.nonce_len = CP_NONCE_LEN;
		memcpy(m.hello.nonce, H->client_nonce, CP_NONCE_LEN);
	}
	send_msg(&m);
	if (!m.hello.nonce_len)
		return;
	settle();
	if (H->challenged && before_auth)
		before_auth();
	if (H->challenged) {
		struct cp_msg a = {.type = CP_AUTH};
		const char *key = ((p >> 5) & 3) == 1 ? "wrong-token" : TOKEN;
		uint8_t id[CP_SERVER_ID_LEN];

		server_id(id);
		if (replay_auth)
			memcpy(a.auth.proof, replay_auth, CP_PROOF_LEN);
		else if (cp_auth_proof((const uint8_t *)key, strlen(key), CP_AUTH_CLIENT,
				       H->client_nonce, H->server_nonce, id, a.auth.proof))
			fail("cp_auth_proof");
		memcpy(H->sent_auth, a.auth.proof, CP_PROOF_LEN);
		send_msg(&a);
	}
}

static void op_start(struct script *s)
{
	uint8_t p = byte(s), q = byte(s);
	struct cp_msg m = {.type = CP_FILE_START};
	const char *name = names[p & 7];

	m.start.size = ((uint64_t)(p >> 4) << 11) + q;
	m.start.flags = p & 8 ? CP_START_STREAM : 0;
	m.start.name_len = (uint16_t)strlen(name);
	memcpy(m.start.name, name, m.start.name_len);
	/* The peer's own view: a new file from here, whatever the receiver
	 * makes of it. */
	H->in_file = true;
	H->stream = p & 8;
	H->size = m.start.size;
	H->wrote = 0;
	snprintf(H->name, sizeof(H->name), "%s", name);
	send_msg(&m);
}

/* What a chunk of @len bytes holds: a pattern from @fill and the offset. */
static void fill_data(uint8_t fill, uint32_t len)
{
	uint8_t *d = data_buf();

	for (uint32_t i = 0; i < len; i++)
		d[i] = (uint8_t)(fill + i * 7 + (i >> 9));
}

static void account(uint32_t len)
{
	if (H->in_file && H->wrote + len <= FILE_MAX)
		memcpy(H->content + H->wrote, data_buf(), len);
	H->wrote += len;
}

static void op_chunk(struct script *s)
{
	uint8_t fill = byte(s), q = byte(s);
	const struct grant *g = grant_of_seq(H->seq);
	uint64_t left = H->size - H->wrote;
	uint32_t len;

	if (!H->welcomed || !H->chunk)
		return;
	if (H->stream)
		len = ((uint32_t)q + 1) * 64;
	else
		len = left >= H->chunk ? H->chunk : (uint32_t)left;
	if (!len || len > H->chunk)
		len = H->chunk;
	fill_data(fill, len);
	write_imm(H->addr + (uint64_t)(H->seq % H->window) * H->chunk, len, g ? g->key : 0, H->seq);
	account(len);
	H->seq++;
}

static void op_end(struct script *s)
{
	uint8_t p = byte(s);
	struct cp_msg m = {.type = CP_FILE_END};
	size_t have = H->wrote <= FILE_MAX ? H->wrote : FILE_MAX;

	m.end.bytes = H->wrote + (p & 2 ? 1 : 0);
	m.end.checksum = XXH3_64bits(H->content, have) ^ (p & 1 ? 1 : 0);
	if (H->ndecl < MAX_DECL) {
		struct decl *d = &H->decl[H->ndecl++];

		snprintf(d->name, sizeof(d->name), "%s", H->name);
		d->bytes = m.end.bytes;
		d->sum = m.end.checksum;
	}
	H->in_file = false;
	send_msg(&m);
}

static void op_write(struct script *s)
{
	uint8_t p = byte(s);
	uint32_t len = u16(s) % (2 * 8192 + 1);
	int16_t off = (int16_t)u16(s);
	uint32_t imm = H->seq, key = 0;
	const struct grant *g;

	switch (p & 3) {
	case 1:
		imm = H->seq + 1;
		break;
	case 2:
		imm = H->seq - 1;
		break;
	case 3:
		imm = u32(s);
		break;
	}
	switch ((p >> 2) & 7) {
	case 0: /* the key of imm's grant */
	case 1:
		g = grant_of_seq(imm);
		key = g ? g->key : 0;
		break;
	case 2: /* another seq's */
		g = grant_of_seq(imm + 1);
		key = g ? g->key : 0;
		break;
	case 3: /* the oldest the peer ever had */
		key = H->ngrants ? H->grants[0].key : 0;
		break;
	case 4: /* the next key of imm's window, guessed */
		g = grant_of_seq(imm);
		key = g ? ibv_inc_rkey(g->key) : 0;
		break;
	default:
		key = u32(s);
		break;
	}
	if (!H->welcomed || !H->chunk)
		return;
	fill_data(p, len);
	write_imm(H->addr + (uint64_t)(imm % H->window) * H->chunk + (uint64_t)(int64_t)off, len,
		  key, imm);
	if (imm == H->seq) {
		account(len);
		H->seq++;
	}
}

static void op_raw(struct script *s)
{
	size_t len = u16(s) % (CP_MSG_MAX + 1), have = (size_t)(s->end - s->p);

	if (len > have)
		len = have;
	send_bytes(s->p, len);
	s->p += len;
}

static void op_error(struct script *s)
{
	struct cp_msg m = {.type = CP_ERROR};

	m.error.code = byte(s) % (CP_E_MAX + 2);
	m.error.len = 4;
	memcpy(m.error.text, "gone", 4);
	send_msg(&m);
}

static void op_disconnect(void)
{
	if (H->ep && !H->down)
		rr_ep_disconnect(H->ep);
}

static void op_wait(struct script *s)
{
	unsigned int n = byte(s) % 32 + 1;

	for (unsigned int i = 0; i < n; i++)
		pump(0);
}

static void op_time(struct script *s)
{
	fake_clock_advance((uint64_t)(byte(s) % 16 + 1) * 1000000000ull);
	settle();
}

/* ---- one run ---- */

static unsigned int count_fds(void)
{
	unsigned int n = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		n++;
	closedir(d);
	return n;
}

/* Every file the store kept: one the peer declared, under that name. */
static unsigned int check_dir(int dirfd, const char *prefix)
{
	unsigned int files = 0;
	struct dirent *de;
	DIR *d;
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 || !(d = fdopendir(fd)))
		fail("cannot read the directory");
	while ((de = readdir(d))) {
		char path[2 * CP_NAME_MAX + 2];
		struct stat sb;
		uint8_t *buf;
		int f;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s%s", prefix, de->d_name);
		if (fstatat(dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW))
			fail("stat %s: %s", path, strerror(errno));
		if (S_ISDIR(sb.st_mode)) {
			char sub[2 * CP_NAME_MAX + 3];
			int sfd = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

			if (sfd < 0)
				fail("open %s: %s", path, strerror(errno));
			snprintf(sub, sizeof(sub), "%s/", path);
			files += check_dir(sfd, sub);
			close(sfd);
			continue;
		}
		if (!S_ISREG(sb.st_mode))
			fail("%s: not a regular file", path);
		if (range_partial(prefix, de->d_name))
			continue;
		buf = malloc((size_t)sb.st_size + 1);
		f = openat(dirfd, de->d_name, O_RDONLY | O_CLOEXEC);
		if (!buf || f < 0 || read(f, buf, (size_t)sb.st_size) != sb.st_size)
			fail("cannot read %s", path);
		close(f);
		if (!declared(path, (uint64_t)sb.st_size, XXH3_64bits(buf, (size_t)sb.st_size)))
			fail("%s (%lld bytes, %016llx) stored: not what the peer declared", path,
			     (long long)sb.st_size,
			     (unsigned long long)XXH3_64bits(buf, (size_t)sb.st_size));
		free(buf);
		files++;
	}
	closedir(d);
	return files;
}

static void remove_tree(int dirfd)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd)))
		return;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (de->d_type == DT_DIR) {
			int sfd = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

			if (sfd >= 0) {
				remove_tree(sfd);
				close(sfd);
			}
			unlinkat(dirfd, de->d_name, AT_REMOVEDIR);
		} else {
			unlinkat(dirfd, de->d_name, 0);
		}
	}
	closedir(d);
}

static void setup(struct harness *h, uint8_t cfg)
{
	struct rr_ep_opts eo, po = {
				      .max_send_wr = 2 * MAX_WRITES,
				      .max_recv_wr = NRECV,
				      .on_qp_ready = peer_qp_ready,
				      .on_disconnect = peer_down,
			      };
	struct rr_bridge_opts bo = {0};
	unsigned int spins = 0;

	h->o.window = 1u << (cfg & 3);
	h->o.chunk = cfg & 4 ? 8192 : 4096;
	fake_set_mw_supported(!(cfg & 8));
	if (cfg & 16) {
		h->o.have_token = true;
		h->o.token_len = sizeof(TOKEN) - 1;
		memcpy(h->o.token, TOKEN, h->o.token_len);
	}
	h->o.force = cfg & 32;
	h->busy = (cfg & 0xc0) == 0xc0;
	h->crowd = (cfg & 0xc0) == 0x40;
	h->o.quiet = true;
	h->o.max_conns = 4;
	h->o.max_pending = 4;
	h->o.hello_timeout_s = 10;
	h->o.timeout_s = 30;
	h->mw_off = cfg & 8;

	snprintf(h->dir, sizeof(h->dir), "/tmp/fuzz-rx.XXXXXX");
	if (!mkdtemp(h->dir))
		fail("mkdtemp: %s", strerror(errno));
	h->dirfd = open(h->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (h->dirfd < 0 || mkdirat(h->dirfd, "dir", 0700))
		fail("cannot make %s", h->dir);
	if (scenario_plant)
		scenario_plant(h->dirfd);
	if (scenario_opts)
		scenario_opts(&h->o);
	h->mem = aligned_alloc(4096, (size_t)(NRECV + NSEND) * CP_MSG_MAX + DATA_MAX);
	h->content = calloc(1, FILE_MAX);
	if (!h->mem || !h->content)
		fail("out of memory");
	memset(h->mem, 0, (size_t)(NRECV + NSEND) * CP_MSG_MAX + DATA_MAX);

	cp_gate_init(&h->gate, h->o.max_pending);
	h->made = (struct cp_dirs)CP_DIRS_INIT;
	if (cp_loop_init_group(&h->lp, 256))
		fail("cp_loop_init_group");
	h->env = (struct rx_env){
		.lp = &h->lp,
		.o = &h->o,
		.dirfd = h->dirfd,
		.gate = &h->gate,
		.made = &h->made,
		.n = &h->n,
		.admit = admit,
		.stored = stored,
		.data = h,
	};
	eo = (struct rr_ep_opts){
		.max_send_wr = 2 * h->o.window + RX_SENDS,
		.max_recv_wr = h->o.window + RX_SPARE_RECVS,
		.on_qp_ready = rx_qp_ready,
	};
	if (rr_listen(h->lp.b, "127.0.0.1", 0, &eo, sizeof(eo), rx_on_accept, h, &h->l))
		fail("rr_listen");
	if (io_uring_queue_init(64, &h->ring, 0) ||
	    rr_bridge_create(&h->b, &h->ring, &bo, sizeof(bo)))
		fail("the peer's bridge");
	if (rr_connect(h->b, "127.0.0.1", rr_listener_port(h->l), &po, sizeof(po), peer_connected,
		       &h->ep))
		fail("rr_connect");
	while (!h->connected && !h->conn_failed && spins++ < SETTLE_MAX)
		pump(spins > 100);
	if (!h->connected)
		fail("the peer could not connect");
	settle();
}

static void crowd_connected(rr_ep *ep, int status, void *data)
{
	(void)ep;
	(void)status;
	(void)data;
}

/* CROWD connection requests at once, none of which will say HELLO; the
 * receiver makes room for each by dropping one not yet admitted. */
static void crowd_comes(struct harness *h)
{
	struct rr_ep_opts co = {.max_send_wr = 1, .max_recv_wr = 1};

	for (unsigned int i = 0; i < CROWD; i++)
		if (rr_connect(h->b, "127.0.0.1", rr_listener_port(h->l), &co, sizeof(co),
			       crowd_connected, &h->crowd_ep[i]))
			fail("rr_connect");
	settle();
}

/* A receiver whose QP is in error, the peer still connected: nothing can
 * pass any more, and it must not wait for --timeout to give its place. */
static void check_broken(struct harness *h)
{
	if (h->rx && h->broke_ns && cp_now_ns() - h->broke_ns > LOST_S * 1000000000ull)
		fail("the receiver still holds a connection %u s after a refused write put "
		     "its QP into error",
		     LOST_S);
}

static void teardown(struct harness *h)
{
	unsigned int ticks = 0;

	if (h->crowd && !h->crowd_ep[0])
		crowd_comes(h);
	h->tearing = true;
	op_disconnect();
	settle();
	/* Time passes until the receivers end: every deadline of rx.c comes
	 * within END_TICKS simulated seconds. */
	while ((h->rx || h->crowd_alive) && ticks++ < END_TICKS) {
		fake_clock_advance(1000000000ull);
		settle();
		check_broken(h);
	}
	if (h->rx || h->crowd_alive)
		fail("the receiver never ended");
	if (h->rx_made != 1 || h->rx_ended != 1)
		fail("%u receivers made, %u ended", h->rx_made, h->rx_ended);
	if (cp_gate_pending(&h->gate))
		fail("every receiver ended, %u still counted in the gate",
		     cp_gate_pending(&h->gate));
	if (h->how == RX_ENDED && !h->result && h->errors)
		fail("result 0 after an ERROR");
	if (getenv("FUZZ_RX_VERBOSE"))
		fprintf(stderr,
			"fuzz-rx: ended %s, result %d; %u stored, %u FILE_DONE, %u ERROR; "
			"%u writes, %u chunks arrived\n",
			h->how == RX_ENDED     ? "admitted"
			: h->how == RX_REFUSED ? "refused"
					       : "dropped",
			h->result, h->stored, h->dones, h->errors, h->nwrites, h->arrived);
	while (rr_ep_outstanding(h->ep) && ticks++ < SETTLE_MAX)
		pump(1);
	if (h->mr)
		rr_mr_dereg(h->mr);
	rr_ep_destroy(h->ep);
	for (unsigned int i = 0; i < CROWD; i++)
		rr_ep_destroy(h->crowd_ep[i]);
	if (rr_listener_destroy(h->l))
		fail("rr_listener_destroy");
	if (rr_bridge_destroy(h->b))
		fail("rr_bridge_destroy");
	io_uring_queue_exit(&h->ring);
	cp_loop_fini(&h->lp);
	cp_gate_fini(&h->gate);
	cp_dirs_free(&h->made);
	if (scenario_verify)
		scenario_verify(h);
	if (check_dir(h->dirfd, "") > h->stored)
		fail("more files stored than the receiver reported");
	remove_tree(h->dirfd);
	close(h->dirfd);
	if (rmdir(h->dir))
		fail("rmdir %s: %s", h->dir, strerror(errno));
	free(h->mem);
	free(h->content);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct script s = {.p = data, .end = data + size};
	struct harness *h;
	unsigned int fds;

	fake_device(); /* its async fd stays for the process: open it first */
	fds = count_fds();
	h = calloc(1, sizeof(*h));

	if (!h)
		return 0;
	H = h;
	setup(h, byte(&s));
	while (s.p < s.end && !h->down) {
		switch (byte(&s) % 10) {
		case 0:
			op_hello(&s);
			break;
		case 1:
			op_start(&s);
			break;
		case 2:
			op_chunk(&s);
			break;
		case 3:
			op_end(&s);
			break;
		case 4:
			op_write(&s);
			break;
		case 5:
			op_raw(&s);
			break;
		case 6:
			op_error(&s);
			break;
		case 7:
			op_disconnect();
			break;
		case 8:
			op_wait(&s);
			break;
		case 9:
			op_time(&s);
			break;
		}
		settle();
	}
	teardown(h);
	H = NULL;
	free(h);
	if (count_fds() != fds)
		fail("%u file descriptors open after the run, %u before", count_fds(), fds);
	return 0;
}

#ifdef RX_REPLAY
/* Replay every file of the directories named: a TAP line each. */
static int replay(const char *path, unsigned int *n)
{
	struct stat sb;
	uint8_t *buf;
	FILE *f;

	if (stat(path, &sb) || !S_ISREG(sb.st_mode))
		return 0;
	buf = malloc((size_t)sb.st_size + 1);
	f = fopen(path, "rb");
	if (!buf || !f || fread(buf, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
		printf("not ok %u - %s: cannot read\n", ++*n, path);
		return 1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)sb.st_size);
	free(buf);
	printf("ok %u - %s\n", ++*n, path);
	fflush(stdout);
	return 0;
}

/* ---- scenarios: hand-written sessions with what they must leave ---- */

static const char *scenario_bad; /* why the last scenario failed, or NULL */

/* One TAP line for the scenario just run; 1 when it failed. */
static int scenario_tap(unsigned int *n, const char *what)
{
	printf("%s %u - %s%s%s\n", scenario_bad ? "not ok" : "ok", ++*n, what,
	       scenario_bad ? ": " : "", scenario_bad ? scenario_bad : "");
	return scenario_bad != NULL;
}

static void plant_file(int dirfd, const char *name, const char *text)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		fail("cannot plant %s", name);
	close(fd);
}

static uint64_t size_of(int dirfd, const char *name)
{
	struct stat sb;

	return fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) ? UINT64_MAX : (uint64_t)sb.st_size;
}

/* An operator's file "a" of 4 bytes, a PIN. */
static void plant_pin(int dirfd)
{
	plant_file(dirfd, "a", "1234");
}

/* A partial of "c" a transfer of ours left, 8 bytes. */
static void plant_resume(int dirfd)
{
	plant_file(dirfd, ".c.rrcp-partial", "abcdefgh");
}

/* A partial of "b" another transfer left, 8 bytes. */
static void plant_partial(int dirfd)
{
	plant_file(dirfd, ".b.rrcp-partial", "abcdefgh");
}

static struct {
	unsigned int haves, errors;
	uint64_t have_bytes;
} seen;

static void verify_pin(struct harness *h)
{
	seen.haves = h->haves;
	seen.errors = h->errors;
	seen.have_bytes = h->have_bytes;
	if (h->haves && (h->have_bytes || h->have_flags || h->have_sum == XXH3_64bits("1234", 4)))
		scenario_bad = "FILE_HAVE told of the file under the name";
	if (size_of(h->dirfd, "a") != 4)
		scenario_bad = "the file under the name changed";
	unlinkat(h->dirfd, "a", 0);
	unlinkat(h->dirfd, ".a.rrcp-partial", 0);
}

static void verify_partial(struct harness *h)
{
	if (size_of(h->dirfd, ".b.rrcp-partial") != 8)
		scenario_bad = "a smaller declared size emptied another transfer's partial";
	else if (!h->errors)
		scenario_bad = "no ERROR for a partial longer than the file";
	unlinkat(h->dirfd, ".b.rrcp-partial", 0);
}

/* HELLO (token, chunk 4096, window 1), then FILE_START of @name, @size,
 * to resume; run with a token, window 1, memory windows, no --force. */
static void run_start(const char *name, uint64_t size, uint32_t flags)
{
	struct cp_msg m = {.type = CP_FILE_START};
	uint8_t script[8 + CP_MSG_MAX];
	size_t n = 0, len;

	script[n++] = 16; /* cfg: token */
	script[n++] = 0;  /* HELLO */
	script[n++] = 0;  /* right token, chunk 4096, window 1 */
	m.start.flags = flags;
	m.start.size = size;
	m.start.name_len = (uint16_t)strlen(name);
	memcpy(m.start.name, name, m.start.name_len);
	len = cp_encode(&m, script + n + 3, CP_MSG_MAX);
	script[n++] = 5; /* raw SEND */
	script[n++] = (uint8_t)len;
	script[n++] = (uint8_t)(len >> 8);
	n += len;
	script[n++] = 8; /* wait */
	script[n++] = 4;
	LLVMFuzzerTestOneInput(script, n);
}

static int scenario(unsigned int *n, const char *what, void (*plant)(int),
		    void (*verify)(struct harness *), const char *name, uint64_t size)
{
	scenario_bad = NULL;
	scenario_plant = plant;
	scenario_verify = verify;
	run_start(name, size, CP_START_RESUME);
	scenario_plant = NULL;
	scenario_verify = NULL;
	return scenario_tap(n, what);
}

static void opts_max_size(struct cp_opts *o)
{
	o->max_size = 1000;
}

static void opts_min_free(struct cp_opts *o)
{
	o->min_free = UINT64_MAX / 2;
}

static void verify_refused(struct harness *h)
{
	if (!h->errors)
		scenario_bad = "no ERROR";
}

static void verify_taken(struct harness *h)
{
	if (h->errors)
		scenario_bad = "an ERROR";
}

/* ---- a fake server's recording, replayed to the real one ---- */

static uint8_t recorded[CP_PROOF_LEN];

static void verify_record(struct harness *h)
{
	memcpy(recorded, h->sent_auth, CP_PROOF_LEN);
	if (!h->welcomed)
		scenario_bad = "the token's proof was refused";
}

static void verify_replay(struct harness *h)
{
	if (h->welcomed)
		scenario_bad = "a recorded AUTH logged in";
	else if (!h->errors)
		scenario_bad = "no ERROR for a recorded AUTH";
}

/*
 * Issue 40: the token was shown to whoever answered, so a server that is
 * not the real one could replay it to the real one. What a sender sends
 * (HELLO's nonce, AUTH's proof over both nonces) is recorded from one
 * login and replayed, the same HELLO and that AUTH: the receiver's fresh
 * nonce makes it worthless. (Protocol 5's HELLO carried the token: its
 * replay logged in.)
 */
static int replayed_login(unsigned int *n)
{
	static const uint8_t script[] = {16, 0, 0, 8, 1}; /* token; HELLO; wait */
	int bad = 0;

	scenario_bad = NULL;
	scenario_verify = verify_record;
	LLVMFuzzerTestOneInput(script, sizeof(script));
	bad |= scenario_tap(n, "the token's proof logs in");
	scenario_bad = NULL;
	scenario_verify = verify_replay;
	replay_auth = recorded;
	LLVMFuzzerTestOneInput(script, sizeof(script));
	replay_auth = NULL;
	scenario_verify = NULL;
	return bad | scenario_tap(n, "a recorded login, replayed, is refused");
}

/*
 * Issue 49, proven P2: the hold was checked at HELLO only, and the token
 * moved to AUTH: a guesser said HELLO on every connection while not held,
 * then sent every AUTH, each compared and counted, a right one admitted.
 * Here the source is held back between CHALLENGE and AUTH (as the other
 * connections' failures would); the right proof then must be refused
 * without being compared, and not count as another try.
 */
static unsigned int held_before, checks_before;

static void hold_source(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	for (int i = 0; i <= GATE_FREE_FAILS; i++)
		held_before = cp_gate_failed(&H->gate, (const struct sockaddr *)&sa, cp_now_ns());
	checks_before = client_checks;
}

static void verify_held(struct harness *h)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	if (!held_before)
		scenario_bad = "the source was not held back";
	else if (h->welcomed)
		scenario_bad = "a held source's right AUTH logged in";
	else if (client_checks != checks_before)
		scenario_bad = "a held source's AUTH was compared";
	else if (!h->errors)
		scenario_bad = "no ERROR for a held source's AUTH";
	else if (cp_gate_held(&h->gate, (const struct sockaddr *)&sa, cp_now_ns()) > held_before)
		scenario_bad = "a held source's AUTH counted as another try";
}

static int held_auth(unsigned int *n)
{
	static const uint8_t script[] = {16, 0, 0, 8, 1}; /* token; HELLO; wait */

	scenario_bad = NULL;
	scenario_verify = verify_held;
	before_auth = hold_source;
	LLVMFuzzerTestOneInput(script, sizeof(script));
	before_auth = NULL;
	scenario_verify = NULL;
	return scenario_tap(n, "an AUTH from a source held back since its HELLO is refused unread");
}

/*
 * Issue 49, suspected: an existing name (no --force) was refused at once
 * for another length, but read and hashed for an equal one: the delay
 * told a token holder the file's size. Now both read the declared length
 * (the named file as far as it goes, then the received bytes): what the
 * hashing thread reads is counted, never timed. "a" holds 100 bytes.
 */
static void plant_100(int dirfd)
{
	char text[101];

	memset(text, 'x', 100);
	text[100] = 0;
	plant_file(dirfd, "a", text);
}

static void verify_exists(struct harness *h)
{
	if (!h->errors)
		scenario_bad = "no ERROR for another content under the name";
	else if (size_of(h->dirfd, "a") != 100)
		scenario_bad = "the file under the name changed";
	unlinkat(h->dirfd, "a", 0);
}

static int same_reads(unsigned int *n)
{
	static const uint8_t sizes[] = {100, 50, 200};
	char what[96];
	int bad = 0;

	for (size_t i = 0; i < sizeof(sizes); i++) {
		/* token; HELLO; FILE_START "a" of sizes[i] bytes; its chunk;
		 * FILE_END; wait */
		const uint8_t script[] = {16, 0, 0, 1, 0, sizes[i], 2, 3, 0, 3, 0, 8, 4};
		unsigned long long before = pread_bytes, read;

		scenario_bad = NULL;
		scenario_plant = plant_100;
		scenario_verify = verify_exists;
		LLVMFuzzerTestOneInput(script, sizeof(script));
		scenario_plant = NULL;
		scenario_verify = NULL;
		read = pread_bytes - before;
		if (!scenario_bad && read != sizes[i])
			scenario_bad = "another amount was read than the declared length";
		snprintf(what, sizeof(what),
			 "%u bytes sent over a file of 100: %llu bytes read to compare", sizes[i],
			 read);
		bad |= scenario_tap(n, what);
	}
	return bad;
}

/*
 * Issue 49: nothing of the server was in the proof, so a server that is
 * not the real one could relay a live login to the real one: the sender's
 * AUTH, over both nonces, passed there too. The proof now names the
 * address the sender dialled; one that names another (the rogue's: here
 * the same host, another port) is refused, the right token notwithstanding.
 */
static void verify_relayed(struct harness *h)
{
	if (h->welcomed)
		scenario_bad = "a proof naming another server's address logged in";
	else if (!h->errors)
		scenario_bad = "no ERROR for a relayed proof";
}

static int relayed_login(unsigned int *n)
{
	static const uint8_t script[] = {16, 0, 0, 8, 1}; /* token; HELLO; wait */

	scenario_bad = NULL;
	scenario_verify = verify_relayed;
	relayed = true;
	LLVMFuzzerTestOneInput(script, sizeof(script));
	relayed = false;
	scenario_verify = NULL;
	return scenario_tap(n, "a login relayed from another server's address is refused");
}

/* Issue 40: no disk bounds. --max-size and --min-free refuse a file at
 * its FILE_START. */
static int bounds(unsigned int *n)
{
	static const struct {
		const char *what;
		void (*opts)(struct cp_opts *);
		void (*verify)(struct harness *);
		uint64_t size;
	} t[] = {
		{"--max-size refuses a larger file", opts_max_size, verify_refused, 4096},
		{"--max-size takes a smaller one", opts_max_size, verify_taken, 100},
		{"--min-free refuses what would leave less free", opts_min_free, verify_refused, 1},
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		scenario_bad = NULL;
		scenario_opts = t[i].opts;
		scenario_verify = t[i].verify;
		run_start("a", t[i].size, 0);
		scenario_opts = NULL;
		scenario_verify = NULL;
		bad |= scenario_tap(n, t[i].what);
	}
	return bad;
}

/* Issue 40, proven 4 and 5: resume answers of what a sender may not
 * learn or undo. */
static int scenarios(unsigned int *n)
{
	unsigned int haves;
	uint64_t bytes;
	int bad = 0;

	bad |= scenario(n, "resume is no hash oracle on a file under its name", plant_pin,
			verify_pin, "a", 4);
	haves = seen.haves + 10 * seen.errors;
	bytes = seen.have_bytes;
	bad |= scenario(n, "resume is no size oracle on a file under its name", plant_pin,
			verify_pin, "a", 5);
	if (haves != seen.haves + 10 * seen.errors || bytes != seen.have_bytes) {
		printf("not ok %u - sizes 4 and 5 were answered differently\n", ++*n);
		bad = 1;
	} else {
		printf("ok %u - sizes 4 and 5 answered alike\n", ++*n);
	}
	bad |= scenario(n, "a smaller size leaves another transfer's partial", plant_partial,
			verify_partial, "b", 4);
	return bad;
}

/*
 * Issue 40: a tree entry's calls, and the truncation of a partial, must
 * never hold the loop. Each scenario arms a libc call to hang, has the
 * receiver make it, and while it hangs lets the crowd's connection
 * requests come to the same loop: their receivers must be made (the
 * loop goes on). Then the call is released and the entry or file must
 * end as it would have. A call made on the loop thread itself holds the
 * loop: the stall's watchdog ends it after STALL_S seconds, a failure.
 * MKDIR's mkdirat() is the ring's now: libc's is never called.
 */
static struct harness *stall_begin(void)
{
	struct harness *h = calloc(1, sizeof(*h));
	struct script s = {.p = (const uint8_t[]){0}, .end = NULL};

	if (!h)
		fail("out of memory");
	H = h;
	stall.loop = pthread_self();
	setup(h, 16 | 0x40); /* a token; the crowd, which the scenario calls */
	h->o.quiet = !getenv("FUZZ_RX_VERBOSE");
	s.end = s.p + 1;
	op_hello(&s); /* the right token, chunk 4096, window 1 */
	settle();
	if (!h->welcomed)
		fail("the scripted peer was not welcomed");
	/* An entry is answered with 0 bytes, checksum 0. */
	h->decl[h->ndecl++] = (struct decl){.name = "", .bytes = 0, .sum = 0};
	return h;
}

/* Pump until @until holds, at most SETTLE_MAX passes; never settle():
 * it waits for the receiver's I/O, which a hung call holds. */
static bool pump_until(bool (*until)(struct harness *h), struct harness *h)
{
	for (unsigned int i = 0; i < SETTLE_MAX; i++) {
		if (until(h))
			return true;
		pump(1);
	}
	return until(h);
}

static unsigned int dones_before;

static bool held_or_done(struct harness *h)
{
	bool held;

	pthread_mutex_lock(&stall.mu);
	held = stall.held || stall.timed_out;
	pthread_mutex_unlock(&stall.mu);
	return held || h->dones > dones_before || h->errors;
}

static bool crowd_in(struct harness *h)
{
	return h->crowd_made > 0;
}

static bool answered(struct harness *h)
{
	return h->dones > dones_before || h->errors;
}

static bool have_seen(struct harness *h)
{
	return h->haves > 0 || h->errors;
}

/*
 * @msg goes with @call armed (made off the loop if @hangs, else never by
 * libc); the receiver must stay responsive while the call hangs, and
 * answer @msg once released: FILE_DONE if @done, else (FILE_FROM)
 * nothing, only no ERROR. Then @verify. NULL, or why not.
 */
static const char *stall_run(struct harness *h, const char *call, bool hangs,
			     const struct cp_msg *msg, bool done,
			     const char *(*verify)(struct harness *h))
{
	bool on_loop, timed_out, was_held;

	dones_before = h->dones;
	pthread_mutex_lock(&stall.mu);
	stall.call = call;
	stall.released = stall.timed_out = stall.held = stall.on_loop = false;
	pthread_mutex_unlock(&stall.mu);
	send_msg(msg);
	pump_until(held_or_done, h);
	pthread_mutex_lock(&stall.mu);
	was_held = stall.held;
	timed_out = stall.timed_out;
	on_loop = stall.on_loop;
	stall.call = NULL;
	pthread_mutex_unlock(&stall.mu);
	if (timed_out || on_loop)
		return "the loop thread made the call and waited on it";
	if (h->errors)
		return "an ERROR";
	if (was_held != hangs)
		return hangs ? "the call was never made" : "libc's call was made";
	if (was_held) {
		/* Hung on the worker: another connection's requests meanwhile. */
		for (unsigned int i = 0; i < CROWD; i++)
			if (rr_connect(h->b, "127.0.0.1", rr_listener_port(h->l),
				       &(struct rr_ep_opts){.max_send_wr = 1, .max_recv_wr = 1},
				       sizeof(struct rr_ep_opts), crowd_connected, &h->crowd_ep[i]))
				fail("rr_connect");
		if (!pump_until(crowd_in, h))
			return "no other connection was taken while the call hung";
		if (h->dones > dones_before)
			return "answered before the call returned";
		pthread_mutex_lock(&stall.mu);
		stall.released = true;
		pthread_cond_broadcast(&stall.cv);
		pthread_mutex_unlock(&stall.mu);
	}
	if (done && !pump_until(answered, h))
		return "never answered";
	settle();
	if (h->errors)
		return "an ERROR";
	return verify ? verify(h) : NULL;
}

/* What the scenarios leave that check_dir() would take for a file. */
static void stall_cleanup(struct harness *h)
{
	unlinkat(h->dirfd, "l", 0);
	unlinkat(h->dirfd, ".c.rrcp-partial", 0);
}

static int stall_end(struct harness *h, unsigned int *n, const char *what, const char *bad)
{
	/* Released in any case: the worker must not hang teardown. */
	pthread_mutex_lock(&stall.mu);
	stall.released = true;
	pthread_cond_broadcast(&stall.cv);
	pthread_mutex_unlock(&stall.mu);
	scenario_verify = stall_cleanup;
	teardown(h);
	scenario_verify = NULL;
	H = NULL;
	free(h);
	printf("%s %u - %s%s%s\n", bad ? "not ok" : "ok", ++*n, what, bad ? ": " : "",
	       bad ? bad : "");
	return bad != NULL;
}

static struct cp_msg entry_msg(uint8_t type, const char *name, const char *target, uint32_t mode)
{
	struct cp_msg m = {.type = type};

	m.entry.name_len = (uint16_t)strlen(name);
	memcpy(m.entry.name, name, m.entry.name_len);
	if (target) {
		m.entry.target_len = (uint16_t)strlen(target);
		memcpy(m.entry.target, target, m.entry.target_len);
	}
	m.entry.mode = mode;
	if (type != CP_MKDIR) /* a name only */
		m.entry.mtime = (struct cp_time){1500000000, 5};
	return m;
}

static const char *verify_dir(struct harness *h)
{
	struct stat sb;

	if (fstatat(h->dirfd, "d", &sb, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(sb.st_mode))
		return "no directory d";
	return NULL;
}

static mode_t umask_now;

static const char *verify_meta(struct harness *h)
{
	struct stat sb;

	if (fstatat(h->dirfd, "d", &sb, AT_SYMLINK_NOFOLLOW) ||
	    (sb.st_mode & 07777) != (0750 & ~umask_now) || sb.st_mtim.tv_sec != 1500000000)
		return "d has not the mode 0750 and the time sent";
	return NULL;
}

static const char *verify_link(struct harness *h)
{
	char buf[16] = "";
	struct stat sb;

	if (readlinkat(h->dirfd, "l", buf, sizeof(buf) - 1) < 0 || strcmp(buf, "dir") ||
	    fstatat(h->dirfd, "l", &sb, AT_SYMLINK_NOFOLLOW) || sb.st_mtim.tv_sec != 1500000000)
		return "no link l -> dir with the time sent";
	return NULL;
}

static const char *verify_file(struct harness *h)
{
	struct stat sb;

	if (fstatat(h->dirfd, "z", &sb, AT_SYMLINK_NOFOLLOW) || !S_ISREG(sb.st_mode) ||
	    (sb.st_mode & 07777) != (0640 & ~umask_now) || sb.st_mtim.tv_sec != 1500000000)
		return "no file z with the mode 0640 and the time sent";
	return NULL;
}

static const char *verify_truncated(struct harness *h)
{
	if (size_of(h->dirfd, ".c.rrcp-partial") != 0)
		return "the partial was not emptied";
	return NULL;
}

/* MKDIR d stored, then d's DIR_META with its fchmod() hung on the
 * worker until the scenario releases it (or stall_end() does). NULL, or
 * why not. */
static const char *dir_meta_hangs(struct harness *h)
{
	struct cp_msg m = entry_msg(CP_MKDIR, "d", NULL, 0);
	const char *bad = stall_run(h, NULL, false, &m, true, verify_dir);

	if (bad)
		return bad;
	pthread_mutex_lock(&stall.mu);
	stall.call = "fchmod";
	stall.released = stall.timed_out = stall.held = false;
	pthread_mutex_unlock(&stall.mu);
	m = entry_msg(CP_DIR_META, "d", NULL, 0750);
	send_msg(&m);
	dones_before = h->dones;
	pump_until(held_or_done, h);
	return NULL;
}

static int stalls(unsigned int *n)
{
	struct harness *h;
	struct cp_msg m;
	const char *bad;
	int rc = 0;

	umask_now = umask(022);
	umask(umask_now);
	/* MKDIR: through the ring, libc's mkdirat() never called. */
	h = stall_begin();
	m = entry_msg(CP_MKDIR, "d", NULL, 0);
	bad = stall_run(h, "mkdirat", false, &m, true, verify_dir);
	rc |= stall_end(h, n, "MKDIR never holds the loop", bad);

	/* DIR_META: its fchmod() hangs on the worker. */
	h = stall_begin();
	m = entry_msg(CP_MKDIR, "d", NULL, 0);
	bad = stall_run(h, NULL, false, &m, true, verify_dir);
	m = entry_msg(CP_DIR_META, "d", NULL, 0750);
	if (!bad)
		bad = stall_run(h, "fchmod", true, &m, true, verify_meta);
	rc |= stall_end(h, n, "a hung DIR_META holds its connection, not the loop", bad);

	/* SYMLINK: its utimensat() hangs on the worker. */
	h = stall_begin();
	m = entry_msg(CP_SYMLINK, "l", "dir", 0);
	bad = stall_run(h, "utimensat", true, &m, true, verify_link);
	rc |= stall_end(h, n, "a hung SYMLINK holds its connection, not the loop", bad);

	/* A file's mode: its fchmod() hangs on the worker. */
	h = stall_begin();
	{
		struct cp_msg st = {.type = CP_FILE_START}, end = {.type = CP_FILE_END};

		st.start.flags = CP_START_META;
		st.start.mode = 0640;
		st.start.mtime = (struct cp_time){1500000000, 5};
		st.start.name_len = 1;
		st.start.name[0] = 'z';
		end.end.checksum = XXH3_64bits("", 0);
		h->decl[h->ndecl++] =
			(struct decl){.name = "z", .bytes = 0, .sum = end.end.checksum};
		send_msg(&st);
		bad = stall_run(h, "fchmod", true, &end, true, verify_file);
	}
	rc |= stall_end(h, n, "a hung file mode holds its connection, not the loop", bad);

	/* Issue 49: a call that never returns fails its connection after
	 * --timeout (30 s here), as the file system's fault, not the peer's
	 * silence; the loop's worker does not hold the teardown. */
	h = stall_begin();
	bad = dir_meta_hangs(h);
	if (!bad) {
		for (int i = 0; i < 40 && !h->errors; i++) {
			fake_clock_advance(1000000000ull);
			for (int k = 0; k < 50 && !h->errors; k++)
				pump(1);
		}
		if (!h->errors)
			bad = "no ERROR after --timeout while a call hung";
		else if (!strstr(h->last_error, "file system call has not returned"))
			bad = h->last_error;
	}
	rc |= stall_end(h, n, "a call that never returns fails its connection after --timeout",
			bad);

	/* Version 9: while a call hangs (as a long fsync or a commit's
	 * reread of a big file would), the receiver says BUSY after each
	 * 5 s of its own silence, not before, so that the sender's --timeout
	 * counts a silent peer, not a slow file. */
	h = stall_begin();
	bad = dir_meta_hangs(h);
	if (!bad) {
		unsigned int before = h->busies;

		for (int s = 1; s <= 11 && !bad && !h->errors; s++) {
			fake_clock_advance(1000000000ull);
			for (int k = 0; k < 50; k++)
				pump(1);
			if (h->busies - before != (unsigned int)(s / 5))
				bad = "BUSY not once after each 5 s of silence";
		}
		pthread_mutex_lock(&stall.mu);
		stall.released = true;
		pthread_cond_broadcast(&stall.cv);
		pthread_mutex_unlock(&stall.mu);
		if (!bad && (!pump_until(answered, h) || h->errors))
			bad = "the DIR_META was not answered once the call returned";
	}
	rc |= stall_end(h, n, "a hung call: BUSY after each 5 s of silence", bad);

	/* FILE_FROM 0: the partial's ftruncate() hangs on the worker. */
	scenario_plant = plant_resume;
	h = stall_begin();
	scenario_plant = NULL;
	bad = NULL;
	{
		struct cp_msg st = {.type = CP_FILE_START};

		st.start.flags = CP_START_RESUME;
		st.start.size = 16;
		st.start.name_len = 1;
		st.start.name[0] = 'c';
		send_msg(&st);
		if (!pump_until(have_seen, h) || h->errors || h->have_bytes != 8)
			bad = "no FILE_HAVE of the 8 bytes held";
	}
	m = (struct cp_msg){.type = CP_FILE_FROM};
	m.from.offset = 0;
	if (!bad)
		bad = stall_run(h, "ftruncate", true, &m, false, verify_truncated);
	rc |= stall_end(h, n, "a hung truncation holds its connection, not the loop", bad);
	return rc;
}

/*
 * Issue 49, proven P1: a link's target was checked by counting its "..",
 * but the kernel follows each part before them, and a token holder can
 * make one a link it stored just before. Over the wire, each entry of
 * @steps must be taken (FILE_DONE) and the last refused (an ERROR), and
 * not be there.
 */
struct link_step {
	uint8_t type;
	const char *name, *target;
};

static char deep_dir[40];

static void links_cleanup(struct harness *h)
{
	char path[CP_NAME_MAX + 8];
	static const char *const links[] = {"l1", "l2", "later", "l4"};

	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		unlinkat(h->dirfd, links[i], 0);
	snprintf(path, sizeof(path), "%s/up", deep_dir);
	unlinkat(h->dirfd, path, 0);
	snprintf(path, sizeof(path), "%s/esc", deep_dir);
	unlinkat(h->dirfd, path, 0);
}

static int links_run(unsigned int *n, const char *what, const struct link_step *steps,
		     size_t nsteps)
{
	struct harness *h = stall_begin();
	const char *bad = NULL;

	for (size_t i = 0; i < nsteps && !bad; i++) {
		struct cp_msg m = entry_msg(steps[i].type, steps[i].name, steps[i].target, 0);
		bool last = i + 1 == nsteps;

		dones_before = h->dones;
		send_msg(&m);
		if (!pump_until(answered, h))
			bad = "never answered";
		else if (!last && h->errors)
			bad = "an ERROR for an entry that stays in DIR";
		else if (last && !h->errors)
			bad = "no ERROR: the link was stored";
		else if (last && !faccessat(h->dirfd, steps[i].name, F_OK, AT_SYMLINK_NOFOLLOW))
			bad = "the link is there";
	}
	scenario_verify = links_cleanup;
	teardown(h);
	scenario_verify = NULL;
	H = NULL;
	free(h);
	printf("%s %u - %s%s%s\n", bad ? "not ok" : "ok", ++*n, what, bad ? ": " : "",
	       bad ? bad : "");
	return bad != NULL;
}

static int links_out(unsigned int *n)
{
	static char up[64], esc[96], dirs[16][40], deep_up[48], deep_esc[48];
	struct link_step deep[18];
	int bad = 0;

	bad |= links_run(
		n, "l1 -> ., then l2 -> l1/.. is refused",
		(const struct link_step[]){{CP_SYMLINK, "l1", "."}, {CP_SYMLINK, "l2", "l1/.."}},
		2);
	bad |= links_run(n, "l4 -> later/.. before later exists is refused",
			 (const struct link_step[]){{CP_SYMLINK, "l4", "later/.."}}, 1);
	strcpy(esc, "up");
	for (int i = 0; i < 16; i++) {
		snprintf(dirs[i], sizeof(dirs[i]), "%s%sd", i ? dirs[i - 1] : "", i ? "/" : "");
		deep[i] = (struct link_step){CP_MKDIR, dirs[i], NULL};
		strcat(up, i ? "/.." : "..");
		strcat(esc, "/..");
	}
	strcat(esc, "/etc/passwd");
	snprintf(deep_dir, sizeof(deep_dir), "%s", dirs[15]);
	snprintf(deep_up, sizeof(deep_up), "%s/up", dirs[15]);
	snprintf(deep_esc, sizeof(deep_esc), "%s/esc", dirs[15]);
	deep[16] = (struct link_step){CP_SYMLINK, deep_up, up};
	deep[17] = (struct link_step){CP_SYMLINK, deep_esc, esc};
	bad |= links_run(n, "16 down, up -> 16 x .., then esc -> up/16 x ../etc/passwd is refused",
			 deep, 18);
	return bad;
}

/* ---- ranges (protocol 8): a striped file over the wire ---- */

/* "big": 20,480 bytes in ranges of 8 KiB (chunks of 4 KiB): two whole
 * stripes and a tail of one chunk. */
#define RG_STRIPE 8192u
#define RG_SIZE	  20480u
#define RG_PART	  ".big.rrcp-partial"

static uint8_t rg_data[RG_SIZE];
static int rg_held_fd = -1; /* another connection's open of the partial */
static unsigned int haves_before;

static void rg_at(uint32_t i, uint64_t *off, uint64_t *len)
{
	cp_range_at(RG_SIZE, RG_STRIPE, i, off, len);
}

static uint64_t rg_fold(void)
{
	struct cp_range_fold f;
	uint64_t off, len, sum;

	if (cp_range_fold_init(&f))
		fail("out of memory");
	for (uint32_t i = 0; i < cp_range_count(RG_SIZE, RG_STRIPE); i++) {
		rg_at(i, &off, &len);
		cp_range_fold_add(&f, XXH3_64bits(rg_data + off, len));
	}
	sum = cp_range_fold_sum(&f);
	cp_range_fold_free(&f);
	return sum;
}

static bool have_more(struct harness *h)
{
	return h->haves > haves_before || h->errors;
}

static bool granted_next(struct harness *h)
{
	return grant_of_seq(h->seq) || h->errors || h->down;
}

static struct cp_msg rg_start(uint64_t off, uint64_t len, uint64_t stripe)
{
	struct cp_msg m = {.type = CP_FILE_START};

	m.start.size = RG_SIZE;
	m.start.flags = CP_START_RESUME | CP_START_RANGE;
	m.start.name_len = 3;
	memcpy(m.start.name, "big", 3);
	m.start.range_off = off;
	m.start.range_len = len;
	m.start.stripe = stripe;
	return m;
}

/*
 * Range @i as the sender sends it: FILE_START, FILE_FROM after what the
 * receiver holds of it when the hash agrees (else 0), the chunks from
 * there, FILE_END; until FILE_DONE or an ERROR. What FILE_HAVE offered
 * in *held. NULL, or why not.
 */
static const char *rg_send(struct harness *h, uint32_t i, uint64_t *held)
{
	struct cp_msg m;
	uint64_t off, len, from;

	rg_at(i, &off, &len);
	m = rg_start(off, len, RG_STRIPE);
	haves_before = h->haves;
	dones_before = h->dones;
	send_msg(&m);
	if (!pump_until(have_more, h) || h->errors)
		return "no FILE_HAVE for a range";
	*held = h->have_bytes;
	from = *held && *held <= len && h->have_sum == XXH3_64bits(rg_data + off, *held) ? *held
											 : 0;
	m = (struct cp_msg){.type = CP_FILE_FROM, .from = {.offset = from}};
	send_msg(&m);
	for (uint64_t o = from; o < len; o += h->chunk) {
		uint32_t n = len - o < h->chunk ? (uint32_t)(len - o) : h->chunk;
		const struct grant *g;

		if (!pump_until(granted_next, h) || h->errors)
			return "no grant for a range's chunk";
		g = grant_of_seq(h->seq);
		memcpy(data_buf(), rg_data + off + o, n);
		write_imm(h->addr + (uint64_t)(h->seq % h->window) * h->chunk, n, g->key, h->seq);
		h->seq++;
	}
	m = (struct cp_msg){.type = CP_FILE_END};
	m.end.bytes = len;
	m.end.checksum = XXH3_64bits(rg_data + off, len);
	h->decl[h->ndecl++] = (struct decl){.name = "", .bytes = len, .sum = m.end.checksum};
	send_msg(&m);
	if (!pump_until(answered, h) || h->errors)
		return h->errors ? h->last_error : "a range never answered";
	return NULL;
}

/* FILE_COMMIT of "big"; until FILE_DONE or an ERROR. */
static void rg_commit(struct harness *h)
{
	struct cp_msg m = {.type = CP_FILE_COMMIT};

	m.start.size = RG_SIZE;
	m.start.name_len = 3;
	memcpy(m.start.name, "big", 3);
	m.start.stripe = RG_STRIPE;
	m.start.sum = rg_fold();
	/* FILE_DONE's, and the file it names */
	h->decl[h->ndecl++] = (struct decl){.name = "", .bytes = RG_SIZE, .sum = m.start.sum};
	h->decl[h->ndecl++] = (struct decl){
		.name = "big", .bytes = RG_SIZE, .sum = XXH3_64bits(rg_data, RG_SIZE)};
	dones_before = h->dones;
	send_msg(&m);
	pump_until(answered, h);
	settle();
}

/* Is "big" there, the sender's bytes, and its partial gone? */
static const char *rg_named(struct harness *h)
{
	uint8_t buf[RG_SIZE + 1];
	int fd = openat(h->dirfd, "big", O_RDONLY | O_CLOEXEC);
	ssize_t got = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;

	if (fd >= 0)
		close(fd);
	if (got != RG_SIZE || memcmp(buf, rg_data, RG_SIZE))
		return "big is not the sender's bytes";
	if (size_of(h->dirfd, RG_PART) != UINT64_MAX)
		return "the partial is still there";
	return NULL;
}

static void rg_cleanup(struct harness *h)
{
	unlinkat(h->dirfd, "big", 0);
	unlinkat(h->dirfd, RG_PART, 0);
}

static int rg_end(struct harness *h, unsigned int *n, const char *what, const char *bad)
{
	if (rg_held_fd >= 0)
		close(rg_held_fd);
	rg_held_fd = -1;
	scenario_verify = rg_cleanup;
	teardown(h);
	scenario_verify = NULL;
	scenario_opts = NULL;
	H = NULL;
	free(h);
	printf("%s %u - %s%s%s\n", bad ? "not ok" : "ok", ++*n, what, bad ? ": " : "",
	       bad ? bad : "");
	return bad != NULL;
}

/* The refusal of the last step: an ERROR saying @text, and no "big". */
static const char *rg_refused(struct harness *h, const char *text)
{
	settle();
	if (!h->errors)
		return "no ERROR";
	if (!strstr(h->last_error, text))
		return h->last_error;
	if (size_of(h->dirfd, "big") != UINT64_MAX)
		return "big was named";
	return NULL;
}

/* A cut run's partial: range 0 whole, range 1's first chunk, no range 2. */
static void plant_cut(int dirfd)
{
	int fd = openat(dirfd, RG_PART, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	if (fd < 0 || pwrite(fd, rg_data, 12288, 0) != 12288)
		fail("cannot plant the partial");
	close(fd);
}

/* Another connection at work on "big": its partial open (held shared,
 * as cp_store_open_range() holds it) with range 1 claimed. */
static void hold_range_1(int dirfd)
{
	rg_held_fd = openat(dirfd, RG_PART, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (rg_held_fd < 0 || cp_range_hold(rg_held_fd, false) ||
	    cp_range_claim(rg_held_fd, RG_STRIPE, RG_STRIPE))
		fail("cannot hold range 1");
}

static int ranges(unsigned int *n)
{
	static const uint32_t order[] = {2, 0, 1};
	struct harness *h;
	const char *bad = NULL;
	uint64_t held[3] = {0};
	struct cp_msg m;
	int rc = 0;

	for (uint32_t i = 0; i < RG_SIZE; i++)
		rg_data[i] = (uint8_t)(i * 131 + (i >> 8));

	/* Ranges in the order 2, 0, 1, then the commit: named whole. */
	bad = NULL;
	h = stall_begin();
	for (size_t k = 0; k < 3 && !bad; k++)
		bad = rg_send(h, order[k], &held[k]);
	if (!bad) {
		rg_commit(h);
		bad = h->errors	      ? h->last_error
		      : h->dones != 4 ? "the commit was not answered"
				      : rg_named(h);
	}
	if (!bad && (held[0] || held[1] || held[2] || h->seq != 5))
		bad = "a fresh file's ranges held bytes, or not 5 chunks went";
	rc |= rg_end(h, n, "ranges 2, 0, 1 then FILE_COMMIT: the file named whole", bad);

	/* A range missing in the middle: its hole rereads as zeros. */
	bad = NULL;
	h = stall_begin();
	bad = rg_send(h, 0, &held[0]);
	if (!bad)
		bad = rg_send(h, 2, &held[2]);
	if (!bad) {
		rg_commit(h);
		bad = rg_refused(h, "checksum mismatch");
	}
	if (!bad && size_of(h->dirfd, RG_PART) != RG_SIZE)
		bad = "the partial, with its two ranges, was not kept";
	rc |= rg_end(h, n, "FILE_COMMIT with range 1 missing is refused", bad);

	/* The last range missing: the partial is short of the size. */
	bad = NULL;
	h = stall_begin();
	bad = rg_send(h, 0, &held[0]);
	if (!bad)
		bad = rg_send(h, 1, &held[1]);
	if (!bad) {
		rg_commit(h);
		bad = rg_refused(h, "a range is missing");
	}
	rc |= rg_end(h, n, "FILE_COMMIT with the last range missing is refused", bad);

	/* No range at all: the commit's own open made an empty partial, which
	 * goes again. */
	bad = NULL;
	h = stall_begin();
	rg_commit(h);
	bad = rg_refused(h, "a range is missing");
	if (!bad && size_of(h->dirfd, RG_PART) != UINT64_MAX)
		bad = "an empty partial was left";
	rc |= rg_end(h, n, "FILE_COMMIT of no range is refused, nothing left", bad);

	/* A range past the size: the decoder refuses it. */
	bad = NULL;
	h = stall_begin();
	m = rg_start(3 * RG_STRIPE, RG_STRIPE, RG_STRIPE);
	send_msg(&m);
	bad = rg_refused(h, "a range not at a stripe of the file");
	rc |= rg_end(h, n, "a range past the file's size is refused", bad);

	/* Ranges off the chunks (a stripe of 6 KiB, chunks of 4): refused by
	 * the receiver, which alone knows the chunk. */
	bad = NULL;
	h = stall_begin();
	m = rg_start(6144, 6144, 6144);
	send_msg(&m);
	bad = rg_refused(h, "chunk");
	rc |= rg_end(h, n, "a range that does not start on a chunk is refused", bad);

	/* --max-size judges the whole file at each range. */
	scenario_opts = opts_max_size;
	bad = NULL;
	h = stall_begin();
	m = rg_start(0, RG_STRIPE, RG_STRIPE);
	send_msg(&m);
	bad = rg_refused(h, "over --max-size");
	rc |= rg_end(h, n, "a range of a file over --max-size is refused", bad);

	/* Range 1 held by another connection: range 0 shares the partial,
	 * range 1 is refused busy and nothing of it is written. */
	scenario_plant = hold_range_1;
	bad = NULL;
	h = stall_begin();
	scenario_plant = NULL;
	bad = rg_send(h, 0, &held[0]);
	if (!bad) {
		uint64_t seq = h->seq;

		m = rg_start(RG_STRIPE, RG_STRIPE, RG_STRIPE);
		send_msg(&m);
		bad = rg_refused(h, "another connection receives this range");
		if (!bad && (h->seq != seq || h->haves != 1))
			bad = "range 1 was offered";
	}
	rc |= rg_end(h, n, "a range claimed by another connection is refused busy", bad);

	/* Every range stored, but another connection holds the partial: the
	 * commit is refused busy, nothing named. */
	bad = NULL;
	h = stall_begin();
	for (uint32_t i = 0; i < 3 && !bad; i++)
		bad = rg_send(h, i, &held[i]);
	if (!bad) {
		rg_held_fd = openat(h->dirfd, RG_PART, O_RDWR | O_CLOEXEC);
		if (rg_held_fd < 0 || cp_range_hold(rg_held_fd, false))
			fail("cannot hold the partial");
		rg_commit(h);
		bad = rg_refused(h, "");
		if (!bad && size_of(h->dirfd, RG_PART) != RG_SIZE)
			bad = "the partial did not stay";
	}
	rc |= rg_end(h, n, "FILE_COMMIT while a range is held is refused", bad);

	/* A cut run left range 0 whole and one chunk of range 1: range 0 is
	 * not sent again, range 1 goes on after its chunk, range 2 whole;
	 * two chunks in all, and the commit names the file. */
	scenario_plant = plant_cut;
	bad = NULL;
	h = stall_begin();
	scenario_plant = NULL;
	for (uint32_t i = 0; i < 3 && !bad; i++)
		bad = rg_send(h, i, &held[i]);
	if (!bad && (held[0] != RG_STRIPE || held[1] != 4096 || held[2] != 0))
		bad = "the ranges did not offer 8192, 4096 and 0 bytes";
	if (!bad && h->seq != 2)
		bad = "not exactly the two missing chunks went";
	if (!bad) {
		rg_commit(h);
		bad = h->errors ? h->last_error : rg_named(h);
	}
	rc |= rg_end(h, n, "a cut range resumes after its held chunk, a whole one is not resent",
		     bad);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned int n = 0;
	int bad = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	bad |= scenarios(&n);
	bad |= stalls(&n);
	bad |= links_out(&n);
	bad |= bounds(&n);
	bad |= replayed_login(&n);
	bad |= held_auth(&n);
	bad |= relayed_login(&n);
	bad |= same_reads(&n);
	bad |= ranges(&n);
	for (int i = 1; i < argc; i++) {
		struct dirent **list;
		int k = scandir(argv[i], &list, NULL, alphasort);

		if (k < 0) {
			bad |= replay(argv[i], &n);
			continue;
		}
		for (int j = 0; j < k; j++) {
			char path[4096];

			if (list[j]->d_name[0] != '.') {
				snprintf(path, sizeof(path), "%s/%s", argv[i], list[j]->d_name);
				bad |= replay(path, &n);
			}
			free(list[j]);
		}
		free(list);
	}
	printf("1..%u\n", n);
	if (n < 5) {
		printf("Bail out! only %u inputs\n", n);
		return 1;
	}
	return bad;
}
#endif
