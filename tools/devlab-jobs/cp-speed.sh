# ringrdma-cp's speed against what a user would pick instead, in one
# packed-lab VM (/work/shared/devlab: busybox sh, no python): ROUNDS
# rounds of ib_write_bw (1 MiB messages, -n 500), a plain TCP copy
# (tcp_copy from /job/bin or the pack: sendfile in, write + fsync out) and
# ringrdma-cp send of one MIB MiB file, all in the guest's /tmp (RAM), then
# ib_write_bw once more. Prints one ROUND line per round and a MEDIAN line;
# the --json summaries and /proc/stat deltas go to /job/out/.
# ROUNDS, MIB and CP_ARGS (extra options for send and serve) may be set in
# /job/env (sourced when present). JOB_OUT (default /job/out) is for a
# try in the project lab: JOB_OUT=/tmp/o PATH=build/cp:build/tests/cp:$PATH busybox sh cp-speed.sh
A=192.0.2.1
O=${JOB_OUT:-/job/out}
ROUNDS=${ROUNDS:-3}
MIB=${MIB:-256}
CP_ARGS=${CP_ARGS:-}
[ -f /job/env ] && . /job/env
HZ=100

# stat_line: /proc/stat's cpu line (all vCPUs, in 1/HZ s).
stat_line() { head -n 1 /proc/stat; }
# stat_delta BEFORE AFTER: seconds of user, nice (cp's hashing threads run
# nicer), system, idle, iowait, softirq over all vCPUs between the two.
stat_delta() {
	echo "$1 $2" | awk -v hz=$HZ '{ n = NF / 2; for (i = 2; i <= 8; i++) d[i] = ($(i + n) - $i) / hz
		printf "user %.2f nice %.2f system %.2f idle %.2f iowait %.2f softirq %.2f s", d[2], d[3], d[4], d[5], d[6], d[8] }'
}
# field FILE KEY: a top-level member of cp's --json (one member a line).
field() { sed -n 's/^  "'"$2"'": \([^,]*\),\{0,1\}$/\1/p' "$1" 2>/dev/null | tr -d '"'; }
bw() {
	ib_write_bw -d rxe0 -s 1048576 -n 500 >/dev/null 2>&1 &
	sleep 1
	ib_write_bw -d rxe0 -s 1048576 -n 500 $A 2>&1 | awk '$1 == 1048576 {print $4}'
	wait
}
med() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }

echo "cp-speed: $(nproc) vCPUs, $ROUNDS rounds of $MIB MiB, CP_ARGS '$CP_ARGS'"
date
mkdir -p /tmp/d
head -c $((MIB << 20)) /dev/urandom >/tmp/f
# tcp_copy: in the job folder (/job/bin) or in the pack (/opt/rr).
TCP=/job/bin/tcp_copy
[ -x $TCP ] || TCP=$(command -v tcp_copy)
has_tcp=0
[ -n "$TCP" ] && has_tcp=1
[ $has_tcp = 1 ] || echo "no tcp_copy in /job/bin or the pack: TCP rounds skipped (see tools/devlab-jobs/README.md)"
bws= wholes= datas= tcps=
for r in $(seq $ROUNDS); do
	b=$(bw)
	bws="$bws $b"
	tcp=
	if [ $has_tcp = 1 ]; then
		rm -f /tmp/d/tcp.bin
		$TCP recv $A:7600 /tmp/d/tcp.bin >$O/r$r.tcp-recv.txt 2>&1 &
		s0=$(stat_line)
		$TCP send $A:7600 /tmp/f >$O/r$r.tcp-send.txt 2>&1
		echo "tcp: $(stat_delta "$s0" "$(stat_line)")" >$O/r$r.stat.txt
		wait
		rm -f /tmp/d/tcp.bin
		tcp=$(sed -n 's/.*mb_per_s=//p' $O/r$r.tcp-send.txt)
	fi
	rm -rf /tmp/d/cp && mkdir /tmp/d/cp
	ringrdma-cp serve --no-auth --listen $A:7601 --dir /tmp/d/cp --count 1 --json $O/r$r.serve.json $CP_ARGS >$O/r$r.serve.txt 2>&1 &
	for _ in $(seq 100); do grep -q listening $O/r$r.serve.txt && break; sleep 0.1; done
	s0=$(stat_line)
	ringrdma-cp send --quiet --json $O/r$r.send.json $CP_ARGS /tmp/f $A:7601 >$O/r$r.send.txt 2>&1
	rc=$?
	echo "cp: $(stat_delta "$s0" "$(stat_line)")" >>$O/r$r.stat.txt
	wait
	cmp -s /tmp/f /tmp/d/cp/f || rc="$rc, stored copy differs"
	whole=$(field $O/r$r.send.json mb_per_s)
	data=$(field $O/r$r.send.json data_mb_per_s)
	wholes="$wholes $(awk -v c="$whole" -v w="$b" 'BEGIN {printf "%.3f", c / w}')"
	datas="$datas $(awk -v c="$data" -v w="$b" 'BEGIN {printf "%.3f", c / w}')"
	[ -n "$tcp" ] && tcps="$tcps $(awk -v c="$whole" -v t="$tcp" 'BEGIN {printf "%.3f", c / t}')"
	echo "ROUND $r ib_write_bw=$b tcp=${tcp:--} cp=$whole cp_data=$data ratio_whole=$(echo "$wholes" | awk '{print $NF}')" \
		"ratio_data=$(echo "$datas" | awk '{print $NF}') cp_per_tcp=$([ -n "$tcp" ] && echo "$tcps" | awk '{print $NF}' || echo -)" \
		"send_cpu=$(field $O/r$r.send.json cpu_seconds) serve_cpu=$(field $O/r$r.serve.json cpu_seconds) rc=$rc"
	sed 's/^/  /' $O/r$r.stat.txt
done
b=$(bw)
echo "ib_write_bw after the rounds: $b"
echo "MEDIAN ratio_data=$(echo "$datas" | med) ratio_whole=$(echo "$wholes" | med)" \
	"cp_per_tcp=$(echo "$tcps" | med) ib_write_bw=$(echo "$bws $b" | med)"
date
