#!/bin/bash
# ringrdma-cp send -r in the lab: a tree with modes, mtimes (to the
# nanosecond), empty and read-only directories, links and a special file
# round-trips under serve's umask, links skipped by default and sent as
# links with --links; a 10,000-file directory over --conns 4; a link
# planted in DIR is never followed; usage errors. Both sides are listed
# by one python3 run each time (type, mode, mtime, size, sha256, target).
#   tree.sh PATH/TO/ringrdma-cp
CP=${1:?usage: tree.sh PATH/TO/ringrdma-cp}
. "$(dirname "$0")/lib.sh" 11
PORT=7600
umask 022
(umask 077 && echo tree-test-token-0123456789 >"$T/token")
TOK=(--token-file "$T/token")

# The source tree: every mtime set bottom-up, after the contents, and
# the read-only directory's mode last.
python3 -S - "$T/src" <<'PY' || { echo "Bail out! cannot make the tree"; exit 1; }
import os, sys
root = sys.argv[1]
top = os.path.join(root, "top")
t = 1600000000 * 10**9
def f(rel, mode, size):
    global t
    p = os.path.join(top, rel)
    with open(p, "wb") as fh:
        fh.write(os.urandom(size))
    os.chmod(p, mode)
    t += 1000000007
    os.utime(p, ns=(t, t))
for d in ["sub/deeper/deepest", "emptydir", "rodir"]:
    os.makedirs(os.path.join(top, d))
f("a.txt", 0o644, 1000); f("exec.sh", 0o755, 10); f("secret", 0o600, 4096)
f("ro", 0o444, 1); f("suid", 0o4755, 5); f("wide", 0o666, 7); f("empty", 0o640, 0)
f("big", 0o644, 300 * 1024 + 3); f("sub/s1", 0o644, 65536)
f("sub/deeper/deepest/leaf", 0o600, 123); f("rodir/inside", 0o644, 9)
os.symlink("a.txt", os.path.join(top, "link"))
os.symlink("/nonexistent/x", os.path.join(top, "sub/dangling"))
os.symlink("sub", os.path.join(top, "dirlink"))
os.mkfifo(os.path.join(top, "fifo"))
for rel in ["link", "sub/dangling", "dirlink"]:
    t += 3
    os.utime(os.path.join(top, rel), ns=(t, t), follow_symlinks=False)
for d, mode in [("sub/deeper/deepest", 0o750), ("sub/deeper", 0o755), ("sub", 0o711),
                ("emptydir", 0o700), ("rodir", 0o555), ("", 0o750)]:
    p = os.path.join(top, d)
    os.chmod(p, mode)
    t += 999
    os.utime(p, ns=(t, t))
many = os.path.join(root, "many")
os.mkdir(many)
for i in range(10000):
    with open(os.path.join(many, "f%05d" % i), "wb") as fh:
        fh.write(os.urandom(i % 97))
PY

# 1. Links skipped (the default), three connections side by side.
mkdir -p "$T/d1" "$T/d2" "$T/d3" "$T/d4/real" "$T/outside"
start_serve s1 $PORT --dir "$T/d1" --count 3 "${TOK[@]}" --json "$T/s1.json"
timeout 300 "$CP" send -r --conns 3 "${TOK[@]}" --json "$T/c1.json" "$T/src/top" "$ADDR:$PORT" \
	>"$T/c1.out" 2>"$T/c1.err"
crc=$?
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$crc" = 0 ] && [ "$src" = 0 ] && ok=1
result $ok "send -r --conns 3 of a tree (send exit $crc, serve exit $src)"
[ $ok = 1 ] || show "$T/c1.err" "$T/s1.err"
diffs=$(same_tree "$T/src/top" "$T/d1/top" 0)
ok=0
[ -z "$diffs" ] && ok=1
result $ok "files, modes, mtimes, empty and read-only directories arrived; no link made"
[ $ok = 1 ] || echo "$diffs" | sed 's/^/# /'
ok=0
grep -q "skipping symbolic link $T/src/top/link (--links sends links)" "$T/c1.err" &&
	grep -q "skipping special file $T/src/top/fifo" "$T/c1.err" &&
	[ "$(grep -c skipping "$T/c1.err")" = 4 ] && ok=1
result $ok "each link and the FIFO skipped with a message"
[ $ok = 1 ] || show "$T/c1.err"

