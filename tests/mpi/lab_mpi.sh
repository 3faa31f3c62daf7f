#!/bin/bash
# MPI across the lab's VMs without sshd: one boot of four VMs, mpirun
# started on the first, its daemons on the others through the lab's
# remote-start agent (plm_rsh_agent, tools/lab/agent). Runs lab_ranks
# with one rank on each VM, then 2 VMs x 2 ranks (TCP between the VMs,
# shared memory within one); each time rank 0 checks every rank, the
# hosts they ran on, the data, and that rxe0's packet counters did not
# move while MPI talked. Then a host that cannot be reached: mpirun must
# fail, not hang. Runs on the host; TAP output.
set -u
LAB=${1:?usage: lab_mpi.sh PATH/TO/rdma-lab LAB_RANKS|none BUILD_DIR}
PROG=${2:?usage: lab_mpi.sh PATH/TO/rdma-lab LAB_RANKS|none BUILD_DIR}
BUILD=${3:?usage: lab_mpi.sh PATH/TO/rdma-lab LAB_RANKS|none BUILD_DIR}
. "$(dirname "$0")/../support/mpi.sh"
mpi_require "$PROG"
# The guest sees the checkout (writable) but not the host's /tmp.
dir=$(mktemp -d "$BUILD/mpi-lab.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/../tap.sh"
tap_plan 5

script='
t0=$SECONDS
timeout 120 mpirun -n 4 --host lab1,lab2,lab3,lab4 '"$PROG"' 4 4
echo "@@ one-per-vm rc=$? secs=$((SECONDS - t0))"
t0=$SECONDS
timeout 120 mpirun -n 4 --host lab1:2,lab2:2 '"$PROG"' 4 2
echo "@@ two-by-two rc=$? secs=$((SECONDS - t0))"
t0=$SECONDS
timeout 120 mpirun -n 2 --host lab1,lab9 '"$PROG"' 2 2
echo "@@ unreachable rc=$? secs=$((SECONDS - t0))"
'
start=$SECONDS
"$LAB" run --hosts 4 --timeout 300 -- bash -c "$script" >"$dir/out" 2>&1
rc=$?
secs=$((SECONDS - start))
sed 's/^/# /' "$dir/out" | tail -n 40
echo "# lab run: status $rc, ${secs}s in all"
field() { sed -n "s/^@@ $1 .*$2=\([0-9]*\).*/\1/p" "$dir/out"; }
tap_is $([ "$rc" = 0 ]; echo $?) "four VMs booted and the script ran (lab status $rc)"
tap_is $([ "$(field one-per-vm rc)" = 0 ] && grep -q '^ok: 4 ranks on 4 hosts' "$dir/out"; echo $?) \
	"mpirun -n 4, one rank on each of 4 VMs: every check of rank 0 held"
tap_is $([ "$(field two-by-two rc)" = 0 ] && grep -q '^ok: 4 ranks on 2 hosts' "$dir/out"; echo $?) \
	"mpirun -n 4 on 2 VMs x 2 ranks: every check of rank 0 held"
tap_is $(! grep -q '^FAIL' "$dir/out"; echo $?) "... no rank saw rxe0's counters move while MPI talked"
r=$(field unreachable rc)
tap_is $([ -n "$r" ] && [ "$r" != 0 ] && [ "$r" != 124 ] && grep -q 'agent: cannot reach lab9' "$dir/out"; echo $?) \
	"a VM that does not exist: mpirun fails (status ${r:-none}, not 124: no hang), the agent says why"
tap_done
