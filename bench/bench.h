/* SPDX-License-Identifier: MIT */
/* ringrdma-bench: shared definitions. */
#ifndef RR_BENCH_H
#define RR_BENCH_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <ringrdma.h>

#define BENCH_MAX_MSG	   65536
#define BENCH_MAX_QD	   256
#define BENCH_MAX_CONNS	   1024
#define BENCH_MAX_THREADS  16 /* server groups (--threads) */
#define BENCH_DEFAULT_PORT 18515
#define BENCH_CDF_POINTS   200
#define BENCH_MAX_REPEAT   16
/* The smallest slot: a FIN's header and figures fit in one. */
#define BENCH_MIN_SLOT 128

/* How a side waits for its work completions. The -ep strategies are uring,
 * hybrid and busy (a bridge whose CQ is in RR_WAIT_BUSY) with every post
 * made through the library's endpoints, which chain what one pass posts on
 * a queue into one ibv_post_send()/_recv(): busy-ep is the -ep rows'
 * busy-polling reference, so they compare waits, not posting styles.
 * epoll-aio is epoll whose file reads are Linux AIO (io_submit(), an
 * eventfd in the epoll set, io_getevents() on its wake-up): how epoll
 * programs read a device with O_DIRECT, several reads in flight. */
enum strategy {
	S_BUSY,
	S_THREAD,
	S_EPOLL,
	S_URING,
	S_HYBRID,
	S_HYBRID_PLAIN,
	S_URING_EP,
	S_HYBRID_EP,
	S_BUSY_EP,
	S_EPOLL_AIO, /* last: the hello carries the number */
	S_COUNT
};
/* What the client asks of the server. mixed-direct is mixed reading a
 * file on a block device with O_DIRECT (--file-dir). */
enum workload { W_PINGPONG, W_RATE, W_MIXED, W_IDLE, W_CONNS, W_MIXED_DIRECT, W_COUNT };
/* The workload reads a file in the client's thread. */
static inline bool workload_mixed(enum workload w)
{
	return w == W_MIXED || w == W_MIXED_DIRECT;
}
/* How a message travels: SEND/RECV, or RDMA WRITE with immediate. */
enum op { OP_SEND, OP_WRITE_IMM, OP_COUNT };

/* One run: a strategy on a workload with its parameters. */
struct bench_cfg {
	enum strategy strat;
	enum workload wl;
	enum op op;
	uint32_t msg_size;
	uint32_t qd;		 /* messages in flight per connection */
	uint32_t conns;		 /* connections sharing one CQ per side */
	uint32_t threads;	 /* server: groups, each a bridge on a thread (1: none) */
	uint32_t client_threads; /* client: threads, connections split evenly */
	uint32_t all_conns;	 /* a client thread's hello: the run's, not its share */
	long all_iters;
	long iters; /* measured round trips, all connections together */
	uint32_t idle_ms;
	unsigned int spin_us;
	bool spin_fixed;	   /* hybrid: RR_WAIT_HYBRID_FIXED */
	bool ring_read;		   /* bridges: RR_BRIDGE_RING_READ */
	bool post_now;		   /* -ep rows: RR_EP_POST_NOW, no coalescing */
	unsigned int signal_every; /* a send in N asks for a completion */
	unsigned int timeout_s;	   /* the server side's own watchdog */
	const char *addr;
	uint16_t port;
	const char *file;  /* mixed: the file the client reads */
	bool file_direct;  /* mixed: read it with O_DIRECT */
	const char *dfile; /* mixed-direct: the file, read with O_DIRECT */
	uint32_t file_qd;  /* mixed-direct: reads in flight (1: pread's one) */
	bool count_pass;   /* count syscalls (a pass of its own, not timed) */
};

/* Figures of one side, measured over its timed part. */
struct side_figures {
	double cpu_s;
	double elapsed_s;
	int64_t ctx_switches;
	int64_t syscalls; /* -1 when the kernel cannot count them (or not asked) */
	int64_t wcs, wakeups;
	double sys_cpu_s;	/* the machine's busy CPU (/proc/stat); -1: unknown */
	int64_t verbs_syscalls; /* of syscalls: posts and arms (write, ioctl) */
	/* Requests posted, and the ibv_post_send()/_recv() calls (chains)
	 * and work requests that took them to the provider. */
	int64_t posts, chains, wrs;
};

