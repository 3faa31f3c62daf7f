// SPDX-License-Identifier: MIT
/*
 * Hostile ringrdma-cp peers for the lab tests. Plain librdmacm and the wire
 * format's encoder, not the library under test.
 *
 *   cp-hostile idle ADDR PORT N SECS
 *	N connections that are established and never say HELLO, held SECS
 *	seconds. Prints "established E refused R" once every connect was
 *	tried.
 *
 *   cp-hostile halfopen ADDR PORT N SECS
 *	N connection requests that are never completed: each is sent, the
 *	receiver's reply (REP) arrives, and the event that would make
 *	librdmacm answer it (RTU) is never read, so the receiver holds a
 *	request that is never established. Held SECS seconds. Prints
 *	"requested N" once every request was sent.
 *
 *   cp-hostile guess ADDR PORT N TOKEN_FILE
 *	N connections one after the other, each proving a wrong token,
 *	then one proving the token of TOKEN_FILE; prints the answer to each:
 *	"try I: refused CODE TEXT" or "try I: welcome", the last as "good: ...".
 *
 *   cp-hostile churn ADDR PORT SECS
 *	For SECS seconds: connect, send a HELLO (never the AUTH), and keep
 *	the connection without ever answering the receiver's disconnect,
 *	as a reconnect loop would (200 kept at most, the oldest let go).
 *	Prints "connections N".
 *
 *   cp-hostile rewrite ADDR PORT NAME FILE
 *	A sender of one chunk-sized file NAME that, right behind the chunk,
 *	keeps rewriting the chunk's first 64 bytes in the receiver's window for
 *	300 ms, alternately with other bytes and with the bytes it first
 *	wrote, while the receiver hashes and stores it; then FILE_END with the
 *	checksum of what it first wrote. Those bytes go to FILE. Prints
 *	"rewritten N", then "stored" (FILE_DONE) or "refused CODE TEXT"; or
 *	"shut after N rewrites: STATUS" when the receiver's device refused a
 *	rewrite (the slot's grant was used up), which ends the connection.
 *
 *   cp-hostile steal ADDR PORT NAME FILE
 *	A victim that says HELLO, and a second connection that never does and
 *	RDMA WRITEs into the victim's window with the address of its WELCOME
 *	and the key of its first GRANT. Prints "attack: STATUS" (the attacker's work completion),
 *	then the victim sends a 4 KiB file NAME (its bytes also go to FILE)
 *	and prints "stored" on FILE_DONE.
 *
 *   cp-hostile offset ADDR PORT FILE
 *	One connection, window 1, chunk 4 KiB: file "a" of 4 KiB (pattern A)
 *	as a sender writes it; then files "b" and "c", each one short chunk
 *	of 3584 bytes written 512 bytes into the slot (pattern B), so that the
 *	head of what the receiver takes is whatever the slot held. "b"
 *	declares the checksum of 512 zeros and B's first 3072 bytes (those
 *	go to FILE), "c" that of A's head and the same: the receiver that
 *	stores the slot's old bytes stores "c", not "b". Prints "a: stored"
 *	and so on, or "X: refused CODE TEXT", and "oldhash H": the hash of
 *	A's head and B, which the receiver must never send back.
 *
 *   cp-hostile badwrite ADDR PORT SECS
 *	A sender that says HELLO, then RDMA WRITEs 64 bytes just past the end
 *	of its window with the key of its first GRANT: the receiver's device
 *	refuses it and its QP goes into error. Prints "attack: STATUS" (its
 *	work completion), then holds the connection SECS seconds without
 *	ever disconnecting.
 *
 * Where a peer says HELLO, it proves the token in $CP_HOSTILE_TOKEN, if set
 * (a nonce, and AUTH for the CHALLENGE: cp/auth.h).
 *
 * Exit 0 when the peer did its part, 1 on a network failure, 2 on usage.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <xxhash.h>

#include "auth.h"
#include "proto.h"

struct conn {
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	char buf[2][512];
};

/* What ringrdma-cp asks for too: RNR retries forever, one READ each way. */
static struct rdma_conn_param conn_param = {
	.responder_resources = 1,
	.initiator_depth = 1,
	.retry_count = 7,
	.rnr_retry_count = 7,
};

