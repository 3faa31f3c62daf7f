#!/bin/bash
# tools/bench-boots --from: medians and ranges over boots, from three
# made-up boots whose figures differ; --summary: one boot, each target met
# or missed, as tools/demo prints it; the targets come from one file,
# tools/bench-targets.txt: each printed once, none out of reach, a name
# listed twice refused, and docs/performance.md's table of them checked
# against the file (a target missing on either side fails); a boot that
# fails prints the end of its output (TAP).
set -u
TOOL=${1:?usage: bench_boots.sh PATH/TO/bench-boots}
SRC=$(cd "$(dirname "$TOOL")/.." && pwd)
TARGETS=$SRC/tools/bench-targets.txt
DOC=$SRC/docs/performance.md
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
    # 4 reads in flight: uring 90, 100, 200 MB/s against epoll-aio's 100
    # (0.9, 1, 2); uring p50 50 against epoll-aio 100 (0.5)
    rec("uring", "mixed-direct", file_qd=4, p50_us=50.0, file_mb_per_s=[90.0, 100.0, 200.0][k - 1]),
    rec("epoll-aio", "mixed-direct", file_qd=4, p50_us=100.0, file_mb_per_s=100.0),
]))
PY
done
out=$("$TOOL" --from "$dir"/b1.json "$dir"/b2.json "$dir"/b3.json)
echo "$out" | sed 's/^/# /'
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/../tap.sh"
tap_plan 25
line() { echo "$out" | grep -F "$1" | tr -s ' '; }
# check DESC LINE REGEX: the line of the table matches.
check() {
	echo "$2" | grep -qE -e "$3"
	tap_is $? "$1" "$2"
}
check "uring / thread: median 2, range 1-3, missed" "$(line 'uring / thread')" '2\.00 1\.00 3\.00 <= 1 no'
check "qd 4 uring / epoll-aio MB/s: median 1, range 0.9-2, met" \
	"$(line 'qd 4 file MB/s: uring / epoll-aio')" '1\.00 0\.90 2\.00 >= 1 yes'
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
check "the qd 1 row is not the qd 4 target's: 120 / 100 at qd 1" \
	"$(line 'mixed-direct file MB/s: uring / epoll ')" '1\.20 1\.20 1\.20 >= 0\.95 yes'
# The targets file: every name printed once, and nothing else judged.
names=$(grep -v '^#' "$TARGETS" | grep '|' | cut -d'|' -f1 | sed 's/ *$//')
nt=$(echo "$names" | wc -l)
once=0
while IFS= read -r name; do
	[ "$(echo "$out" | grep -cF -- "$name ")" = 1 ] && once=$((once + 1))
done <<<"$names"
judged=$(echo "$out" | sed -n '/^target /,/^$/p' | grep -cE ' (yes|no|-)( |$)')
check "each of the file's $nt targets printed once, $nt judged" "$once $judged" "^$nt $nt\$"
check "out of reach: rate uring / busy is not a target" "$(echo "$names" | grep -c '^rate ops/s: uring / busy$')" '^0$'
check "mixed p50 uring / epoll is one target" "$(echo "$names" | grep -c '^mixed p50: uring / epoll$')" '^1$'
# A name listed twice: refused, naming the line.
cp "$TARGETS" "$dir/dup.txt"
grep -m1 '^pingpong p50: uring / epoll ' "$TARGETS" >>"$dir/dup.txt"
dup=$("$TOOL" --targets "$dir/dup.txt" --from "$dir/b1.json" 2>&1; echo "status $?")
check "a target listed twice is refused" "${dup//$'\n'/ }" "listed twice .* status 2\$"
# The doc's table and the file: the same targets, each once.
check "docs/performance.md lists the file's targets, each once" \
	"$("$TOOL" --check-doc "$DOC" 2>&1; echo "status $?")" '^status 0$'
grep -v '^mixed-direct qd 4 p50: uring / epoll-aio ' "$TARGETS" >"$dir/missing.txt"
check "a target missing from the file fails the doc check" \
	"$("$TOOL" --targets "$dir/missing.txt" --check-doc "$DOC" 2>&1 | tr '\n' ' '; echo "status ${PIPESTATUS[0]}")" \
	"'mixed-direct qd 4 p50: uring / epoll-aio' is in the doc's table, not in the targets file.*status 1"
grep -v '^| mixed-direct qd 4 p50: uring / epoll-aio |' "$DOC" >"$dir/doc.md"
check "a target missing from the doc fails" \
	"$("$TOOL" --check-doc "$dir/doc.md" 2>&1 | tr '\n' ' '; echo "status ${PIPESTATUS[0]}")" "'mixed-direct qd 4 p50: uring / epoll-aio' is in the doc's table 0 times.*status 1"
# One boot, as tools/demo shows it.
sum=$("$TOOL" --summary "$dir/b2.json" 2>&1)
echo "$sum" | sed 's/^/# /'
check "summary: the device row leads, ring at qd 4" "$(echo "$sum" | sed -n 2,5p | tr -s ' ')" "ring \(uring\), 4 reads in flight 100\.0 50\.0"
check "summary: a target met" "$(echo "$sum" | grep -F 'qd 4 p50: uring / epoll-aio' | tr -s ' ')" '0\.50 <= 1 met$'
check "summary: a target missed" "$(echo "$sum" | grep -F 'pingpong p50: uring / thread' | tr -s ' ')" '2\.00 <= 1 missed$'
check "summary: one boot decides nothing, and the 3-boot command" "${sum//$'\n'/ }" \
	'One boot decides nothing.*3-boot medians on both kernels: tools/bench-boots --boots 3 .*--kernel 6\.12'
# A boot that fails says why: the end of its output, kept beside its JSON.
tree=$dir/tree
mkdir -p "$tree/tools" "$tree/build/bench"
cp "$TOOL" "$TARGETS" "$tree/tools/"
printf '#!/bin/sh\nexit 0\n' >"$tree/build/bench/ringrdma-bench"
printf '#!/bin/sh\necho "guest: epoll-aio qd 16: io_submit: Resource temporarily unavailable"\nexit 1\n' \
	>"$tree/tools/bench-lab"
chmod +x "$tree/build/bench/ringrdma-bench" "$tree/tools/bench-lab"
check "a failed boot prints the end of its output" \
	"$("$tree/tools/bench-boots" --boots 1 --keep "$dir/keep" 2>&1 | tr '\n' ' '; echo "status ${PIPESTATUS[0]}")" \
	"boot 1 failed \(status 1\); the end of .*boot-1\.log:.*io_submit: Resource temporarily unavailable.*status 1"
tap_done
