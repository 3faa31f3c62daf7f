#!/bin/bash
# rr-one-ring end to end, TAP output. Run inside the RDMA lab (or with
# RR_TEST_ADDR on a real device): a 5 MB random file goes from the server to
# the client over RDMA, read with io_uring and sent from the same ring that
# answers a TCP status request on 127.0.0.1.
#
#   one_ring_test.sh PATH/TO/rr-one-ring
#
# Without an RDMA device it skips, unless RDMA_LAB or RR_REQUIRE_RDMA=1 is
# set: then a missing device is a failure.
set -u
exe=${1:?usage: one_ring_test.sh PATH/TO/rr-one-ring}
port=7480 tcp_port=7481 size=5000000 limit=120

. "$(dirname "${BASH_SOURCE[0]}")/../support/require.sh"
rr_require_rdma 3
addr=$RR_ADDR

tmp=$(mktemp -d /tmp/one-ring.XXXXXX) || exit 1
spid=
cleanup() {
	[ -n "$spid" ] && kill "$spid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

failed=0
n=0
result() { # OK? DESCRIPTION
	n=$((n + 1))
	if [ "$1" = 1 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		failed=1
	fi
}
show() { # FILE: as TAP diagnostics
	[ -s "$1" ] && sed "s|^|# ${1##*/}: |" "$1"
}

echo "1..3"
# Not a multiple of the 64 KiB chunk: the last chunk is a short one.
head -c "$size" /dev/urandom >"$tmp/data"

"$exe" --timeout "$limit" server "$addr" "$port" "$tcp_port" "$tmp/data" \
	>"$tmp/server.out" 2>"$tmp/server.err" &
spid=$!
for _ in $(seq 300); do
	grep -q listening "$tmp/server.out" 2>/dev/null && break
	kill -0 "$spid" 2>/dev/null || break
	sleep 0.1
done

"$exe" --timeout "$limit" client "$addr" "$port" >"$tmp/client.out" 2>"$tmp/client.err"
crc=$?

# The client exits only after the server hung up, i.e. after the server saw
# its last SEND complete: the counters in the status line are final now.
status=
if exec 3<>"/dev/tcp/127.0.0.1/$tcp_port"; then
	IFS= read -r -t 20 status <&3
	exec 3<&-
fi

# The server leaves on its own once it served both; bound the wait anyway.
for _ in $(seq $((limit * 10))); do
	kill -0 "$spid" 2>/dev/null || break
	sleep 0.1
done
wait "$spid"
src=$?
spid=

cli_sum=$(sed -n "s/.*received $size bytes, fnv1a64 \([0-9a-f]\{16\}\)$/\1/p" "$tmp/client.out")
srv_sum=$(sed -n "s/.*sent $size bytes, fnv1a64 \([0-9a-f]\{16\}\)$/\1/p" "$tmp/server.out")

ok=0
[ "$crc" = 0 ] && [ -n "$cli_sum" ] && ok=1
result $ok "client received $size bytes over RDMA (exit $crc)"
[ $ok = 1 ] || { show "$tmp/client.out"; show "$tmp/client.err"; }

ok=0
[ "$src" = 0 ] && [ -n "$srv_sum" ] && [ "$srv_sum" = "$cli_sum" ] && ok=1
result $ok "server read and sent the same bytes: fnv1a64 ${srv_sum:-none} = ${cli_sum:-none} (exit $src)"
[ $ok = 1 ] || { show "$tmp/server.out"; show "$tmp/server.err"; }

ok=0
[ "$status" = "rdma clients: 1, bytes sent: $size" ] && ok=1
result $ok "TCP status line: ${status:-none}"

exit $failed
