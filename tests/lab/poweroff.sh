#!/bin/bash
# The guest's power-off after the command must not need the host root:
# the kernel tears the 9p root down while it powers off, and a command
# looked up then ("sleep: command not found") made PID 1 exit and the
# kernel panic after the command's status was written. The command takes
# the root's commands away from PID 1 (a tmpfs over /usr, as the root's
# going away does), then expects its status and no panic. Boots the lab
# once; TAP output.
set -u
LAB=${1:?usage: poweroff.sh PATH/TO/rdma-lab BUILD_DIR}
BUILD=${2:?usage: poweroff.sh PATH/TO/rdma-lab BUILD_DIR}
dir=$(mktemp -d "$BUILD/lab-poweroff.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/../tap.sh"
tap_plan 2

# /bin, /sbin and /lib are links into /usr.
"$LAB" run --timeout 120 -- bash -c 'mount -t tmpfs none /usr && echo usr-hidden' \
	>"$dir/out" 2>&1
rc=$?
sed 's/^/# /' "$dir/out" | tail -n 8
tap_is $([ "$rc" = 0 ] && grep -q usr-hidden "$dir/out"; echo $?) \
	"all of /usr hidden from PID 1: the command's status (0, got $rc)"
tap_is $(! grep -q "Kernel panic" "$dir/out"; echo $?) "... and no kernel panic on the way out"
tap_done