/* An RC endpoint towards @ai, every send signalled; NULL on failure. */
static struct rdma_cm_id *create_ep(struct rdma_addrinfo *ai, uint32_t send_wr, uint32_t recv_wr)
{
	struct ibv_qp_init_attr qa = {
		.cap = {.max_send_wr = send_wr,
			.max_recv_wr = recv_wr,
			.max_send_sge = 1,
			.max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};
	struct rdma_cm_id *id;

	return rdma_create_ep(&id, ai, NULL, &qa) ? NULL : id;
}

static struct rdma_cm_id *dial(struct rdma_addrinfo *ai, struct conn *c)
{
	struct rdma_cm_id *id = create_ep(ai, 1, 2);

	if (!id)
		return NULL;
	/* Receives posted: whatever the receiver answers is taken, and ignored. */
	c->mr = rdma_reg_msgs(id, c->buf, sizeof(c->buf));
	if (!c->mr || rdma_post_recv(id, NULL, c->buf[0], sizeof(c->buf[0]), c->mr) ||
	    rdma_post_recv(id, NULL, c->buf[1], sizeof(c->buf[1]), c->mr) ||
	    rdma_connect(id, &conn_param)) {
		if (c->mr)
			rdma_dereg_mr(c->mr);
		c->mr = NULL;
		rdma_destroy_ep(id);
		return NULL;
	}
	return id;
}

static int idle(int argc, char **argv)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *ai;
	struct conn *conns;
	int n, secs, est = 0, refused = 0;

	if (argc != 6) {
		fprintf(stderr, "usage: cp-hostile idle ADDR PORT N SECS\n");
		return 2;
	}
	n = atoi(argv[4]);
	secs = atoi(argv[5]);
	if (n < 1 || n > 4096 || secs < 0) {
		fprintf(stderr, "cp-hostile: bad N or SECS\n");
		return 2;
	}
	if (rdma_getaddrinfo(argv[2], argv[3], &hints, &ai)) {
		fprintf(stderr, "cp-hostile: %s:%s: %s\n", argv[2], argv[3], strerror(errno));
		return 1;
	}
	conns = calloc((size_t)n, sizeof(*conns));
	if (!conns)
		return 1;
	for (int i = 0; i < n; i++) {
		conns[i].id = dial(ai, &conns[i]);
		if (conns[i].id)
			est++;
		else
			refused++;
	}
	printf("established %d refused %d\n", est, refused);
	fflush(stdout);
	sleep((unsigned int)secs);
	for (int i = 0; i < n; i++) {
		if (!conns[i].id)
			continue;
		rdma_disconnect(conns[i].id);
		rdma_dereg_mr(conns[i].mr);
		rdma_destroy_ep(conns[i].id);
	}
	free(conns);
	rdma_freeaddrinfo(ai);
	return 0;
}

#define RW_RECVS     4
#define RW_SENDS     16
#define RW_INFLIGHT  2	/* one rewrite at a time: each pattern rests as long */
#define RW_REWRITE   64 /* one packet: lands whole */
#define RW_ATTACK_MS 300

struct rw {
	struct rdma_cm_id *id;
	struct ibv_mr *ctl_mr, *data_mr;
	uint8_t ctl[RW_RECVS + 1][CP_MSG_MAX]; /* receives, then the one send */
	uint8_t *data;			       /* the chunk, then the rewrite */
	uint64_t addr;			       /* the window's slot 0, of WELCOME */
	uint32_t key;			       /* seq 0's key, of the first GRANT */
	uint32_t last_limit, last_key;	       /* of the last GRANT seen */
};

static int rw_send(struct rw *c, const struct cp_msg *m)
{
	uint8_t *buf = c->ctl[RW_RECVS];
	size_t len = cp_encode(m, buf, CP_MSG_MAX);
	struct ibv_wc wc;

	if (!len || rdma_post_send(c->id, NULL, buf, len, c->ctl_mr, 0) ||
	    rdma_get_send_comp(c->id, &wc) != 1 || wc.status) {
		fprintf(stderr, "cp-hostile: sending %s failed\n", cp_type_name(m->type));
		return -1;
	}
	return 0;
}

