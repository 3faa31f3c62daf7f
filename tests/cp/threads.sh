#!/bin/bash
# ringrdma-cp serve --threads in the lab: connections spread over poll
# groups, each a thread with its own ring. Six senders at once, three
# files each (a multi-MiB one among them), into serve --threads 3
# --count 6: every file byte for byte, connections on more than one
# thread in the --json summary, and --count still ends serve. Then a
# signal reaches every thread: SIGTERM mid-transfer ends serve --threads 2
# with 130 and nothing half-written left. --max-pending is one count for
# all threads, and a full one evicts a stranger on any thread. Bad
# --threads values are usage errors.
#   threads.sh PATH/TO/ringrdma-cp PATH/TO/cp-hostile
CP=${1:?usage: threads.sh PATH/TO/ringrdma-cp PATH/TO/cp-hostile}
HOSTILE=${2:?usage: threads.sh PATH/TO/ringrdma-cp PATH/TO/cp-hostile}
. "$(dirname "$0")/lib.sh" 10
PORT=7550 SENDERS=6

mkdir -p "$T/src" "$T/dst"
for i in $(seq $SENDERS); do
	head -c $((i * 1000 + 7)) /dev/urandom >"$T/src/small$i"
	head -c $((300 * 1024 + i)) /dev/urandom >"$T/src/mid$i"
	head -c $(((2 << 20) + i * 65536 + 123)) /dev/urandom >"$T/src/big$i"
done

start_serve th $PORT --dir "$T/dst" --threads 3 --count $SENDERS --chunk 64K --window 16 \
	--json "$T/th.json"
ok=$?
grep -q "3 threads" "$T/th.out" || ok=1
result $((1 - ok)) "serve --threads 3 listens and says so"
[ $ok = 0 ] || show "$T/th.out" "$T/th.err"
spids=()
for i in $(seq $SENDERS); do
	timeout 300 "$CP" send --chunk 64K --window 16 --json "$T/c$i.json" "$T/src/small$i" \
		"$T/src/big$i" "$T/src/mid$i" "$ADDR:$PORT" >"$T/c$i.out" 2>"$T/c$i.err" &
	spids+=($!)
	PIDS+=($!)
done
codes=
for p in "${spids[@]}"; do
	wait "$p"
	codes="$codes $?"
