// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp --mpi: the ranks' agreement and rank 0's answers to the
 * other ranks' connections (see ranks.h). Every message is on a
 * communicator of our own, so an application's or a launcher's messages
 * never meet ours. The ranks are one job of one binary: a message is a
 * plain struct, checked only so that a wrong index never reaches memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "range.h"
#include "ranks.h"
#include "rr_config.h"
#include "json.h"

enum { OP_TAKE = 1, OP_STORED, OP_PING, OP_FAIL, OP_DONE };

/* Every request carries the stores its rank kept back (nstored of them). */
struct req {
	int32_t op, conn, result, nstored;
	uint64_t bytes; /* OP_PING: this rank's acknowledged bytes */
	struct cp_mpiq_pair stored[CP_MPIQ_BATCH];
	char msg[200];
};

/* OP_TAKE: n entries for the connection (n > 0), or what take said:
 * -1 every entry went, -2 wait, -3 stop. */
struct rep {
	int32_t n, stop;
	struct cp_mpiq_pair e[CP_MPIQ_BATCH];
	char msg[200];
};

static void set_stop(struct cp_mpiq *m, int result, const char *msg);

#if RR_HAVE_MPI
#include <mpi.h>

/* A take's answer comes on TAG_TAKE + its connection: one asked ahead
 * never meets another request's. */
enum { TAG_REQ = 1, TAG_REP = 2, TAG_TAKE = 16 };

static int rep_tag(const struct req *r)
{
	return r->op == OP_TAKE ? TAG_TAKE + r->conn : TAG_REP;
}

static MPI_Comm comm = MPI_COMM_NULL;
static int me, ranks, local_me;

bool cp_mpi_built(void)
{
	return true;
}

int cp_mpi_init(int *argc, char ***argv)
{
	sigset_t set;
	MPI_Comm node;
	int provided = 0;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	/* Rank 0 answers on a thread of its own while its loops run; the
	 * other ranks' threads ask one at a time under a mutex. */
	if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
		cp_log("--mpi: MPI_Init_thread failed");
		return -1;
	}
	if (provided < MPI_THREAD_SERIALIZED) {
		cp_log("--mpi: this MPI gives threads no access (MPI_THREAD_SERIALIZED needed)");
		MPI_Finalize();
		return -1;
	}
	MPI_Comm_dup(MPI_COMM_WORLD, &comm);
	MPI_Comm_rank(comm, &me);
	MPI_Comm_size(comm, &ranks);
	MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node);
	MPI_Comm_rank(node, &local_me);
	MPI_Comm_free(&node);
	return 0;
}

void cp_mpi_fini(void)
{
	if (comm != MPI_COMM_NULL)
		MPI_Comm_free(&comm);
	MPI_Finalize();
}

int cp_mpi_rank(void)
{
	return me;
}

int cp_mpi_size(void)
{
	return ranks;
}

int cp_mpi_local_rank(void)
{
	return local_me;
}

void cp_mpi_abort(int status)
{
	MPI_Abort(comm, status);
}

int cp_mpi_worst(int status)
{
	int worst = status;

	MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, comm);
	return worst;
}

int cp_mpi_gather(const struct cp_rank_figs *mine, struct cp_rank_figs *all)
{
	int rc = MPI_Gather(mine, (int)sizeof(*mine), MPI_BYTE, all, (int)sizeof(*mine), MPI_BYTE,
			    0, comm);

	return rc == MPI_SUCCESS ? 0 : -EIO;
}

