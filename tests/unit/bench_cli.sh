#!/bin/bash
# ringrdma-bench's options, before anything touches RDMA: the -ep
# strategies are known, run with server groups, and are refused with
# --client (their server sets its endpoints up from the run it knows).
# --file-qd takes 1 to 64 reads in flight; epoll-aio runs where the bench
# was built with libaio (HAS_AIO=1 from meson) and is refused, saying so,
# where it was not.
# TAP output.
bench=${1:?usage: bench_cli.sh PATH/TO/ringrdma-bench [HAS_AIO]}
has_aio=${2:-1}
# shellcheck disable=SC2034 # cli_check.sh runs it
CLI=(env -u RR_TEST_ADDR "$bench")
# shellcheck source=tests/unit/cli_check.sh
. "$(dirname "$0")/cli_check.sh"
echo "1..12"
check "help names uring-ep" 0 "uring-ep" --help
check "help names hybrid-ep" 0 "hybrid-ep" --help
check "uring-ep with --client is refused" 2 "uring-ep: .* runs locally only" \
	--strategies uring-ep --client 192.0.2.9
check "hybrid-ep with --client is refused" 2 "hybrid-ep: .* runs locally only" \
	--strategies busy,hybrid-ep --client 192.0.2.9
check "the -ep strategies run on server groups" 2 "no address" \
	--strategies uring-ep,hybrid-ep --threads 1,2
check "--threads 2 with busy is still refused" 2 "only the uring and hybrid" \
	--strategies busy,uring-ep --threads 2
check "a misspelt strategy is refused" 2 "bad list item 'uring-epp'" --strategies uring-epp
check "help names epoll-aio and --file-qd" 0 "epoll-aio.*\|--file-qd" --help
check "--file-qd 1,4,16 is taken" 2 "no address" --workloads mixed-direct --file-qd 1,4,16
check "--file-qd 0 is refused" 2 "bad list item '0'" --file-qd 0
check "--file-qd 65 is refused" 2 "bad list item '65'" --file-qd 4,65
if [ "$has_aio" = 1 ]; then
	check "epoll-aio runs (built with libaio)" 2 "no address" --strategies epoll,epoll-aio
else
	check "epoll-aio is refused without libaio" 2 "built without libaio (Debian: libaio-dev" \
		--strategies epoll,epoll-aio
fi
exit $failed
