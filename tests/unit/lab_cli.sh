#!/bin/bash
# tools/rdma-lab refuses bad invocations with a clear message and status 125
# before it boots anything. TAP output.
lab=${1:?usage: lab_cli.sh PATH/TO/rdma-lab}
# shellcheck disable=SC2034 # tap_check runs it
CLI=("$lab")
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/../tap.sh"
tap_plan 11
tap_check "run without a command" 125 "no command given" run --
tap_check "run --hosts 5" 125 "--hosts takes 1 to 4" run --hosts 5 -- true
tap_check "run --hosts two" 125 "--hosts takes 1 to 4" run --hosts two -- true
tap_check "run --timeout abc" 125 "whole seconds" run --timeout abc -- true
tap_check "run --mtu abc" 125 "--mtu takes bytes" run --mtu abc -- true
tap_check "run --mtu below IPv6's least" 125 "--mtu takes bytes" run --mtu 1000 -- true
tap_check "--peer-cmd needs two hosts" 125 "needs --hosts 2" run --peer-cmd true -- true
tap_check "run --kernel 5.10" 125 "--kernel takes 6.1 or 6.12" run --kernel 5.10 -- true
RDMA_LAB_KERNEL=6.2 tap_check "RDMA_LAB_KERNEL=6.2" 125 "--kernel takes 6.1 or 6.12" run -- true
tap_check "unknown subcommand" 2 "rdma-lab run" frobnicate
tap_check "help names the subcommands" 0 "rdma-lab device" --help
tap_done