/* The next message, which must be of @type; an ERROR is printed. Other
 * GRANTs are skipped: one chunk is all it sends. */
static int rw_expect(struct rw *c, struct cp_msg *m, unsigned int type)
{
	struct ibv_wc wc;
	char why[160];
	uint8_t *buf;
	int rc;

	do {
		if (rdma_get_recv_comp(c->id, &wc) != 1 || wc.status) {
			fprintf(stderr, "cp-hostile: receive failed\n");
			return -1;
		}
		buf = (uint8_t *)(uintptr_t)wc.wr_id;
		rc = cp_decode(buf, wc.byte_len, m, why, sizeof(why));
		if (rdma_post_recv(c->id, buf, buf, CP_MSG_MAX, c->ctl_mr) || rc) {
			fprintf(stderr, "cp-hostile: %s\n", rc ? why : "cannot repost a receive");
			return -1;
		}
		if (m->type == CP_GRANT) {
			c->last_limit = m->grant.limit;
			c->last_key = m->grant.keys[m->grant.nkeys - 1];
		}
	} while (m->type == CP_GRANT && type != CP_GRANT);
	if (m->type == CP_ERROR) {
		printf("refused %s %s\n", cp_err_name(m->error.code), m->error.text);
		return 1;
	}
	if (m->type != type) {
		fprintf(stderr, "cp-hostile: got %s, wanted %s\n", cp_type_name(m->type),
			cp_type_name(type));
		return -1;
	}
	return 0;
}

/* Post an RDMA WRITE of @len bytes at @buf to the start of @to's window
 * (@to's address and key: another connection's for a theft). */
static int rw_write(struct rw *c, const struct rw *to, uint8_t *buf, uint32_t len, bool imm)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = c->data_mr->lkey};
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
		.imm_data = htobe32(0), /* seq 0: the first chunk */
		.wr.rdma = {.remote_addr = to->addr, .rkey = to->key},
	};
	struct ibv_send_wr *bad;
	int rc = ibv_post_send(c->id->qp, &wr, &bad);

	if (rc) {
		fprintf(stderr, "cp-hostile: cannot post an RDMA WRITE: %s\n", strerror(rc));
		return -1;
	}
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * The chunk, then rewrites of its first bytes posted right behind it, so
 * that they land while the receiver wakes up, hashes and stores it. Each
 * rewrite alternates: a hash that saw the first bytes and a file write that
 * saw the others would store what was never checked. Returns 1 once the
 * receiver's device refused a rewrite (printed): the connection is dead.
 */
static int rw_attack(struct rw *c, uint32_t len)
{
	unsigned int inflight = 1, n = 0;
	uint64_t end = UINT64_MAX;
	struct ibv_wc wc;

	if (rw_write(c, c, c->data, len, true))
		return -1;
	while (inflight) {
		while (inflight < RW_INFLIGHT && now_ms() < end) {
			if (rw_write(c, c, n & 1 ? c->data : c->data + len, RW_REWRITE, false))
				return -1;
			inflight++;
			n++;
		}
		if (rdma_get_send_comp(c->id, &wc) != 1) {
			fprintf(stderr, "cp-hostile: RDMA WRITE failed\n");
			return -1;
		}
		if (wc.status == IBV_WC_REM_ACCESS_ERR && end != UINT64_MAX) {
			printf("shut after %u rewrites: %s\n", n, ibv_wc_status_str(wc.status));
			fflush(stdout);
			return 1;
		}
		if (wc.status) {
			fprintf(stderr, "cp-hostile: RDMA WRITE failed: %s\n",
				ibv_wc_status_str(wc.status));
			return -1;
		}
		inflight--;
		if (end == UINT64_MAX) /* the chunk landed (first to complete) */
			end = now_ms() + RW_ATTACK_MS;
	}
	printf("rewritten %u\n", n);
	fflush(stdout);
	return 0;
}

