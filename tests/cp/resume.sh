#!/bin/bash
# ringrdma-cp retried, in the lab: a file already stored with the same
# content is a success (sent again in full and compared: no sender is
# told the hash of a file under its name), with other content a refusal;
# a transfer cut mid-file (sender killed) goes on from the partial the
# receiver kept, verified by hash, and one whose partial does not match
# starts again from 0; --no-resume keeps nothing.
#   resume.sh PATH/TO/ringrdma-cp
CP=${1:?usage: resume.sh PATH/TO/ringrdma-cp}
. "$(dirname "$0")/lib.sh" 11
PORT=7570
GEOM=(--chunk 64K --window 8) # a window of 512 KiB: bigger files resume

(umask 077 && printf 'resume-secret-0123456789\n' >"$T/tok")
mkdir -p "$T/src" "$T/dst"
head -c 200000 /dev/urandom >"$T/src/small"
head -c $((24 << 20)) /dev/urandom >"$T/src/big"
start_serve srv $PORT --dir "$T/dst" --token-file "$T/tok" "${GEOM[@]}"

# send NAME ARGS...: a send to serve, logs in $T/NAME.*; its exit status.
send() {
	local name=$1
	shift
	timeout 300 "$CP" send --token-file "$T/tok" "${GEOM[@]}" --json "$T/$name.json" "$@" \
		"$ADDR:$PORT" >"$T/$name.out" 2>"$T/$name.err"
}

# --- the same small file twice, then other content under its name
send s1 "$T/src/small"
send s2 "$T/src/small"
rc=$?
ok=0
[ "$rc" = 0 ] && cmp -s "$T/src/small" "$T/dst/small" && grep -q 'already had small' "$T/srv.err" && ok=1
result $ok "the same small file sent again: success, exit 0 (exit $rc)"
[ $ok = 1 ] || show "$T/s2.err" "$T/srv.err"
head -c 200000 /dev/urandom >"$T/other"
send s3 --as small "$T/other"
rc=$?
ok=0
[ "$rc" = 5 ] && grep -q 'exists with other content' "$T/s3.err" && cmp -s "$T/src/small" "$T/dst/small" && ok=1
result $ok "other content under that name: refused, exit 5, the file untouched (exit $rc)"
[ $ok = 1 ] || show "$T/s3.err"

# --- the same large file twice: sent again in full, then compared (a
# resume is answered from a partial only, never from the named file)
send b1 "$T/src/big"
send b2 "$T/src/big"
rc=$?
json_load "$T/b2.json"
ok=0
[ "$rc" = 0 ] && [ "$(json_field "$T/b2.json" chunks)" -gt 0 ] &&
	[ "$(json_field "$T/b2.json" bytes_resumed)" = 0 ] && cmp -s "$T/src/big" "$T/dst/big" && ok=1
result $ok "the same large file sent again: exit 0, sent in full and compared (exit $rc, chunks $(json_field "$T/b2.json" chunks))"
[ $ok = 1 ] || show "$T/b2.err" "$T/srv.err"

# cut NAME FILE ARGS...: send FILE slowly (1 MiB/s), kill -9 the sender
# about 2 s after the receiver's partial got its first bytes (builtins
# only: in the lab every program started costs a good part of a second),
# wait until the receiver has let go of it.
cut() {
	local name=$1 file=$2 i
	shift 2
	# No timeout(1) in between: the KILL must reach the sender itself
	# (cleanup kills it on every exit path).
	"$CP" send --token-file "$T/tok" "${GEOM[@]}" --limit-rate 1M "$@" "$file" \
		"$ADDR:$PORT" >"$T/$name.out" 2>"$T/$name.err" &
	local pid=$!
	PIDS+=("$pid")
	for ((i = 0; i < 600; i++)); do
		[ -s "$T/dst/.${file##*/}.rrcp-partial" ] && break
		# No partial to watch: a few seconds' worth went.
		[ "$*" = --no-resume ] && [ $i -ge 30 ] && break
		nap 0.1
	done
	nap 2
	kill -9 "$pid"
	wait "$pid" 2>/dev/null
	await_line "$T/srv.err" "during ${file##*/} after" "$SERVE_PID" 300
}

# resend NAME FILE: send, again while the receiver still holds the last
# connection's partial ("busy"); its exit status.
resend() {
	local i rc
	for ((i = 0; i < 10; i++)); do
		send "$1" "$2"
		rc=$?
		[ "$rc" = 5 ] && grep -q 'another connection' "$T/$1.err" && { nap 1; continue; }
		return $rc
	done
	return $rc
}

