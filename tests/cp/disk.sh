#!/bin/bash
# ringrdma-cp on a disk file system (ext4 on a loop device; runs as root in
# the lab VM): serve --direct stores files intact around the page cache and
# refuses a DIR that takes no O_DIRECT; a frozen file system stalls only the
# connection that writes to it, never another one.
#   disk.sh PATH/TO/ringrdma-cp
CP=${1:?usage: disk.sh PATH/TO/ringrdma-cp}
. "$(dirname "$0")/lib.sh" 8
PORT=7650

# ext4 in a file on the guest's /tmp, mounted at $T/root/cold.
mkdir -p "$T/src" "$T/root/cold" "$T/ram"
# The kernel's own module loader: the lab keeps its modules elsewhere.
for m in loop ext4; do "$(cat /proc/sys/kernel/modprobe)" -q "$m" >>"$T/mkfs.out" 2>&1; done
truncate -s 128M "$T/ext4.img"
mkfs.ext4 -q -F "$T/ext4.img" >"$T/mkfs.out" 2>&1 &&
	mount -o loop "$T/ext4.img" "$T/root/cold" 2>>"$T/mkfs.out" && MOUNTS+=("$T/root/cold")
show "$T/mkfs.out"
# Thaw before lib.sh unmounts: a frozen mount would hold the exit forever.
trap 'fsfreeze -u "$T/root/cold" 2>/dev/null; cleanup' EXIT

head -c $(((8 << 20) + 1000)) /dev/urandom >"$T/src/odd"  # unaligned tail
head -c $((3 * 4096)) /dev/urandom >"$T/src/blocks"      # whole blocks only
head -c 100 /dev/urandom >"$T/src/tiny"                  # a tail alone
head -c $((16 << 20)) /dev/urandom >"$T/src/big"

# --- --direct: intact, and the page cache holds at most each file's tail
D=$T/root/cold/direct
mkdir -p "$D"
start_serve direct $PORT --dir "$D" --count 1 --direct --chunk 64K
timeout 120 "$CP" send "$T/src/odd" "$T/src/blocks" "$T/src/tiny" "$ADDR:$PORT" \
	>"$T/direct.c.out" 2>"$T/direct.c.err"
crc=$?
wait_pid "$SERVE_PID" 60
src=$?
# Before anything reads them: 2049 pages of odd, 3 of blocks and 1 of tiny
# when written through the cache; O_DIRECT leaves only the tails (odd's last
# page, tiny) there.
pages=$(fincore --noheadings --raw --output PAGES "$D/odd" "$D/blocks" "$D/tiny" 2>/dev/null |
	awk '{s += $1; n++} END {print (n == 3 ? s : "?")}')
ok=0
[ "$pages" != "?" ] && [ "$pages" -le 2 ] && ok=1
result $ok "--direct: the stored files' data is not in the page cache ($pages pages are)"
ok=0
[ "$crc" = 0 ] && [ "$src" = 0 ] && cmp -s "$T/src/odd" "$D/odd" &&
	cmp -s "$T/src/blocks" "$D/blocks" && cmp -s "$T/src/tiny" "$D/tiny" && ok=1
result $ok "--direct on ext4: three files stored intact (exit $crc/$src)"
[ $ok = 1 ] || show "$T/direct.c.err" "$T/direct.err"

# --- a file system without O_DIRECT (tmpfs on 6.1) is refused up front
mount -t tmpfs -o size=1m tmpfs "$T/ram" && MOUNTS+=("$T/ram")
timeout 30 "$CP" serve --listen "$ADDR:$((PORT + 1))" --no-auth --dir "$T/ram" --direct \
	>"$T/ram.out" 2>"$T/ram.err"
src=$?
if python3 -S -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_WRONLY | os.O_TMPFILE | os.O_DIRECT))' \
	"$T/ram" 2>/dev/null; then
	n=$((n + 1))
	echo "ok $n # SKIP this kernel's tmpfs takes O_DIRECT: nothing to refuse"
else
	ok=0
	[ "$src" = 3 ] && grep -q "takes no O_DIRECT" "$T/ram.err" && ok=1
	result $ok "--direct on tmpfs: serve refuses to start, exit 3 (exit $src)"
	[ $ok = 1 ] || show "$T/ram.out" "$T/ram.err"
fi

