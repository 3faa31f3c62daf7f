// SPDX-License-Identifier: MIT
/*
 * tcp_copy: what a user would pick instead of ringrdma-cp, for
 * tests/cp/measure_2hosts.sh and tools/devlab-jobs/. Not a test and not
 * installed; for loopback and lab addresses.
 *
 *   tcp_copy recv [ADDR:]PORT FILE   accept one connection, write what
 *                                    arrives to FILE, fsync, answer one byte
 *   tcp_copy send ADDR:PORT FILE     sendfile() FILE into the socket, wait
 *                                    for that byte
 *
 * The sender's time runs from connect to the receiver's byte, which comes
 * after the fsync: the same span as ringrdma-cp send's (stored, not only
 * sent). Each side prints one line: "tcp_copy MODE: bytes=N seconds=S
 * mb_per_s=R" (MB = 10^6 B). A refused connect is retried for 60 s, as
 * the receiver may still be starting.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE (1 << 20)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what)
{
	fprintf(stderr, "tcp_copy: %s: %s\n", what, strerror(errno));
	return 1;
}

/* "ADDR:PORT" or, when @addr_optional, "PORT" (any address). */
static int parse_addr(const char *s, int addr_optional, struct sockaddr_in *sa)
{
	const char *colon = strrchr(s, ':');
	char host[64];
	char *end;
	long port;

	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(INADDR_ANY);
	if (colon) {
		if ((size_t)(colon - s) >= sizeof(host))
			return -1;
		memcpy(host, s, (size_t)(colon - s));
		host[colon - s] = '\0';
		if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
			return -1;
		s = colon + 1;
	} else if (!addr_optional) {
		return -1;
	}
	port = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || port < 1 || port > 65535)
		return -1;
	sa->sin_port = htons((uint16_t)port);
	return 0;
}

static void report(const char *mode, uint64_t bytes, double secs)
{
	printf("tcp_copy %s: bytes=%llu seconds=%.6f mb_per_s=%.3f\n", mode,
	       (unsigned long long)bytes, secs, secs > 0 ? (double)bytes / 1e6 / secs : 0.0);
	fflush(stdout);
}

static int do_recv(const struct sockaddr_in *sa, const char *path)
{
	int one = 1, lfd, cfd = -1, fd = -1, rc = 1;
	uint64_t bytes = 0;
	char *buf = NULL;
	double t0;
	ssize_t n;

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return fail("socket");
	if (setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(lfd, (const struct sockaddr *)sa, sizeof(*sa)) || listen(lfd, 1)) {
		rc = fail("bind/listen");
		goto out;
	}
	printf("tcp_copy recv: listening\n");
	fflush(stdout);
	cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (cfd < 0) {
		rc = fail("accept");
		goto out;
	}
	t0 = now();
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	buf = malloc(BUF_SIZE);
	if (fd < 0 || !buf) {
		rc = fail(path);
		goto out;
	}
	while ((n = read(cfd, buf, BUF_SIZE)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = fail("read");
			goto out;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(fd, buf + off, (size_t)(n - off));

			if (w < 0) {
				rc = fail("write");
				goto out;
			}
			off += w;
		}
		bytes += (uint64_t)n;
	}
	if (fsync(fd)) {
		rc = fail("fsync");
		goto out;
	}
	/* Stored: tell the sender, whose clock stops here. */
	if (write(cfd, "k", 1) != 1) {
		rc = fail("write ack");
		goto out;
	}
	report("recv", bytes, now() - t0);
	rc = 0;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	if (cfd >= 0)
		close(cfd);
	close(lfd);
	return rc;
}

static int do_send(const struct sockaddr_in *sa, const char *path)
{
	int fd, sfd = -1, rc = 1;
	uint64_t bytes = 0;
	struct stat st;
	double t0 = 0;
	char ack;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st))
		return fail(path);
	for (int tries = 0;; tries++) {
		sfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (sfd < 0) {
			rc = fail("socket");
			goto out;
		}
		t0 = now();
		if (!connect(sfd, (const struct sockaddr *)sa, sizeof(*sa)))
			break;
		if (errno != ECONNREFUSED || tries >= 600) {
			rc = fail("connect");
			goto out;
		}
		close(sfd);
		sfd = -1;
		usleep(100 * 1000);
	}
	while (bytes < (uint64_t)st.st_size) {
		ssize_t n = sendfile(sfd, fd, NULL, (size_t)st.st_size - bytes);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? fail("sendfile")
				   : (fprintf(stderr, "tcp_copy: %s shrank\n", path), 1);
			goto out;
		}
		bytes += (uint64_t)n;
	}
	if (shutdown(sfd, SHUT_WR)) {
		rc = fail("shutdown");
		goto out;
	}
	if (read(sfd, &ack, 1) != 1) {
		fprintf(stderr, "tcp_copy: the receiver did not confirm\n");
		goto out;
	}
	report("send", bytes, now() - t0);
	rc = 0;
out:
	if (sfd >= 0)
		close(sfd);
	close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa;
	int is_recv;

	if (argc != 4 || (strcmp(argv[1], "recv") && strcmp(argv[1], "send")))
		goto usage;
	is_recv = !strcmp(argv[1], "recv");
	if (parse_addr(argv[2], is_recv, &sa))
		goto usage;
	return is_recv ? do_recv(&sa, argv[3]) : do_send(&sa, argv[3]);
usage:
	fprintf(stderr, "usage: tcp_copy recv [ADDR:]PORT FILE\n"
			"       tcp_copy send ADDR:PORT FILE\n");
	return 2;
}