# --- cut mid-file, sent again: goes on from the partial
head -c $((32 << 20)) /dev/urandom >"$T/src/cutme"
cut c1 "$T/src/cutme"
held=$(stat -c %s "$T/dst/.cutme.rrcp-partial" 2>/dev/null || echo 0)
pmode=$(stat -c %a "$T/dst/.cutme.rrcp-partial" 2>/dev/null)
ok=0
[ "$held" -gt 0 ] && [ "$held" -lt $((32 << 20)) ] && [ ! -e "$T/dst/cutme" ] &&
	[ "$pmode" = 600 ] && grep -q 'the partial is kept' "$T/srv.err" && ok=1
result $ok "a sender killed mid-file leaves a partial of $held bytes, mode $pmode, no file under the name"
[ $ok = 1 ] || show "$T/c1.err" "$T/srv.err"
resend c2 "$T/src/cutme"
rc=$?
json_load "$T/c2.json"
res=$(json_field "$T/c2.json" bytes_resumed)
chunks=$(json_field "$T/c2.json" chunks)
ok=0
[ "$rc" = 0 ] && [ "${res:-0}" -gt 0 ] && [ "$res" -lt $((32 << 20)) ] &&
	[ $((chunks * 65536)) -lt $((32 << 20)) ] && ok=1
result $ok "sent again it resumes: exit $rc, $res bytes held, $chunks chunks of 64K sent"
[ $ok = 1 ] || show "$T/c2.err" "$T/srv.err"
ok=0
fmode=$(stat -c %a "$T/dst/cutme" 2>/dev/null)
cmp -s "$T/src/cutme" "$T/dst/cutme" && [ ! -e "$T/dst/.cutme.rrcp-partial" ] &&
	[ "$fmode" = "$(printf %o $((0644 & ~$(umask))))" ] &&
	grep -q "xxh3 $(sed -n 's/.*cutme: [0-9]* bytes, xxh3 //p' "$T/c2.out")" "$T/srv.err" && ok=1
result $ok "the resumed file is the source byte for byte (mode $fmode), same hash on both sides, no partial left"
[ $ok = 1 ] || show "$T/c2.out" "$T/srv.err"

# --- a partial that is not the file's beginning: sent from 0
head -c $((32 << 20)) /dev/urandom >"$T/src/mism"
cut m1 "$T/src/mism"
held=$(stat -c %s "$T/dst/.mism.rrcp-partial" 2>/dev/null || echo 0)
printf 'XXXXXXXX' | dd of="$T/dst/.mism.rrcp-partial" bs=1 seek=1000 conv=notrunc status=none
resend m2 "$T/src/mism"
rc=$?
json_load "$T/m2.json"
ok=0
[ "$held" -gt 0 ] && [ "$rc" = 0 ] && [ "$(json_field "$T/m2.json" bytes_resumed)" = 0 ] &&
	cmp -s "$T/src/mism" "$T/dst/mism" && [ ! -e "$T/dst/.mism.rrcp-partial" ] && ok=1
result $ok "a partial changed behind our back: its hash differs, sent from 0, stored intact (exit $rc)"
[ $ok = 1 ] || show "$T/m2.err" "$T/srv.err"

# --- --no-resume: nothing kept
head -c $((32 << 20)) /dev/urandom >"$T/src/whole"
cut w1 "$T/src/whole" --no-resume
ok=0
[ ! -e "$T/dst/.whole.rrcp-partial" ] && [ ! -e "$T/dst/whole" ] && ok=1
result $ok "--no-resume: a cut transfer keeps nothing"
[ $ok = 1 ] || { ls -la "$T/dst" | sed 's/^/# /'; show "$T/w1.err"; }
send w2 --no-resume "$T/src/whole"
rc=$?
json_load "$T/w2.json"
ok=0
[ "$rc" = 0 ] && [ "$(json_field "$T/w2.json" bytes_resumed)" = 0 ] && cmp -s "$T/src/whole" "$T/dst/whole" && ok=1
result $ok "--no-resume sends the file whole (exit $rc)"
[ $ok = 1 ] || show "$T/w2.err"

# --- the serve side said what happened
ok=0
grep -q 'resuming cutme at' "$T/srv.err" && ok=1
result $ok "serve logs the resume"
ok=0
kill -0 "$SERVE_PID" 2>/dev/null && ok=1
result $ok "serve is still up"
[ $ok = 1 ] || show "$T/srv.err"
finish
