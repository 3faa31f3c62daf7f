// SPDX-License-Identifier: MIT
/* Whether serve, send and proxy can run here at all, and with what. */
#include <dirent.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

bool cp_mw_forced_off(void)
{
	const char *v = getenv("RINGRDMA_CP_NO_MW");

	return v && *v && strcmp(v, "0");
}

/*
 * Allocate one type 2 window on each device, as each connection will:
 * the only way to know, as providers set IBV_DEVICE_MEM_WINDOW* flags
 * unevenly (rxe says type 2B; mlx5 has both and says so).
 */
int cp_mw_check(char *dev_name, size_t len)
{
	struct ibv_device **list;
	int n, rc = 0;

	if (len)
		dev_name[0] = '\0';
	if (cp_mw_forced_off()) {
		snprintf(dev_name, len, "every device (RINGRDMA_CP_NO_MW is set)");
		return -EOPNOTSUPP;
	}
	list = ibv_get_device_list(&n);
	if (!list)
		return errno ? -errno : -ENODEV;
	for (int i = 0; i < n && !rc; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
		struct ibv_mw *mw = pd ? ibv_alloc_mw(pd, IBV_MW_TYPE_2) : NULL;

		if (!mw) {
			rc = -EOPNOTSUPP;
			snprintf(dev_name, len, "%s", ibv_get_device_name(list[i]));
		}
		if (mw)
			ibv_dealloc_mw(mw);
		if (pd)
			ibv_dealloc_pd(pd);
		if (ctx)
			ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return rc;
}
