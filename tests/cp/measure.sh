#!/bin/bash
# Not a test: the figures of docs/ringrdma-cp.md in one lab boot.
#   tools/rdma-lab run -- tests/cp/measure.sh build/cp/ringrdma-cp
# perftest ib_write_bw and ib_read_bw (one outstanding read, as libringrdma
# allows) with 1 MiB messages, then ringrdma-cp send of a 256 MiB file
# with 1 MiB chunks, and both sides' --json summaries.
CP=${1:?usage: measure.sh PATH/TO/ringrdma-cp}
A=${RDMA_LAB_ADDR:?run it in the lab}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
bw() { # ib_write_bw|ib_read_bw EXTRA...
	local prog=$1
	shift
	$prog -d rxe0 -s 1048576 -n 500 "$@" >/dev/null 2>&1 &
	sleep 1
	$prog -d rxe0 -s 1048576 -n 500 "$@" "$A" 2>&1 | awk '$1 == 1048576 {print "'"$prog $*"': " $4 " MB/s avg"}'
	wait
}
bw ib_write_bw
bw ib_read_bw -o 1
head -c $((256 << 20)) /dev/urandom >"$T/f"
mkdir "$T/d"
"$CP" serve --listen "$A:7530" --dir "$T/d" --count 1 --json "$T/s.json" >"$T/s.out" &
for _ in $(seq 300); do grep -q listening "$T/s.out" && break; sleep 0.1; done
"$CP" send --quiet --json "$T/c.json" "$T/f" "$A:7530"
wait
python3 - "$T/c.json" "$T/s.json" <<'PY'
import json, sys
c, s = (json.load(open(p)) for p in sys.argv[1:])
gib = c["bytes"] / 2**30
print(f"ringrdma-cp send 256 MiB: {c['mb_per_s']:.1f} MB/s (MB = 10^6 B), "
      f"sender {c['cpu_seconds'] / gib:.2f} CPU s/GiB, receiver {s['cpu_seconds'] / gib:.2f} CPU s/GiB, "
      f"peak RSS sender {c['peak_rss_bytes'] / 2**20:.1f} MiB, receiver {s['peak_rss_bytes'] / 2**20:.1f} MiB")
PY
