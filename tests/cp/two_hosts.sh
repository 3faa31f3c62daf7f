#!/bin/bash
# ringrdma-cp across two lab VMs (suite device-2hosts): this VM sends 24 MiB
# of random data to the serve that two_hosts_peer.sh runs on the other one;
# the copy must come back identical through the shared checkout.
#   two_hosts.sh PATH/TO/ringrdma-cp BUILD_DIR
CP=${1:?usage: two_hosts.sh PATH/TO/ringrdma-cp BUILD_DIR}
BUILD=${2:?usage: two_hosts.sh PATH/TO/ringrdma-cp BUILD_DIR}
. "$(dirname "$0")/lib.sh" 2
peer=${RDMA_LAB_PEER_ADDR:-}
if [ -z "$peer" ]; then
	result 0 "RDMA_LAB_PEER_ADDR is not set: run with tools/rdma-lab run --hosts 2"
	result 0 "no peer"
	finish
fi
drop=$BUILD/cp-2hosts-drop
head -c $((24 << 20)) /dev/urandom >"$T/across"
# The peer may still be booting: connection refused means try again.
for _ in $(seq 60); do
	timeout 300 "$CP" send --json "$T/c.json" "$T/across" "$peer:7490" >"$T/c.out" 2>"$T/c.err"
	crc=$?
	[ "$crc" = 4 ] && grep -q "cannot connect" "$T/c.err" || break
	sleep 1
done
ok=0
[ "$crc" = 0 ] && ok=1
result $ok "send to $peer across two VMs (exit $crc, $(json_field "$T/c.json" mb_per_s) MB/s)"
[ $ok = 1 ] || show "$T/c.err"
for _ in $(seq 600); do [ -e "$drop/serve.rc" ] && break; sleep 0.1; done
ok=0
[ "$(cat "$drop/serve.rc" 2>/dev/null)" = 0 ] && cmp -s "$T/across" "$drop/across" && ok=1
result $ok "the peer's serve exited 0 and stored the same bytes"
[ $ok = 1 ] || show "$drop/serve.log"
rm -f "$drop/across"
finish
