#!/bin/bash
# Not a test: the figures of docs/ringrdma-cp-figures.md in one lab boot.
#   tools/rdma-lab run -- tests/cp/measure.sh build/cp/ringrdma-cp [RUN...]
# perftest ib_write_bw with 1 MiB messages at cp's window (-t 16),
# ib_read_bw with one outstanding read (as libringrdma allows), then
# rounds of ib_write_bw at its default depth and ringrdma-cp send of one
# 256 MiB file in the guest's own /tmp (RAM; the checkout over 9p would
# measure 9p) to a serve whose DIR is there too, with both sides' --json
# summaries, and ib_write_bw once more at the end (see ROUNDS below).
# Each RUN is "[BINARY:]OPTIONS" (default: the first argument with the
# default options), e.g. "--window 32" or "old/ringrdma-cp:--chunk 4M".
CP=${1:?usage: measure.sh PATH/TO/ringrdma-cp [RUN...]}
shift
[ $# -gt 0 ] || set -- ""
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
bw ib_write_bw -t 16
bw ib_read_bw -o 1
head -c $((256 << 20)) /dev/urandom >"$T/f"
port=7530
# send_once BIN PORT ARGS...: a serve --count 1 into a fresh $T/d, and
# BIN send of $T/f to it, both with ARGS and --json ($T/s.json,
# $T/c.json); fails as send does.
send_once() {
	local bin=$1 port=$2 spid
	shift 2
	rm -rf "$T/d" && mkdir "$T/d"
	"$bin" serve --listen "$A:$port" --no-auth --dir "$T/d" --count 1 --json "$T/s.json" "$@" >"$T/s.out" &
	spid=$!
	for _ in $(seq 100); do grep -q listening "$T/s.out" && break; sleep 0.1; done
	if ! timeout 120 "$bin" send --quiet --json "$T/c.json" "$@" "$T/f" "$A:$port"; then
		kill "$spid"
		wait "$spid"
		return 1
	fi
	wait "$spid"
}
# One send first, not reported: the first send of a boot ran up to 45%
# slower than the ones after it, whichever binary (78 against 140 MB/s
# in one boot), most likely the guest memory QEMU backs on first touch.
send_once "$CP" 7530 2>/dev/null || echo "warm-up send failed"
# ROUNDS rounds (MEASURE_ROUNDS, default 1) of ib_write_bw then each RUN,
# and ib_write_bw once more at the end: the lab drifts within a boot (56
# to 75 MB/s seen), so each send is set against the mean of the
# ib_write_bw runs just before and after it, and the boot's figure is the
# median of those ratios per RUN.
ROUNDS=${MEASURE_ROUNDS:-1}
: >"$T/ratios"
for round in $(seq "$ROUNDS"); do
	bw ib_write_bw | tee "$T/bw.$round"
	i=0
	for run in "$@"; do
		i=$((i + 1))
		bin=$CP args=$run
		case $run in *:*) bin=${run%%:*} args=${run#*:} ;; esac
		port=$((port + 1))
		# shellcheck disable=SC2086
		send_once "$bin" "$port" $args || { echo "send [$run] failed"; continue; }
		python3 - "$T/c.json" "$T/s.json" "$bin $args" "$round" "$i" >>"$T/ratios" <<'PY'
import json, sys
c, s = (json.load(open(p)) for p in sys.argv[1:3])
gib = c["bytes"] / 2**30
# data_mb_per_s: without process start, set-up and teardown (binaries before it lack it)
data = f"data phase {c['data_mb_per_s']:.1f} MB/s, " if "data_mb_per_s" in c else ""
impl = f", hash {c['hash_impl']}" if "hash_impl" in c else ""
print(f"ringrdma-cp send 256 MiB [{sys.argv[3].strip()}]: {c['mb_per_s']:.1f} MB/s (MB = 10^6 B), {data}"
      f"sender {c['cpu_seconds'] / gib:.2f} CPU s/GiB, receiver {s['cpu_seconds'] / gib:.2f} CPU s/GiB, "
      f"peak RSS sender {c['peak_rss_bytes'] / 2**20:.1f} MiB, receiver {s['peak_rss_bytes'] / 2**20:.1f} MiB{impl}",
      file=sys.stderr)
print(sys.argv[4], sys.argv[5], c.get("data_mb_per_s", c["mb_per_s"]), sys.argv[3].strip())
PY
	done
done
printf 'after the runs: '
bw ib_write_bw | tee "$T/bw.$((ROUNDS + 1))"
python3 - "$T" "$ROUNDS" <<'PY'
import statistics, sys
t, rounds = sys.argv[1], int(sys.argv[2])
bw = {}
for k in range(1, rounds + 2):
    try:
        bw[k] = float(open(f"{t}/bw.{k}").read().split(": ")[1].split()[0])
    except (OSError, IndexError, ValueError):
        pass
per = {}
for line in open(f"{t}/ratios"):
    r, i, mb, name = line.split(maxsplit=3)
    r, i = int(r), int(i)
    around = [bw[k] for k in (r, r + 1) if k in bw]
    if around:
        per.setdefault((i, name.strip()), []).append(float(mb) / statistics.mean(around))
for (i, name), v in sorted(per.items()):
    print(f"cp data / ib_write_bw [{name}]: median {statistics.median(v):.2f} "
          f"({', '.join(f'{x:.2f}' for x in v)})")
PY