# 2. --links over one connection: links as links, the pipeline full.
start_serve s2 $((PORT + 1)) --dir "$T/d2" --count 1 --any-links "${TOK[@]}" --json "$T/s2.json"
timeout 300 "$CP" send -r --links "${TOK[@]}" --json "$T/c2.json" "$T/src/top/" \
	"$ADDR:$((PORT + 1))" >"$T/c2.out" 2>"$T/c2.err"
crc=$?
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$crc" = 0 ] && [ "$src" = 0 ] && ok=1
result $ok "send -r --links of the tree, as DIR/ (send exit $crc, serve exit $src)"
[ $ok = 1 ] || show "$T/c2.err" "$T/s2.err"
diffs=$(same_tree "$T/src/top" "$T/d2/top" 1)
ok=0
[ -z "$diffs" ] && ok=1
result $ok "the tree with its links, targets verbatim (a dangling one too), link mtimes"
[ $ok = 1 ] || echo "$diffs" | sed 's/^/# /'
json_load "$T/c2.json" "$T/s2.json"
ahead=$(json_field "$T/s2.json" files_ahead)
ok=0
[ "$(json_field "$T/c2.json" files)" = 11 ] && [ "$(json_field "$T/s2.json" files)" = 11 ] &&
	[ -n "$ahead" ] && [ "$ahead" -ge 1 ] && ok=1
result $ok "11 files counted on both sides, $ahead began while the one before was being named"
[ $ok = 1 ] || show "$T/c2.json" "$T/s2.json"

# 3. 10,000 files in one directory over four connections.
start_serve s3 $((PORT + 2)) --dir "$T/d3" --count 4 --quiet "${TOK[@]}" --json "$T/s3.json"
t0=$EPOCHREALTIME
timeout 900 "$CP" send -r --conns 4 --quiet "${TOK[@]}" --json "$T/c3.json" "$T/src/many" \
	"$ADDR:$((PORT + 2))" >"$T/c3.out" 2>"$T/c3.err"
crc=$?
t1=$EPOCHREALTIME
wait_pid "$SERVE_PID" 60
src=$?
secs=$(python3 -S -c "print('%.1f' % ($t1 - $t0))")
ok=0
[ "$crc" = 0 ] && [ "$src" = 0 ] && ok=1
result $ok "send -r --conns 4 of 10,000 files in $secs s (send exit $crc, serve exit $src)"
[ $ok = 1 ] || show "$T/c3.err" "$T/s3.err"
diffs=$(same_tree "$T/src/many" "$T/d3/many" 0)
json_load "$T/c3.json"
ok=0
[ -z "$diffs" ] && [ "$(json_field "$T/c3.json" files)" = 10000 ] &&
	[ "$(json_field "$T/c3.json" connections)" = 4 ] && ok=1
result $ok "all 10,000 arrived byte for byte with their modes and mtimes, over 4 connections"
[ $ok = 1 ] || { echo "$diffs" | sed 's/^/# /'; show "$T/c3.json"; }

# 4. A link planted in DIR where the tree's top goes: refused, not followed.
ln -s "$T/outside" "$T/d4/top"
start_serve s4 $((PORT + 3)) --dir "$T/d4" --count 1 "${TOK[@]}"
timeout 120 "$CP" send -r "${TOK[@]}" "$T/src/top" "$ADDR:$((PORT + 3))" >"$T/c4.out" 2>"$T/c4.err"
crc=$?
wait_pid "$SERVE_PID" 60
ok=0
[ "$crc" = 5 ] && grep -q "file exists" "$T/c4.err" && [ -z "$(ls -A "$T/outside")" ] &&
	[ -L "$T/d4/top" ] && ok=1
result $ok "a link in DIR in the tree's place is refused (exit $crc), nothing made through it"
[ $ok = 1 ] || show "$T/c4.err" "$T/s4.err"

# 5. Usage: a directory without -r, --links without -r.
"$CP" send "${TOK[@]}" "$T/src/top" "$ADDR:$((PORT + 4))" >"$T/c5.out" 2>"$T/c5.err"
crc=$?
ok=0
[ "$crc" = 3 ] && grep -q -- "-r sends its tree" "$T/c5.err" && ok=1
result $ok "a directory without -r is refused before connecting (exit $crc)"
[ $ok = 1 ] || show "$T/c5.err"
"$CP" send --links "$T/src/top/a.txt" "$ADDR:$((PORT + 4))" >"$T/c6.out" 2>"$T/c6.err"
crc=$?
ok=0
[ "$crc" = 2 ] && grep -q -- "--links needs -r" "$T/c6.err" && ok=1
result $ok "--links without -r is a usage error (exit $crc)"
[ $ok = 1 ] || show "$T/c6.err"
finish
