#!/bin/bash
# ringrdma-cp against hostile peers, in the lab: connections that never say
# HELLO, connection requests never completed (half-open), a token guesser,
# a reconnect loop, a flood of half-open requests, a write that puts
# serve's QP into error, strangers with a wrong or no token, names with
# control and 8-bit bytes, and more TCP clients than the proxy takes.
# None of them may lock
# out, end or slow down the legitimate transfer beyond the HELLO deadline.
# And a sender that rewrites its chunk in the window after sending it: what
# is stored must be what was checked, or nothing; a connection that writes
# into another's window is refused by the device.
#   hostile.sh PATH/TO/ringrdma-cp PATH/TO/cp-hostile
CP=${1:?usage: hostile.sh PATH/TO/ringrdma-cp PATH/TO/cp-hostile}
HOSTILE=${2:?usage: hostile.sh PATH/TO/ringrdma-cp PATH/TO/cp-hostile}
. "$(dirname "$0")/lib.sh" 22
PORT=7530 HELLO=3

mkdir -p "$T/src"
head -c $((8 << 20)) /dev/urandom >"$T/src/eight"
head -c $((16 << 20)) /dev/urandom >"$T/src/sixteen"
printf 'hello\n' >"$T/src/small"
tok "$T/good.tok" right-secret-0123456789
tok "$T/bad.tok" wrong-secret-0123456789

