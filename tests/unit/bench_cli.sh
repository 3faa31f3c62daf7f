#!/bin/bash
# ringrdma-bench's options, before anything touches RDMA: the -ep
# strategies are known, run with server groups, and are refused with
# --client (their server sets its endpoints up from the run it knows).
# --file-qd takes 1 to 64 reads in flight; epoll-aio runs where the bench
# was built with libaio (HAS_AIO=1 from meson) and is refused, saying so,
# where it was not. Each option's range and words.
# TAP output.
bench=${1:?usage: bench_cli.sh PATH/TO/ringrdma-bench [HAS_AIO]}
has_aio=${2:-1}
# shellcheck disable=SC2034 # tap_check runs it
CLI=(env -u RR_TEST_ADDR "$bench")
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/../tap.sh"
tap_check "help names uring-ep" 0 "uring-ep" --help
tap_check "help names hybrid-ep" 0 "hybrid-ep" --help
tap_check "uring-ep with --client is refused" 2 "uring-ep: .* runs locally only" \
	--strategies uring-ep --client 192.0.2.9
tap_check "hybrid-ep with --client is refused" 2 "hybrid-ep: .* runs locally only" \
	--strategies busy,hybrid-ep --client 192.0.2.9
tap_check "the -ep strategies run on server groups" 2 "no address" \
	--strategies uring-ep,hybrid-ep --threads 1,2
tap_check "--threads 2 with busy is still refused" 2 "only the uring and hybrid" \
	--strategies busy,uring-ep --threads 2
tap_check "a misspelt strategy is refused" 2 "bad list item 'uring-epp'" --strategies uring-epp
tap_check "help names epoll-aio and --file-qd" 0 "epoll-aio.*\|--file-qd" --help
tap_check "--file-qd 1,4,16 is taken" 2 "no address" --workloads mixed-direct --file-qd 1,4,16
tap_check "--file-qd 0 is refused" 2 "bad list item '0'" --file-qd 0
tap_check "--file-qd 65 is refused" 2 "bad list item '65'" --file-qd 4,65
if [ "$has_aio" = 1 ]; then
	tap_check "epoll-aio runs (built with libaio)" 2 "no address" --strategies epoll,epoll-aio
else
	tap_check "epoll-aio is refused without libaio" 2 "built without libaio (Debian: libaio-dev" \
		--strategies epoll,epoll-aio
fi
tap_check "--help names every option" 0 "^  --port PORT  *--server/--client port (default 18515)" --help
tap_check "an unknown option is refused, with the usage" 2 "unrecognized option '--bogus'" --bogus
tap_check "an operand is refused, with the usage" 2 "^usage: ringrdma-bench" extra
tap_check "an option without its argument is refused" 2 "requires an argument" --qd
tap_check "every option is taken" 2 "no address" --quick --strategies uring --workloads rate \
	--ops send --size 128 --qd 8 --conns 1,2 --threads 1 --client-threads 2 --iters 100 \
	--repeat 2 --no-count --idle-ms 10 --spin-us 5 --spin-fixed --ring-read --post-now \
	--signal-every 4 --timeout 9 --file /dev/null --file-direct --file-qd 1 \
	--file-dir /tmp --port 9999
# OPTION VALUE: refused, with the bench's words for a bad number.
for ov in "size 3" "qd 257" "client-threads 17" "iters 0" "repeat 17" "idle-ms 0" \
	"spin-us 1000001" "signal-every 65" "timeout 86401" "port 65536" "port 1x"; do
	read -r opt val <<<"$ov"
	tap_check "--$opt $val is refused" 2 "^ringrdma-bench: bad value '$val'\$" "--$opt" "$val"
done
for ov in "conns 1025" "threads 17" "workloads ping" "ops read"; do
	read -r opt val <<<"$ov"
	tap_check "--$opt $val is refused" 2 "bad list item '$val'" "--$opt" "$val"
done
tap_done
