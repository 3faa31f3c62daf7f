#!/bin/bash
# The examples end to end, against each other, TAP output. Run inside the
# RDMA lab (or with RR_TEST_ADDR on a real device): echo_server serves
# client, embed and wait_modes, then leaves on SIGTERM; echo_groups serves
# embed clients over several threads; batch_cq, on its own, counts its
# completions.
#
#   examples.sh ECHO_SERVER CLIENT EMBED WAIT_MODES ECHO_GROUPS BATCH_CQ
#
# Without an RDMA device it skips, unless RDMA_LAB or RR_REQUIRE_RDMA=1 is
# set: then a missing device is a failure.
set -u
server=${1:?usage: examples.sh ECHO_SERVER CLIENT EMBED WAIT_MODES ECHO_GROUPS BATCH_CQ}
client=${2:?} embed=${3:?} wait_modes=${4:?} groups=${5:?} batch_cq=${6:?}
port=7490 tests=12 clients=5 limit=60
threads=3 gclients=6

. "$(dirname "${BASH_SOURCE[0]}")/../support/require.sh"
rr_require_rdma "$tests"
addr=$RR_ADDR

tmp=$(mktemp -d /tmp/rr-examples.XXXXXX) || exit 1
spid=
cleanup() {
	[ -n "$spid" ] && kill -KILL "$spid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

failed=0 n=0
result() { # OK? DESCRIPTION [FILES TO SHOW ON FAILURE...]
	local ok=$1 what=$2
	shift 2
	n=$((n + 1))
	if [ "$ok" = 1 ]; then
		echo "ok $n - $what"
		return
	fi
	echo "not ok $n - $what"
	failed=1
	for f in "$@"; do
		[ -s "$f" ] && sed "s|^|# ${f##*/}: |" "$f"
	done
}

echo "1..$tests"
"$server" "$addr" "$port" >"$tmp/server.out" 2>"$tmp/server.err" &
spid=$!
for _ in $(seq 300); do
	grep -q listening "$tmp/server.out" 2>/dev/null && break
	kill -0 "$spid" 2>/dev/null || break
	sleep 0.1
done
ok=0
grep -q "^echo_server: listening on $addr:$port$" "$tmp/server.out" && ok=1
result $ok "echo_server listens on $addr:$port" "$tmp/server.out" "$tmp/server.err"

timeout $limit "$client" "$addr" "$port" "hello, ringrdma" >"$tmp/client.out" 2>"$tmp/client.err"
rc=$?
ok=0
[ $rc = 0 ] && [ "$(cat "$tmp/client.out")" = "echo: hello, ringrdma" ] && ok=1
result $ok "client: the echo comes back (exit $rc)" "$tmp/client.out" "$tmp/client.err"

# Several chunks of 4 KiB, the last one short; the output is the input.
seq 1 5000 >"$tmp/input"
timeout $limit "$embed" "$addr" "$port" <"$tmp/input" >"$tmp/embed.out" 2>"$tmp/embed.err"
rc=$?
ok=0
[ $rc = 0 ] && cmp -s "$tmp/input" "$tmp/embed.out" && ok=1
result $ok "embed: $(wc -c <"$tmp/input") bytes of standard input come back unchanged (exit $rc)" \
	"$tmp/embed.err"

timeout $limit "$wait_modes" "$addr" "$port" 300 >"$tmp/modes.out" 2>"$tmp/modes.err"
rc=$?
ok=0
lines=0
for m in event hybrid busy; do
	grep -Eq "^$m +[0-9.]+ +[0-9.]+ +[0-9]+%$" "$tmp/modes.out" && lines=$((lines + 1))
done
[ $rc = 0 ] && [ $lines = 3 ] && ok=1
result $ok "wait_modes: one line of figures per mode (exit $rc)" "$tmp/modes.out" "$tmp/modes.err"
sed 's/^/# /' "$tmp/modes.out"

# Connections at once: one slot each on the server.
pids=()
for i in $(seq "$clients"); do
	timeout $limit "$client" "$addr" "$port" "client $i" >"$tmp/c$i.out" 2>"$tmp/c$i.err" &
	pids+=($!)
done
good=0
for i in $(seq "$clients"); do
	wait "${pids[$((i - 1))]}" && [ "$(cat "$tmp/c$i.out")" = "echo: client $i" ] &&
		good=$((good + 1))
done
ok=0
[ $good = "$clients" ] && ok=1
result $ok "$clients clients at once: $good echoed" "$tmp/c1.err"

# SIGTERM arrives through the server's ring and ends rr_bridge_run().
kill -TERM "$spid"
for _ in $(seq $((limit * 10))); do
	kill -0 "$spid" 2>/dev/null || break
	sleep 0.1
done
wait "$spid"
rc=$?
spid=
ok=0
[ $rc = 0 ] && ok=1
result $ok "echo_server leaves cleanly on SIGTERM (exit $rc)" "$tmp/server.err"

served=$((3 + clients))
ok=0
grep -q "^echo_server: served $served connections$" "$tmp/server.out" && ok=1
result $ok "echo_server served $served connections" "$tmp/server.out"

# echo_groups: embed clients whose standard input is a FIFO we hold open, so
# that all are connected at once. Each connection then arrives while the
# ones before it are still there, and the listener puts it on the thread
# with the fewest: the counts come out even, whatever the timing.
gport=$((port + 1))
"$groups" "$addr" "$gport" "$threads" >"$tmp/groups.out" 2>"$tmp/groups.err" &
spid=$!
for _ in $(seq 300); do
	grep -q listening "$tmp/groups.out" 2>/dev/null && break
	kill -0 "$spid" 2>/dev/null || break
	sleep 0.1
done
ok=0
grep -q "^echo_groups: listening on $addr:$gport, $threads threads$" "$tmp/groups.out" && ok=1
result $ok "echo_groups listens on $addr:$gport with $threads threads" \
	"$tmp/groups.out" "$tmp/groups.err"

trap '' PIPE # a client that died must not take the script with it
pids=() fds=()
for i in $(seq "$gclients"); do
	mkfifo "$tmp/gin$i"
	timeout $limit "$embed" "$addr" "$gport" <"$tmp/gin$i" >"$tmp/g$i.out" 2>"$tmp/g$i.err" &
	pids+=($!)
	exec {fd}>"$tmp/gin$i"
	fds+=("$fd")
	echo "embed $i" | tee "$tmp/gexp$i" >&"$fd"
done
# Connected, all of them, once each has its first line back.
for _ in $(seq $((limit * 10))); do
	up=0
	for i in $(seq "$gclients"); do
		grep -q "^embed $i$" "$tmp/g$i.out" 2>/dev/null && up=$((up + 1))
	done
	[ $up = "$gclients" ] && break
	sleep 0.1
done
# Then more than DEPTH messages each, and the end of their input.
for i in $(seq "$gclients"); do
	fd=${fds[$((i - 1))]}
	seq "$i" 3000 | tee -a "$tmp/gexp$i" >&"$fd"
	exec {fd}>&-
done
good=0
for i in $(seq "$gclients"); do
	wait "${pids[$((i - 1))]}" && cmp -s "$tmp/gexp$i" "$tmp/g$i.out" && good=$((good + 1))
done
ok=0
[ "$up" = "$gclients" ] && [ $good = "$gclients" ] && ok=1
result $ok "echo_groups: $gclients embed clients at once, $up connected, $good echoed in full" \
	"$tmp/g1.err" "$tmp/groups.err"

kill -TERM "$spid"
for _ in $(seq $((limit * 10))); do
	kill -0 "$spid" 2>/dev/null || break
	sleep 0.1
done
wait "$spid"
rc=$?
spid=
ok=0
[ $rc = 0 ] && ok=1
result $ok "echo_groups leaves cleanly on SIGTERM (exit $rc)" "$tmp/groups.err"

counts=$(sed -n 's/^echo_groups: thread [0-9]* served \([0-9]*\) connections$/\1/p' \
	"$tmp/groups.out" | sort -n | tr '\n' ' ')
read -r -a c <<<"$counts"
sum=0
for k in "${c[@]}"; do sum=$((sum + k)); done
ok=0
[ ${#c[@]} = "$threads" ] && [ $sum = "$gclients" ] && [ $((c[-1] - c[0])) -le 1 ] && ok=1
result $ok "echo_groups spread $gclients connections over $threads threads: ${counts% }" \
	"$tmp/groups.out"

# batch_cq on the device that has $addr as a RoCE GID: 100 rounds of 32
# sends and 32 receives, every completion in a batch of 1 to cq_batch (32).
IFS=. read -r -a octet <<<"$addr"
mapped=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "${octet[@]}")
dev=$(grep -lx "$mapped" /sys/class/infiniband/*/ports/1/gids/* 2>/dev/null | head -1)
dev=${dev#/sys/class/infiniband/} dev=${dev%%/*}
timeout $limit "$batch_cq" "$dev" >"$tmp/batch.out" 2>"$tmp/batch.err"
rc=$?
ok=0
re='^batch_cq: 6400 completions in ([0-9]+) calls \(largest ([0-9]+)\)$'
[ $rc = 0 ] && [[ $(cat "$tmp/batch.out") =~ $re ]] &&
	[ "${BASH_REMATCH[1]}" -le 6400 ] && [ "${BASH_REMATCH[2]}" -le 32 ] && ok=1
result $ok "batch_cq on ${dev:-no device with $addr}: 6400 completions, batches of 1 to 32 (exit $rc)" \
	"$tmp/batch.out" "$tmp/batch.err"
sed 's/^/# /' "$tmp/batch.out"

exit $failed