/* A side's syscall counters (-1: none): all, and the verbs' own. */
struct side_counters {
	int all, verbs;
};
extern bool count_syscalls; /* open counters in side_begin() */

/* This thread's work completions handled and wake-ups from a blocking
 * wait for them (thread, epoll: the wait returned; the bridge: CQ events
 * read). Busy polling never sleeps, so it has none. Posts, chains and work
 * requests: one each per raw post; the bridge's counters for endpoints. */
struct side_counts {
	uint64_t wcs, wakeups;
	uint64_t posts, chains, wrs;
};
extern __thread struct side_counts side_counts;

/* Where a side of a local run is, in memory the parent shares: a run the
 * watchdog stops says where each side was stuck. */
enum side_phase { PH_START, PH_CONNECT, PH_RUN, PH_FINISH, PH_CLOSE, PH_COUNT };
struct side_trace {
	volatile int phase;
	volatile uint64_t wcs, sends, recvs;
};
extern struct side_trace *side_trace; /* NULL: nobody watches */
static inline void side_phase(enum side_phase p)
{
	if (side_trace)
		side_trace->phase = p;
}

/* Mixed workload: file reads in the client's own thread. */
#define FILER_MAX_DEPTH 64
struct filer_aio;
struct filer {
	int fd;
	uint64_t size, off, bytes, reads;
	uint8_t *buf;
	unsigned int depth; /* reads kept in flight, at most */
	unsigned int inflight;
	unsigned int most; /* the most in flight at once, measured */
	/* Syscalls the reads cost, measured: the filer's own (pread(),
	 * io_submit(), the eventfd's read(), io_getevents()) and the loop's
	 * wake-ups for file completions alone (an epoll_wait() or the
	 * bridge's io_uring_enter() that found no RDMA completion). */
	uint64_t calls, lone_wakes;
	uint64_t busy; /* slots of buf with a read in flight */
	bool want;     /* ring, aio: top the reads up on the next pass */
	bool direct;
	struct filer_aio *aio; /* epoll-aio: the AIO context and its eventfd */
};

/* One connection. */
struct bqp {
	struct rdma_cm_id *id; /* NULL with an endpoint */
	rr_ep *ep;	       /* -ep strategies' client */
	uint8_t *recv, *send;  /* 2*qd+1 receive slots, qd+1 send slots */
	uint64_t raddr;	       /* the peer's receive slots (WRITE_IMM) */
	uint32_t rkey;
	uint32_t echo_next;   /* server: the next send slot for an echo */
	uint32_t unsignalled; /* sends since the last signalled one */
	bool up;	      /* established */
};

struct bside;
typedef void (*wc_handler)(struct bside *s, const struct ibv_wc *wc);

/* One side of a run: every connection's QP on one CQ its strategy waits on. */
struct bside {
	struct bench_cfg cfg;
	struct rdma_event_channel *ec;
	struct rdma_cm_id *listen_id;
	struct bqp *qps;
	uint32_t nqp;	    /* places used, holes (id NULL) included */
	uint32_t nslots;    /* places there are room for */
	uint32_t half_made; /* server: connections dropped half-way */
	uint32_t retries;   /* client: connection requests made again */
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch; /* thread, epoll */
	struct ibv_cq *cq;
	int epfd;
	unsigned int unacked;
	bool armed; /* hybrid-plain: the CQ is armed */
	/* uring, hybrid: the bridge owns the channel and the CQ */
	struct io_uring ring;
	bool ring_ready;
	unsigned int ring_flags;
	rr_bridge *b;
	rr_cq *rcq;
	struct side_counts seen; /* the bridge's stats, last look */
	uint32_t connecting;	 /* -ep: rr_connect()s not yet answered */
	int conn_err;		 /* -ep: how the last one failed */
	uint8_t *buf;
	size_t buf_len, slot_sz;
	struct ibv_mr *mr;
	wc_handler on_wc;
	void *role; /* client or server state */
	int err;
	bool done;
	bool listening; /* side_listen() succeeded */
	struct filer *filer;
	struct filer *aio_filer;     /* epoll-aio: reaped on its eventfd even
				      * after the measurement dropped filer */
	volatile sig_atomic_t *stop; /* set (by a signal handler): side_loop() ends */
};

/* Message header: the first 8 bytes of every message. */
struct msg_hdr {
	uint32_t slot; /* the client's send slot, or a control code */
	uint32_t seq;
};
#define HDR_STOP 0xfffffff0u /* client: measurement over, send figures */
#define HDR_FIN	 0xfffffff1u /* server: here are my figures */