int cp_mpi_share_list(struct cp_sendq *q, int walk_ret, uint64_t *total, char *msg, size_t len)
{
	const size_t piece = 1u << 30; /* what MPI's int count holds, and less */
	uint64_t n = 0;
	size_t packed = 0;
	char *buf = NULL;
	int ret, have, all_have;

	if (!me && !walk_ret && cp_sendq_pack(q, &buf, &packed)) {
		snprintf(msg, len, "out of memory");
		walk_ret = CP_EXIT_FAIL;
	}
	ret = cp_mpi_worst(walk_ret);
	if (ret) {
		if (!walk_ret)
			snprintf(msg, len, "another rank could not walk what it was given");
		free(buf);
		return ret;
	}
	n = packed;
	MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm);
	MPI_Bcast(total, 1, MPI_UINT64_T, 0, comm);
	if (me)
		buf = malloc(n ? n : 1);
	have = buf != NULL;
	MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, comm);
	if (!all_have) {
		snprintf(msg, len, "%s", have ? "another rank is out of memory" : "out of memory");
		free(buf);
		return CP_EXIT_FAIL;
	}
	for (uint64_t off = 0; off < n; off += piece)
		MPI_Bcast(buf + off, (int)(n - off < piece ? n - off : piece), MPI_BYTE, 0, comm);
	ret = 0;
	if (me && cp_sendq_unpack(q, buf, (size_t)n)) {
		snprintf(msg, len,
			 "rank 0's list of what to send did not unpack here (not the same "
			 "ringrdma-cp on every host?)");
		ret = CP_EXIT_FAIL;
	}
	free(buf);
	ret = cp_mpi_worst(ret);
	if (ret && !msg[0])
		snprintf(msg, len, "another rank could not take rank 0's list");
	return ret;
}

/* What each rank found of rank 0's file in cp_mpi_same_dir(). */
enum {
	DIR_OK,
	DIR_MADE,    /* rank 0 cannot make, hold, claim or rename it */
	DIR_OTHER,   /* not the same directory */
	DIR_UNSEEN,  /* rank 0's claim not seen here */
	DIR_CANNOT,  /* cannot test a lock or a name here */
	DIR_COLLIDE, /* the hold or a range of its own refused */
	DIR_STALE,   /* the old name still found after the rename */
};

