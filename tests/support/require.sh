# shellcheck shell=bash
# The shell twin of require.h, for TAP test scripts. Source it, then call
#   rr_require_rdma PLAN
# with the number of cases planned. It sets RR_ADDR to the address to test
# on; with no RDMA device (or no address) it ends the test: skipping (the
# "not supported" answer of a plain meson test), or, where RDMA is required
# (RDMA_LAB or RR_REQUIRE_RDMA=1), failing every planned case.
rr_require_rdma() {
	local plan=$1 devs why i
	RR_ADDR=${RR_TEST_ADDR:-${RDMA_LAB_ADDR:-}}
	devs=$(ls /sys/class/infiniband 2>/dev/null)
	[ -n "$devs" ] && [ -n "$RR_ADDR" ] && return 0
	why="no RDMA device"
	[ -n "$devs" ] && why="RDMA device but neither RR_TEST_ADDR nor RDMA_LAB_ADDR set"
	if [ "${RR_REQUIRE_RDMA:-}" = 1 ] || [ -n "${RDMA_LAB:-}" ]; then
		echo "1..$plan"
		for ((i = 1; i <= plan; i++)); do
			echo "not ok $i - RDMA required but $why"
		done
		exit 1
	fi
	echo "1..0 # SKIP $why (run through tools/test or tools/rdma-lab)"
	exit 0
}
