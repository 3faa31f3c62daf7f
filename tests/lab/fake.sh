#!/bin/bash
# tools/rdma-lab's own faults, on the host in seconds: a stand-in QEMU
# (tests/lab/fake/qemu-system-x86_64) plays the guests. A peer that never
# ends must not hold the run, a QEMU that ignores SIGTERM is killed, and
# a kernel panic at any point of a boot fails the run. TAP output.
set -u
LAB=${1:?usage: fake.sh PATH/TO/rdma-lab}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/lab-fake.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/cache/fake" "$dir/tmp"
touch "$dir/cache/fake/ready"
truncate -s 1M "$dir/cache/disk-1g.ext4"
export PATH=$here/fake:$PATH RDMA_LAB_CACHE=$dir/cache RDMA_LAB_KVER=fake TMPDIR=$dir/tmp
export FAKE_QEMU_PIDS=$dir/pids
. "$(dirname "$0")/../tap.sh"
tap_plan 17
# lab OUT ARGS...: run the lab under a generous watchdog (124 past it).
lab() {
	local out=$1
	shift
	: >"$FAKE_QEMU_PIDS"
	timeout -k 10 60 "$LAB" run "$@" >"$dir/$out" 2>&1
	rc=$?
	sed 's/^/# /' "$dir/$out" | tail -n 8
}
# Whether every stand-in QEMU of the last run is gone.
qemus_gone() {
	local p
	for p in $(cat "$FAKE_QEMU_PIDS"); do
		kill -0 "$p" 2>/dev/null && return 1
	done
	return 0
}

FAKE_QEMU_H2=silent lab out1 --hosts 2 --peer-cmd 'while :; do sleep 1; done' -- sh -c 'exit 7'
tap_is $([ "$rc" = 7 ]; echo $?) "a peer that never ends, quietly: the command's status (7) once the first VM is done (got $rc)"
tap_is $(qemus_gone; echo $?) "... and the peer's QEMU itself is stopped"

FAKE_QEMU_H2=stubborn lab out2 --hosts 2 -- true
tap_is $([ "$rc" = 0 ] && qemus_gone; echo $?) "a QEMU that ignores SIGTERM is killed (got $rc)"

FAKE_QEMU_H1=panic-after lab out3 -- true
tap_is $([ "$rc" = 125 ]; echo $?) "a panic after the command's status was written fails the run with 125 (got $rc)"
tap_is $(grep -q "kernel panicked" "$dir/out3" && grep -q "^  VM 1: .*Kernel panic - not syncing: Attempted to kill init" "$dir/out3"; echo $?) \
	"... saying so, quoting the kernel"

FAKE_QEMU_H2=panic-after lab out4 --hosts 2 --peer-cmd true -- true
tap_is $([ "$rc" = 125 ] && grep -q "^  VM 2: .*Kernel panic" "$dir/out4"; echo $?) \
	"a panic of the peer VM fails the run too (got $rc)"

lab out5 -- sh -c 'echo the-command-ran; exit 3'
tap_is $([ "$rc" = 3 ] && grep -q the-command-ran "$dir/out5"; echo $?) "a clean run returns the command's status (3, got $rc) and its output"
tap_is $(! grep -q "rdma-lab:" "$dir/out5"; echo $?) "... with no word from the lab"

# Four VMs: the peer command on every peer, each VM's address named,
# and no QEMU or switch left on any way out: a clean end, a peer that
# never boots, an interrupt.
# lab_gone: no QEMU of the last run and no switch (its port file lies in
# the run directory, under $dir) still running.
lab_gone() {
	qemus_gone && ! pgrep -f "$dir/tmp/" >/dev/null
}
# left: what lab_gone found still running, for a failure's diagnosis.
left() {
	local p
	for p in $(cat "$FAKE_QEMU_PIDS"); do
		ps -o pid=,stat=,args= -p "$p" 2>/dev/null
	done
	pgrep -af "$dir/tmp/"
}
FAKE_QEMU_H3=silent FAKE_QEMU_H4=silent lab out6 --hosts 4 \
	--peer-cmd 'echo "peer $RDMA_LAB_HOST of $RDMA_LAB_HOSTS"' -- sh -c 'exit 5'
