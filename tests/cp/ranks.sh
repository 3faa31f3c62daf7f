#!/bin/bash
# cp/ranks.c on the host: test-cp-ranks as 3 ranks of one MPI job on
# this host (shared memory only; no RDMA, no network), TAP from rank 0.
#   ranks.sh PATH/TO/test-cp-ranks|none BUILD_DIR
PROG=${1:?usage: ranks.sh PATH/TO/test-cp-ranks|none BUILD_DIR}
BUILD=${2:?usage: ranks.sh PATH/TO/test-cp-ranks|none BUILD_DIR}
. "$(dirname "$0")/../support/mpi.sh"
mpi_require "$PROG"
dir=$(mktemp -d "$BUILD/cp-ranks.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
# Open MPI: as root only when told so (CI runs as root); shared memory
# within the host, and three ranks even on a machine of two cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_osc=^ucx
export OMPI_MCA_rmaps_base_oversubscribe=1
# Under ASan, no leak check: Open MPI's own allocations at exit sit in
# components it unloads, which LeakSanitizer can neither name nor be
# told to pass over (cp/ranks.c allocates nothing that outlives a call).
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
exec timeout 150 mpirun -n 3 "$PROG" "$dir"