# --- a frozen file system stalls only its own connection
rm -rf "$T/root/cold/direct"
start_serve frozen $((PORT + 2)) --dir "$T/root" --count 2 --chunk 256K
fsfreeze -f "$T/root/cold"
timeout 120 "$CP" send --as cold/big "$T/src/big" "$ADDR:$((PORT + 2))" \
	>"$T/cold.c.out" 2>"$T/cold.c.err" &
cold=$!
PIDS+=("$cold")
sleep 1 # let the frozen one start first; the checks below do not depend on it
timeout 60 "$CP" send --as warm "$T/src/big" "$ADDR:$((PORT + 2))" \
	>"$T/warm.c.out" 2>"$T/warm.c.err"
wrc=$?
ok=0
[ "$wrc" = 0 ] && cmp -s "$T/src/big" "$T/root/warm" && kill -0 "$cold" 2>/dev/null &&
	[ ! -e "$T/root/cold/big" ] && ok=1
result $ok "one connection's file system frozen: another stores its file meanwhile (exit $wrc)"
[ $ok = 1 ] || show "$T/warm.c.err" "$T/cold.c.err" "$T/frozen.err"
fsfreeze -u "$T/root/cold"
wait_pid "$cold" 60
crc=$?
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$crc" = 0 ] && [ "$src" = 0 ] && cmp -s "$T/src/big" "$T/root/cold/big" && ok=1
result $ok "thawed: the stalled connection completes, its file intact (exit $crc/$src)"
[ $ok = 1 ] || show "$T/cold.c.err" "$T/frozen.err"

# --- frozen mid-file, then its senders lost: neither writes blocked on
# the frozen file system (sender A keeps sending) nor dropping an unnamed
# file there (sender B was stopped first, so nothing of it is in flight and
# the last close of its O_TMPFILE comes at once) may hold up the others
start_serve lost $((PORT + 3)) --dir "$T/root" --count 4 --chunk 64K
for s in A B; do
	# No timeout(1) in between: STOP and KILL must reach the sender itself
	# (cleanup kills it on every exit path).
	"$CP" send --no-resume --limit-rate 1M --as "cold/slow$s" "$T/src/big" "$ADDR:$((PORT + 3))" \
		>"$T/slow$s.c.out" 2>"$T/slow$s.c.err" &
	PIDS+=($!)
	eval "slow$s=$!"
done
sleep 3 # both files are open and being written
kill -STOP "$slowB"
sleep 1 # B's last chunks land and are written
fsfreeze -f "$T/root/cold"
timeout 60 "$CP" send --as warm2 "$T/src/big" "$ADDR:$((PORT + 3))" \
	>"$T/warm2.c.out" 2>"$T/warm2.c.err"
wrc=$?
ok=0
[ "$wrc" = 0 ] && cmp -s "$T/src/big" "$T/root/warm2" && ok=1
result $ok "frozen mid-file: another connection stores its file meanwhile (exit $wrc)"
[ $ok = 1 ] || show "$T/warm2.c.err" "$T/slowA.c.err" "$T/lost.err"
kill -9 "$slowA" "$slowB" 2>/dev/null
wait "$slowA" "$slowB" 2>/dev/null
for _ in $(seq 300); do
	[ "$(grep -c "sender disconnected\|connection lost" "$T/lost.err")" -ge 2 ] && break
	sleep 0.1
done
timeout 60 "$CP" send --as warm3 "$T/src/big" "$ADDR:$((PORT + 3))" \
	>"$T/warm3.c.out" 2>"$T/warm3.c.err"
wrc=$?
ok=0
[ "$wrc" = 0 ] && cmp -s "$T/src/big" "$T/root/warm3" && ok=1
result $ok "their senders lost while frozen: a third connection stores its file (exit $wrc)"
[ $ok = 1 ] || show "$T/warm3.c.err" "$T/lost.err"
fsfreeze -u "$T/root/cold"
wait_pid "$SERVE_PID" 60
src=$?
ok=0
[ "$src" = 4 ] && ! ls -A "$T/root/cold" | grep -q slow && ok=1
result $ok "thawed: serve ends, exit 4 for the lost senders, nothing of their files left (exit $src)"
[ $ok = 1 ] || { show "$T/lost.err"; ls -la "$T/root/cold" | sed 's/^/# /'; }
finish
