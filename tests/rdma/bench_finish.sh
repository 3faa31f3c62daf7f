#!/bin/bash
# ringrdma-bench --server ends a run whose FIN is never acknowledged: a
# client (bench-stop-client) sends STOP with no receive posted for the FIN
# that answers it, so the server's send is refused with RNR NAKs for ever.
# The server gives FIN its grace (bench/server.c), ends the run,
# disconnects and serves the next. TAP output.
#   bench_finish.sh PATH/TO/ringrdma-bench PATH/TO/bench-stop-client
BENCH=${1:?usage: bench_finish.sh BENCH STOP_CLIENT}
CLIENT=${2:?usage: bench_finish.sh BENCH STOP_CLIENT}
. "$(dirname "$0")/../support/require.sh"
rr_require_rdma 2
. "$(dirname "$0")/../tap.sh"
PORT=7710
T=$(mktemp -d)
"$BENCH" --server --addr "$RR_ADDR" --port $PORT >"$T/srv.out" 2>"$T/srv.err" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null; rm -rf "$T"' EXIT
for ((i = 0; i < 100; i++)); do
	grep -q 'serving runs' "$T/srv.out" && break
	sleep 0.1
done
tap_plan 2
# The grace is 2 s; 60 s is a watchdog (before: the server waited out
# the client's --timeout, 600 s here).
out=$(timeout 120 "$CLIENT" "$RR_ADDR" $PORT 60 2>&1)
rc=$?
tap_is "$rc" \
	"a FIN refused for ever: the server ends the run and disconnects (client exit $rc)" "$out"
tap_result "$(grep -q 'FIN not acknowledged' "$T/srv.err" && echo 1)" \
	"... and says why" "$(cat "$T/srv.err")"
tap_done