/*
 * HELLO (a nonce with @token, none without), and with @token the AUTH
 * that answers the receiver's CHALLENGE with a proof of it (cp/auth.h);
 * then its answer in @w: WELCOME 0, refused 1 (printed), failed -1.
 */
static int rw_login(struct rw *c, const char *token, size_t len, uint32_t chunk, struct cp_msg *w)
{
	struct cp_msg m = {.type = CP_HELLO}, a = {.type = CP_AUTH};
	uint8_t cn[CP_NONCE_LEN], sid[CP_SERVER_ID_LEN];
	int rc;

	m.hello.chunk = chunk;
	m.hello.window = 1;
	if (token) {
		if (cp_auth_nonce(cn))
			return -1;
		m.hello.nonce_len = CP_NONCE_LEN;
		memcpy(m.hello.nonce, cn, CP_NONCE_LEN);
	}
	if (rw_send(c, &m))
		return -1;
	if (!token)
		return rw_expect(c, w, CP_WELCOME);
	rc = rw_expect(c, &m, CP_CHALLENGE);
	if (rc)
		return rc;
	if (cp_auth_server_id(rdma_get_peer_addr(c->id), sid) ||
	    cp_auth_proof((const uint8_t *)token, len, CP_AUTH_CLIENT, cn, m.challenge.nonce, sid,
			  a.auth.proof) ||
	    rw_send(c, &a))
		return -1;
	return rw_expect(c, w, CP_WELCOME);
}

/* HELLO, the WELCOME in @w, then the first GRANT for the key of seq 0:
 * 0, 1 refused (printed), -1 failed. */
static int rw_hello(struct rw *c, uint32_t chunk, struct cp_msg *w)
{
	struct cp_msg m;
	const char *token = getenv("CP_HOSTILE_TOKEN");
	int rc;

	/* A receiver that checks a token gets its proof: the attack comes
	 * after. */
	rc = rw_login(c, token, token ? strlen(token) : 0, chunk, w);
	if (!rc)
		rc = rw_expect(c, &m, CP_GRANT);
	if (rc)
		return rc;
	if (m.grant.limit != 1 || m.grant.nkeys != 1) {
		fprintf(stderr, "cp-hostile: first GRANT: limit %u\n", m.grant.limit);
		return -1;
	}
	c->addr = w->welcome.addr;
	c->key = m.grant.keys[0];
	return 0;
}

/* @len bytes of a pattern (then RW_REWRITE others) to send; the pattern
 * also goes to @file. */
static int rw_data(struct rw *c, uint32_t len, const char *file)
{
	FILE *f;

	c->data = malloc((size_t)len + RW_REWRITE);
	if (!c->data)
		return -1;
	for (uint32_t i = 0; i < len; i++)
		c->data[i] = (uint8_t)(i * 131u + (i >> 12));
	memset(c->data + len, 0x5a, RW_REWRITE);
	c->data_mr = ibv_reg_mr(c->id->pd, c->data, (size_t)len + RW_REWRITE, 0);
	f = file ? fopen(file, "wb") : NULL;
	if (!c->data_mr || (file && (!f || fwrite(c->data, 1, len, f) != len || fclose(f)))) {
		fprintf(stderr, "cp-hostile: setting up the data failed\n");
		return -1;
	}
	return 0;
}

/* One file of @len bytes in one chunk, rewritten while stored if
 * @attack; prints "stored" on FILE_DONE. 0 when it did its part. */
static int rw_file(struct rw *c, const char *name, uint32_t len, bool attack)
{
	struct cp_msg m = {.type = CP_FILE_START};
	struct ibv_wc wc;
	int rc;

	m.start.size = len;
	m.start.name_len = (uint16_t)strlen(name);
	if (m.start.name_len > CP_NAME_MAX)
		return -1;
	memcpy(m.start.name, name, m.start.name_len);
	/* The chunk follows at once; a refusal comes instead of FILE_DONE. */
	if (rw_send(c, &m))
		return -1;
	rc = attack ? rw_attack(c, len)
	     : rw_write(c, c, c->data, len, true) || rdma_get_send_comp(c->id, &wc) != 1 ||
			     wc.status
		     ? -1
		     : 0;
	if (rc)
		return rc > 0 ? 0 : -1;
	m = (struct cp_msg){.type = CP_FILE_END};
	m.end.bytes = len;
	m.end.checksum = XXH3_64bits(c->data, len);
	if (rw_send(c, &m))
		return -1;
	rc = rw_expect(c, &m, CP_FILE_DONE);
	if (!rc)
		printf("stored\n");
	return rc < 0 ? -1 : 0;
}

