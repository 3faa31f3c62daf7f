#!/bin/bash
# Inside the four-VM lab boot of ranks_lab.sh, on lab1: ringrdma-cp's
# ranks under mpirun through the lab's agent. Prints "@@ NAME rc=N" per
# step; ranks_lab.sh checks the results on the host.
#   ranks_guest.sh CP DIR [EXPORT]   (DIR on the shared checkout: src/, token)
# The serve ranks, one on lab3 and one on lab4, store into one directory
# over NFS 4.2 (tools/lab/nfs): lab3 exports EXPORT (default a directory
# on its own disk) and both mount it at the same path. What they stored
# is compared on lab3, in EXPORT, with the source over 9p.
set -u
CP=$1 D=$2
S=${3:-/run/rdma-lab/disk/nfs} # on lab3, exported
L=/run/rdma-lab/nfs            # S, mounted on lab3 and lab4
on3() { "$RDMA_LAB_AGENT" lab3 "$@"; }
on4() { "$RDMA_LAB_AGENT" lab4 "$@"; }
NFS=$(cd "$(dirname "$0")/../../tools/lab" && pwd)/nfs
PORT=7700
STRIPE=$((4 << 20))
addr3=$(getent hosts lab3 | awk '{print $1; exit}')
addr4=$(getent hosts lab4 | awk '{print $1; exit}')
# Under ASan, no leak check: Open MPI's allocations at exit sit in
# components it unloads (tests/cp/ranks.sh says more).
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
step() { echo "@@ $1 rc=$2 secs=$3"; }
serve_ranks() { # LOG NAME ARGS...: serve ranks on lab3 and lab4 into L/NAME, in the background
	local log=$1 name=$2
	shift 2
	on3 mkdir -p "$S/$name"
	mpirun -x ASAN_OPTIONS -n 2 --host lab3,lab4 "$CP" serve --mpi --listen "0.0.0.0:$PORT" \
		--dir "$L/$name" --token-file "$D/token" --count 2 "$@" >"$log" 2>&1 &
	SPID=$!
	for _ in $(seq 600); do
		[ "$(grep -c 'listening on' "$log")" = 2 ] && return 0
		kill -0 $SPID 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
send_ranks() { # NAME ARGS...: 2 ranks on lab1 and 2 on lab2, to both serve hosts
	local name=$1
	shift
	# Over NFS under the emulator a small file takes some 50 ms.
	timeout $((300 + ${RR_CP_RANKS_FILES:-200} / 10)) \
		mpirun -x ASAN_OPTIONS -n 4 --host lab1:2,lab2:2 "$CP" send --mpi --token-file "$D/token" \
		--chunk 256K --window 16 --stripe $STRIPE --no-progress --json "$D/$name.json" "$@" \
		"$addr3:$PORT,$addr4:$PORT" >"$D/$name.out" 2>&1
}
# slow_send NAME DST N: big at 512K/s a rank, in the background (its
# mpirun's pid in mpid), until the partial in DST holds N stripes.
slow_send() {
	local held
	mpirun -x ASAN_OPTIONS -n 4 --host lab1:2,lab2:2 "$CP" send --mpi --token-file "$D/token" \
		--chunk 256K --window 16 --stripe $STRIPE --limit-rate 512K --no-progress \
		"$D/src/big" "$addr3:$PORT,$addr4:$PORT" >"$D/$1.out" 2>&1 &
	mpid=$!
	for _ in $(seq 240); do
		held=$(on3 du -B1 "$S/$2/.big.rrcp-partial" 2>/dev/null | cut -f1)
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
# NFS from lab3's disk to lab3 and lab4, as serve ranks on two hosts
# would share a file system. Mounted with its name cache first: a name
# one host renamed stays for a while on the other, so they are refused.
t0=$SECONDS
on3 mkdir -p "$S" && on3 bash "$NFS" export "$S" &&
	on3 bash "$NFS" mount lab3 $L.cached && on4 bash "$NFS" mount lab3 $L.cached &&
	on3 bash "$NFS" mount lab3 $L lookupcache=none && on4 bash "$NFS" mount lab3 $L lookupcache=none
step nfs $? $((SECONDS - t0))
t0=$SECONDS
on3 mkdir -p "$S/cached"
timeout 60 mpirun -x ASAN_OPTIONS -n 2 --host lab3,lab4 "$CP" serve --mpi --listen "0.0.0.0:$PORT" \
	--dir $L.cached/cached --token-file "$D/token" >"$D/cached.out" 2>&1
step cached $? $((SECONDS - t0))

# 2. The tree and the big file: 2 hosts x 2 send ranks to 2 serve hosts.
t0=$SECONDS
serve_ranks "$D/serve1.out" dst --json "$D/serve1.json"
send_ranks send1 -r "$D/src"
rc=$?
wait $SPID
src=$?
step send1 "$rc" $((SECONDS - t0))
step serve1 $src 0
on3 diff -r "$D/src" "$S/dst/src" >"$D/diff1" 2>&1
step same1 $? 0
# Each directory's mode and time, set by DIR_META on the serve rank that
# made it (the other leaves a directory it did not make as it is).
dirs='find . -type d -exec stat -c "%a %Y %n" {} + | sort'
(cd "$D/src" && eval "$dirs") >"$D/dirs.src"
on3 "cd '$S/dst/src' && $dirs" >"$D/dirs.dst"
diff "$D/dirs.src" "$D/dirs.dst" >"$D/dirs.diff"
step dirs1 $? 0
on3 rm -rf "$S/dst" # room on lab3's disk

# 3. A wrong token: every rank refused, nothing stored (refused
#    connections do not count toward serve's --count).
t0=$SECONDS
(umask 077 && echo wrong-secret-0123456789 >"$D/wrong")
serve_ranks "$D/serve3.out" dst3
timeout 120 mpirun -x ASAN_OPTIONS -n 4 --host lab1:2,lab2:2 "$CP" send --mpi --token-file "$D/wrong" \
	--no-progress "$D/src/big" "$addr3:$PORT,$addr4:$PORT" >"$D/wrong.out" 2>&1
step wrong $? $((SECONDS - t0))
step empty2 "$(on3 ls -A "$S/dst3" | wc -l)" 0

# 4. A send rank killed mid-file (SIGKILL), then the same copy again.
t0=$SECONDS
# Cut midway through the second ranges: the ranks send one range each at
# a time, 8 s a range at 512K/s, and over NFS a range's bytes reach lab3
# when its store ends (close flushes), so once 4 stripes are held the
# first ranges are whole; 3 s later the next are about 1.5 MiB in.
slow_send cut dst3 4
sleep 3
victim=$(pgrep -x ringrdma-cp | head -n 1) # a send rank here (serve runs on lab3, lab4)
kill -9 "$victim"
wait $mpid
step cut $? $((SECONDS - t0))
wait $SPID
on3 du -B1 "$S/dst3/.big.rrcp-partial" 2>/dev/null | cut -f1 >"$D/held"
step named3 "$(on3 ls "$S/dst3" | wc -l)" 0
t0=$SECONDS
serve_ranks "$D/serve4.out" dst3
send_ranks resend "$D/src/big"
rc=$?
wait $SPID
step resend "$rc" $((SECONDS - t0))
on3 cmp "$D/src/big" "$S/dst3/big"
step same3 $? 0

# 5. A serve rank SIGKILLed mid-file: the send ranks fail with a clear
#    error, and nothing is named.
t0=$SECONDS
serve_ranks "$D/serve5.out" dst5
slow_send lost dst5 2
on3 'kill -9 $(pgrep -x ringrdma-cp | head -n 1)'
wait $mpid
step lost $? $((SECONDS - t0))
wait $SPID
step named5 "$(on3 ls "$S/dst5" | wc -l)" 0
