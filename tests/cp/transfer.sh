#!/bin/bash
# ringrdma-cp end to end in the lab: the edge sizes around a 64 KiB chunk
# and 64 MiB of random data in one run, many small files in one run,
# byte-for-byte, and the same files over four connections side by side;
# then 16 MiB and 128 MiB transfers (the default window is 64 MiB) whose
# peak RSS on both sides must be within a few MiB of each other (memory
# bounded by the window, not by the file). In the lab every program
# started costs most of a second: files are made, compared and parsed a
# batch at a time.
#   transfer.sh PATH/TO/ringrdma-cp
CP=${1:?usage: transfer.sh PATH/TO/ringrdma-cp}
. "$(dirname "$0")/lib.sh" 13
PORT=7500 CHUNK=65536

mkdir -p "$T/src" "$T/dst" "$T/many" "$T/dst2" "$T/big" "$T/dst3" "$T/dst4"
# random_files DIR/PREFIX SIZE...: DIR/PREFIXSIZE of SIZE random bytes each.
random_files() {
	python3 -S -c 'import os, sys
for n in sys.argv[2:]:
    with open(sys.argv[1] + n, "wb") as f:
        f.write(os.urandom(int(n)))' "$@"
}
# same_files A B NAME...: the names that differ between dirs A and B or are
# missing from B (one diff when all are there and alike).
same_files() {
	local a=$1 b=$2 f
	shift 2
	diff -rq "$a" "$b" >/dev/null 2>&1 && return 0
	for f in "$@"; do cmp -s "$a/$f" "$b/$f" || printf ' %s' "$f"; done
}
sizes="0 1 4095 4096 $((CHUNK - 1)) $CHUNK $((CHUNK + 1)) $((64 << 20))"
random_files "$T/src/f" $sizes
files=()
for s in $sizes; do
	files+=("$T/src/f$s")
done

# The receiver's window is smaller than the sender's: WELCOME lowers it, and
# the sender, whose buffers were registered before WELCOME, uses a part.
start_serve s1 $PORT --dir "$T/dst" --count 1 --json "$T/s1.json" --window 4
timeout 300 "$CP" send --chunk 64K --window 8 --json "$T/c1.json" "${files[@]}" "$ADDR:$PORT" \
	>"$T/c1.out" 2>"$T/c1.err"