/* Connected, receives posted; NULL (said why) on failure. */
static struct rw *rw_open(struct rdma_addrinfo *ai)
{
	struct rw *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->id = create_ep(ai, RW_SENDS, RW_RECVS);
	if (c->id)
		c->ctl_mr = rdma_reg_msgs(c->id, c->ctl, sizeof(c->ctl));
	for (int i = 0; c->ctl_mr && i < RW_RECVS; i++)
		if (rdma_post_recv(c->id, c->ctl[i], c->ctl[i], CP_MSG_MAX, c->ctl_mr))
			goto err;
	if (c->ctl_mr && !rdma_connect(c->id, &conn_param))
		return c;
err:
	fprintf(stderr, "cp-hostile: connect: %s\n", strerror(errno));
	if (c->ctl_mr)
		rdma_dereg_mr(c->ctl_mr);
	if (c->id)
		rdma_destroy_ep(c->id);
	free(c);
	return NULL;
}

static void rw_close(struct rw *c)
{
	if (!c)
		return;
	rdma_disconnect(c->id);
	if (c->data_mr)
		ibv_dereg_mr(c->data_mr);
	rdma_dereg_mr(c->ctl_mr);
	rdma_destroy_ep(c->id);
	free(c->data);
	free(c);
}

static struct rdma_addrinfo *resolve(const char *addr, const char *port)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *ai;

	if (rdma_getaddrinfo(addr, port, &hints, &ai)) {
		fprintf(stderr, "cp-hostile: %s:%s: %s\n", addr, port, strerror(errno));
		return NULL;
	}
	return ai;
}

static int rewrite(int argc, char **argv)
{
	struct rdma_addrinfo *ai;
	struct cp_msg w;
	struct rw *c;
	int rc;

	if (argc != 6) {
		fprintf(stderr, "usage: cp-hostile rewrite ADDR PORT NAME FILE\n");
		return 2;
	}
	ai = resolve(argv[2], argv[3]);
	c = ai ? rw_open(ai) : NULL;
	rc = c ? rw_hello(c, CP_CHUNK_MAX, &w) : -1;
	if (!rc &&
	    (rw_data(c, w.welcome.chunk, argv[5]) || rw_file(c, argv[4], w.welcome.chunk, true)))
		rc = -1;
	rw_close(c);
	if (ai)
		rdma_freeaddrinfo(ai);
	return rc < 0 ? 1 : 0; /* refused (1): printed, it did its part */
}

/*
 * A victim sender and a second connection, established but never
 * authenticated, that writes into the victim's window with its real
 * address and key; then the victim sends its file.
 */
static int steal(int argc, char **argv)
{
	struct rdma_addrinfo *ai;
	struct rw *v = NULL, *x = NULL;
	struct ibv_wc wc;
	struct cp_msg w;
	int rc = -1;

	if (argc != 6) {
		fprintf(stderr, "usage: cp-hostile steal ADDR PORT NAME FILE\n");
		return 2;
	}
	ai = resolve(argv[2], argv[3]);
	if (ai)
		v = rw_open(ai);
	if (v)
		x = rw_open(ai);
	if (x && !rw_hello(v, 4096, &w) && !rw_data(x, 64, NULL) &&
	    !rw_write(x, v, x->data, 64, false) && rdma_get_send_comp(x->id, &wc) == 1) {
		printf("attack: %s\n", ibv_wc_status_str(wc.status));
		fflush(stdout);
		rc = rw_data(v, 4096, argv[5]) || rw_file(v, argv[4], 4096, false) ? -1 : 0;
	}
	rw_close(x);
	rw_close(v);
	if (ai)
		rdma_freeaddrinfo(ai);
	return rc ? 1 : 0;
}

