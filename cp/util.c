// SPDX-License-Identifier: MIT
/* ringrdma-cp: small helpers every mode uses. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cp.h"

/* One line on stderr, escaped by cp_esc(): names and peer text are in it. */
void cp_log(const char *fmt, ...)
{
	char line[1024], esc[CP_ESC_LEN(sizeof(line))];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, CP_PROG ": %s\n", cp_esc(line, esc, sizeof(esc)));
}

const char *cp_esc(const char *s, char *buf, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	if (!cap)
		return buf;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char e[4];
		size_t n = 0;

		if (c < 0x20 || c >= 0x7f) {
			e[n++] = '\\';
			e[n++] = 'x';
			e[n++] = hex[c >> 4];
			e[n++] = hex[c & 15];
		} else {
			e[n++] = (char)c;
		}
		if (o + n + 1 > cap) {
			/* Does not fit: end with "..." where room allows. */
			while (o && o + 4 > cap)
				o--;
			if (o + 4 <= cap) {
				memcpy(buf + o, "...", 3);
				o += 3;
			}
			break;
		}
		memcpy(buf + o, e, n);
		o += n;
	}
	buf[o] = '\0';
	return buf;
}

int cp_err_exit(unsigned int code)
{
	switch (code) {
	case CP_E_AUTH:
	case CP_E_NAME:
	case CP_E_EXISTS:
	case CP_E_BUSY:
		return CP_EXIT_REFUSED;
	case CP_E_IO:
	case CP_E_NOSPC:
		return CP_EXIT_REMOTE_IO;
	case CP_E_CHECKSUM:
	case CP_E_PROTO:
		return CP_EXIT_INTEGRITY;
	default:
		return CP_EXIT_FAIL;
	}
}

int cp_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port)
{
	const char *colon, *h = s;
	size_t hl;
	char *end;
	long p;

	if (*s == '[') {
		colon = strstr(s, "]:");
		if (!colon)
			return -EINVAL;
		h = s + 1;
		hl = (size_t)(colon - h);
		colon++;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - s);
	}
	if (!hl || hl >= host_len)
		return -EINVAL;
	errno = 0;
	p = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || p < 1 || p > 65535)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (uint16_t)p;
	return 0;
}

uint64_t cp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double cp_cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

uint64_t cp_peak_rss_bytes(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

int cp_open_walked(int top, const char *path, dev_t dev, ino_t ino, bool nofollow)
{
	struct open_how how = {.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
	struct stat sb;
	int fd, err;

	if (top >= 0)
		fd = (int)syscall(SYS_openat2, top, path, &how, sizeof(how));
	else
		fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));

	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb)) {
		err = -errno;
		close(fd);
		return err;
	}
	if (!S_ISREG(sb.st_mode) || sb.st_dev != dev || sb.st_ino != ino) {
		close(fd);
		return !S_ISREG(sb.st_mode) ? -EINVAL : -ESTALE;
	}
	return fd;
}
