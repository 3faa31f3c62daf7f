#!/bin/bash
# The lab's last resort against a guest kernel that locks up: it must say
# so, quoting the kernel, boot once more, and give up after a second time.
# Each case crashes the guest on purpose (sysrq 'c': a kernel panic, the
# way softlockup_panic ends a soft lockup). Runs on the host; TAP output.
set -u
LAB=${1:?usage: lockup.sh PATH/TO/rdma-lab BUILD_DIR}
BUILD=${2:?usage: lockup.sh PATH/TO/rdma-lab BUILD_DIR}
# The guest sees the checkout (writable) but not the host's /tmp.
dir=$(mktemp -d "$BUILD/lab-lockup.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/../tap.sh"
tap_plan 4

crash_once="if [ -e $dir/crashed ]; then echo second-boot-ran; exit 0; fi
touch $dir/crashed; sync; echo c >/proc/sysrq-trigger; sleep 30"
"$LAB" run --timeout 120 -- bash -c "$crash_once" >"$dir/out1" 2>&1
rc=$?
cat "$dir/out1" | sed 's/^/# /' | tail -n 12
tap_is $([ "$rc" = 0 ] && grep -q second-boot-ran "$dir/out1"; echo $?) \
	"a kernel crash on the first boot: booted again and the command's status (0) returned (got $rc)"
tap_is $(grep -q "kernel locked up or panicked" "$dir/out1" && grep -q "Kernel panic" "$dir/out1"; echo $?) \
	"said plainly what happened, quoting the kernel"

"$LAB" run --timeout 120 -- bash -c 'echo c >/proc/sysrq-trigger; sleep 30' >"$dir/out2" 2>&1
rc=$?
cat "$dir/out2" | sed 's/^/# /' | tail -n 6
tap_is $([ "$rc" = 125 ]; echo $?) "a kernel crash on both boots ends with 125 (got $rc)"
tap_is $([ "$(grep -c 'booting the lab once more' "$dir/out2")" = 1 ]; echo $?) "booted again once only"
tap_done