/* One request, sent and never completed; NULL on failure. */
static struct rdma_cm_id *half_open(struct rdma_addrinfo *ai)
{
	struct ibv_qp_init_attr qa = {
		.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	struct rdma_event_channel *ch = rdma_create_event_channel();
	enum rdma_cm_event_type want[] = {RDMA_CM_EVENT_ADDR_RESOLVED,
					  RDMA_CM_EVENT_ROUTE_RESOLVED};
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return NULL;
	for (int i = 0; i < 2; i++) {
		bool ok;

		if ((i == 0 ? rdma_resolve_addr(id, ai->ai_src_addr, ai->ai_dst_addr, 2000)
			    : rdma_resolve_route(id, 2000)) ||
		    rdma_get_cm_event(ch, &ev))
			goto err;
		ok = ev->event == want[i];
		rdma_ack_cm_event(ev);
		if (!ok)
			goto err;
	}
	/* The reply to this is an event on @ch that nobody reads: librdmacm
	 * sends the RTU only from rdma_get_cm_event(). */
	if (rdma_create_qp(id, NULL, &qa) || rdma_connect(id, &conn_param))
		goto err;
	return id;
err:
	fprintf(stderr, "cp-hostile: half-open request: %s\n", strerror(errno));
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return NULL;
}

static int halfopen(int argc, char **argv)
{
	struct rdma_addrinfo *ai;
	int n, secs, sent = 0;

	if (argc != 6) {
		fprintf(stderr, "usage: cp-hostile halfopen ADDR PORT N SECS\n");
		return 2;
	}
	n = atoi(argv[4]);
	secs = atoi(argv[5]);
	if (n < 1 || n > 4096 || secs < 0)
		return 2;
	ai = resolve(argv[2], argv[3]);
	if (!ai)
		return 1;
	for (int i = 0; i < n; i++)
		if (half_open(ai))
			sent++;
	printf("requested %d\n", sent);
	fflush(stdout);
	sleep((unsigned int)secs);
	/* The process's end takes the ids with it. */
	return sent == n ? 0 : 1;
}

/* HELLO with @token, then the answer, printed after @label. */
static int try_token(struct rdma_addrinfo *ai, const char *label, const char *token, size_t len)
{
	struct cp_msg w;
	struct rw *c = rw_open(ai);
	int rc;

	if (!c)
		return -1;
	printf("%s: ", label);
	rc = rw_login(c, token, len, 4096, &w);
	if (rc == 0)
		printf("welcome\n");
	else if (rc < 0)
		printf("failed\n");
	fflush(stdout);
	rw_close(c);
	return rc < 0 ? -1 : 0;
}

static int guess(int argc, char **argv)
{
	char good[CP_TOKEN_MAX + 1], label[32], wrong[32];
	struct rdma_addrinfo *ai;
	int n, fd, rc = 0;
	ssize_t len;

	if (argc != 6) {
		fprintf(stderr, "usage: cp-hostile guess ADDR PORT N TOKEN_FILE\n");
		return 2;
	}
	n = atoi(argv[4]);
	fd = open(argv[5], O_RDONLY);
	len = fd < 0 ? -1 : read(fd, good, sizeof(good) - 1);
	if (fd >= 0)
		close(fd);
	while (len > 0 && (good[len - 1] == '\n' || good[len - 1] == ' '))
		len--;
	if (n < 0 || len <= 0 || len > CP_TOKEN_MAX)
		return 2;
	ai = resolve(argv[2], argv[3]);
	if (!ai)
		return 1;
	for (int i = 1; i <= n && !rc; i++) {
		snprintf(label, sizeof(label), "try %d", i);
		snprintf(wrong, sizeof(wrong), "guess-%d", i);
		rc = try_token(ai, label, wrong, strlen(wrong));
	}
	if (!rc)
		rc = try_token(ai, "good", good, (size_t)len);
	rdma_freeaddrinfo(ai);
	return rc ? 1 : 0;
}

#define CHURN_KEEP 200

static int churn(int argc, char **argv)
{
	struct rw *kept[CHURN_KEEP] = {0};
	struct cp_msg m = {.type = CP_HELLO};
	struct rdma_addrinfo *ai;
	uint64_t end;
	int n = 0;

	if (argc != 5) {
		fprintf(stderr, "usage: cp-hostile churn ADDR PORT SECS\n");
		return 2;
	}
	ai = resolve(argv[2], argv[3]);
	if (!ai)
		return 1;
	/* A nonce, and never the AUTH the receiver's CHALLENGE asks for:
	 * each waits in the gate, evicted by the next ones (a sender that
	 * proves nothing is never admitted). */
	m.hello.chunk = 4096;
	m.hello.window = 1;
	m.hello.nonce_len = CP_NONCE_LEN;
	memset(m.hello.nonce, 0x5a, CP_NONCE_LEN);
	end = now_ms() + (uint64_t)atoi(argv[4]) * 1000;
	while (now_ms() < end) {
		struct rw *c = rw_open(ai);

		if (!c)
			continue; /* refused: try again, as a loop would */
		/* Its QP stays; the receiver's disconnect is never answered
		 * (nobody reads this id's events). */
		if (rw_send(c, &m)) {
			rw_close(c);
			continue;
		}
		if (kept[n % CHURN_KEEP])
			rw_close(kept[n % CHURN_KEEP]);
		kept[n % CHURN_KEEP] = c;
		n++;
	}
	printf("connections %d\n", n);
	fflush(stdout);
	for (int i = 0; i < CHURN_KEEP; i++)
		if (kept[i])
			rw_close(kept[i]);
	rdma_freeaddrinfo(ai);
	return 0;
}

#define OF_CHUNK 4096u
#define OF_SKIP	 512u /* where the short chunks begin inside the slot */
#define OF_LEN	 (OF_CHUNK - OF_SKIP)

/* FILE_START @name of @len bytes; one WRITE with immediate @seq of @len
 * bytes at @src to @skip bytes into the slot; FILE_END with @sum; prints
 * the outcome. 0: it did its part (stored or refused), -1 failed. */
static int of_file(struct rw *c, const char *name, uint32_t seq, const uint8_t *src, uint32_t len,
		   uint32_t skip, uint64_t sum)
{
	struct cp_msg m = {.type = CP_FILE_START};
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = c->data_mr->lkey};
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.imm_data = htobe32(seq),
	};
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	int rc;

	/* Seq's key came with the GRANT that raised the limit past it. */
	while (c->last_limit <= seq)
		if (rw_expect(c, &m, CP_GRANT))
			return -1;
	wr.wr.rdma.remote_addr = c->addr + skip;
	wr.wr.rdma.rkey = c->last_key;
	m = (struct cp_msg){.type = CP_FILE_START};
	m.start.size = len;
	m.start.name_len = (uint16_t)strlen(name);
	memcpy(m.start.name, name, m.start.name_len);
	if (rw_send(c, &m) || ibv_post_send(c->id->qp, &wr, &bad) ||
	    rdma_get_send_comp(c->id, &wc) != 1 || wc.status) {
		fprintf(stderr, "cp-hostile: %s: sending failed\n", name);
		return -1;
	}
	m = (struct cp_msg){.type = CP_FILE_END};
	m.end.bytes = len;
	m.end.checksum = sum;
	if (rw_send(c, &m))
		return -1;
	printf("%s: ", name);
	rc = rw_expect(c, &m, CP_FILE_DONE);
	if (!rc)
		printf("stored\n");
	fflush(stdout);
	return rc < 0 ? -1 : 0;
}