crc=$?
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$crc" = 0 ] && [ "$src" = 0 ] && ok=1
result $ok "send of ${#files[@]} files of sizes $sizes (send exit $crc, serve exit $src)"
[ $ok = 1 ] || show "$T/c1.err" "$T/s1.err"
bad=$(same_files "$T/src" "$T/dst" $(printf 'f%s ' $sizes))
bad=${bad// f/ }
ok=0
[ -z "$bad" ] && ok=1
result $ok "every file arrived byte for byte${bad:+ (differ or missing:$bad)}"
json_load "$T/c1.json" "$T/s1.json"
ok=0
[ "$(json_field "$T/c1.json" files)" = 8 ] && [ "$(json_field "$T/s1.json" files)" = 8 ] &&
	[ "$(json_field "$T/c1.json" checksum)" = "$(json_field "$T/s1.json" checksum)" ] &&
	[ "$(json_field "$T/s1.json" window)" = 4 ] &&
	[ "$(json_field "$T/c1.json" bytes)" = "$(json_field "$T/s1.json" bytes)" ] && ok=1
result $ok "both --json summaries agree on files, bytes and the checksum"
[ $ok = 1 ] || show "$T/c1.json" "$T/s1.json"
ok=0
[ -z "$(ls -A "$T/dst" | grep -v '^f[0-9]*$')" ] && ok=1
result $ok "no temp file left behind"
rm -rf "$T/src"

many=() names=()
for ((i = 1; i <= 40; i++)); do
	many+=("$T/many/m$((i * 777))")
	names+=("m$((i * 777))")
done
random_files "$T/many/m" $(seq 777 777 $((40 * 777)))
# send_many TAG PORT DIR SERVE_COUNT [SEND OPTIONS...]: the 40 small files
# to a serve --count SERVE_COUNT storing in DIR; sets crc, src (exit codes)
# and bad (files that differ or are missing).
send_many() {
	local tag=$1 port=$2 dir=$3 count=$4
	shift 4
	start_serve "s$tag" "$port" --dir "$dir" --count "$count" --json "$T/s$tag.json"
	timeout 300 "$CP" send --chunk 4K --window 4 --json "$T/c$tag.json" "$@" "${many[@]}" \
		"$ADDR:$port" >"$T/c$tag.out" 2>"$T/c$tag.err"
	crc=$?
	wait_pid "$SERVE_PID" 60
	src=$?
	bad=$(same_files "$T/many" "$dir" "${names[@]}" | wc -w)
	json_load "$T/c$tag.json" "$T/s$tag.json"
}
send_many 2 $((PORT + 1)) "$T/dst2" 1
ahead=$(json_field "$T/s2.json" files_ahead)
ok=0
[ "$crc" = 0 ] && [ "$src" = 0 ] && [ "$bad" = 0 ] && ok=1
result $ok "40 files in one run, 4 KiB chunks, window 4 (exit $crc/$src, $bad differ)"
[ $ok = 1 ] || show "$T/c2.err" "$T/s2.err"
# One file ahead: the next file's FILE_START follows a FILE_END without
# waiting for FILE_DONE, so files arrive while the one before is synced
# and named (that takes ring round trips; FILE_START comes right after).
ok=0
[ -n "$ahead" ] && [ "$ahead" -ge 1 ] && [ "$ahead" -le 39 ] && ok=1
result $ok "one connection keeps its pipeline over file boundaries: $ahead of 39 files began early"
[ $ok = 1 ] || show "$T/c2.err" "$T/s2.err"

# --conns 4: four connections, each taking the next file when its last is
# sent; the receiver counts four authenticated connections.
send_many 4 $((PORT + 3)) "$T/dst4" 4 --conns 4
ok=0
[ "$crc" = 0 ] && [ "$src" = 0 ] && [ "$bad" = 0 ] &&
	[ "$(json_field "$T/c4.json" connections)" = 4 ] && [ "$(json_field "$T/c4.json" files)" = 40 ] &&
	[ "$(json_field "$T/s4.json" files)" = 40 ] && ok=1
result $ok "40 files over --conns 4 (exit $crc/$src, $bad differ, $(json_field "$T/c4.json" connections) connections)"
[ $ok = 1 ] || show "$T/c4.err" "$T/s4.err"
# Two of the four refused ("busy"): send fails as refused, at once, and
# ends the two admitted connections (serve counts them and exits).
rm -rf "$T/dst4" && mkdir "$T/dst4"
start_serve s5 $((PORT + 4)) --dir "$T/dst4" --count 2 --max-conns 2
timeout 120 "$CP" send --conns 4 --chunk 4K --window 4 "${many[@]}" "$ADDR:$((PORT + 4))" \
	>"$T/c5.out" 2>"$T/c5.err"
crc=$?
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$crc" = 5 ] && [ "$src" != 124 ] && grep -q busy "$T/c5.err" && ok=1
result $ok "send --conns 4 with two refused as busy: exit 5, serve ended (exit $crc/$src)"
[ $ok = 1 ] || show "$T/c5.err" "$T/s5.err"

# Peak RSS: same window, 8x the data.
rss_run() { # SIZE_MIB TAG
	head -c $(($1 << 20)) /dev/urandom >"$T/big/b$2"
	start_serve "r$2" $((PORT + 2)) --dir "$T/dst3" --count 1 --json "$T/r$2.s.json"
	timeout 500 "$CP" send --json "$T/r$2.c.json" "$T/big/b$2" "$ADDR:$((PORT + 2))" \
		>"$T/r$2.out" 2>"$T/r$2.err"
	local crc=$?
	wait_pid "$SERVE_PID" 60
	local src=$?
	cmp -s "$T/big/b$2" "$T/dst3/b$2"
	local same=$?
	rm -f "$T/big/b$2" "$T/dst3/b$2"
	json_load "$T/r$2.c.json" "$T/r$2.s.json"
	[ "$crc" = 0 ] && [ "$src" = 0 ] && [ "$same" = 0 ]
}
rss_run 16 small
ok_small=$?
rss_run 128 large
ok_large=$?
ok=0
[ $ok_small = 0 ] && [ $ok_large = 0 ] && ok=1
result $ok "16 MiB and 128 MiB transfers with the default window arrived intact"
[ $ok = 1 ] || show "$T/rsmall.err" "$T/rlarge.err" "$T/rsmall.err" "$T/rlarge.err"
# Under ASan the allocator's quarantine and shadow pages move peak RSS by
# several MiB from run to run: allow 16 MiB there, still far below the
# 240 MiB a file loaded whole would add.
slack=4
ldd "$CP" 2>/dev/null | grep -q libasan && slack=16
for side in c s; do
	a=$(json_field "$T/rsmall.$side.json" peak_rss_bytes)
	b=$(json_field "$T/rlarge.$side.json" peak_rss_bytes)
	ok=0
	d=$((b - a))
	[ -n "$a" ] && [ -n "$b" ] && [ "${d#-}" -lt $((slack << 20)) ] && ok=1
	name=sender
	[ $side = s ] && name=receiver
	result $ok "$name peak RSS: 16 MiB run ${a:-?} B, 128 MiB run ${b:-?} B (within $slack MiB)"
done
ok=0
mbs=$(json_field "$T/rlarge.c.json" mb_per_s)
cpu=$(json_field "$T/rlarge.c.json" cpu_seconds)
[ -n "$mbs" ] && [ -n "$cpu" ] && ok=1
result $ok "128 MiB send summary has rate and CPU: ${mbs:-?} MB/s, ${cpu:-?} CPU s"
# The data phase (first WELCOME to last FILE_DONE) lies inside the run.
ok=0
python3 -S - "$T/rlarge.c.json" "$T/rlarge.s.json" <<'PY' && ok=1
import json, sys
c, s = (json.load(open(p)) for p in sys.argv[1:3])
assert 0 < c["data_seconds"] <= c["seconds"], c
assert c["data_mb_per_s"] >= c["mb_per_s"], c
assert abs(c["data_mb_per_s"] * c["data_seconds"] - c["bytes"] / 1e6) < 0.01 * c["bytes"] / 1e6, c
assert "data_seconds" not in s, s
PY
result $ok "128 MiB send summary has its data phase: $(json_field "$T/rlarge.c.json" data_seconds) of $(json_field "$T/rlarge.c.json" seconds) s"
finish