tap_is $([ "$rc" = 5 ] && [ "$(wc -l <"$FAKE_QEMU_PIDS")" = 4 ]; echo $?) \
	"--hosts 4: four VMs, the first one's status (5, got $rc)"
tap_is $(grep -q '^\[peer2\] peer 2 of 192.0.2.1 192.0.2.2 192.0.2.3 192.0.2.4$' "$dir/out6"; echo $?) \
	"... the peer command ran on a peer that knew every address"
tap_is $(lab_gone; echo $?) "... every QEMU and the switch stopped"

FAKE_QEMU_H4=dead lab out7 --hosts 4 -- true
tap_is $([ "$rc" = 125 ] && grep -q 'peer VM 4 did not come up' "$dir/out7" && lab_gone; echo $?) \
	"a peer that never boots: 125, said so, nothing left running (got $rc)" "left: $(left)"

FAKE_QEMU_H3=panic-boot lab out9 --hosts 4 -- true
tap_is $([ "$rc" = 125 ] && grep -q "a peer's kernel panicked or locked up while booting" "$dir/out9" &&
	[ "$(grep -c 'booting the lab once more' "$dir/out9")" = 1 ] && lab_gone; echo $?) \
	"a peer's kernel panics while booting: said so, booted once more, then 125 (got $rc)" \
	"$(grep -c 'booting the lab once more' "$dir/out9") boots more; left: $(left)"

# A console that never ends (held by what QEMU left behind; or a QEMU
# ended before it opened its console FIFO, whose reader then waits in
# open()): the run still ends. Before, the lab waited for that reader for
# ever (a peer that panicked while booting, under load, did it in CI).
FAKE_QEMU_H1=leaky lab out10 -- true
tap_is $([ "$rc" = 0 ]; echo $?) \
	"a console held open after QEMU ended: the run ends with the command's status (0, got $rc)"
[ -s "$FAKE_QEMU_PIDS.leaks" ] && xargs kill <"$FAKE_QEMU_PIDS.leaks" 2>/dev/null

: >"$FAKE_QEMU_PIDS"
FAKE_QEMU_H1=silent FAKE_QEMU_H2=silent FAKE_QEMU_H3=silent FAKE_QEMU_H4=silent \
	"$LAB" run --hosts 4 -- true >"$dir/out8" 2>&1 &
labpid=$!
for _ in $(seq 300); do
	[ "$(wc -l <"$FAKE_QEMU_PIDS")" = 4 ] && break
	sleep 0.1
done
kill -TERM "$labpid"
wait "$labpid"
rc=$?
tap_is $([ "$rc" = 130 ] && lab_gone; echo $?) "interrupted with four VMs up: 130, nothing left running (got $rc)" \
	"left: $(left)"

# The stand-in itself, killed (as stop_vms kills a QEMU still there 10 s
# after SIGTERM): its command ends with it, as a killed VM's does. Before,
# a peer's cmd.sh that its TERM loop had not ended yet outlived the lab.
rd=$dir/killed
mkdir -p "$rd"
printf 'LAB_HOST_ID=2\nLAB_HOSTS=2\nLAB_KVER=fake\n' >"$rd/config"
echo 'while :; do sleep 1; done' >"$rd/cmd.sh"
FAKE_QEMU_PIDS= qemu-system-x86_64 -virtfs "local,path=$rd,mount_tag=labrun,security_model=none" \
	>/dev/null 2>&1 &
fq=$!
for _ in $(seq 100); do
	pgrep -f "$rd/cmd.sh" >/dev/null && break
	sleep 0.1
done
kill -KILL "$fq"
wait "$fq" 2>/dev/null
for _ in $(seq 50); do
	pgrep -f "$rd/cmd.sh" >/dev/null || break
	sleep 0.1
done
tap_is $([ -e "$rd/ready" ] && ! pgrep -f "$rd/cmd.sh" >/dev/null; echo $?) \
	"a stand-in QEMU killed ends its command with it" "left: $(pgrep -af "$rd/cmd.sh")"
pkill -f "$rd/cmd.sh"
rm -rf "$rd"

left=$(ls -A "$dir/tmp"; ls -A "$dir/cache" | grep -v -x -e fake -e disk-1g.ext4)
tap_is $([ -z "$left" ]; echo $?) "every run's directory and disk copy removed (left: ${left:-none})"
tap_done
