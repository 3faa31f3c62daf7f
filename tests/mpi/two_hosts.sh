#!/bin/bash
# MPI across two lab VMs, inside the device-2hosts boot (suite
# device-2hosts): mpirun here starts 2 ranks on each VM through the lab's
# remote-start agent; rank 0 checks every rank, both hosts, the data
# passed round the ring, and that rxe0's packet counters did not move
# while MPI talked. TAP output.
#   two_hosts.sh PATH/TO/lab_ranks
PROG=${1:?usage: two_hosts.sh PATH/TO/lab_ranks}
if [ -z "${RDMA_LAB_AGENT:-}" ] || [ "$(wc -w <<<"${RDMA_LAB_HOSTS:-}")" -lt 2 ]; then
	echo "1..0 # SKIP needs two lab VMs: tools/rdma-lab run --hosts 2"
	exit 0
fi
read -r a b _ <<<"$RDMA_LAB_HOSTS"
echo "1..1"
start=$SECONDS
out=$(timeout 240 mpirun -n 4 --host "$a:2,$b:2" "$PROG" 4 2 2>&1)
rc=$?
sed 's/^/# /' <<<"$out" | tail -n 20
echo "# mpirun: status $rc, $((SECONDS - start))s"
if [ "$rc" = 0 ] && grep -q '^ok: 4 ranks on 2 hosts' <<<"$out"; then
	echo "ok 1 - mpirun -n 4 on 2 VMs x 2 ranks through the lab's agent: rank 0's checks held"
else
	echo "not ok 1 - mpirun -n 4 on 2 VMs x 2 ranks through the lab's agent (status $rc)"
	exit 1
fi
