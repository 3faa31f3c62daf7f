#!/bin/bash
# The second VM's side of the device-2hosts suite (tools/test passes it as
# --peer-cmd): the smoke peer for test-two-hosts, and a ringrdma-cp serve
# for cp-two-hosts that stores into the VM's own /tmp, then copies what it
# got and its exit status into BUILD_DIR/cp-2hosts-drop, which the first
# VM sees through the shared checkout.
#   two_hosts_peer.sh BUILD_DIR
b=${1:?usage: two_hosts_peer.sh BUILD_DIR}
"$b/tests/rdma/smoke-peer" "$RDMA_LAB_ADDR" 7471 2 &
drop=$b/cp-2hosts-drop
rm -rf "$drop"
mkdir -p /tmp/cp-peer "$drop"
"$b/cp/ringrdma-cp" serve --listen "$RDMA_LAB_ADDR:7490" --no-auth --dir /tmp/cp-peer --count 1 \
	--timeout 300 >"$drop/serve.log" 2>&1
echo $? >"$drop/serve.rc.tmp"
cp /tmp/cp-peer/* "$drop/" 2>/dev/null
mv "$drop/serve.rc.tmp" "$drop/serve.rc"
wait
