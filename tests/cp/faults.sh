#!/bin/bash
# ringrdma-cp when things go wrong, in the lab (runs as root in the VM):
# receiver disk full and read-only DIR, wrong or missing token, hostile
# names, sender and receiver killed mid-transfer. Each time: the documented
# exit code and a clear message on the survivor, and never a file under
# its final name unless it is complete.
#   faults.sh PATH/TO/ringrdma-cp
CP=${1:?usage: faults.sh PATH/TO/ringrdma-cp}
. "$(dirname "$0")/lib.sh" 18
PORT=7510

mkdir -p "$T/src"
head -c $((8 << 20)) /dev/urandom >"$T/src/eight"
head -c $((64 << 20)) /dev/urandom >"$T/src/big"
empty() { [ -d "$1" ] && [ -z "$(ls -A "$1")" ]; }

# --- receiver's disk fills up
mkdir -p "$T/full"
mount -t tmpfs -o size=2m tmpfs "$T/full" && MOUNTS+=("$T/full")
start_serve full $PORT --dir "$T/full" --count 1 --chunk 256K
timeout 120 "$CP" send "$T/src/eight" "$ADDR:$PORT" >"$T/full.c.out" 2>"$T/full.c.err"
crc=$?
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$crc" = 7 ] && grep -q "No space left" "$T/full.c.err" && ok=1
result $ok "disk full: sender exits 7 and says why (exit $crc)"
[ $ok = 1 ] || show "$T/full.c.err" "$T/full.err"
ok=0
[ "$src" = 3 ] && grep -q "No space left" "$T/full.err" && empty "$T/full" && ok=1
result $ok "disk full: serve exits 3, nothing left in DIR (exit $src)"
[ $ok = 1 ] || { show "$T/full.err"; ls -la "$T/full" | sed 's/^/# /'; }

# --- read-only DIR
mkdir -p "$T/ro"
mount -t tmpfs -o ro,size=1m tmpfs "$T/ro" && MOUNTS+=("$T/ro")
start_serve ro $((PORT + 1)) --dir "$T/ro" --count 1
timeout 120 "$CP" send "$T/src/eight" "$ADDR:$((PORT + 1))" >"$T/ro.c.out" 2>"$T/ro.c.err"
crc=$?
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$crc" = 7 ] && grep -q "Read-only file system" "$T/ro.c.err" && [ "$src" = 3 ] && ok=1
result $ok "unwritable DIR: sender exits 7, serve 3, both say why (exit $crc/$src)"
[ $ok = 1 ] || show "$T/ro.c.err" "$T/ro.err"

# --- tokens
tok "$T/good.tok" right-secret-0123456789
tok "$T/bad.tok" wrong-secret-0123456789
mkdir -p "$T/tok"
# Strangers do not count toward --count, nor change serve's exit status.
start_serve tok $((PORT + 2)) --dir "$T/tok" --count 1 --token-file "$T/good.tok"
timeout 60 "$CP" send --token-file "$T/bad.tok" "$T/src/eight" "$ADDR:$((PORT + 2))" \
	>"$T/tok1.out" 2>"$T/tok1.err"
c1=$?
timeout 60 "$CP" send "$T/src/eight" "$ADDR:$((PORT + 2))" >"$T/tok2.out" 2>"$T/tok2.err"
c2=$?
timeout 60 "$CP" send --token-file "$T/good.tok" "$T/src/eight" "$ADDR:$((PORT + 2))" \
	>"$T/tok3.out" 2>"$T/tok3.err"
c3=$?
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$c1" = 5 ] && grep -q "authentication failed: refused: wrong token" "$T/tok1.err" &&
	[ "$c2" = 5 ] && grep -q "refused: no token" "$T/tok2.err" && ok=1
result $ok "wrong and missing token: sender exits 5 with a clear error (exit $c1, $c2)"
[ $ok = 1 ] || show "$T/tok1.err" "$T/tok2.err"
ok=0
[ "$(grep -c "refused: .* token" "$T/tok.err")" = 2 ] && [ "$src" = 0 ] && ok=1
result $ok "serve logged both refusals and exits 0 after the one real transfer (exit $src)"
[ $ok = 1 ] || show "$T/tok.err"
ok=0
[ "$c3" = 0 ] && cmp -s "$T/src/eight" "$T/tok/eight" && [ "$(ls -A "$T/tok")" = eight ] && ok=1
result $ok "the right token gets the file through, and only that one (exit $c3)"
[ $ok = 1 ] || show "$T/tok3.err"

