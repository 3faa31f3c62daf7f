#!/bin/bash
# tools/rdma-lab refuses bad invocations with a clear message and status 125
# before it boots anything. TAP output.
lab=${1:?usage: lab_cli.sh PATH/TO/rdma-lab}
n=0 failed=0
check() { # DESCRIPTION WANT_STATUS WANT_TEXT ARGS...
	local desc=$1 want=$2 text=$3 out rc
	shift 3
	out=$("$lab" "$@" 2>&1)
	rc=$?
	n=$((n + 1))
	if [ "$rc" = "$want" ] && grep -q -- "$text" <<<"$out"; then
		echo "ok $n - $desc"
	else
		echo "not ok $n - $desc (status $rc, output: ${out//$'\n'/ | })"
		failed=1
	fi
}
echo "1..8"
check "run without a command" 125 "no command given" run --
check "run --hosts 3" 125 "--hosts must be 1 or 2" run --hosts 3 -- true
check "run --timeout abc" 125 "whole seconds" run --timeout abc -- true
check "run --mtu abc" 125 "--mtu takes bytes" run --mtu abc -- true
check "run --mtu below IPv6's least" 125 "--mtu takes bytes" run --mtu 1000 -- true
check "--peer-cmd needs two hosts" 125 "needs --hosts 2" run --peer-cmd true -- true
check "unknown subcommand" 2 "rdma-lab run" frobnicate
check "help names the subcommands" 0 "rdma-lab device" --help
exit $failed
