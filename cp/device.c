// SPDX-License-Identifier: MIT
/* Whether serve, send and proxy can run here at all. */
#include <dirent.h>
#include <stdio.h>

#include "cp.h"

bool cp_have_device(void)
{
	struct dirent *e;
	bool any = false;
	DIR *d;

	/* Any verbs device: whether it has an address is the connection's business. */
	d = opendir("/sys/class/infiniband");
	if (!d)
		return false;
	while (!any && (e = readdir(d)))
		any = e->d_name[0] != '.';
	closedir(d);
	return any;
}

int cp_no_device(const char *mode)
{
	cp_log("%s: no RDMA device here (no /sys/class/infiniband entry).", mode);
	fputs("  Run it on a host with an RDMA device (Soft-RoCE will do: rdma link add).\n"
	      "  Without one, a ringrdma checkout copies through its lab (Soft-RoCE under\n"
	      "  QEMU): tools/cp-lab [--hosts 2] FILE... DIR   (see " CP_PROG "(1))\n",
	      stderr);
	return CP_EXIT_FAIL;
}
