#!/bin/bash
# Not a test: ringrdma-cp against what a user would pick instead, across
# two lab VMs (1 vCPU each), in one boot:
#   tools/rdma-lab run --hosts 2 --timeout 1500 \
#     --peer-cmd 'tests/cp/measure_2hosts.sh --peer build' -- tests/cp/measure_2hosts.sh build
# ROUNDS (default 3) rounds of, in turn: ib_write_bw with 1 MiB messages
# (-n 500), a plain TCP copy of MIB MiB (default 128; build/tests/cp/
# tcp_copy: sendfile into the socket, written and fsynced on the other
# side, timed from connect to the receiver's answer after its fsync) and
# ringrdma-cp send of the same file to a serve --count 1. The source is in
# this VM's /tmp, the receivers write into the peer's /tmp (RAM: the
# checkout over 9p would measure 9p). Each round prints each figure and
# the ratios cp/TCP (whole runs) and cp data phase/ib_write_bw.
# Around each copy both VMs take /proc/stat (the one vCPU's user, nice,
# system, softirq and idle seconds: cp's hashing threads run at a nicer
# level, so "nice" is theirs) and sample the copier's threads' CPU times
# (/proc/PID/task/*/stat, every second: the last second may be missing).
# During a copy this script forks nothing (see nap).
# MEASURE_QPS=N adds ib_write_bw -q N to each round (rxe lets each RC QP
# have 128 unacknowledged packets and 64 of its own in the netdev: is one
# QP the limit?); MEASURE_MTU="M..." sets both VMs' netdev MTU at the
# start of each round, taking the list in turn (rxe follows it: 4200 gives
# 4096-byte RDMA packets instead of 1024); MEASURE_BW_N (500) is
# ib_write_bw's -n.
# MEASURE_CP_ARGS="ARGS;ARGS..." gives send and serve (set it on both VMs)
# extra options, taking the list in turn per round, e.g. "; --chunk 4M
# --window 16" alternates the defaults with 4 MiB chunks.
# MEASURE_BW_DEPTH=D adds ib_write_bw -t D (D writes in flight, as cp's
# window has; perftest's default is 128) to each round, and the copier's
# ratio to it.
# MEASURE_WARM=N (default 1): the first N rounds are printed but left out
# of the medians: a boot's first copies ran up to a third slower than the
# rest, whichever options they had (guest memory QEMU backs on first
# touch, code it translates once), which a real host never pays again.
# Give ROUNDS one more for it.
# MEASURE_PERF=1 adds one more cp round under `perf record -a` on both VMs,
# whose top symbols are printed (not counted in the ratios).
#   measure_2hosts.sh BUILD_DIR [ROUNDS] [MIB]        on the first VM
#   measure_2hosts.sh --peer BUILD_DIR [ROUNDS]       on the second VM
# The VMs keep in step through BUILD_DIR/measure-2hosts (the shared checkout).
set -u
peer=0
[ "${1:-}" = --peer ] && peer=1 && shift
B=$(cd "${1:?usage: measure_2hosts.sh [--peer] BUILD_DIR [ROUNDS] [MIB]}" && pwd)
R=${2:-3}
MIB=${3:-128}
CP=$B/cp/ringrdma-cp
TCP=$B/tests/cp/tcp_copy
D=$B/measure-2hosts
A=${RDMA_LAB_ADDR:?run it in the lab}
P=${RDMA_LAB_PEER_ADDR:?run it with tools/rdma-lab run --hosts 2}
HZ=$(getconf CLK_TCK)
BWPORT=18515
PERF=${MEASURE_PERF:-0}
WARM=${MEASURE_WARM:-1}
command -v perf >/dev/null || PERF=0
QPS=${MEASURE_QPS:-}
DEPTH=${MEASURE_BW_DEPTH:-}
BWN=${MEASURE_BW_N:-500}
MTUS=(${MEASURE_MTU:-})
# (a ';' more: read drops an empty last field, as in "--chunk 4M;")
IFS=';' read -r -a CPARGS <<<"${MEASURE_CP_ARGS:+$MEASURE_CP_ARGS;}"
# cp_args ROUND: the round's extra options from MEASURE_CP_ARGS.
cp_args() {
	[ ${#CPARGS[@]} = 0 ] && return
	echo "${CPARGS[$((($1 - 1) % ${#CPARGS[@]}))]}"
}
# set_mtu ROUND: the round's MTU from MEASURE_MTU on rxe0's netdev.
set_mtu() {
	[ ${#MTUS[@]} = 0 ] && return
	local m=${MTUS[$((($1 - 1) % ${#MTUS[@]}))]} nd
	nd=$(rdma link show rxe0/1 | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
	ip link set "$nd" mtu "$m" || echo "cannot set $nd's mtu to $m"
	echo "round $1: $nd mtu $m"
}
# Each fork and exec costs a lot under TCG on one vCPU (a sampler with
# cat and sleep took more CPU than the copy): the helpers that run during
# a copy use bash builtins only. nap SECS sleeps on a FIFO nobody writes.
NAPFIFO=$(mktemp -u /tmp/m2nap.XXXXXX)
mkfifo "$NAPFIFO" && exec 9<>"$NAPFIFO" && rm -f "$NAPFIFO"
nap() { read -r -t "$1" -u 9 _; }
# cpu_snap: the first line of /proc/stat.
cpu_snap() {
	local l
	read -r l </proc/stat
	echo "$l"
}
# cpu_delta BEFORE AFTER: the vCPU's seconds between two snapshots.
cpu_delta() {
	echo "$1 $2" | awk -v hz="$HZ" '{
		# cpu user nice system idle iowait irq softirq steal ...
		n = (NF) / 2
		for (i = 2; i <= 8; i++) d[i] = ($(i + n) - $i) / hz
		printf "user %.2f nice %.2f system %.2f idle %.2f iowait %.2f irq %.2f softirq %.2f s", \
			d[2], d[3], d[4], d[5], d[6], d[7], d[8]
	}'
}
# sample PID OUT: until PID exits, keep its threads' stat lines in OUT
# (every second, so the last second may be missing: each look costs
# tens of ms under TCG).
sample() {
	local pid=$1 out=$2 t l buf
	while [ -d /proc/"$pid" ]; do
		buf=
		for t in /proc/"$pid"/task/*/stat; do
			read -r l 2>/dev/null <"$t" && buf+=$l$'\n'
		done
		[ -n "$buf" ] && printf '%s' "$buf" >"$out"
		nap 1
	done
}
# threads PID STATFILE: the sampled threads' CPU seconds, grouped: the
# main (loop) thread, the hashing threads (nicer than main), io_uring's
# workers and the rest.
threads() {
	[ -s "$2" ] || { echo "no thread samples"; return; }
	# pid (comm) state ... utime=14 stime=15 ... nice=19; comm has no spaces here
	awk -v pid="$1" -v hz="$HZ" '{
		u = $14 / hz; s = $15 / hz
		if ($1 == pid) { g = "loop"; mainnice = $19 } else if ($2 ~ /iou-/) g = "io-wq"
		else g = "other"
		grp[NR] = g; nice[NR] = $19; uu[NR] = u; ss[NR] = s
	} END {
		for (i = 1; i <= NR; i++) {
			g = grp[i]
			if (g == "other" && nice[i] > mainnice) g = "hash"
			U[g] += uu[i]; S[g] += ss[i]; N[g]++
		}
		split("loop hash io-wq other", order, " ")
		for (k = 1; k <= 4; k++) { g = order[k]; if (N[g])
			printf "%s%s %.2f+%.2f s (user+sys, %d thr)", sep, g, U[g], S[g], N[g]; sep = ", " }
		print ""
	}' "$2"
}
# field FILE KEY: a top-level member of cp's --json (one member a line).
field() { sed -n 's/^  "'"$2"'": \([^,]*\),\{0,1\}$/\1/p' "$1" 2>/dev/null | tr -d '"'; }
ms() { echo $(($(date +%s%N) / 1000000)); }
perf_top() { # DATA: the top symbols over the whole VM, and the top threads
	perf report -i "$1" --stdio --sort comm,dso 2>/dev/null | grep -v '^#' | grep -v '^$' | head -n 12
	perf report -i "$1" --stdio --sort sym 2>/dev/null | grep -v '^#' | grep -v '^$' | head -n 25
}

if [ $peer = 1 ]; then
	# The receivers, round after round, each writing what it saw into $D.
	rm -rf "$D" /tmp/m2
	mkdir -p "$D" /tmp/m2
	rounds=$R
	[ "$PERF" = 1 ] && rounds=$((R + 1))
	for r in $(seq "$rounds"); do
		if [ "$r" -le "$R" ]; then
			set_mtu "$r" >/dev/null
			# A client that came too early can end the server with an
			# error: serve again until one run went through.
			for _ in $(seq 20); do
				ib_write_bw -d rxe0 -s 1048576 -n $BWN -p $BWPORT >/dev/null 2>&1 && break
			done
			for _ in $(seq 20); do
				[ -z "$QPS" ] || ib_write_bw -d rxe0 -s 1048576 -n $((BWN / QPS)) -q "$QPS" \
					-p $BWPORT >/dev/null 2>&1 && break
			done
			for _ in $(seq 20); do
				[ -z "$DEPTH" ] || ib_write_bw -d rxe0 -s 1048576 -n "$BWN" -t "$DEPTH" \
					-p $BWPORT >/dev/null 2>&1 && break
			done
			rm -f /tmp/m2/tcp.bin
			b=$(cpu_snap)
			"$TCP" recv "$A:7600" /tmp/m2/tcp.bin >"$D/r$r.tcp.out" 2>&1
			echo "peer cpu: $(cpu_delta "$b" "$(cpu_snap)")" >>"$D/r$r.tcp.out"
			rm -f /tmp/m2/tcp.bin
		fi
		rm -rf /tmp/m2/d && mkdir /tmp/m2/d
		[ "$r" -gt "$R" ] && { perf record -a -o /tmp/m2/perf.data -F 499 -q >/dev/null 2>&1 & perfpid=$!; }
		ca=$(cp_args "$r")
		b=$(cpu_snap)
		# shellcheck disable=SC2086
		"$CP" serve --no-auth --listen "$A:7601" --dir /tmp/m2/d --count 1 --timeout 300 \
			--json "$D/r$r.serve.json" $ca >"$D/r$r.serve.out" 2>&1 &
		spid=$!
		sample $spid /tmp/m2/threads &
		smp=$!
		wait $spid
		echo $? >"$D/r$r.serve.rc"
		echo "peer cpu: $(cpu_delta "$b" "$(cpu_snap)")" >>"$D/r$r.serve.out"
		wait $smp
		echo "peer serve threads: $(threads $spid /tmp/m2/threads)" >>"$D/r$r.serve.out"
		if [ "$r" -gt "$R" ]; then
			kill -INT $perfpid && wait $perfpid
			perf_top /tmp/m2/perf.data >"$D/r$r.perf.txt" 2>&1
		fi
		touch "$D/r$r.done"
	done
	exit 0
fi

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
head -c $((MIB << 20)) /dev/urandom >"$T/f"
# wait_peer FILE: the peer's record of a step, or give up after 5 minutes.
wait_peer() {
	local i
	for ((i = 0; i < 3000; i++)); do [ -e "$1" ] && return 0; nap 0.1; done
	echo "the peer never wrote $1"
	return 1
}
echo "measure_2hosts: $R rounds, $MIB MiB, to $P; this VM: $(nproc) vCPU; $(date -u +%FT%TZ)"
sum_r1=""
sum_r2=""
sum_r3=""
rounds=$R
[ "$PERF" = 1 ] && rounds=$((R + 1))
for r in $(seq "$rounds"); do
	if [ "$r" -le "$R" ]; then
		echo "--- round $r"
		set_mtu "$r"
		# ib_write_bw: the peer's server may not be listening yet.
		bw=
		for _ in $(seq 300); do
			bw=$(ib_write_bw -d rxe0 -s 1048576 -n $BWN -p $BWPORT "$P" 2>/dev/null |
				awk '$1 == 1048576 {print $4}')
			[ -n "$bw" ] && break
			nap 0.3
		done
		echo "ib_write_bw 1 MiB -n $BWN: ${bw:-failed} MB/s"
		if [ -n "$QPS" ]; then
			bwq=
			for _ in $(seq 100); do
				bwq=$(ib_write_bw -d rxe0 -s 1048576 -n $((BWN / QPS)) -q "$QPS" -p $BWPORT "$P" 2>/dev/null |
					awk '$1 == 1048576 {print $4}')
				[ -n "$bwq" ] && break
				nap 0.3
			done
			echo "ib_write_bw 1 MiB -n $((BWN / QPS)) -q $QPS: ${bwq:-failed} MB/s"
		fi
		bwd=
		if [ -n "$DEPTH" ]; then
			for _ in $(seq 100); do
				bwd=$(ib_write_bw -d rxe0 -s 1048576 -n "$BWN" -t "$DEPTH" -p $BWPORT "$P" 2>/dev/null |
					awk '$1 == 1048576 {print $4}')
				[ -n "$bwd" ] && break
				nap 0.3
			done
			echo "ib_write_bw 1 MiB -n $BWN -t $DEPTH: ${bwd:-failed} MB/s"
		fi
		b=$(cpu_snap)
		t0=$(ms)
		tcp=$("$TCP" send "$P:7600" "$T/f" 2>&1)
		t1=$(ms)
		echo "tcp_copy $MIB MiB: $(echo "$tcp" | sed -n 's/.*mb_per_s=//p') MB/s" \
			"(connect to fsynced: $(echo "$tcp" | sed -n 's/.*seconds=\([^ ]*\).*/\1/p') s," \
			"process $((t1 - t0)) ms)"
		echo "  sender cpu: $(cpu_delta "$b" "$(cpu_snap)")"
		wait_peer "$D/r$r.tcp.out" && sed 's/^/  /' "$D/r$r.tcp.out"
		tcpr=$(echo "$tcp" | sed -n 's/.*mb_per_s=//p')
	else
		echo "--- perf round (not in the ratios)"
		perf record -a -o "$T/perf.data" -F 499 -q >/dev/null 2>&1 &
		perfpid=$!
		nap 1
	fi
	# ringrdma-cp: the peer's serve may not be listening yet (exit 4).
	ca=$(cp_args "$r")
	for _ in $(seq 100); do
		b=$(cpu_snap)
		t0=$(ms)
		# shellcheck disable=SC2086
		"$CP" send --quiet --json "$T/c.json" $ca "$T/f" "$P:7601" 2>"$T/c.err" &
		cpid=$!
		sample $cpid "$T/threads" &
		smp=$!
		wait $cpid
		crc=$?
		t1=$(ms)
		wait $smp
		[ $crc = 4 ] && grep -q "cannot connect" "$T/c.err" || break
		nap 0.3
	done
	if [ $crc != 0 ]; then
		echo "ringrdma-cp send failed ($crc): $(cat "$T/c.err")"
	else
		mb=$(field "$T/c.json" mb_per_s)
		dmb=$(field "$T/c.json" data_mb_per_s)
		echo "ringrdma-cp send $MIB MiB: $mb MB/s whole run ($(field "$T/c.json" seconds) s;" \
			"process $((t1 - t0)) ms), data phase $dmb MB/s ($(field "$T/c.json" data_seconds) s)," \
			"sender $(field "$T/c.json" cpu_seconds) CPU s"
		echo "  sender cpu: $(cpu_delta "$b" "$(cpu_snap)")"
		echo "  sender threads: $(threads $cpid "$T/threads")"
	fi
	wait_peer "$D/r$r.done" && sed 's/^/  /' "$D/r$r.serve.out" | tail -n 6 &&
		echo "  serve: $(field "$D/r$r.serve.json" cpu_seconds) CPU s, exit $(cat "$D/r$r.serve.rc")"
	if [ "$r" -gt "$R" ]; then
		kill -INT $perfpid && wait $perfpid
		echo "  perf, sender VM:"
		perf_top "$T/perf.data" | sed 's/^/    /'
		echo "  perf, receiver VM:"
		sed 's/^/    /' "$D/r$r.perf.txt"
		continue
	fi
	if [ $crc = 0 ] && [ -n "$bw" ] && [ -n "$tcpr" ]; then
		ratios=$(awk -v c="$mb" -v d="$dmb" -v t="$tcpr" -v w="$bw" \
			'BEGIN {printf "%.2f %.2f", c / t, d / w}')
		if [ "$r" -le "$WARM" ]; then
			echo "round $r${ca:+ [$ca]} (warm-up, not in the medians): cp/TCP ${ratios% *}x, cp data phase/ib_write_bw ${ratios#* }x"
			continue
		fi
		echo "round $r${ca:+ [$ca]}: cp/TCP ${ratios% *}x, cp data phase/ib_write_bw ${ratios#* }x"
		sum_r1="$sum_r1 ${ratios% *}"
		sum_r2="$sum_r2 ${ratios#* }"
		if [ -n "$bwd" ]; then
			rd=$(awk -v d="$dmb" -v w="$bwd" 'BEGIN {printf "%.2f", d / w}')
			echo "round $r: cp data phase/ib_write_bw -t $DEPTH ${rd}x"
			sum_r3="$sum_r3 $rd"
		fi
	fi
done
med() { echo "$@" | tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }
echo "--- cp/TCP:$sum_r1 (median $(med $sum_r1)); cp data phase/ib_write_bw:$sum_r2 (median $(med $sum_r2))"
[ -z "$sum_r3" ] || echo "--- cp data phase/ib_write_bw -t $DEPTH:$sum_r3 (median $(med $sum_r3))"