/* A run's parameters, from the client in its connection requests' rdma_cm
 * private data (at most 56 bytes). */
#define HELLO_MAGIC 0x72726231u /* "rrb1" */
struct hello {
	uint32_t magic;
	uint8_t strat, wl, op, signal_every;
	uint16_t qd, conns;
	uint32_t msg_size;
	uint32_t iters;
	uint32_t idle_ms;
	uint32_t spin_us;
	uint32_t rkey;
	uint64_t addr;
	uint32_t conn;
	uint32_t timeout_s;
	uint8_t spin_fixed;
	uint8_t ring_read;
	uint8_t flags; /* HELLO_COUNT */
} __attribute__((packed));
#define HELLO_COUNT    1u /* a counting pass: count syscalls, time nothing */
#define HELLO_POST_NOW 2u /* endpoints post at once: --post-now */
_Static_assert(sizeof(struct hello) <= RR_PRIVATE_DATA_CONNECT_MAX, "hello fits a request");

/* wr_id: connection, kind and slot index. */
enum { WR_RECV = 1, WR_MSG, WR_CTRL };
static inline uint64_t wr_id_of(uint32_t conn, unsigned int kind, uint32_t idx)
{
	return (uint64_t)conn << 32 | (uint64_t)kind << 24 | idx;
}
static inline uint32_t wr_conn(uint64_t id)
{
	return (uint32_t)(id >> 32);
}
static inline unsigned int wr_kind(uint64_t id)
{
	return (unsigned int)(id >> 24) & 0xff;
}
static inline uint32_t wr_idx(uint64_t id)
{
	return (uint32_t)id & 0xffffff;
}

/* The strategy's posts go through the library's endpoints. */
static inline bool strategy_ep(enum strategy s)
{
	return s == S_URING_EP || s == S_HYBRID_EP || s == S_BUSY_EP;
}
/* The strategy reads its file with Linux AIO through epoll. */
static inline bool strategy_aio(enum strategy s)
{
	return s == S_EPOLL_AIO;
}
/* The strategy keeps several file reads in flight (--file-qd); the
 * others pread() one at a time. */
static inline bool strategy_file_qd(enum strategy s)
{
	return s == S_URING || s == S_HYBRID || s == S_EPOLL_AIO || s == S_URING_EP ||
	       s == S_HYBRID_EP || s == S_BUSY_EP;
}
/* This build has the epoll-aio strategy (libaio at configure). */
bool bench_has_aio(void);
/* A ringrdma bridge waits for the strategy's completions. */
static inline bool strategy_bridge(enum strategy s)
{
	return s == S_URING || s == S_HYBRID || strategy_ep(s);
}
/* The wait mode of a bridge strategy's CQ. */
static inline enum rr_wait_mode strategy_mode(const struct bench_cfg *cfg)
{
	if (cfg->strat == S_URING || cfg->strat == S_URING_EP)
		return RR_WAIT_EVENT;
	if (cfg->strat == S_BUSY_EP)
		return RR_WAIT_BUSY;
	return cfg->spin_fixed ? RR_WAIT_HYBRID_FIXED : RR_WAIT_HYBRID;
}
const char *strategy_name(enum strategy s);
int strategy_parse(const char *name, enum strategy *out);
const char *workload_name(enum workload w);
int workload_parse(const char *name, enum workload *out);
const char *op_name(enum op o);
int op_parse(const char *name, enum op *out);

/* conn.c: rdma_cm connections on one CQ the strategy waits on. */
/* The bench's ring: the cheapest task_work mode the kernel has; its
 * flags in *flags (may be NULL). 0 or -errno. */
int bench_ring_init(struct io_uring *ring, unsigned int *flags);
int side_listen(struct bside *s, const char *addr, uint16_t port, uint16_t *bound);
int side_accept(struct bside *s, struct bench_cfg *cfg, unsigned int timeout_s);
int side_connect(struct bside *s, const struct bench_cfg *cfg, unsigned int retry_s);
uint8_t *side_recv_slot(struct bside *s, uint32_t conn, uint32_t idx);
uint8_t *side_send_slot(struct bside *s, uint32_t conn, uint32_t idx);
int side_post_recv(struct bside *s, uint32_t conn, uint32_t idx);
/* Send `len` bytes at `buf` (a slot of this side) as a SEND or, with
 * write_slot >= 0, as a WRITE_IMM into the peer's receive slot. */
