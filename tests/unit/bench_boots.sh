#!/bin/bash
# tools/bench-boots --from: medians and ranges over boots, from three
# made-up boots whose figures differ (TAP).
set -u
TOOL=${1:?usage: bench_boots.sh PATH/TO/bench-boots}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# boot K: uring p50 = 100*K, thread p50 = 100 (ratios 1, 2, 3); rate ops
# uring 90, 100, 200 against busy 100 (0.9, 1.0, 2.0).
for k in 1 2 3; do
	python3 - "$k" >"$dir/b$k.json" <<'PY'
import json, sys
k = int(sys.argv[1])
def rec(s, w, **f):
    r = {"strategy": s, "workload": w, "op": "send", "conns": 1, "kernel": "6.12.9-test"}
    r.update(f)
    return r
print(json.dumps([
    rec("uring", "pingpong", p50_us=100.0 * k, syscalls_per_op=9.0),
    rec("thread", "pingpong", p50_us=100.0, syscalls_per_op=10.0),
    rec("busy", "rate", ops_per_s=100.0),
    rec("uring", "rate", ops_per_s=[90.0, 100.0, 200.0][k - 1]),
    # client threads: a figure of its own, not the targets' uring row
    rec("busy", "conns", conns=256, ops_per_s=100.0),
    rec("uring", "conns", conns=256, ops_per_s=5.0, client_threads=2),
    rec("uring", "conns", conns=256, ops_per_s=120.0, client_threads=1),
    # the endpoints' rows: 1.5x busy, WRs per chain 20 + k; busy-ep 160
    rec("uring-ep", "rate", ops_per_s=150.0, wrs_per_chain=20.0 + k),
    rec("busy-ep", "rate", ops_per_s=160.0),
    # two client threads: the target of its own, 5 / 4
    rec("busy", "conns", conns=256, ops_per_s=4.0, client_threads=2),
    # O_DIRECT: uring p50 100*k against epoll 400 (0.25, 0.5, 0.75)
    rec("epoll", "mixed-direct", p50_us=400.0, file_mb_per_s=100.0),
    rec("uring", "mixed-direct", p50_us=100.0 * k, file_mb_per_s=120.0),
]))
PY
done
out=$("$TOOL" --from "$dir"/b1.json "$dir"/b2.json "$dir"/b3.json)
echo "$out" | sed 's/^/# /'
echo "1..12"
line() { echo "$out" | grep -F "$1" | tr -s ' '; }
n=0
check() { n=$((n + 1)); if echo "$2" | grep -qE -e "$3"; then echo "ok $n - $1"; else echo "not ok $n - $1: $2"; fi; }
check "uring / thread: median 2, range 1-3, missed" "$(line 'uring / thread')" '2\.00 1\.00 3\.00 <= 1 no'
check "rate uring / busy: median 1, range 0.9-2, met" "$(line 'rate ops/s: uring / busy')" '1\.00 0\.90 2\.00 >= 1 yes'
check "syscalls: uring - thread = -1" "$(line 'uring - thread')" '-1\.00 -1\.00 -1\.00 <= 0 yes'
check "a target with no figures shows a dash" "$(line 'hybrid / busy')" 'busy - - -'
check "conns: the client-threads row is not the target's" "$(line 'conns 256 ops/s: uring / busy')" '1\.20 1\.20 1\.20 >= 0\.9 yes'
check "conns with two client threads: a target of its own" "$(line 'client-threads 2: uring / busy')" '1\.25 1\.25 1\.25 >= 1 yes'
check "rate uring-ep / busy-ep: 0.94, missed" "$(line 'uring-ep / busy-ep')" '0\.94 0\.94 0\.94 >= 1 no'
check "mixed-direct p50 uring / epoll: median 0.5, met" "$(line 'mixed-direct p50: uring / epoll')" '0\.50 0\.25 0\.75 <= 0\.5 yes'
check "the boots' kernel is named" "$(line 'kernel:')" '^kernel: 6\.12\.9-test$'
check "figures: uring pingpong p50 median 200" "$(line 'pingpong p50 us: uring ')" 'uring 200\.00 100\.00 300\.00'
check "rate uring-ep / busy: 1.5, met" "$(line 'rate ops/s: uring-ep / busy')" '1\.50 1\.50 1\.50 >= 1 yes'
check "figures: uring-ep WRs per chain median 22" "$(line 'WRs per chain: uring-ep')" 'uring-ep 22\.00 21\.00 23\.00'
