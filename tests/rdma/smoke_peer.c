// SPDX-License-Identifier: MIT
/* Server half of the two-host smoke test: serves N exchanges on ADDR:PORT. */
#include <stdio.h>
#include <stdlib.h>

#include "smoke.h"

int main(int argc, char **argv)
{
	char err[300] = "";
	int rc;

	if (argc != 4) {
		fprintf(stderr, "usage: %s ADDR PORT ROUNDS\n", argv[0]);
		return 2;
	}
	rc = smoke_server(argv[1], (uint16_t)atoi(argv[2]), atoi(argv[3]), 1, NULL, NULL, err,
			  sizeof(err));
	if (rc)
		fprintf(stderr, "smoke-peer: %s (%d)\n", err, rc);
	else
		printf("smoke-peer: served %s exchanges\n", argv[3]);
	return rc ? 1 : 0;
}