int side_post(struct bside *s, uint32_t conn, uint64_t wr_id, const uint8_t *buf, uint32_t len,
	      int write_slot);
/* The hello a connection request carries, for a server that is not a
 * bside (groups): parse one (0 or -EPROTO), and write the answer. */
int hello_parse(const void *pdata, size_t len, struct bench_cfg *cfg, uint64_t *raddr,
		uint32_t *rkey);
size_t hello_answer(void *out, size_t max, const struct bench_cfg *cfg, uint32_t conn,
		    uint64_t addr, uint32_t rkey);
void side_close(struct bside *s);

/* wait.c: wait for completions and hand each to s->on_wc; 0 or -errno. */
int side_step(struct bside *s);
/* Bring side_counts up to what the side's bridge counted so far (its
 * wake-ups; with endpoints its completions and posts too). Each pass of
 * the bridge does so when it ends, and a measurement does at its bounds,
 * which fall inside a pass (a callback): one pass may carry most of a
 * short run, and its posts belong to the messages they answer. A post
 * counts when it is accepted, its chain and work request when they go
 * out at the end of the pass, so at a bound these may lag the posts by
 * what that pass holds; each chain's work requests count together. */
void side_sync_counts(struct bside *s);
int side_loop(struct bside *s);

/* filer.c: mixed workload file reads; io_uring or pread by strategy. */
int filer_open(struct filer *f, const char *path, bool direct, unsigned int depth);
void filer_close(struct filer *f);
int filer_kick(struct bside *s); /* keep io_uring reads in flight */
/* epoll-aio: an AIO context whose completions signal an eventfd in the
 * side's epoll set; top the reads up (one io_submit()); on the eventfd's
 * wake-up, reap what completed. 0 or -errno. */
int filer_aio_attach(struct bside *s);
int filer_aio_kick(struct filer *f);
int filer_aio_reap(struct filer *f);
int filer_aio_efd(const struct filer *f); /* its eventfd, in the epoll set */
/* The eventfd's epoll_event.data.u64, beside the channel's 0. */
#define FILER_AIO_EVENT 1
int filer_pread(struct filer *f); /* one synchronous chunk */
void filer_on_cqe(rr_bridge *b, const struct io_uring_cqe *cqe, void *data);
int filer_make_file(const char *dir, uint64_t size, char *path, size_t len);
struct result;
int filer_only(const char *path, bool direct, enum workload wl, unsigned int ms, struct result *r);
/* This process's io-wq workers (iou-wrk-*) and their context switches. */
#define IOWQ_MAX 64
struct iowq_snap {
	int n;
	int tid[IOWQ_MAX];
	int64_t sw[IOWQ_MAX];
};
int iowq_snap(struct iowq_snap *s);
/* The workers' switches between two snapshots (new workers: all theirs). */
int64_t iowq_since(const struct iowq_snap *before, const struct iowq_snap *now);

/* A server with groups (--threads N): what each group served, measured
 * over the timed part; written by a local server into shared memory. */
struct group_figures {
	uint32_t threads;		   /* 0: no figures (remote server) */
	uint32_t conns[BENCH_MAX_THREADS]; /* connections placed on it */
	uint64_t ops[BENCH_MAX_THREADS];   /* messages it echoed, timed part */
	double cpu_s[BENCH_MAX_THREADS];   /* its thread's CPU, timed part */
};
extern struct group_figures *group_out; /* NULL: nobody reads them */

/* client.c, server.c: one run each. */
struct client_out {
	struct side_figures cli, srv;
	struct group_figures grp;
	struct side_trace cli_at, srv_at;
	uint32_t cli_threads;			    /* client threads that ran */
	double cli_thread_cpu_s[BENCH_MAX_THREADS]; /* each one's CPU, timed part */
	uint64_t file_bytes;
	uint64_t file_reads; /* completed while measuring */
	uint32_t file_most;  /* the most reads in flight at once meanwhile */
	uint64_t file_calls; /* the reads' syscalls meanwhile (struct filer) */
	int64_t file_iowq;   /* io-wq workers' wake-ups meanwhile; -1: unknown */
	int rc;
	char err[160];
	double rtt[]; /* cfg.iters round trips, microseconds */
};
int client_run(const struct bench_cfg *cfg, struct client_out *out);
/* known: the run, when the caller knows it (a local run); NULL: learnt
 * from the client's first request. */