done
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$codes" = "$(printf ' 0%.0s' $(seq $SENDERS))" ] && ok=1
result $ok "$SENDERS concurrent senders all exit 0 (got$codes)"
[ $ok = 1 ] || show "$T"/c*.err "$T/th.err"
ok=0
[ "$src" = 0 ] && ok=1
result $ok "--count $SENDERS ends serve --threads 3 with exit 0 (exit $src)"
[ $ok = 1 ] || show "$T/th.err"
bad=
for f in "$T"/src/*; do
	cmp -s "$f" "$T/dst/${f##*/}" || bad="$bad ${f##*/}"
done
ok=0
[ -z "$bad" ] && [ "$(ls -A "$T/dst" | wc -l)" = $((SENDERS * 3)) ] && ok=1
result $ok "all $((SENDERS * 3)) files arrived byte for byte, no temp file${bad:+ (differ or missing:$bad)}"
[ $ok = 1 ] || ls -la "$T/dst" | sed 's/^/# /'
# threads 3, thread_conns summing to the connections, more than one used.
check=$(python3 -S - "$T/th.json" $SENDERS <<'PY' 2>&1
import json, sys
j = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
tc = j["thread_conns"]
ok = (j["threads"] == 3 and len(tc) == 3 and sum(tc) == n and j["connections"] == n
      and j["files"] == 3 * n and j["failures"] == 0 and sum(1 for c in tc if c) > 1)
print(("ok " if ok else "bad ") + "thread_conns %s, connections %d, files %d" %
      (tc, j["connections"], j["files"]))
PY
)
ok=0
[ "${check%% *}" = ok ] && ok=1
result $ok "serve --json: ${check#* } (more than one thread used)"
[ $ok = 1 ] || show "$T/th.json"
ok=0
grep -q "connections per thread:" "$T/th.err" && ok=1
result $ok "serve logs its connections per thread"
[ $ok = 1 ] || show "$T/th.err"

# --- a signal reaches every group: two slow senders, SIGTERM, exit 130
mkdir -p "$T/sig"
head -c $((32 << 20)) /dev/urandom >"$T/src32"
start_serve sg $((PORT + 1)) --dir "$T/sig" --threads 2 --chunk 64K --window 4 \
	--json "$T/sg.json"
spids=()
for i in 1 2; do
	"$CP" send --limit-rate 2M --as "s$i" "$T/src32" "$ADDR:$((PORT + 1))" \
		>"$T/sg$i.out" 2>"$T/sg$i.err" &
	spids+=($!)
	PIDS+=($!)
done
sleep 3
kill -TERM "$SERVE_PID"
wait_pid "$SERVE_PID" 60
src=$?
codes=
for p in "${spids[@]}"; do
	wait_pid "$p" 60
	codes="$codes $?"
done
ok=0
# What each sender had sent stays as its partial, to resume from; nothing else.
[ "$src" = 130 ] && [ "$(ls -A "$T/sig" | tr '\n' ' ')" = ".s1.rrcp-partial .s2.rrcp-partial " ] &&
	[ "$codes" != " 0 0" ] &&
	grep -q "receiver interrupted" "$T/sg1.err" && grep -q "receiver interrupted" "$T/sg2.err" &&
	ok=1
result $ok "SIGTERM ends serve --threads 2 mid-transfer: exit 130, both senders told, only their partials left (exit $src, senders$codes)"
[ $ok = 1 ] || { show "$T/sg.err" "$T/sg1.err" "$T/sg2.err"; ls -la "$T/sig" | sed 's/^/# /'; }

# --- --max-pending 1 over two threads: a stranger that never says HELLO
# holds the one place on one thread; the sender's request goes to the
# other (fewest connections), and must evict it there. Before, eviction
# looked only at the request's own thread and refused the sender.
mkdir -p "$T/ev"
start_serve ev $((PORT + 2)) --dir "$T/ev" --threads 2 --max-pending 1 --hello-timeout 60 \
	--count 1 --token-file "$TOKEN" --json "$T/ev.json"
"$HOSTILE" idle "$ADDR" $((PORT + 2)) 1 60 >"$T/ev.h.out" 2>"$T/ev.h.err" &
hpid=$!
PIDS+=("$hpid")
await_line "$T/ev.h.out" established "$hpid" 600
timeout 30 "$CP" send --token-file "$TOKEN" "$T/src/small1" "$ADDR:$((PORT + 2))" \
	>"$T/ev.c.out" 2>"$T/ev.c.err"
crc=$?
wait_pid "$SERVE_PID" 30
src=$?
kill "$hpid" 2>/dev/null
ok=0
[ "$crc" = 0 ] && cmp -s "$T/src/small1" "$T/ev/small1" &&
	grep -q "established 1 refused 0" "$T/ev.h.out" && ok=1
result $ok "--threads 2 --max-pending 1: a stranger on one thread does not lock out a sender on the other (exit $crc)"
[ $ok = 1 ] || show "$T/ev.h.out" "$T/ev.c.err" "$T/ev.err"
ok=0
[ "$src" = 0 ] && grep -q "no HELLO yet, dropped for a newer connection" "$T/ev.err" && ok=1
result $ok "the stranger was evicted from the other thread; serve exits 0 (exit $src)"
[ $ok = 1 ] || show "$T/ev.err" "$T/ev.json"

# --- bad values
"$CP" serve --listen "$ADDR:$PORT" --no-auth --dir "$T" --threads 0 >/dev/null 2>"$T/usage.err"
c1=$?
"$CP" serve --listen "$ADDR:$PORT" --no-auth --dir "$T" --threads 65 >/dev/null 2>>"$T/usage.err"
c2=$?
"$CP" send --threads 17 "$T/src32" "$ADDR:$PORT" >/dev/null 2>>"$T/usage.err"
c3=$?
ok=0
[ "$c1" = 2 ] && [ "$c2" = 2 ] && [ "$c3" = 2 ] && grep -q "want 1 to 16 in send" "$T/usage.err" &&
	ok=1
result $ok "--threads 0, 65, and 17 on send: usage errors (exit $c1, $c2, $c3)"
[ $ok = 1 ] || show "$T/usage.err"
finish
