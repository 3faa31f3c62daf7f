#!/bin/bash
# Not a test: the small-files figures of docs/ringrdma-cp-figures.md in one lab boot.
#   tools/rdma-lab run -- tests/cp/measure_files.sh build/cp/ringrdma-cp [ROUNDS [CP...]]
# 1,000 random 4 KiB files in the guest's own /tmp sent to a serve whose
# DIR is there too, over --conns 1, --conns 4, and --conns 4 to
# serve --threads 2; each run timed with date and checked with diff -r.
# Further binaries (an older build, say) run each round too, interleaved.
# MEASURE_EXT4=1: DIR on ext4 (a loop device in the guest's /tmp), where
# fsync is a journal commit; MEASURE_RUNS: "CONNS:THREADS ..." to run.
CP=${1:?usage: measure_files.sh PATH/TO/ringrdma-cp [ROUNDS [CP...]]}
ROUNDS=${2:-2}
shift $(($# < 2 ? $# : 2))
A=${RDMA_LAB_ADDR:?run it in the lab}
T=$(mktemp -d)
trap 'umount "$T/d" 2>/dev/null; rm -rf "$T"' EXIT
mkdir -p "$T/src"
if [ "${MEASURE_EXT4:-0}" = 1 ]; then
	for m in loop ext4; do "$(cat /proc/sys/kernel/modprobe)" -q "$m"; done
	truncate -s 256M "$T/ext4.img" && mkfs.ext4 -q -F "$T/ext4.img" || exit 1
fi
for i in $(seq 1000); do head -c 4096 /dev/urandom >"$T/src/f$i"; done
port=7600
for _ in $(seq "$ROUNDS"); do
	for bin in "$CP" "$@"; do
		for run in ${MEASURE_RUNS:-1:1 4:1 4:2}; do
			conns=${run%:*} threads=${run#*:}
			umount "$T/d" 2>/dev/null
			rm -rf "$T/d" && mkdir "$T/d"
			if [ "${MEASURE_EXT4:-0}" = 1 ]; then
				mkfs.ext4 -q -F "$T/ext4.img" && mount -o loop "$T/ext4.img" "$T/d" &&
					rmdir "$T/d/lost+found" || exit 1
			fi
			port=$((port + 1))
			"$bin" serve --listen "$A:$port" --no-auth --dir "$T/d" --count "$conns" --threads "$threads" \
				--quiet >"$T/s.out" 2>&1 &
			spid=$!
			for _ in $(seq 100); do grep -q listening "$T/s.out" && break; sleep 0.1; done
			t0=$(date +%s%N)
			"$bin" send --quiet --conns "$conns" "$T"/src/f* "$A:$port" || echo "send failed"
			t1=$(date +%s%N)
			wait "$spid"
			same=no
			diff -rq "$T/src" "$T/d" >/dev/null && same=yes
			awk -v b="$bin" -v c="$conns" -v th="$threads" -v ns=$((t1 - t0)) -v same=$same 'BEGIN {
				s = ns / 1e9
				printf "%s --conns %s, serve --threads %s: %.0f files/s, %.2f ms per file, identical: %s\n",
					b, c, th, 1000 / s, s, same }'
		done
	done
done