static int offset(int argc, char **argv)
{
	uint8_t *a, *b, *head = NULL;
	struct rdma_addrinfo *ai;
	uint64_t zsum = 0, oldsum = 0;
	struct cp_msg w;
	struct rw *c;
	int rc;
	FILE *f;

	if (argc != 5) {
		fprintf(stderr, "usage: cp-hostile offset ADDR PORT FILE\n");
		return 2;
	}
	ai = resolve(argv[2], argv[3]);
	c = ai ? rw_open(ai) : NULL;
	rc = c ? rw_hello(c, OF_CHUNK, &w) : -1;
	if (!rc && w.welcome.chunk != OF_CHUNK)
		rc = -1;
	if (!rc) {
		c->data = calloc(2, OF_CHUNK);
		head = calloc(1, OF_CHUNK);
		if (!c->data || !head)
			rc = -1;
	}
	if (!rc) {
		a = c->data;
		b = c->data + OF_CHUNK;
		for (uint32_t i = 0; i < OF_CHUNK; i++) {
			a[i] = (uint8_t)(0xa0 + i % 7);
			b[i] = (uint8_t)(0x30 + i % 11);
		}
		c->data_mr = ibv_reg_mr(c->id->pd, c->data, 2 * OF_CHUNK, 0);
		/* What the receiver takes: the slot's first OF_LEN bytes, B's
		 * first OF_LEN - OF_SKIP behind a head of zeros or of A. */
		memcpy(head + OF_SKIP, b, OF_LEN - OF_SKIP);
		zsum = XXH3_64bits(head, OF_LEN);
		memcpy(head, a, OF_SKIP);
		oldsum = XXH3_64bits(head, OF_LEN);
		memset(head, 0, OF_SKIP);
		f = fopen(argv[4], "wb");
		if (!c->data_mr || !f || fwrite(head, 1, OF_LEN, f) != OF_LEN || fclose(f))
			rc = -1;
	}
	if (!rc) {
		printf("oldhash %016llx\n", (unsigned long long)oldsum);
		rc = of_file(c, "a", 0, a, OF_CHUNK, 0, XXH3_64bits(a, OF_CHUNK));
	}
	if (!rc)
		rc = of_file(c, "b", 1, b, OF_LEN, OF_SKIP, zsum);
	if (!rc)
		rc = of_file(c, "c", 2, b, OF_LEN, OF_SKIP, oldsum);
	rw_close(c);
	free(head);
	if (ai)
		rdma_freeaddrinfo(ai);
	return rc < 0 ? 1 : 0;
}

