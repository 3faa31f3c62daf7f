// SPDX-License-Identifier: MIT
/*
 * With no address given: use a real local RDMA device if there is one
 * (tools/rdma-lab device), else run this same command inside the lab
 * (tools/rdma-lab run). The lab shares the checkout writable and the rest
 * read-only, so output files are written to a directory in the checkout
 * and copied to where they were asked for afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "labhost.h"

static bool output_opt(const char *a, const char **key)
{
	static const char *const keys[] = {"--json", "--csv", "--plot"};

	for (int i = 0; i < 3; i++) {
		size_t l = strlen(keys[i]);

		if (!strncmp(a, keys[i], l) && (a[l] == 0 || a[l] == '=')) {
			*key = keys[i];
			return true;
		}
	}
	return false;
}

int lab_reexec(int argc, char **argv, int hosts, const char *json, const char *csv,
	       const char *plot)
{
	char tool[PATH_MAX], self[PATH_MAX], dir[PATH_MAX], files[3][PATH_MAX + 16];
	const char *want[3] = {json, csv, plot}, *names[3] = {"b.json", "b.csv", "b.png"};
	char **av = calloc((size_t)argc + 16, sizeof(char *));
	char peer[PATH_MAX + 64], tmo[16];
	int n = 0, status, rc = 0;
	ssize_t sl;
	pid_t pid;

	if (!av)
		return -ENOMEM;
	if (labhost_tool(tool, sizeof(tool))) {
		fprintf(stderr,
			"ringrdma-bench: no RDMA device and no lab: tools/rdma-lab is not in %s\n"
			"  give --addr ADDR of an RDMA device, or run from a ringrdma checkout\n",
			labhost_root());
		free(av);
		return -ENOENT;
	}
	sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl < 0) {
		free(av);
		return -errno;
	}
	self[sl] = 0;
	snprintf(dir, sizeof(dir), "%s/.bench-lab.XXXXXX", labhost_root());
	if (!mkdtemp(dir)) {
		free(av);
		return -errno;
	}
	snprintf(tmo, sizeof(tmo), "%d", 3600);
	av[n++] = tool;
	av[n++] = "run";
	av[n++] = "--timeout";
	av[n++] = tmo;
	if (hosts == 2) {
		snprintf(peer, sizeof(peer), "exec '%s' --server --addr \"$RDMA_LAB_ADDR\"", self);
		/* One vCPU per VM leaves a busy-polling side no CPU for rxe. */
		av[n++] = "--hosts";
		av[n++] = "2";
		av[n++] = "--smp";
		av[n++] = "2";
		av[n++] = "--peer-cmd";
		av[n++] = peer;
	}
	av[n++] = "--";
	av[n++] = "env";
	av[n++] = "RR_BENCH_IN_LAB=1";
	av[n++] = self;
	/* --hosts 2 stays: inside, it makes this the client of the peer VM. */
	for (int i = 1; i < argc; i++) {
		const char *key;

		if (output_opt(argv[i], &key)) {
			int k = key[2] == 'j' ? 0 : key[2] == 'c' ? 1 : 2;

			if (!strchr(argv[i], '='))
				i++;
			snprintf(files[k], sizeof(files[k]), "%s=%s/%s", key, dir, names[k]);
			av[n++] = files[k];
			continue;
		}
		av[n++] = argv[i];
	}
	av[n] = NULL;
	fprintf(stderr,
		"ringrdma-bench: no RDMA device here; running in the lab (Soft-RoCE under "
		"QEMU%s)\n",
		hosts == 2 ? ", two VMs" : "");
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		execv(tool, av);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0)
		rc = -errno;
	else
		rc = WIFEXITED(status) ? WEXITSTATUS(status) : 125;
	for (int k = 0; k < 3; k++) {
		char from[PATH_MAX + 16];

		if (!want[k])
			continue;
		snprintf(from, sizeof(from), "%s/%s", dir, names[k]);
		if (access(from, F_OK) == 0) {
			int e = labhost_copy_file(from, want[k]);

			if (e) {
				fprintf(stderr, "ringrdma-bench: %s: %s\n", want[k], strerror(-e));
				rc = rc ? rc : 1;
			}
			unlink(from);
		}
	}
	rmdir(dir);
	free(av);
	return rc;
}
