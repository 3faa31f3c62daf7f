#!/bin/bash
# ringrdma-bench runs every strategy with a tiny iteration count and writes
# complete, sane JSON: one record per strategy, every field present, counts
# equal to what was asked, percentiles ordered. Never asserts on speed.
bench=${1:?usage: bench_json.sh PATH/TO/ringrdma-bench}
addr=${RR_TEST_ADDR:-${RDMA_LAB_ADDR:-}}
if [ -z "$addr" ]; then
	if [ -n "${RDMA_LAB:-}" ] || [ "${RR_REQUIRE_RDMA:-}" = 1 ]; then
		echo "1..1"
		echo "not ok 1 - no RDMA address although RDMA is required"
		exit 1
	fi
	echo "1..0 # SKIP no RDMA device (run through tools/test or tools/rdma-lab)"
	exit 0
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bench" --addr "$addr" --iters 200 --json "$out/b.json" --timeout 120 >"$out/table" 2>&1
rc=$?
python3 - "$out/b.json" "$rc" "$out/table" <<'PY'
import json, sys
path, rc, table = sys.argv[1], int(sys.argv[2]), sys.argv[3]
checks = []
def check(ok, what):
    checks.append((bool(ok), what))
check(rc == 0, f"ringrdma-bench exited 0 (got {rc}): " + open(table).read().replace("\n", " | ")[-300:])
try:
    recs = json.load(open(path))
except Exception as e:
    recs = []
    check(False, f"JSON parses ({e})")
want = ["busy", "thread", "epoll", "uring", "hybrid"]
check([r.get("strategy") for r in recs] == want, f"one record per strategy: {[r.get('strategy') for r in recs]}")
fields = ["strategy", "workload", "msg_size", "qd", "iters", "p50_us", "p99_us", "p999_us",
          "max_us", "ops_per_s", "cpu_us_per_op", "syscalls_per_op", "ctx_switches_per_op"]
for r in recs:
    s = r.get("strategy")
    check(all(f in r for f in fields), f"{s}: all fields present")
    check(r.get("iters") == 200 and r.get("msg_size") == 64 and r.get("qd") == 1
          and r.get("workload") == "pingpong", f"{s}: counts as asked")
    check(0 < r.get("p50_us", 0) <= r.get("p99_us", 0) <= r.get("p999_us", 0) <= r.get("max_us", 0),
          f"{s}: 0 < p50 <= p99 <= p99.9 <= max")
    check(r.get("ops_per_s", 0) > 0 and r.get("cpu_us_per_op", -1) >= 0
          and r.get("ctx_switches_per_op", -1) >= 0, f"{s}: rates non-negative")
    sc = r.get("syscalls_per_op")
    check(sc is None or sc >= 0, f"{s}: syscalls_per_op null or >= 0")
print(f"1..{len(checks)}")
for i, (ok, what) in enumerate(checks, 1):
    print(f"{'ok' if ok else 'not ok'} {i} - {what}")
sys.exit(0 if all(ok for ok, _ in checks) else 1)
PY