# --- hostile names
mkdir -p "$T/host" "$T/outside"
echo precious >"$T/outside/target"
ln -s "$T/outside" "$T/host/esc"
ln -s "$T/outside/target" "$T/host/lnk"
echo mine >"$T/host/existing"
names=("../x" "/tmp/abs" "esc/x" "a/../../x" "lnk" "existing" "nodir/x")
start_serve host $((PORT + 3)) --dir "$T/host" --count ${#names[@]}
codes=
for nm in "${names[@]}"; do
	timeout 60 "$CP" send --as "$nm" "$T/src/eight" "$ADDR:$((PORT + 3))" \
		>>"$T/host.c.out" 2>>"$T/host.c.err"
	codes="$codes $?"
done
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$codes" = " 5 5 5 5 5 5 5" ] && ok=1
result $ok "hostile names ${names[*]}: each refused with exit 5 (got$codes)"
[ $ok = 1 ] || show "$T/host.c.err"
ok=0
[ "$(cat "$T/outside/target")" = precious ] && [ "$(ls -A "$T/outside")" = target ] &&
	[ "$(cat "$T/host/existing")" = mine ] && [ -L "$T/host/lnk" ] && [ ! -e "$T/x" ] &&
	[ ! -e /tmp/abs ] && [ "$(ls -A "$T/host" | sort | tr '\n' ' ')" = "esc existing lnk " ] &&
	ok=1
result $ok "nothing written outside DIR or over existing files (serve exit $src)"
[ $ok = 1 ] || { show "$T/host.err"; ls -laR "$T/host" "$T/outside" | sed 's/^/# /'; }

# --- the sender dies mid-transfer
mkdir -p "$T/ks"
start_serve ks $((PORT + 4)) --dir "$T/ks" --count 1 --chunk 64K --window 4
"$CP" send --limit-rate 4M "$T/src/big" "$ADDR:$((PORT + 4))" >"$T/ks.c.out" 2>"$T/ks.c.err" &
spid=$!
PIDS+=("$spid")
sleep 3
kill -9 "$spid"
wait "$spid" 2>/dev/null
wait_pid "$SERVE_PID" 60
src=$?
ok=0
# A disconnect, or a SEND of ours failing first on the dead peer's QP.
[ "$src" = 4 ] && grep -Eq "(sender disconnected|connection lost) during big after [0-9]* bytes.*; the partial is kept" \
	"$T/ks.err" && ok=1
result $ok "sender killed: serve exits 4 and says so (exit $src)"
[ $ok = 1 ] || show "$T/ks.err"
ok=0
# Bigger than a window: a resend goes on from the partial (resume.sh).
[ "$(ls -A "$T/ks")" = .big.rrcp-partial ] && [ -s "$T/ks/.big.rrcp-partial" ] && ok=1
result $ok "sender killed: no file under its name, only the partial to resume from"
[ $ok = 1 ] || ls -la "$T/ks" | sed 's/^/# /'

# --- the receiver dies mid-transfer
mkdir -p "$T/kr"
start_serve kr $((PORT + 5)) --dir "$T/kr" --chunk 64K --window 4
"$CP" send --limit-rate 4M "$T/src/big" "$ADDR:$((PORT + 5))" >"$T/kr.c.out" 2>"$T/kr.c.err" &
spid=$!
PIDS+=("$spid")
sleep 3
kill -9 "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null
wait_pid "$spid" 90
crc=$?
ok=0
[ "$crc" = 4 ] && grep -Eq "connection to .* lost|failed|no progress" "$T/kr.c.err" && ok=1
result $ok "receiver killed: sender exits 4 with a clear error (exit $crc)"
[ $ok = 1 ] || show "$T/kr.c.err"
ok=0
[ ! -e "$T/kr/big" ] && ok=1
result $ok "receiver killed: nothing under the final name"

# --- the sender's own file is unreadable: refused before connecting
timeout 30 "$CP" send "$T/src/missing" "$ADDR:$PORT" >"$T/miss.out" 2>"$T/miss.err"
crc=$?
ok=0
[ "$crc" = 3 ] && grep -q "No such file" "$T/miss.err" && ok=1
result $ok "missing source file: exit 3 (got $crc)"

# --- one file ahead never costs the file before it: the second file
# vanishes while the first is sent (its open fails when the first's
# FILE_END goes, 4 s in), or has a name the receiver refuses; either way
# the first is stored, the run fails naming the second
mkdir -p "$T/nx" "$T/nx2"
cp "$T/src/eight" "$T/src/second"
start_serve nx $((PORT + 8)) --dir "$T/nx" --count 1 --chunk 64K
"$CP" send --limit-rate 2M "$T/src/eight" "$T/src/second" "$ADDR:$((PORT + 8))" \
	>"$T/nx.c.out" 2>"$T/nx.c.err" &
spid=$!
PIDS+=("$spid")
sleep 1
rm "$T/src/second"
wait_pid "$spid" 90
crc=$?
wait_pid "$SERVE_PID" 60
ok=0
[ "$crc" = 3 ] && grep -q "cannot open .*second" "$T/nx.c.err" &&
	cmp -s "$T/src/eight" "$T/nx/eight" && [ "$(ls -A "$T/nx")" = eight ] && ok=1
result $ok "the next file vanishes: the one before is stored, exit 3 (got $crc)"
[ $ok = 1 ] || { show "$T/nx.c.err" "$T/nx.err"; ls -la "$T/nx" | sed 's/^/# /'; }
bad=$T/src/$'b\001d'
head -c 5000 /dev/urandom >"$bad"
start_serve nx2 $((PORT + 9)) --dir "$T/nx2" --count 1 --chunk 64K
timeout 60 "$CP" send "$T/src/eight" "$bad" "$ADDR:$((PORT + 9))" >"$T/nx2.c.out" 2>"$T/nx2.c.err"
crc=$?
wait_pid "$SERVE_PID" 60
ok=0
[ "$crc" = 5 ] && cmp -s "$T/src/eight" "$T/nx2/eight" && [ "$(ls -A "$T/nx2")" = eight ] && ok=1
result $ok "the next file's name is refused: the one before is stored, exit 5 (got $crc)"
[ $ok = 1 ] || { show "$T/nx2.c.err" "$T/nx2.err"; ls -la "$T/nx2" | sed 's/^/# /'; }
rm -f "$bad"

# --- --force replaces existing files, also in a subdirectory: on tmpfs
# (O_TMPFILE, linked under a temp name and renamed over the old one), and
# on a file system without O_TMPFILE (a named temp file renamed), where
# the build tree is on one (the lab's 9p checkout)
force_case() { # NAME DIR PORT
	rm -rf "$2" && mkdir -p "$2/sub" && echo old >"$2/eight" && echo old >"$2/sub/e"
	start_serve "$1" "$3" --dir "$2" --count 2 --force --chunk 64K
	timeout 60 "$CP" send "$T/src/eight" "$ADDR:$3" >"$T/$1.c.out" 2>"$T/$1.c.err" &&
		timeout 60 "$CP" send --as sub/e "$T/src/eight" "$ADDR:$3" >>"$T/$1.c.out" \
			2>>"$T/$1.c.err"
	local crc=$?
	wait_pid "$SERVE_PID" 30
	local src=$?
	ok=0
	[ "$crc" = 0 ] && [ "$src" = 0 ] && cmp -s "$T/src/eight" "$2/eight" &&
		cmp -s "$T/src/eight" "$2/sub/e" && [ "$(ls -A "$2" | tr '\n' ' ')" = "eight sub " ] &&
		[ "$(ls -A "$2/sub")" = e ] && ok=1
	[ $ok = 1 ] || { show "$T/$1.c.err" "$T/$1.err"; ls -laR "$2" | sed 's/^/# /'; }
}
mkdir -p "$T/ft"
mount -t tmpfs -o size=64m tmpfs "$T/ft" && MOUNTS+=("$T/ft")
force_case ft "$T/ft/d" $((PORT + 6))
result $ok "--force replaces a file and one in a subdirectory, O_TMPFILE (exit 0)"
NT=$(dirname "$CP")/.rrcp-notmpfile.$$
mkdir -p "$NT"
if python3 -S -c 'import os, sys; os.open(sys.argv[1], os.O_WRONLY | os.O_TMPFILE)' "$NT" 2>/dev/null; then
	n=$((n + 1))
	echo "ok $n # SKIP $(dirname "$CP") supports O_TMPFILE: no named-temp path to test"
else
	force_case fn "$NT/d" $((PORT + 7))
	result $ok "--force replaces a file and one in a subdirectory, named temp files"
fi
rm -rf "$NT"

# --- bad command lines
"$CP" send "$T/src/eight" >/dev/null 2>"$T/usage.err"
c1=$?
"$CP" serve --listen "$ADDR:$PORT" --no-auth --dir "$T" --window 3 >/dev/null 2>>"$T/usage.err"
c2=$?
ok=0
[ "$c1" = 2 ] && [ "$c2" = 2 ] && ok=1
result $ok "usage errors exit 2 (got $c1, $c2)"
finish
