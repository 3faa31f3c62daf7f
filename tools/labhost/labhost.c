// SPDX-License-Identifier: MIT
/* The programs' side of tools/rdma-lab (see labhost.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "labhost.h"

#ifndef RR_SOURCE_ROOT
#define RR_SOURCE_ROOT "."
#endif

const char *labhost_root(void)
{
	return RR_SOURCE_ROOT;
}

int labhost_tool(char *path, size_t len)
{
	if ((size_t)snprintf(path, len, "%s/tools/rdma-lab", RR_SOURCE_ROOT) >= len)
		return -ENAMETOOLONG;
	return access(path, X_OK) ? -ENOENT : 0;
}

int labhost_device_addr(char *addr, size_t len)
{
	char tool[PATH_MAX], cmd[PATH_MAX + 32], line[256], *sp;
	FILE *p;
	int rc = labhost_tool(tool, sizeof(tool));

	if (rc)
		return rc;
	snprintf(cmd, sizeof(cmd), "'%s' device 2>/dev/null", tool);
	p = popen(cmd, "r");
	if (!p)
		return -errno;
	/* "DEV NETDEV ADDR" on the first line; read the rest so it exits. */
	if (!fgets(line, sizeof(line), p))
		line[0] = 0;
	while (fgets(cmd, sizeof(cmd), p))
		;
	if (pclose(p) || !(sp = strrchr(line, ' ')))
		return -ENODEV;
	sp[strcspn(sp, "\n")] = 0;
	snprintf(addr, len, "%s", sp + 1);
	return 0;
}

int labhost_copy_file(const char *from, const char *to)
{
	char buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC), out, rc = 0;
	ssize_t n;

	if (in < 0)
		return -errno;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0) {
		rc = -errno;
		goto out_in;
	}
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n) {
			rc = -EIO;
			break;
		}
	if (n < 0)
		rc = -errno;
	if (close(out) && !rc)
		rc = -errno;
out_in:
	close(in);
	return rc;
}