int server_run_one(struct bside *s, const char *addr, uint16_t port, int port_fd,
		   const struct bench_cfg *known);
/* groups.c: the server of a run with known->threads > 1 groups. */
int group_server_run(const struct bench_cfg *known, const char *addr, int port_fd);

/* figures.c */
bool syscalls_hold(bool on);
void side_begin(struct side_figures *f, struct side_counters *sc);
void side_end(struct side_figures *f, struct side_counters *sc);
/* The same over several threads: syscalls counted on each of tids (scs:
 * n slots), completions and wake-ups as given. */
void side_begin_threads(struct side_figures *f, struct side_counters *scs, const int *tids, int n,
			const struct side_counts *c);
void side_end_threads(struct side_figures *f, struct side_counters *scs, int n,
		      const struct side_counts *c);
/* The counts of a bridge's stats (wcs, CQ events as wake-ups, posts). */
void side_counts_of(const rr_bridge *b, struct side_counts *c);
double thread_cpu_now(void);
double system_cpu_now(void);
double now_us(void);
/* Microseconds from the CPU's cycle counter, calibrated once: no syscall,
 * where clock_gettime() is one (the lab's TCG). */
double tick_us(void);

/* A measured run, reduced. */
struct result {
	struct bench_cfg cfg;
	const char *name; /* strategy, or a reference tool's row */
	double p50, p99, p999, max, ops_per_s;
	double cpu_us_per_op, syscalls_per_op, ctx_per_op;
	double verbs_syscalls_per_op; /* posts and arms: doorbells on mlx5 */
	double crossings_per_op;      /* the rest: would remain on mlx5 */
	double sys_cpu_us_per_op;     /* the machine's, /proc/stat; <0: unknown */
	double cpu_pct_per_side;      /* idle: CPU of a core, mean of both sides */
	double file_mb_per_s;	      /* mixed */
	double file_iowq_pct;	      /* mixed: reads that io-wq ran; <0: unknown */
	uint32_t file_most;	      /* mixed: the most reads in flight at once */
	double file_sc_per_read;      /* mixed: the reads' syscalls each; <0: unknown */
	double wcs_per_wakeup;	      /* both sides; 0: never woke (busy) */
	double wakeups_per_op;	      /* both sides' wake-ups from a blocking wait */
	double posts_per_op;	      /* both sides: requests posted */
	double chains_per_op;	      /* ibv_post_send()/_recv() calls for them */
	double wrs_per_chain;	      /* work requests per call; 0: none made */
	double cli_wrs_per_chain;     /* the same, each side's */
	double srv_wrs_per_chain;
	double cli_cpu_us_per_op, srv_cpu_us_per_op;
	uint32_t threads, ngroups; /* ngroups: group figures known */
	uint32_t group_conns[BENCH_MAX_THREADS];
	double group_cpu_us_per_op[BENCH_MAX_THREADS];
	uint32_t client_threads;
	double client_thread_cpu_us_per_op[BENCH_MAX_THREADS];
	uint32_t repeat; /* runs reduced into this one (medians) */
	double rep_p50[BENCH_MAX_REPEAT], rep_ops[BENCH_MAX_REPEAT], rep_cpu[BENCH_MAX_REPEAT];
	bool syscalls_known, has_latency, reference;
	double cdf[BENCH_CDF_POINTS + 1]; /* latency quantiles, for --plot */
};

/* run.c: fork the server and the client of one run, or serve forever. */
int run_local(const struct bench_cfg *cfg, struct result *r, int timeout_s);
/* Medians of n runs of one configuration (n <= BENCH_MAX_REPEAT) into out. */
void reduce_repeats(const struct result *runs, int n, struct result *out);
int run_remote(const struct bench_cfg *cfg, struct result *r, int timeout_s);
int serve_forever(const char *addr, uint16_t port);

/* report.c */
void report_table(FILE *out, const struct result *r, int n);
void report_targets(FILE *out, const struct result *r, int n);
int report_json(const char *path, const struct result *r, int n);
int report_csv(const char *path, const struct result *r, int n);
int report_plot(const char *path, const struct result *r, int n);

/* perftest.c: perftest's ib_send_lat as reference rows. */
int perftest_rows(const char *addr, uint32_t msg_size, long iters, struct result *r, int max);
/* Before and after: each row the mean of the two, each run kept. */
void perftest_merge(struct result *after, const struct result *before, int n);

#endif
