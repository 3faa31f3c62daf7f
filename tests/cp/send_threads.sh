#!/bin/bash
# ringrdma-cp send --threads in the lab: the connections spread over N
# sender threads, each with its own ring, all taking from one list. A
# tree (nested directories, many small files, a striped file inside)
# and a striped file beside it, over --threads 2 and over --threads 4
# --conns 4: stored byte for byte with every mode and mtime (a
# directory's DIR_META after everything beneath it), --json counting
# files, ranges and the connections of each thread. A striped copy over
# --threads 4 killed midway and sent again resumes its ranges; a file
# the receiver refuses on one thread ends the others (exit 5, no hang);
# SIGTERM ends every thread (exit 130).
#   send_threads.sh PATH/TO/ringrdma-cp
CP=${1:?usage: send_threads.sh PATH/TO/ringrdma-cp}
. "$(dirname "$0")/lib.sh" 11
PORT=7610
GEOM=(--chunk 64K --window 8)
STRIPE=$((1 << 20))
umask 022

# The source: top/ with 3 levels of 3 subdirectories, 4 small files in
# each, a 5-range file in top/, every mtime set after the contents; and
# big, 12 ranges and a tail, beside it.
python3 -S - "$T/src" $STRIPE <<'PY' || { echo "Bail out! cannot make the tree"; exit 1; }
import os, sys
root, stripe = sys.argv[1], int(sys.argv[2])
t = 1600000000 * 10**9
def tree(d, depth):
    global t
    os.makedirs(d)
    for i in range(4):
        p = os.path.join(d, "f%d" % i)
        with open(p, "wb") as fh:
            fh.write(os.urandom(1 + (i * 4099 + depth * 777) % 70000))
        t += 1000000007
        os.utime(p, ns=(t, t))
    for i in range(3 if depth else 0):
        tree(os.path.join(d, "s%d" % i), depth - 1)
    os.chmod(d, 0o750 if depth % 2 else 0o755)
    t += 999
    os.utime(d, ns=(t, t))
tree(os.path.join(root, "top"), 3)
p = os.path.join(root, "top", "striped")
with open(p, "wb") as fh:
    fh.write(os.urandom(4 * stripe + 4321))
os.utime(p, ns=(t + 5, t + 5))
os.utime(os.path.join(root, "top"), ns=(t + 9, t + 9))
with open(os.path.join(root, "big"), "wb") as fh:
    fh.write(os.urandom(12 * stripe + 12345))
PY
NFILES=$(find "$T/src" -type f | wc -l)

# send NAME ARGS...: a send to the serve on $SPORT, logs in $T/NAME.*;
# its exit status (124: it hung).
send() {
	local name=$1
	shift
	timeout 300 "$CP" send --token-file "$TOKEN" "${GEOM[@]}" --stripe $STRIPE \
		--json "$T/$name.json" "$@" "$ADDR:$SPORT" >"$T/$name.out" 2>"$T/$name.err"
}

# json_check FILE THREADS: exit 0, every file and range counted, the
# connections spread over THREADS threads (each at least one).
json_check() {
	python3 -S - "$1" "$2" "$NFILES" <<'PY'
import json, sys
j, threads, files = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
tc = j.get("thread_conns", [])
ok = (j["exit_code"] == 0 and j["files"] == files and j["ranges"] == 5 + 13 and
      j["threads"] == threads and len(tc) == threads and min(tc) >= 1 and
      sum(tc) == j["connections"] and j["connections"] >= threads)
print("ok" if ok else "bad: %s" % {k: j.get(k) for k in
      ("exit_code", "files", "ranges", "threads", "thread_conns", "connections")})
PY
}

round() { # THREADS CONNS PORT
	local th=$1 conns=$2 dst=$T/dst$1
	SPORT=$3
	mkdir -p "$dst"
	start_serve srv$th $SPORT --dir "$dst" --token-file "$TOKEN" "${GEOM[@]}"
	send t$th -r --threads "$th" --conns "$conns" "$T/src/top" "$T/src/big"
	rc=$?
	diffs=$(same_tree "$T/src" "$dst" 0)
	ok=0
	[ "$rc" = 0 ] && [ -z "$diffs" ] && ok=1
	result $ok "send -r --threads $th --conns $conns: tree and striped files stored byte for byte, modes and mtimes (exit $rc)"
	[ $ok = 1 ] || { echo "$diffs" | sed 's/^/# /'; show "$T/t$th.err" "$T/srv$th.err"; }
	j=$(json_check "$T/t$th.json" "$th")
	ok=0
	[ "$j" = ok ] && ok=1
	result $ok "--json of --threads $th: $NFILES files, 18 ranges, connections over $th threads ($j)"
}