int cp_mpi_same_dir(int dirfd, char *msg, size_t len)
{
	int fd = -1, bad = DIR_OK, err = 0, rc, worst = 0;
	char name[64], gone[72];
	long long id = 0;
	struct stat sb;

	if (!me)
		id = (long long)(((uint64_t)getpid() ^ (cp_now_ns() << 20)) >> 1);
	MPI_Bcast(&id, 1, MPI_LONG_LONG, 0, comm);
	snprintf(name, sizeof(name), ".ringrdma-cp-ranks.%llx", id);
	snprintf(gone, sizeof(gone), "%s.gone", name);
	/* rank 0: a file of its own in DIR, held as a range's partial is
	 * (shared), with its first byte claimed */
	if (!me) {
		fd = openat(dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		rc = fd < 0 ? -errno : cp_range_hold(fd, false);
		if (!rc)
			rc = cp_range_claim(fd, 0, 1);
		if (rc)
			bad = DIR_MADE, err = -rc;
	}
	MPI_Bcast(&bad, 1, MPI_INT, 0, comm);
	if (bad) {
		snprintf(msg, len, "rank 0 cannot make and lock a file in its directory: %s",
			 strerror(err ? err : EIO));
		goto out;
	}
	if (me) {
		/* as another range of it: the hold shared, the same byte
		 * refused, one of its own given */
		fd = openat(dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			bad = DIR_OTHER;
		else if ((rc = cp_range_hold(fd, false)))
			bad = rc == -EBUSY ? DIR_COLLIDE : DIR_CANNOT;
		else if (!(rc = cp_range_claim(fd, 0, 1)))
			bad = DIR_UNSEEN;
		else if (rc != -EBUSY)
			bad = DIR_CANNOT;
		else if (cp_range_claim(fd, 1 + (uint64_t)me, 1))
			bad = DIR_COLLIDE;
	}
	worst = cp_mpi_worst(bad);
	/* A commit renames a partial that other ranks may hold open: each
	 * must see the old name gone at once, or it would take the
	 * committed file for the partial (cp_range_still_partial()). */
	if (!worst) {
		if (!me && renameat(dirfd, name, dirfd, gone))
			bad = DIR_MADE, err = errno;
		if (!cp_mpi_worst(bad) && me) {
			if (!fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW))
				bad = DIR_STALE;
			else if (errno != ENOENT)
				bad = DIR_CANNOT;
		}
		worst = cp_mpi_worst(bad);
	}
	if (worst == DIR_MADE)
		snprintf(msg, len, "rank 0 cannot rename a file in its directory: %s",
			 strerror(err ? err : EIO));
	else if (worst == DIR_OTHER)
		snprintf(msg, len, "--dir is not one directory that every rank sees");
	else if (worst == DIR_UNSEEN)
		snprintf(msg, len,
			 "--dir's file system does not share locks between the ranks' hosts: "
			 "ranges of one file could be written twice at once (run the serve "
			 "ranks on one host, or use a file system with locks across hosts)");
	else if (worst == DIR_COLLIDE)
		snprintf(msg, len,
			 "--dir's file system does not let two ranks hold ranges of one file "
			 "(its byte-range locks collide): give the serve ranks a local or "
			 "parallel file system");
	else if (worst == DIR_STALE)
		snprintf(msg, len,
			 "--dir's file system shows a renamed file under its old name to the "
			 "other ranks' hosts for a while: a range could be written into a "
			 "committed file (on NFS, mount with lookupcache=none)");
	else if (worst == DIR_CANNOT)
		snprintf(msg, len, "cannot test a lock or a name in --dir");
out:
	if (fd >= 0)
		close(fd);
	MPI_Barrier(comm);
	if (!me && unlinkat(dirfd, gone, 0))
		unlinkat(dirfd, name, 0);
	return bad || worst ? CP_EXIT_LOCAL_IO : 0;
}

/* Another rank's stores (@r's), on rank 0's server thread: only of an
 * entry that went on that rank's connection, once. */
static void take_stores(struct cp_mpiq *m, const struct req *r, int from)
{
	struct cp_sendq *q = m->q;
	bool ready = false;

	for (int k = 0; k < r->nstored && k < CP_MPIQ_BATCH; k++) {
		int i = r->stored[k].idx;
		bool mine;

		if (i < 0 || i >= q->ne)
			continue;
		pthread_mutex_lock(&q->mu);
		mine = q->e[i].conn >= 0 && q->e[i].conn / CP_SEND_CONNS_MAX == from &&
		       !q->e[i].done;
		pthread_mutex_unlock(&q->mu);
		if (mine && cp_sendq_stored(q, i, r->stored[k].sum))
			ready = true;
	}
	if (ready && m->on_ready)
		m->on_ready(m->data);
}

static int take_one(struct cp_mpiq *m, int conn, uint64_t *sum);

/* Bytes an entry sends, for the batch's limit (a file's as walked). */
static uint64_t entry_bytes(const struct cp_sendq_entry *e)
{
	return e->range ? e->range_len : e->kind ? 0 : e->size;
}

/* Another rank's request, on rank 0's server thread. */
static bool answer(struct cp_mpiq *m, const struct req *r, int from)
{
	struct rep p = {.stop = atomic_load(&m->stop)};
	/* Connections are numbered per rank: rank r's k is r * MAX + k. */
	int conn = from * CP_SEND_CONNS_MAX + r->conn;
	uint64_t bytes = 0;

	m->requests++;
	take_stores(m, r, from);
	switch (r->op) {
	case OP_TAKE:
		p.n = -3;
		if (p.stop)
			break;
		for (p.n = 0; p.n < CP_MPIQ_BATCH && bytes < CP_MPIQ_BATCH_BYTES; p.n++) {
			int i = take_one(m, conn, &p.e[p.n].sum);

			if (i == -ENOMEM) {
				set_stop(m, CP_EXIT_FAIL, "rank 0: out of memory");
				m->on_fail(m->data, CP_EXIT_FAIL, "rank 0: out of memory");
				p.n = -3;
				p.stop = atomic_load(&m->stop);
				break;
			}
			if (i < 0) {
				if (!p.n)
					p.n = i;
				break;
			}
			p.e[p.n].idx = i;
			bytes += entry_bytes(&m->q->e[i]);
		}
		break;
	case OP_STORED:
		return false; /* no answer */
	case OP_FAIL:
	case OP_DONE:
		if (r->result > 0) {
			set_stop(m, r->result, r->msg);
			m->on_fail(m->data, r->result, r->msg);
		}
		p.stop = atomic_load(&m->stop);
		break;
	case OP_PING:
		if (m->bytes)
			atomic_store(&m->bytes[from], r->bytes);
		break;
	default:
		return false;
	}
	if (p.stop) {
		pthread_mutex_lock(&m->stop_mu);
		snprintf(p.msg, sizeof(p.msg), "%s", m->stop_msg);
		pthread_mutex_unlock(&m->stop_mu);
	}
	MPI_Send(&p, sizeof(p), MPI_BYTE, from, rep_tag(r), comm);
	return r->op == OP_DONE;
}

/*
 * A request's arrival, waited for without MPI's blocking receive, which
 * polls its sockets without pause for as long as it waits (this thread
 * waits most of the run, on the CPU the rank's loop needs): asked a few
 * times in a row, then between sleeps growing from 50 us to 10 ms, back
 * to none once one came. Only rank 0's answers wait for it, and the other
 * ranks ask for a connection's next batch before they need it.
 */
static int await_request(struct req *r, MPI_Status *st, unsigned int *idle)
{
	MPI_Request rq;
	int flag = 0;

	if (MPI_Irecv(r, sizeof(*r), MPI_BYTE, MPI_ANY_SOURCE, TAG_REQ, comm, &rq) != MPI_SUCCESS)
		return -1;
	for (;;) {
		if (MPI_Test(&rq, &flag, st) != MPI_SUCCESS)
			return -1; /* the job is ending: mpirun ends the ranks */
		if (flag)
			break;
		if (++*idle > 16) {
			unsigned int us = 50u << (*idle - 17 < 8 ? *idle - 17 : 8);
			struct timespec ts = {0, (long)(us < 10000 ? us : 10000) * 1000};

			nanosleep(&ts, NULL);
		}
	}
	*idle = 0;
	return 0;
}

static void *serve_ranks(void *arg)
{
	struct cp_mpiq *m = arg;
	unsigned int idle = 0;
	int done = 0;

	while (done < m->size - 1) {
		struct req r;
		MPI_Status st;

		if (await_request(&r, &st, &idle))
			break;
		r.msg[sizeof(r.msg) - 1] = 0;
		if (r.op == OP_TAKE && (r.conn < 0 || r.conn >= CP_SEND_CONNS_MAX))
			continue; /* one binary: cannot be, and has no tag to answer on */
		if (answer(m, &r, st.MPI_SOURCE))
			done++;
	}
	return NULL;
}

/* Rank 0 of a job of more: the thread answering the others. */
static int server_start(struct cp_mpiq *m)
{
	int rc;

	m->bytes = calloc((size_t)m->size, sizeof(*m->bytes));
	if (!m->bytes)
		return -ENOMEM;
	rc = pthread_create(&m->server, NULL, serve_ranks, m);
	if (rc) {
		free(m->bytes);
		m->bytes = NULL;
		return -rc;
	}
	m->server_on = true;
	return 0;
}

/* Under m->mu: the stores kept back go with request @r. */
static void carry_stores(struct cp_mpiq *m, struct req *r)
{
	r->nstored = m->nuntold;
	memcpy(r->stored, m->untold, (size_t)m->nuntold * sizeof(*m->untold));
	m->nuntold = 0;
	m->told_ns = cp_now_ns();
	m->requests++;
}

/* One request to rank 0, with the stores kept back, and but for
 * OP_STORED its answer; under m->mu. */
static void ask(struct cp_mpiq *m, struct req *r, struct rep *p)
{
	carry_stores(m, r);
	MPI_Send(r, sizeof(*r), MPI_BYTE, 0, TAG_REQ, comm);
	if (p)
		MPI_Recv(p, sizeof(*p), MPI_BYTE, 0, rep_tag(r), comm, MPI_STATUS_IGNORE);
}

/* A connection's take asked ahead: its request and answer in flight. */
struct ahead {
	MPI_Request sent, answered;
	struct req r;
	struct rep p;
	bool on;
};

static void *ahead_alloc(void)
{
	return calloc(CP_SEND_CONNS_MAX, sizeof(struct ahead));
}

static bool ahead_on(const struct cp_mpiq *m, int conn)
{
	return ((const struct ahead *)m->ahead)[conn].on;
}

/* Under m->mu: @conn's next take asked now, its answer read later. */
static void ask_ahead(struct cp_mpiq *m, int conn)
{
	struct ahead *a = &((struct ahead *)m->ahead)[conn];

	a->r = (struct req){.op = OP_TAKE, .conn = conn};
	carry_stores(m, &a->r);
	MPI_Isend(&a->r, sizeof(a->r), MPI_BYTE, 0, TAG_REQ, comm, &a->sent);
	MPI_Irecv(&a->p, sizeof(a->p), MPI_BYTE, 0, TAG_TAKE + conn, comm, &a->answered);
	a->on = true;
}

/* Under m->mu: the answer of @conn's take asked ahead (waited for only
 * where it has not come yet). */
static void await_ahead(struct cp_mpiq *m, int conn, struct rep *p)
{
	struct ahead *a = &((struct ahead *)m->ahead)[conn];

	MPI_Wait(&a->sent, MPI_STATUS_IGNORE);
	MPI_Wait(&a->answered, MPI_STATUS_IGNORE);
	*p = a->p;
	a->on = false;
}

#else /* !RR_HAVE_MPI */

bool cp_mpi_built(void)
{
	return false;
}

int cp_mpi_init(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	cp_log("--mpi: this ringrdma-cp was built without MPI");
	return -1;
}

void cp_mpi_fini(void)
{
}

int cp_mpi_rank(void)
{
	return 0;
}

int cp_mpi_size(void)
{
	return 1;
}

int cp_mpi_local_rank(void)
{
	return 0;
}

void cp_mpi_abort(int status)
{
	(void)status;
}

int cp_mpi_worst(int status)
{
	return status;
}

int cp_mpi_gather(const struct cp_rank_figs *mine, struct cp_rank_figs *all)
{
	(void)mine, (void)all;
	return -ENOSYS;
}

int cp_mpi_share_list(struct cp_sendq *q, int walk_ret, uint64_t *total, char *msg, size_t len)
{
	(void)q, (void)total, (void)msg, (void)len;
	return walk_ret;
}

int cp_mpi_same_dir(int dirfd, char *msg, size_t len)
{
	(void)dirfd, (void)msg, (void)len;
	return 0;
}

static int server_start(struct cp_mpiq *m)
{
	(void)m;
	return -ENOSYS;
}

/* Never called: a job of one rank is rank 0, which asks no one. */
static void ask(struct cp_mpiq *m, struct req *r, struct rep *p)
{
	(void)m, (void)r;
	if (p)
		*p = (struct rep){.n = -3, .stop = CP_EXIT_FAIL};
}

static void *ahead_alloc(void)
{
	return NULL;
}

static bool ahead_on(const struct cp_mpiq *m, int conn)
{
	(void)m, (void)conn;
	return false;
}

static void ask_ahead(struct cp_mpiq *m, int conn)
{
	(void)m, (void)conn;
}

static void await_ahead(struct cp_mpiq *m, int conn, struct rep *p)
{
	(void)m, (void)conn;
	*p = (struct rep){.n = -3, .stop = CP_EXIT_FAIL};
}

#endif

/* The first failure is the one every rank stops with. */
static void set_stop(struct cp_mpiq *m, int result, const char *msg)
{
	int none = 0;

	pthread_mutex_lock(&m->stop_mu);
	if (!atomic_load(&m->stop)) {
		snprintf(m->stop_msg, sizeof(m->stop_msg), "%s", msg ? msg : "");
		atomic_compare_exchange_strong(&m->stop, &none, result);
	}
	pthread_mutex_unlock(&m->stop_mu);
}

/* A take on the list itself (rank 0), for connection @conn. */
static int take_one(struct cp_mpiq *m, int conn, uint64_t *sum)
{
	int i = cp_sendq_take(m->q, conn);

	if (i >= 0 && m->on_take)
		m->on_take(m->data, conn, i);
	if (i >= 0 && m->q->e[i].kind == CP_FILE_COMMIT && cp_sendq_commit_sum(m->q, i, sum))
		return -ENOMEM;
	return i;
}

int cp_mpiq_start(struct cp_mpiq *m, struct cp_sendq *q, bool mpi)
{
	m->q = q;
	m->rank = mpi ? cp_mpi_rank() : 0;
	m->size = mpi ? cp_mpi_size() : 1;
	pthread_mutex_init(&m->mu, NULL);
	pthread_mutex_init(&m->stop_mu, NULL);
	if (m->size == 1)
		return 0;
	if (!m->rank)
		return server_start(m);
	m->taken = calloc(CP_SEND_CONNS_MAX, sizeof(*m->taken));
	m->ahead = ahead_alloc();
	return m->taken && m->ahead ? 0 : -ENOMEM;
}

/* Under m->mu: once half of a batch of several went, the connection's
 * next batch is asked for (a batch of one range waits for its turn:
 * holding big ranges ahead would leave other ranks idle at the end). */
static void maybe_ahead(struct cp_mpiq *m, int conn)
{
	if (m->held[conn] > 1 && 2 * (m->held[conn] - m->next[conn]) <= m->held[conn] &&
	    !ahead_on(m, conn))
		ask_ahead(m, conn);
}

int cp_mpiq_take(struct cp_mpiq *m, int conn, uint64_t *sum)
{
	struct req r = {.op = OP_TAKE, .conn = conn};
	struct rep p = {0};

	if (atomic_load(&m->stop))
		return -3;
	if (!m->rank)
		return take_one(m, conn, sum);
	if (conn < 0 || conn >= CP_SEND_CONNS_MAX)
		return -3;
	pthread_mutex_lock(&m->mu);
	if (m->next[conn] < m->held[conn]) {
		const struct cp_mpiq_pair *e = &m->taken[conn][m->next[conn]++];

		maybe_ahead(m, conn);
		*sum = e->sum;
		pthread_mutex_unlock(&m->mu);
		return e->idx;
	}
	if (ahead_on(m, conn))
		await_ahead(m, conn, &p);
	else
		ask(m, &r, &p);
	if (p.stop) {
		pthread_mutex_unlock(&m->mu);
		p.msg[sizeof(p.msg) - 1] = 0;
		set_stop(m, p.stop, p.msg);
		return -3;
	}
	if (p.n > CP_MPIQ_BATCH || p.n < -3) {
		p.n = -3;
	} else {
		for (int k = 0; k < p.n; k++)
			if (p.e[k].idx < 0 || p.e[k].idx >= m->q->ne)
				p.n = -3;
	}
	if (p.n <= 0) {
		pthread_mutex_unlock(&m->mu);
		return p.n;
	}
	memcpy(m->taken[conn], p.e, (size_t)p.n * sizeof(*p.e));
	m->held[conn] = p.n;
	m->next[conn] = 1;
	maybe_ahead(m, conn);
	pthread_mutex_unlock(&m->mu);
	*sum = p.e[0].sum;
	return p.e[0].idx;
}

bool cp_mpiq_stored(struct cp_mpiq *m, int i, uint64_t sum)
{
	const struct cp_sendq_entry *e = &m->q->e[i];
	struct req r = {.op = OP_STORED};

	if (!m->rank)
		return cp_sendq_stored(m->q, i, sum);
	pthread_mutex_lock(&m->mu);
	if (!m->nuntold)
		m->told_ns = cp_now_ns();
	m->untold[m->nuntold++] = (struct cp_mpiq_pair){.idx = i, .sum = sum};
	/* Other connections may wait for a MKDIR or the last range of a
	 * file: those go at once; the rest with the next request. */
	if (m->nuntold == CP_MPIQ_BATCH || e->kind == CP_MKDIR || e->range)
		ask(m, &r, NULL);
	pthread_mutex_unlock(&m->mu);
	return false;
}

void cp_mpiq_tick(struct cp_mpiq *m, uint64_t hold_ns)
{
	struct req r = {.op = OP_STORED};

	if (!m->rank)
		return;
	pthread_mutex_lock(&m->mu);
	if (m->nuntold && cp_now_ns() - m->told_ns >= hold_ns)
		ask(m, &r, NULL);
	pthread_mutex_unlock(&m->mu);
}

/* A request with an answer; a stop in it is every rank's. */
static void ask_answered(struct cp_mpiq *m, struct req *r)
{
	struct rep p = {0};

	pthread_mutex_lock(&m->mu);
	ask(m, r, &p);
	pthread_mutex_unlock(&m->mu);
	if (p.stop) {
		p.msg[sizeof(p.msg) - 1] = 0;
		set_stop(m, p.stop, p.msg);
	}
}

void cp_mpiq_fail(struct cp_mpiq *m, int result, const char *msg)
{
	struct req r = {.op = OP_FAIL, .result = result};

	if (!m->rank) {
		set_stop(m, result, msg);
		return;
	}
	snprintf(r.msg, sizeof(r.msg), "%s", msg ? msg : "");
	ask_answered(m, &r);
}

int cp_mpiq_stopped(struct cp_mpiq *m, uint64_t bytes)
{
	struct req r = {.op = OP_PING, .bytes = bytes};

	if (m->rank && !atomic_load(&m->stop))
		ask_answered(m, &r);
	return atomic_load(&m->stop);
}

uint64_t cp_mpiq_others_bytes(const struct cp_mpiq *m)
{
	uint64_t n = 0;

	for (int r = 1; m->bytes && r < m->size; r++)
		n += atomic_load(&m->bytes[r]);
	return n;
}

void cp_mpiq_finish(struct cp_mpiq *m, int result, const char *msg)
{
	struct req r = {.op = OP_DONE, .result = result};

	if (m->rank) {
		struct rep p;

		snprintf(r.msg, sizeof(r.msg), "rank %d: %s", m->rank,
			 msg && *msg ? msg : "failed");
		/* A take still asked ahead (a connection that failed) is
		 * answered before rank 0 hears done. */
		pthread_mutex_lock(&m->mu);
		for (int k = 0; m->ahead && k < CP_SEND_CONNS_MAX; k++)
			if (ahead_on(m, k))
				await_ahead(m, k, &p);
		pthread_mutex_unlock(&m->mu);
		ask_answered(m, &r);
	} else if (m->server_on) {
		pthread_join(m->server, NULL);
		m->server_on = false;
	}
	free(m->bytes);
	m->bytes = NULL;
	free(m->taken);
	m->taken = NULL;
	free(m->ahead);
	m->ahead = NULL;
	pthread_mutex_destroy(&m->mu);
	pthread_mutex_destroy(&m->stop_mu);
}

int cp_mpi_summary(struct cp_rank_figs *mine, struct cp_summary *sum, struct cp_rank_figs *all)
{
	int n = cp_mpi_size();

	gethostname(mine->host, sizeof(mine->host) - 1);
	if (!cp_mpi_gather(mine, all) && !cp_mpi_rank()) {
		sum->n = (struct cp_tally){0};
		for (int r = 0; r < n; r++) {
			/* Each rank's clock is its host's: the longest span counts. */
			uint64_t span = all[r].n.files || all[r].n.ranges
						? all[r].data_end - all[r].data_start
						: 0;

			cp_tally_add(&sum->n, &all[r].n);
			if (span > sum->data_ns)
				sum->data_ns = span;
		}
		sum->ranks = (unsigned int)n;
		sum->rank_figs = all;
	}
	sum->exit_code = cp_mpi_worst(mine->exit_code);
	return sum->exit_code;
}