# Is every byte of FILE... printable ASCII or a newline?
printable() { python3 -S -c 'import sys
for f in sys.argv[1:]:
    b = open(f, "rb").read()
    if any(not (0x20 <= c < 0x7f or c == 10) for c in b):
        sys.exit(1)' "$@"; }

# await_count FILE TEXT N TENTHS: until TEXT is in FILE N times, at most
# TENTHS tenths of a second (shell builtins only, as await_line).
await_count() {
	local i k text
	for ((i = 0; i <= $4; i++)); do
		text=
		[ -e "$1" ] && IFS= read -r -d '' text <"$1"
		for ((k = 0; k < $3; k++)); do
			[[ $text == *"$2"* ]] || break
			text=${text#*"$2"}
		done
		[ "$k" = "$3" ] && return 0
		nap 0.1
	done
	return 1
}

# hold_idle NAME PORT N SECS: N connections without HELLO held SECS seconds
# in the background (pid in IDLE_PID); waits until every connect was tried.
hold_idle() {
	"$HOSTILE" idle "$ADDR" "$2" "$3" "$4" >"$T/$1.out" 2>"$T/$1.err" &
	IDLE_PID=$!
	PIDS+=("$IDLE_PID")
	await_line "$T/$1.out" established "$IDLE_PID" 600
}

# --- 64 connections that never say HELLO, then the real sender
mkdir -p "$T/lock"
start_serve lock $PORT --dir "$T/lock" --count 1 --hello-timeout $HELLO --json "$T/lock.json"
hold_idle idle64 $PORT 64 15
irc=$?
start=$(date +%s)
timeout 60 "$CP" send "$T/src/eight" "$ADDR:$PORT" >"$T/lock.c.out" 2>"$T/lock.c.err"
crc=$?
took=$(($(date +%s) - start))
kill "$IDLE_PID" 2>/dev/null # its QPs go: serve need not wait out their disconnects
wait_pid "$SERVE_PID" 30
src=$?
ok=0
[ "$irc" = 0 ] && [ "$crc" = 0 ] && cmp -s "$T/src/eight" "$T/lock/eight" &&
	[ "$took" -le $((HELLO + 20)) ] && ok=1
result $ok "64 idle connections held: the sender still gets through (exit $crc, ${took}s; $(cat "$T/idle64.out"))"
[ $ok = 1 ] || show "$T/idle64.out" "$T/idle64.err" "$T/lock.c.err" "$T/lock.err"
ok=0
[ "$src" = 0 ] && [ "$(json_field "$T/lock.json" connections)" = 1 ] &&
	grep -q "no HELLO" "$T/lock.err" && ok=1
result $ok "serve --count 1 ends after the real transfer, exit 0; strangers dropped (exit $src)"
[ $ok = 1 ] || show "$T/lock.err" "$T/lock.json"

echo "# $SECONDS s"
# --- serve --count 1 and strangers before and during a live transfer
mkdir -p "$T/cnt"
start_serve cnt $((PORT + 1)) --dir "$T/cnt" --count 1 --hello-timeout 2 \
	--token-file "$T/good.tok" --json "$T/cnt.json"
timeout 30 "$CP" send --token-file "$T/bad.tok" "$T/src/eight" "$ADDR:$((PORT + 1))" \
	>"$T/cnt.s1.out" 2>"$T/cnt.s1.err"
s1=$?
# The real transfer takes about 16 s: the strangers below all come during it,
# however slowly the lab starts each program.
timeout 90 "$CP" send --token-file "$T/good.tok" --limit-rate 1M "$T/src/sixteen" \
	"$ADDR:$((PORT + 1))" >"$T/cnt.c.out" 2>"$T/cnt.c.err" &
cpid=$!
PIDS+=("$cpid")
sleep 0.5
timeout 30 "$CP" send "$T/src/eight" "$ADDR:$((PORT + 1))" >"$T/cnt.s2.out" 2>"$T/cnt.s2.err"
s2=$?
timeout 30 "$CP" send --token-file "$T/bad.tok" "$T/src/eight" "$ADDR:$((PORT + 1))" \
	>"$T/cnt.s3.out" 2>"$T/cnt.s3.err"
s3=$?
hold_idle cnt.idle $((PORT + 1)) 4 4
wait_pid "$cpid" 90
crc=$?
kill "$IDLE_PID" 2>/dev/null
wait_pid "$SERVE_PID" 30
src=$?
json_load "$T/cnt.json"
ok=0
[ "$s1" = 5 ] && [ "$s2" = 5 ] && [ "$s3" = 5 ] && ok=1
result $ok "strangers with a wrong or no token are refused (exit $s1, $s2, $s3)"
[ $ok = 1 ] || show "$T/cnt.s1.err" "$T/cnt.s2.err" "$T/cnt.s3.err"
ok=0
[ "$crc" = 0 ] && cmp -s "$T/src/sixteen" "$T/cnt/sixteen" &&
	grep -q "established 4 refused 0" "$T/cnt.idle.out" && ok=1
result $ok "the live transfer survives them and completes byte for byte (exit $crc; $(cat "$T/cnt.idle.out"))"
[ $ok = 1 ] || show "$T/cnt.c.err" "$T/cnt.err"
ok=0
[ "$src" = 0 ] && [ "$(json_field "$T/cnt.json" connections)" = 1 ] &&
	[ "$(json_field "$T/cnt.json" refused)" -ge 3 ] && ok=1
result $ok "serve --count 1 counted only the real sender and exits 0 (exit $src)"
[ $ok = 1 ] || show "$T/cnt.err" "$T/cnt.json"

echo "# $SECONDS s"
# --- token guessing: after 3 wrong tokens from one address, each more
# failure holds that address back for a time that doubles (2 s first),
# without checking what it sends meanwhile, not even the right token.
mkdir -p "$T/guess"
start_serve guess $((PORT + 7)) --dir "$T/guess" --count 1 --token-file "$T/good.tok" \
	--json "$T/guess.json"
timeout 60 "$HOSTILE" guess "$ADDR" $((PORT + 7)) 6 "$T/good.tok" >"$T/guess.h.out" \
	2>"$T/guess.h.err"
hrc=$?
nap 3 # the hold from the 4th failure (2 s) is over: the right token gets in
timeout 60 "$CP" send --token-file "$T/good.tok" "$T/src/small" "$ADDR:$((PORT + 7))" \
	>"$T/guess.c.out" 2>"$T/guess.c.err"
crc=$?
wait_pid "$SERVE_PID" 30
src=$?
ok=0
[ "$hrc" = 0 ] && [ "$(grep -c 'refused: wrong token$' "$T/guess.h.out")" = 3 ] &&
	grep -q '^try 4: .*refused: wrong token; .* held back for 2 s' "$T/guess.h.out" &&
	grep -q '^try 6: .*too many wrong tokens from .*, try again in [12] s' "$T/guess.h.out" &&
	grep -q '^good: .*too many wrong tokens' "$T/guess.h.out" && ok=1
result $ok "wrong tokens back off per address: 3 free, then held back, even the right token"
[ $ok = 1 ] || show "$T/guess.h.out" "$T/guess.h.err" "$T/guess.err"
ok=0
[ "$crc" = 0 ] && [ "$src" = 0 ] && cmp -s "$T/src/small" "$T/guess/small" && ok=1
result $ok "once the hold is over the right token gets the file through (exit $crc, serve $src)"
[ $ok = 1 ] || show "$T/guess.c.err" "$T/guess.err"

echo "# $SECONDS s"
# --- half-open connections: requests whose RTU never comes (the peer
# never completes the connection). Sixteen fill --max-pending; a token
# holder must still get in at once: the oldest half-open one makes room.
# Before, eviction picked only established connections: refused until the
# connection manager gave up on them, more than a minute later.
mkdir -p "$T/half"
start_serve half $((PORT + 8)) --dir "$T/half" --count 1 --hello-timeout 60 \
	--token-file "$T/good.tok" --json "$T/half.json"
"$HOSTILE" halfopen "$ADDR" $((PORT + 8)) 16 60 >"$T/half.h.out" 2>"$T/half.h.err" &
hpid=$!
PIDS+=("$hpid")
await_line "$T/half.h.out" requested "$hpid" 600
timeout 20 "$CP" send --token-file "$T/good.tok" "$T/src/small" "$ADDR:$((PORT + 8))" \
	>"$T/half.c.out" 2>"$T/half.c.err"
crc=$?
wait_pid "$SERVE_PID" 30
src=$?
kill "$hpid" 2>/dev/null
ok=0
[ "$crc" = 0 ] && cmp -s "$T/src/small" "$T/half/small" &&
	grep -q "requested 16" "$T/half.h.out" && ok=1
result $ok "16 half-open requests fill --max-pending: a token holder still gets in (exit $crc; $(cat "$T/half.h.out"))"
[ $ok = 1 ] || show "$T/half.h.out" "$T/half.h.err" "$T/half.c.err" "$T/half.err"
ok=0
[ "$src" = 0 ] && grep -q "not established, dropped for a newer request" "$T/half.err" &&
	[ "$(json_field "$T/half.json" refused)" -ge 1 ] && ok=1
result $ok "the oldest half-open one was dropped for it, counted as refused (serve exit $src)"
[ $ok = 1 ] || show "$T/half.err" "$T/half.json"

echo "# $SECONDS s"
# --- the HELLO deadline runs from the request: half-open connections go
# after --hello-timeout even when nothing needs their place.
mkdir -p "$T/dl"
start_serve dl $((PORT + 9)) --dir "$T/dl" --hello-timeout 2 --max-pending 64 --json "$T/dl.json"
"$HOSTILE" halfopen "$ADDR" $((PORT + 9)) 4 60 >"$T/dl.h.out" 2>"$T/dl.h.err" &
hpid=$!
PIDS+=("$hpid")
await_line "$T/dl.h.out" requested "$hpid" 600
await_count "$T/dl.err" "not established within 2 s of its request" 4 60
dropped=$(grep -c "not established within 2 s of its request" "$T/dl.err")
kill "$SERVE_PID" 2>/dev/null
wait_pid "$SERVE_PID" 30
kill "$hpid" 2>/dev/null
ok=0
[ "$dropped" = 4 ] && [ "$(json_field "$T/dl.json" refused)" = 4 ] && ok=1
result $ok "half-open requests are dropped --hello-timeout (2 s) after the request ($dropped of 4 within 6 s)"
[ $ok = 1 ] || show "$T/dl.h.out" "$T/dl.h.err" "$T/dl.err" "$T/dl.json"

echo "# $SECONDS s"
# --- a reconnect loop: each connection sends HELLO, never the AUTH its
# CHALLENGE asks for (protocol 6), and never answers the disconnect; then a flood of half-open requests, many within
# one loop pass. Refused connections give back their QP at once and count
# toward --max-pending until then, and a request that finds the gate full
# drops its victim (on this one thread) inside its own callback: serve
# holds at most --max-pending QPs for strangers, one more while a request
# is being set up. And the refusals are logged a few a second, with a
# count of the rest. Before, each refused one kept its QP until the
# disconnect timed out (5 s, then up to 3 s of flushing), and every
# refusal had its line; then the victims went only at serve's next loop
# pass, so a burst within one pass held one more QP per request: 95 at a
# sample of the flood (197 under ASan). What is counted: serve's QPs, each
# a connection's (the listener and the rdma_cm's requests not yet taken
# have none); a victim in the middle of its destroy (state ERR) is one of
# the 5, the new request's QP (INIT) the one more.
mkdir -p "$T/churn"
start_serve churn $((PORT + 10)) --dir "$T/churn" --max-pending 4 --hello-timeout 30 \
	--token-file "$T/good.tok"
"$HOSTILE" churn "$ADDR" $((PORT + 10)) 10 >"$T/churn.h.out" 2>"$T/churn.h.err" &
hpid=$!
PIDS+=("$hpid")
# sample: QPs of serve and of process $1 now, added to the samples (the
# loop's show that the count works: it keeps up to 200). serve is stopped
# while rdma lists them: the list is a netlink dump of several messages
# in QP number order, and a QP serve makes between two messages (a higher
# number) is listed after the victim it destroyed was; unstopped, a
# sample counted QPs never alive at once (6 in a lab run, with 177 of
# the peer's QPs listed before serve's; hence the old check of 8).
most=0 seen=0
samples=
sample() {
	local q=0 h=0 l
	kill -STOP "$SERVE_PID" 2>/dev/null
	rdma res show qp >"$T/qp.txt" 2>"$T/rdma.err"
	kill -CONT "$SERVE_PID" 2>/dev/null
	while IFS= read -r l; do
		[[ $l =~ pid\ $SERVE_PID( |$) ]] && q=$((q + 1))
		[[ $l =~ pid\ $1( |$) ]] && h=$((h + 1))
	done <"$T/qp.txt"
	samples+=" $q/$h"
	[ "$q" -gt "$most" ] && most=$q
	[ "$h" -gt "$seen" ] && seen=$h
}
nap 2
for ((i = 0; i < 6; i++)); do
	sample "$hpid"
	nap 1
done
wait_pid "$hpid" 60
"$HOSTILE" halfopen "$ADDR" $((PORT + 10)) 200 20 >"$T/flood.h.out" 2>"$T/flood.h.err" &
fpid=$!
PIDS+=("$fpid")
samples+=" |"
for ((i = 0; i < 6; i++)); do
	sample "$fpid"
	nap 0.2
done
kill "$fpid" 2>/dev/null
kill "$SERVE_PID" 2>/dev/null
wait_pid "$SERVE_PID" 30
conns=$(sed -n 's/^connections //p' "$T/churn.h.out")
lines=$(grep -c "serve: $ADDR: " "$T/churn.err")
ok=0
# The bound as designed: --max-pending, one more while a request is
# being set up.
[ -n "$conns" ] && [ "$conns" -ge 20 ] && [ "$seen" -ge 5 ] && [ "$most" -le 5 ] && ok=1
result $ok "a reconnect loop of $conns refused connections, then half-open requests: serve held at most $most QPs (--max-pending 4, bound 5; samples serve/peer:$samples)"
[ $ok = 1 ] || show "$T/churn.h.out" "$T/churn.h.err" "$T/flood.h.err" "$T/rdma.err" "$T/churn.err"
ok=0
# 5 at once, then one a second: about 25 over this section's 20 s. With
# protocol 6 the loop's connections wait in the gate to be evicted (no
# AUTH) instead of being refused at once, and the last of them go with
# the flood: the lab logged exactly 25, so the bound is 30.
[ -n "$conns" ] && [ "$lines" -le 30 ] && [ "$lines" -lt "$conns" ] &&
	grep -q "more refusals not logged" "$T/churn.err" && ok=1
result $ok "refusals are logged a few a second with a count of the rest ($lines lines for $conns)"
[ $ok = 1 ] || show "$T/churn.err"

echo "# $SECONDS s"
# --- an admitted peer RDMA WRITEs past the end of its window: the device
# refuses it and serve's QP goes into error, and the peer stays connected
# (never disconnects, never answers). serve must count a failed connection
# and free its QP at once, long before --timeout (120 s). Before, the
# flushed receives were taken for a disconnect still to come: the slot and
# its window stayed until --timeout.
mkdir -p "$T/bad"
start_serve bad $((PORT + 11)) --dir "$T/bad" --timeout 120 --json "$T/bad.json"
"$HOSTILE" badwrite "$ADDR" $((PORT + 11)) 150 >"$T/bad.h.out" 2>"$T/bad.h.err" &
hpid=$!
PIDS+=("$hpid")
await_line "$T/bad.h.out" attack "$hpid" 600
start=$SECONDS
freed=
for ((i = 0; i < 300 && SECONDS - start < 60; i++)); do
	text=
	IFS= read -r -d '' text <"$T/bad.err"
	if [[ $text == *"connection lost"* ]]; then
		rdma res show qp >"$T/bad.qp" 2>"$T/rdma.err"
		q=0
		while IFS= read -r l; do
			[[ $l =~ pid\ $SERVE_PID( |$) ]] && q=$((q + 1))
		done <"$T/bad.qp"
		[ "$q" = 0 ] && freed=$((SECONDS - start)) && break
	fi
	nap 0.2
done
held=0
kill -0 "$hpid" 2>/dev/null && held=1
kill "$SERVE_PID" 2>/dev/null
wait_pid "$SERVE_PID" 30
kill "$hpid" 2>/dev/null
json_load "$T/bad.json"
ok=0
[ -n "$freed" ] && [ "$held" = 1 ] && grep -q '^attack: remote access error' "$T/bad.h.out" && ok=1
result $ok "a write past the window puts serve's QP into error, the peer stays: serve freed it after ${freed:-more than 60} s (--timeout 120; $(head -n 1 "$T/bad.h.out"))"
[ $ok = 1 ] || show "$T/bad.h.out" "$T/bad.h.err" "$T/bad.qp" "$T/bad.err"
ok=0
lost=$(grep -c "connection lost" "$T/bad.err")
# Gone before the SIGTERM: nothing left for it to interrupt.
[ "$lost" = 1 ] && ! grep -q "receiver interrupted" "$T/bad.err" &&
	[ "$(json_field "$T/bad.json" connections)" = 1 ] &&
	[ "$(json_field "$T/bad.json" failures)" = 1 ] && ok=1
result $ok "it is logged once as lost and counted as a failed connection ($lost lines, failures $(json_field "$T/bad.json" failures))"
[ $ok = 1 ] || show "$T/bad.err" "$T/bad.json"

echo "# $SECONDS s"
# --- hostile names: 8-bit and C1 bytes from the peer, control bytes locally
mkdir -p "$T/names"
evil=$'n\x9b[31m\xff\xfe'
raw=$'\e[2J\xc3'
start_serve names $((PORT + 2)) --dir "$T/names" --count 2 --json "$T/names.json"
timeout 30 "$CP" send --as "$evil" "$T/src/small" "$ADDR:$((PORT + 2))" \
	>"$T/n1.out" 2>"$T/n1.err"
n1=$?
printf 'other\n' >"$T/src/other" # the same content would be a success
timeout 30 "$CP" send --as "$evil" --json "$T/n2.json" "$T/src/other" "$ADDR:$((PORT + 2))" \
	>"$T/n2.out" 2>"$T/n2.err"
n2=$?
timeout 30 "$CP" send --json "$T/n3.json" "$T/src/$raw
fake line" "$ADDR:$((PORT + 2))" >"$T/n3.out" 2>"$T/n3.err"
n3=$?
wait_pid "$SERVE_PID" 30
src=$?
ok=0
[ "$n1" = 0 ] && [ "$n2" = 5 ] && [ "$n3" = 3 ] && cmp -s "$T/src/small" "$T/names/$evil" && ok=1
result $ok "a name with 8-bit bytes is stored as given; then exists; a bad local path (exit $n1, $n2, $n3)"
[ $ok = 1 ] || show "$T/n1.err" "$T/n2.err" "$T/n3.err" "$T/names.err"
ok=0
grep -qF 'received n\x9b[31m\xff\xfe (6 bytes' "$T/names.err" &&
	grep -qF 'refusing to replace n\x9b[31m\xff\xfe' "$T/names.err" &&
	grep -qF 'as n\x9b[31m\xff\xfe' "$T/n1.out" && grep -qF '\x1b[2J\xc3\x0afake line' "$T/n3.err" &&
	printable "$T/names.err" "$T/n1.out" "$T/n1.err" "$T/n2.err" "$T/n3.err" && ok=1
result $ok "every log line shows the names escaped, no raw control or 8-bit byte"
[ $ok = 1 ] || { show "$T/names.err" "$T/n1.out" "$T/n2.err" "$T/n3.err" | cat -v; }
ok=0
python3 -S - "$T/n2.json" "$T/n3.json" <<'PY' && printable "$T/n2.json" "$T/n3.json" && ok=1
import json, sys
e2 = json.load(open(sys.argv[1]))["error"]
e3 = json.load(open(sys.argv[2]))["error"]
assert "n\\x9b[31m\\xff\\xfe" in e2, e2
assert "\\x1b[2J\\xc3\\x0afake line" in e3, e3
PY
result $ok "--json errors carry the names escaped and parse as JSON"
[ $ok = 1 ] || show "$T/n2.json" "$T/n3.json" | cat -v

echo "# $SECONDS s"
# --- a sender rewriting its chunk while serve hashes and stores it. Each try
# ends stored (then the file must be exactly what the sender first wrote and
# declared the checksum of), refused with a checksum mismatch, or shut: the
# device refused a rewrite once serve had invalidated the slot's grant
# (then nothing is stored either). Before serve copied chunks out of the
# window, 4 of 36 tries in the lab stored bytes other than those it had
# checked; before each grant had its own memory window, no rewrite was shut.
mkdir -p "$T/rw"
start_serve rw $((PORT + 5)) --dir "$T/rw" --chunk 16M --window 1
outcomes=""
ok=1
# The try's output is matched line by line in the shell: in the lab each
# program started (grep) costs most of a second.
has_line() { # TEXT REGEX: does a line of TEXT match REGEX (ERE, anchored at ^)?
	local l
	while IFS= read -r l; do
		[[ $l =~ ^$2 ]] && return 0
	done <<<"$1"
	return 1
}
for ((i = 1; i <= 30; i++)); do
	timeout 60 "$HOSTILE" rewrite "$ADDR" $((PORT + 5)) "rw$i" "$T/rw.exp$i" \
		>"$T/rw$i.out" 2>"$T/rw$i.err" || { ok=0; show "$T/rw$i.err"; }
	out=
	IFS= read -r -d '' out <"$T/rw$i.out"
	has_line "$out" '(rewritten [1-9]|shut after [0-9]+ rewrites)' || ok=0
	if has_line "$out" 'stored' && cmp -s "$T/rw.exp$i" "$T/rw/rw$i"; then
		outcomes+=s
	elif has_line "$out" 'refused checksum' && [ ! -e "$T/rw/rw$i" ]; then
		outcomes+=r
	elif has_line "$out" 'shut after [0-9]* rewrites: remote access error' &&
		[ ! -e "$T/rw/rw$i" ]; then
		outcomes+=d
	else
		outcomes+=X
		ok=0
		show "$T/rw$i.out"
		[ -e "$T/rw/rw$i" ] && cmp "$T/rw.exp$i" "$T/rw/rw$i" | sed 's/^/# /'
	fi
done
kill "$SERVE_PID" 2>/dev/null
result $ok "a sender rewriting its chunk in the window: stored as checked, refused or shut, 30 tries ($outcomes: s stored, r refused, d shut by the device, X different)"
[ $ok = 1 ] || show "$T/rw.err"
# Its grant used up, a slot is shut: the device refuses the sender's own
# rewrites (no try was shut while one window served the whole connection).
ok=0
case $outcomes in *d*) ok=1 ;; esac
result $ok "a rewrite after the chunk arrived is refused by the device ($outcomes)"

echo "# $SECONDS s"
# --- a connection that never says HELLO writes into another connection's
# window with its real address and key (as a leaked WELCOME gives them):
# the device refuses it (a memory window serves only its own QP), and the
# victim's transfer completes intact. Before windows, the write landed.
mkdir -p "$T/steal"
start_serve steal $((PORT + 6)) --dir "$T/steal" --count 1
timeout 60 "$HOSTILE" steal "$ADDR" $((PORT + 6)) stolen "$T/steal.exp" \
	>"$T/steal.h.out" 2>"$T/steal.h.err"
hrc=$?
wait_pid "$SERVE_PID" 30
ok=0
[ "$hrc" = 0 ] && grep -q '^attack: remote access error' "$T/steal.h.out" &&
	grep -q '^stored' "$T/steal.h.out" && cmp -s "$T/steal.exp" "$T/steal/stolen" && ok=1
result $ok "a stranger's RDMA WRITE into another connection's window is refused, that transfer intact ($(head -n 1 "$T/steal.h.out"))"
[ $ok = 1 ] || show "$T/steal.h.out" "$T/steal.h.err" "$T/steal.err"

echo "# $SECONDS s"
# --- proxy: a TCP client beyond --max-clients; chunks go out full
mkdir -p "$T/px"
start_serve pxs $((PORT + 3)) --dir "$T/px" --count 3 --chunk 64K
"$CP" proxy --tcp-listen 127.0.0.1:$((PORT + 4)) --to "$ADDR:$((PORT + 3))" --count 3 \
	--max-clients 2 --chunk 64K --window 8 --prefix px --json "$T/px.json" \
	>"$T/px.out" 2>"$T/px.err" &
ppid=$!
PIDS+=("$ppid")
await_line "$T/px.out" listening "$ppid" 300
python3 -S - "$T" $((PORT + 4)) <<'PY' >"$T/px.clients" 2>&1
import os, socket, sys, time
tmp, port = sys.argv[1], int(sys.argv[2])
data = [os.urandom(1 << 20) for _ in range(2)]
cs = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
for c, d in zip(cs, data):
    c.sendall(d[:16384])
time.sleep(1)  # both are the proxy's clients now
x = socket.create_connection(("127.0.0.1", port), timeout=20)
try:
    third = x.recv(512).decode(errors="replace")
except OSError as e:
    third = f"no answer: {e}"
x.close()
print("third:", third.strip())
# The rest in small pieces: each recv of the proxy gets far less than a chunk.
for off in range(16384, 1 << 20, 16384):
    for c, d in zip(cs, data):
        c.sendall(d[off:off + 16384])
    time.sleep(0.002)
for i, (c, d) in enumerate(zip(cs, data)):
    c.shutdown(socket.SHUT_WR)
    reply = b""
    while not reply.endswith(b"\n"):
        b = c.recv(512)
        if not b:
            break
        reply += b
    print(f"reply{i}:", reply.decode(errors="replace").strip())
    w = reply.split()
    ok = len(w) == 4 and w[0] == b"OK" and open(f"{tmp}/px/{w[3].decode()}", "rb").read() == d
    print(f"stored{i}:", "same" if ok else "DIFFERENT")
# A slot is free again: an empty stream is taken (and ends --count 3).
c = socket.create_connection(("127.0.0.1", port), timeout=30)
c.shutdown(socket.SHUT_WR)
print("last:", c.recv(512).decode(errors="replace").strip())
PY
wait_pid "$ppid" 60
prc=$?
wait_pid "$SERVE_PID" 30
src=$?
json_load "$T/px.json"
echo "# $SECONDS s: proxy exit $prc, serve exit $src"
ok=0
grep -q "^third: ERROR too many clients (--max-clients 2)" "$T/px.clients" &&
	grep -q "TCP client refused" "$T/px.err" && [ "$(json_field "$T/px.json" refused)" = 1 ] && ok=1
result $ok "a third TCP client over --max-clients 2 is refused with a clear message"
[ $ok = 1 ] || { show "$T/px.clients" "$T/px.json"; cat -A "$T/px.err" | sed 's/^/# px.err: /'; }
[ $ok = 1 ] || show "$T/pxs.err"
ok=0
[ "$prc" = 0 ] && [ "$(grep -c "^stored.: same" "$T/px.clients")" = 2 ] &&
	grep -q "^last: OK 0 " "$T/px.clients" &&
	[ "$(json_field "$T/px.json" chunks)" = 32 ] && ok=1
result $ok "two streams of 1 MiB in 16 KiB pieces: stored, in 32 full 64K chunks; then an empty one (exit $prc, chunks $(json_field "$T/px.json" chunks))"
[ $ok = 1 ] || show "$T/px.clients" "$T/px.err" "$T/px.json"
finish
