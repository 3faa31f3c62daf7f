// SPDX-License-Identifier: MIT
/*
 * Lab smoke: rxe0 reachable, PD/channel/CQ/RC QP through rdma_cm, SEND/RECV
 * and RDMA WRITE verified byte for byte, clean teardown. Run between two
 * threads, two processes, and in completion-channel (event) mode.
 */
#include <pthread.h>
#include <stdio.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "require.h"
#include "smoke.h"

struct server_arg {
	const char *addr;
	int rounds;
	int use_events;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint16_t port;
	int rc;
	char err[300];
};

static void on_ready(uint16_t port, void *arg)
{
	struct server_arg *s = arg;

	pthread_mutex_lock(&s->lock);
	s->port = port;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static void *server_thread(void *arg)
{
	struct server_arg *s = arg;

	s->rc = smoke_server(s->addr, 0, s->rounds, s->use_events, on_ready, s, s->err,
			     sizeof(s->err));
	on_ready(s->port ? s->port : 1, s); /* never leave the client waiting */
	return NULL;
}

static void run_threads(int rounds, int use_events)
{
	struct server_arg s = {.addr = rr_test_require_rdma(),
			       .rounds = rounds,
			       .use_events = use_events,
			       .lock = PTHREAD_MUTEX_INITIALIZER,
			       .cond = PTHREAD_COND_INITIALIZER};
	pthread_t t;
	char err[300] = "";
	int rc = 0;

	cr_assert_eq(pthread_create(&t, NULL, server_thread, &s), 0);
	pthread_mutex_lock(&s.lock);
	while (!s.port)
		pthread_cond_wait(&s.cond, &s.lock);
	pthread_mutex_unlock(&s.lock);
	for (int i = 0; i < rounds && rc == 0; i++)
		rc = smoke_client(s.addr, s.port, 100 + (uint32_t)i, use_events, SMOKE_TIMEOUT_MS,
				  err, sizeof(err));
	pthread_join(t, NULL);
	cr_expect_eq(rc, 0, "%s (%d)", err, rc);
	cr_assert_eq(s.rc, 0, "%s (%d)", s.err, s.rc);
}

TestSuite(smoke, .timeout = 120);

Test(smoke, threads_busy_poll)
{
	run_threads(1, 0);
}

Test(smoke, threads_completion_events)
{
	run_threads(1, 1);
}

Test(smoke, three_connections_in_a_row)
{
	run_threads(3, 1);
}

static void write_port(uint16_t port, void *arg)
{
	int fd = *(int *)arg;

	if (write(fd, &port, sizeof(port)) != sizeof(port))
		_exit(3);
}

Test(smoke, two_processes)
{
	const char *addr = rr_test_require_rdma();
	char err[300] = "";
	uint16_t port = 0;
	int p[2], status = 0, rc;
	pid_t pid;

	cr_assert_eq(pipe(p), 0);
	pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		close(p[0]);
		rc = smoke_server(addr, 0, 1, 1, write_port, &p[1], err, sizeof(err));
		if (rc)
			fprintf(stderr, "%s\n", err);
		_exit(rc ? 1 : 0);
	}
	close(p[1]);
	cr_assert_eq(read(p[0], &port, sizeof(port)), (ssize_t)sizeof(port),
		     "server failed to listen");
	close(p[0]);
	rc = smoke_client(addr, port, 7, 0, SMOKE_TIMEOUT_MS, err, sizeof(err));
	if (rc)
		kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_expect_eq(rc, 0, "%s (%d)", err, rc);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "server process failed (status %#x)", status);
}

Test(smoke, refused_without_listener)
{
	const char *addr = rr_test_require_rdma();
	char err[300] = "";
	/* Nothing listens on this port: the client must report an error,
	 * not hang and not claim success. */
	int rc = smoke_client(addr, 1, 1, 1, 500, err, sizeof(err));

	cr_assert_lt(rc, 0, "connecting to a closed port succeeded");
}