/* A write beyond the window, then the connection held, never closed. */
static int badwrite(int argc, char **argv)
{
	struct rdma_addrinfo *ai;
	struct rw *c = NULL, past;
	struct ibv_wc wc;
	struct cp_msg w;
	int rc = -1;

	if (argc != 5) {
		fprintf(stderr, "usage: cp-hostile badwrite ADDR PORT SECS\n");
		return 2;
	}
	ai = resolve(argv[2], argv[3]);
	if (ai)
		c = rw_open(ai);
	if (c && !rw_hello(c, 4096, &w) && !rw_data(c, 64, NULL)) {
		past = *c;
		past.addr = c->addr + (uint64_t)w.welcome.chunk * w.welcome.window;
		if (!rw_write(c, &past, c->data, 64, false) &&
		    rdma_get_send_comp(c->id, &wc) == 1) {
			printf("attack: %s\n", ibv_wc_status_str(wc.status));
			fflush(stdout);
			/* Nobody reads this id's events: a disconnect of the
			 * receiver's is never answered either. */
			sleep((unsigned int)atoi(argv[4]));
			rc = 0;
		}
	}
	rw_close(c);
	if (ai)
		rdma_freeaddrinfo(ai);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "halfopen"))
		return halfopen(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "guess"))
		return guess(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "churn"))
		return churn(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "idle"))
		return idle(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "rewrite"))
		return rewrite(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "steal"))
		return steal(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "offset"))
		return offset(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "badwrite"))
		return badwrite(argc, argv);
	fprintf(stderr, "usage: cp-hostile idle ADDR PORT N SECS\n"
			"       cp-hostile halfopen ADDR PORT N SECS\n"
			"       cp-hostile guess ADDR PORT N TOKEN_FILE\n"
			"       cp-hostile churn ADDR PORT SECS\n"
			"       cp-hostile rewrite ADDR PORT NAME FILE\n"
			"       cp-hostile steal ADDR PORT NAME FILE\n"
			"       cp-hostile offset ADDR PORT FILE\n"
			"       cp-hostile badwrite ADDR PORT SECS\n");
	return 2;
}
