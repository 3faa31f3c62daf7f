#!/bin/bash
# tools/test-count on made-up meson logs: in a required run or suite a
# skipped case is a failure, except a case the run deselected itself with
# Criterion's --filter ("# SKIP test was skipped"); the table's figures; TAP.
set -u
TOOL=${1:?usage: test_count.sh PATH/TO/test-count}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir/log.json" "$dir/suites.json" <<'PY'
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
with open(sys.argv[2], "w") as f:
    # named as meson names tests with several suites: required by its suite
    print(json.dumps({"name": "p:cp+device / x", "result": "SKIP", "stdout": "",
                      "starttime": 100.0, "duration": 5.0}), file=f)
    print(json.dumps({"name": "p:cp+host / y", "result": "SKIP", "stdout": "",
                      "starttime": 101.0, "duration": 7.0}), file=f)
PY
out=$("$TOOL" --required rdma "rdma=$dir/log.json")
rc=$?
echo "$out" | sed 's/^/# /'
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/../tap.sh"
tap_plan 5
echo "$out" | grep -q "^rdma: 2 passed, 2 failed, 0 skipped$"
tap_is $? "deselected cases not counted; real skips in a required suite are failures"
echo "$out" | grep -q "flavour" && r=1 || r=0
tap_is "$r" "the flavour run is not reported as skipping"
[ "$rc" = 1 ]
tap_is $? "exit status 1 while anything failed (got $rc)"
out=$("$TOOL" --required device "dev=$dir/suites.json")
rc=$?
echo "$out" | sed 's/^/# /'
echo "$out" | grep -q "^dev: 0 passed, 1 failed, 1 skipped$"
tap_is $? "a skip counts as failed in a required suite, not in another"
echo "$out" | grep -Eq "^dev +cp +2 +0 +1 +1 +8$"
tap_is $? "the table has the run's tests, cases and wall seconds (got rc $rc)"
tap_done
