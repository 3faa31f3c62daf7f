#!/bin/bash
# tools/cp-lab from the host (suite boots-lab, run by tools/test outside the
# lab): with no RDMA device it boots the lab itself. Copies two files with
# --hosts 1 and compares checksums; checks the refusals that come before.
#   lab.sh PATH/TO/ringrdma-cp SOURCE_ROOT BUILD_ROOT
set -u
CP=${1:?usage: lab.sh CP SOURCE_ROOT BUILD_ROOT}
ROOT=$(cd "${2:?}" && pwd -P)
BUILD=$(cd "${3:?}" && pwd -P)
# The checkout's lab runner, with the ringrdma-cp of this build.
lab() { RR_BUILD=$BUILD "$ROOT/tools/cp-lab" "$@"; }
# The lab writes only inside the checkout: the build dir if it is there.
case $BUILD/ in "$ROOT"/*) base=$BUILD ;; *) base=$ROOT ;; esac
T=$(mktemp -d "$base/.cp-lab-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

n=0 failed=0
echo "1..7"
result() { # OK? DESCRIPTION
	n=$((n + 1))
	if [ "$1" = 1 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi
}
skip() { # REASON DESCRIPTION
	n=$((n + 1))
	echo "ok $n - $2 # SKIP $1"
}
show() { for f in "$@"; do [ -s "$f" ] && sed "s|^|# ${f##*/}: |" "$f" | tail -n 40; done; return 0; }

native=0
[ -n "${RDMA_LAB:-}" ] && native=1
ls /sys/class/infiniband/* >/dev/null 2>&1 && native=1

# 1: send with no device names the checkout's lab runner.
if [ "$native" = 0 ]; then
	echo x >"$T/x"
	"$CP" send "$T/x" 127.0.0.1:7 >"$T/nodev.out" 2>&1
	rc=$?
	ok=0
	[ "$rc" = 1 ] && grep -q "no RDMA device" "$T/nodev.out" && grep -q "tools/cp-lab" "$T/nodev.out" && ok=1
	result $ok "send without a device fails (exit $rc) and points to tools/cp-lab"
	[ $ok = 1 ] || show "$T/nodev.out"
else
	skip "an RDMA device is present" "send without a device points to the lab mode"
fi

# 2: DIR outside the checkout is refused before booting anything.
mkdir -p "$T/out"
if [ "$native" = 0 ]; then
	lab "$CP" /proc >"$T/outside.out" 2>&1
	rc=$?
	ok=0
	[ "$rc" = 2 ] && grep -q "outside the checkout" "$T/outside.out" && ok=1
	result $ok "lab refuses a DIR outside the checkout (exit $rc)"
	[ $ok = 1 ] || show "$T/outside.out"
else
	skip "allowed next to a real device" "lab refuses a DIR outside the checkout"
fi

# 3: a usage error, also before any boot.
lab --hosts 3 "$T/x" "$T/out" >"$T/usage.out" 2>&1
rc=$?
result "$([ "$rc" = 2 ] && echo 1)" "lab --hosts 3 is a usage error (exit $rc)"

# 4-7: two files through the lab.
head -c $((5 << 20)) /dev/urandom >"$T/big.bin"
printf 'second file\n' >"$T/small.txt"
lab --hosts 1 --timeout 120 --json "$T/send.json" "$T/big.bin" "$T/small.txt" "$T/out" \
	>"$T/lab.out" 2>"$T/lab.err"
rc=$?
result "$([ "$rc" = 0 ] && echo 1)" "tools/cp-lab --hosts 1 exits 0 (exit $rc)"
[ "$rc" = 0 ] || show "$T/lab.out" "$T/lab.err"
ok=1
for f in big.bin small.txt; do
	a=$(sha256sum <"$T/$f") b=$(sha256sum <"$T/out/$f" 2>/dev/null)
	[ "$a" = "$b" ] || ok=0
done
result $ok "both files arrived with the same sha256"
ok=0
grep -q "cp-lab: copied 2 files, $(((5 << 20) + 12)) bytes" "$T/lab.out" && ok=1
result $ok "summary line names both files and their bytes"
[ $ok = 1 ] || show "$T/lab.out"
ok=0
python3 - "$T/send.json" <<'PY' && ok=1
import json, sys
j = json.load(open(sys.argv[1]))
assert j["exit_code"] == 0 and j["files"] == 2 and j["bytes"] == (5 << 20) + 12, j
PY
result $ok "--json brought send's summary back to the host"
exit $failed
