#!/bin/bash
# Inside the four-VM lab boot of ranks_lab.sh, on lab1: ringrdma-cp's
# ranks under mpirun through the lab's agent. Prints "@@ NAME rc=N" per
# step; ranks_lab.sh checks the results on the host.
#   ranks_guest.sh CP DIR [LOCAL]   (DIR on the shared checkout: src/, token)
# The serve ranks store in lab3's LOCAL (default its own disk: 9p refuses
# them, below); what they stored is compared there, with the source over 9p.
set -u
CP=$1 D=$2
L=${3:-/run/rdma-lab/disk} # on lab3
on3() { "$RDMA_LAB_AGENT" lab3 "$@"; }
PORT=7700
STRIPE=$((4 << 20))
addr3=$(getent hosts lab3 | awk '{print $1; exit}')
# Under ASan, no leak check: Open MPI's allocations at exit sit in
# components it unloads (tests/cp/ranks.sh says more).
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
step() { echo "@@ $1 rc=$2 secs=$3"; }
serve_ranks() { # LOG DIR ARGS...: two serve ranks on lab3, in the background
	local log=$1 dir=$2
	shift 2
	on3 mkdir -p "$dir"
	mpirun -x ASAN_OPTIONS -n 2 --host lab3:2 "$CP" serve --mpi --listen "$addr3:$PORT" --dir "$dir" \
		--token-file "$D/token" --count 2 "$@" >"$log" 2>&1 &
	SPID=$!
	for _ in $(seq 600); do
		[ "$(grep -c 'listening on' "$log")" = 2 ] && return 0
		kill -0 $SPID 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
send_ranks() { # NAME ARGS...: 2 ranks on lab1 and 2 on lab2, to both serve ranks
	local name=$1
	shift
	timeout 300 mpirun -x ASAN_OPTIONS -n 4 --host lab1:2,lab2:2 "$CP" send --mpi --token-file "$D/token" \
		--chunk 256K --window 16 --stripe $STRIPE --no-progress --json "$D/$name.json" "$@" \
		"$addr3:$PORT,$addr3:$((PORT + 1))" >"$D/$name.out" 2>&1
}
# slow_send NAME DIR N: big at 512K/s a rank, in the background (its
# mpirun's pid in mpid), until the partial in lab3's DIR holds N stripes.
slow_send() {
	local held
	mpirun -x ASAN_OPTIONS -n 4 --host lab1:2,lab2:2 "$CP" send --mpi --token-file "$D/token" \
		--chunk 256K --window 16 --stripe $STRIPE --limit-rate 512K --no-progress \
		"$D/src/big" "$addr3:$PORT,$addr3:$((PORT + 1))" >"$D/$1.out" 2>&1 &
	mpid=$!
	for _ in $(seq 240); do
		held=$(on3 du -B1 "$2/.big.rrcp-partial" 2>/dev/null | cut -f1)
		[ "${held:-0}" -ge $(($3 * STRIPE)) ] && break
		sleep 0.5
	done
}

# 1. Serve ranks on two hosts, one --dir over 9p: its locks are each
#    host's own, so they are refused before anything listens.
t0=$SECONDS
mkdir -p "$D/split"
timeout 60 mpirun -x ASAN_OPTIONS -n 2 --host lab3,lab4 "$CP" serve --mpi --listen "$addr3:$PORT" \
	--dir "$D/split" --token-file "$D/token" >"$D/split.out" 2>&1
step split $? $((SECONDS - t0))
# ... and two on one host over 9p: its flock and byte-range locks collide.
t0=$SECONDS
timeout 60 mpirun -x ASAN_OPTIONS -n 2 --host lab3:2 "$CP" serve --mpi --listen "$addr3:$PORT" \
	--dir "$D/split" --token-file "$D/token" >"$D/ninep.out" 2>&1
step ninep $? $((SECONDS - t0))

# 2. The tree and the big file: 2 hosts x 2 send ranks to 2 serve ranks.
t0=$SECONDS
serve_ranks "$D/serve1.out" $L/dst --json "$D/serve1.json"
send_ranks send1 -r "$D/src"
rc=$?
wait $SPID
src=$?
step send1 "$rc" $((SECONDS - t0))
step serve1 $src 0
on3 diff -r "$D/src" $L/dst/src >"$D/diff1" 2>&1
step same1 $? 0
on3 rm -rf $L/dst # room on lab3's disk

# 3. A wrong token: every rank refused, nothing stored (refused
#    connections do not count toward serve's --count).
t0=$SECONDS
(umask 077 && echo wrong-secret-0123456789 >"$D/wrong")
serve_ranks "$D/serve3.out" $L/dst3
timeout 120 mpirun -x ASAN_OPTIONS -n 4 --host lab1:2,lab2:2 "$CP" send --mpi --token-file "$D/wrong" \
	--no-progress "$D/src/big" "$addr3:$PORT,$addr3:$((PORT + 1))" >"$D/wrong.out" 2>&1
step wrong $? $((SECONDS - t0))
step empty2 "$(on3 ls -A $L/dst3 | wc -l)" 0

# 4. A send rank killed mid-file (SIGKILL), then the same copy again.
t0=$SECONDS
# Cut once the partial holds 5 stripes' worth: with four ranges in
# flight at once, some are whole by then and others midway.
slow_send cut $L/dst3 5
victim=$(pgrep -x ringrdma-cp | head -n 1) # a send rank here (serve runs on lab3)
kill -9 "$victim"
wait $mpid
step cut $? $((SECONDS - t0))
wait $SPID
on3 du -B1 $L/dst3/.big.rrcp-partial 2>/dev/null | cut -f1 >"$D/held"
step named3 "$(on3 ls $L/dst3 | wc -l)" 0
t0=$SECONDS
serve_ranks "$D/serve4.out" $L/dst3
send_ranks resend "$D/src/big"
rc=$?
wait $SPID
step resend "$rc" $((SECONDS - t0))
on3 cmp "$D/src/big" $L/dst3/big
step same3 $? 0

# 5. A serve rank SIGKILLed mid-file: the send ranks fail with a clear
#    error, and nothing is named.
t0=$SECONDS
serve_ranks "$D/serve5.out" $L/dst5
slow_send lost $L/dst5 2
on3 'kill -9 $(pgrep -x ringrdma-cp | head -n 1)'
wait $mpid
step lost $? $((SECONDS - t0))
wait $SPID
step named5 "$(on3 ls $L/dst5 | wc -l)" 0
