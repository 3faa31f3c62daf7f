#!/bin/bash
# tools/test-count on made-up meson logs: in a required suite a skipped
# case is a failure, except a case the run deselected itself with
# Criterion's --filter ("# SKIP test was skipped"); TAP.
set -u
TOOL=${1:?usage: test_count.sh PATH/TO/test-count}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir/log.json" <<'PY'
import json, sys
def t(name, cmd, lines):
    return json.dumps({"name": name, "command": cmd, "result": "OK", "stdout": "\n".join(lines)})
with open(sys.argv[1], "w") as f:
    # a flavour run: two cases ran, one was deselected by its own filter
    print(t("flavour", ["test-x", "--tap=-", "--filter", "a/*"],
            ["ok 1 - a::one", "ok 2 - a::two", "ok 3 - b::three  # SKIP test was skipped"]), file=f)
    # a plain run whose case skipped: RDMA missing
    print(t("plain", ["test-y", "--tap=-"], ["ok 1 - c::four  # SKIP needs an RDMA device"]), file=f)
    # a filtered run whose selected case skipped for another reason
    print(t("filtered-real-skip", ["test-z", "--filter", "d/*"],
            ["ok 1 - d::five  # SKIP needs an RDMA device"]), file=f)
PY
out=$("$TOOL" --required rdma "rdma=$dir/log.json")
rc=$?
echo "$out" | sed 's/^/# /'
echo "1..3"
n=0
check() { n=$((n + 1)); if [ "$2" = 0 ]; then echo "ok $n - $1"; else echo "not ok $n - $1"; fi; }
echo "$out" | grep -q "^rdma: 2 passed, 2 failed, 0 skipped$"
check "deselected cases not counted; real skips in a required suite are failures" $?
echo "$out" | grep -q "flavour" && r=1 || r=0
check "the flavour run is not reported as skipping" $r
[ "$rc" = 1 ]
check "exit status 1 while anything failed (got $rc)" $?