# --- 1, 2: two threads (two connections); 3, 4: four threads, four connections
round 2 1 $PORT
round 4 4 $((PORT + 1))
SPORT=$((PORT + 1))

# --- 5, 6, 7: a striped copy over four threads killed midway, then sent again
head -c $((16 * STRIPE)) /dev/urandom >"$T/src/cutme"
cut_midway "$T/dst4" cutme "$T/srv4.err" "$CP" send --token-file "$TOKEN" "${GEOM[@]}" \
	--stripe $STRIPE --threads 4 --limit-rate 2M "$T/src/cutme" "$ADDR:$SPORT"
held=$HELD
ok=0
[ ! -e "$T/dst4/cutme" ] && [ "$held" -gt 0 ] && ok=1
result $ok "a copy over --threads 4 killed midway leaves a partial holding $held bytes, nothing named"
resend r4 --threads 4 "$T/src/cutme"
rc=$?
ok=0
[ "$rc" = 0 ] && cmp -s "$T/src/cutme" "$T/dst4/cutme" && [ ! -e "$T/dst4/.cutme.rrcp-partial" ] && ok=1
result $ok "sent again over --threads 4 it is stored byte for byte (exit $rc)"
[ $ok = 1 ] || show "$T/r4.err" "$T/srv4.err"
json_load "$T/r4.json"
rheld=$(json_field "$T/r4.json" ranges_held)
ranges=$(json_field "$T/r4.json" ranges)
ok=0
[ "${rheld:-0}" -ge 1 ] && [ "${ranges:-0}" = 16 ] && ok=1
result $ok "the ranges stored before the cut were not sent again ($rheld of $ranges held whole)"
[ $ok = 1 ] || show "$T/r4.json"

# --- 8, 9: a file the receiver refuses (other content under its name) on
# one thread ends the others: exit 5, promptly, no hang.
cp -r "$T/src/top" "$T/src/again"
head -c 5000 /dev/urandom >"$T/src/again/s1/s2/f3"
send ref -r --threads 4 --conns 4 --as top "$T/src/again"
rc=$?
ok=0
[ "$rc" = 5 ] && ok=1
result $ok "a file refused on one of four threads: send exits 5, not hung (exit $rc)"
[ $ok = 1 ] || show "$T/ref.err"
ok=0
[ "$(json_field "$T/ref.json" exit_code)" = 5 ] && [ "$(json_field "$T/ref.json" failures)" = 1 ] &&
	grep -q "send: receiver" "$T/ref.err" && ok=1
result $ok "one exit status and the receiver's reason in --json and the log"
[ $ok = 1 ] || show "$T/ref.err" "$T/ref.json"

# --- 10, 11: SIGTERM ends every thread: exit 130, the partial kept.
head -c $((16 * STRIPE)) /dev/urandom >"$T/src/intme"
"$CP" send --token-file "$TOKEN" "${GEOM[@]}" --stripe $STRIPE --threads 4 --limit-rate 2M \
	--json "$T/int.json" "$T/src/intme" "$ADDR:$SPORT" >"$T/int.out" 2>"$T/int.err" &
pid=$!
PIDS+=("$pid")
await_partial "$T/dst4" intme
nap 2
kill -TERM "$pid"
wait_pid "$pid" 120
rc=$?
ok=0
[ "$rc" = 130 ] && [ "$(json_field "$T/int.json" exit_code)" = 130 ] && ok=1
result $ok "SIGTERM ends send --threads 4: exit 130 (exit $rc)"
[ $ok = 1 ] || show "$T/int.err"
ok=0
await_line "$T/srv4.err" "sender interrupted" "$SERVE_PID" 300 && [ ! -e "$T/dst4/intme" ] &&
	[ -e "$T/dst4/.intme.rrcp-partial" ] && ok=1
result $ok "the receiver kept the partial to resume, nothing named"
[ $ok = 1 ] || show "$T/srv4.err"
finish
