#!/bin/bash
# ringrdma-cp's exposed memory, in the lab: what a peer can reach of the
# receiver's windows and what the receiver takes from them.
#  - Without memory windows (forced with RINGRDMA_CP_NO_MW=1) every
#    connection still has a protection domain of its own: a stranger's
#    RDMA WRITE with another connection's real address and key fails.
#  - serve --require-mw refuses to start where there are none.
#  - A chunk written at an offset inside its slot: what the receiver
#    stores and hashes holds zeros, never the slot's old bytes, and no
#    hash of them goes back to the peer.
#   memory.sh PATH/TO/ringrdma-cp PATH/TO/cp-hostile
CP=${1:?usage: memory.sh PATH/TO/ringrdma-cp PATH/TO/cp-hostile}
HOSTILE=${2:?usage: memory.sh PATH/TO/ringrdma-cp PATH/TO/cp-hostile}
. "$(dirname "$0")/lib.sh" 6
PORT=7560

(umask 077 && printf 'memory-secret-0123456789\n' >"$T/tok")
export CP_HOSTILE_TOKEN=memory-secret-0123456789
head -c 300000 /dev/urandom >"$T/small"

# --- no memory windows: --require-mw refuses to start
RINGRDMA_CP_NO_MW=1 timeout 60 "$CP" serve --listen "$ADDR:$PORT" --dir "$T" --require-mw \
	--token-file "$T/tok" >"$T/req.out" 2>"$T/req.err"
rc=$?
ok=0
[ "$rc" = 1 ] && grep -q 'require-mw.*no memory windows' "$T/req.err" && ok=1
result $ok "serve --require-mw without memory windows refuses to start (exit $rc)"
[ $ok = 1 ] || show "$T/req.out" "$T/req.err"

# --- with them, --require-mw serves
mkdir -p "$T/req"
start_serve req2 $((PORT + 1)) --dir "$T/req" --count 1 --require-mw --token-file "$T/tok"
timeout 120 "$CP" send --token-file "$T/tok" "$T/small" "$ADDR:$((PORT + 1))" \
	>"$T/req2.c.out" 2>"$T/req2.c.err"
crc=$?
wait_pid "$SERVE_PID" 30
src=$?
ok=0
[ "$crc" = 0 ] && [ "$src" = 0 ] && cmp -s "$T/small" "$T/req/small" && ok=1
result $ok "serve --require-mw on a device with memory windows stores a file (send $crc, serve $src)"
[ $ok = 1 ] || show "$T/req2.c.err" "$T/req2.err"

# --- no memory windows: a stranger writes into another connection's window
mkdir -p "$T/steal"
RINGRDMA_CP_NO_MW=1 start_serve steal $((PORT + 2)) --dir "$T/steal" --count 1 \
	--token-file "$T/tok"
timeout 60 "$HOSTILE" steal "$ADDR" $((PORT + 2)) stolen "$T/steal.exp" \
	>"$T/steal.h.out" 2>"$T/steal.h.err"
hrc=$?
wait_pid "$SERVE_PID" 30
ok=0
grep -q 'no memory windows' "$T/steal.err" && ok=1
result $ok "RINGRDMA_CP_NO_MW=1: serve fell back to the region's key"
ok=0
[ "$hrc" = 0 ] && grep -q '^attack: remote access error' "$T/steal.h.out" &&
	grep -q '^stored' "$T/steal.h.out" && cmp -s "$T/steal.exp" "$T/steal/stolen" && ok=1
result $ok "without memory windows a stranger's WRITE into another connection's window fails, that transfer intact ($(head -n 1 "$T/steal.h.out"))"
[ $ok = 1 ] || show "$T/steal.h.out" "$T/steal.h.err" "$T/steal.err"

# --- short chunks written 512 bytes into their slot
mkdir -p "$T/off"
start_serve off $((PORT + 3)) --dir "$T/off" --count 1 --token-file "$T/tok"
timeout 60 "$HOSTILE" offset "$ADDR" $((PORT + 3)) "$T/off.exp" >"$T/off.h.out" 2>"$T/off.h.err"
hrc=$?
wait_pid "$SERVE_PID" 30
old=$(sed -n 's/^oldhash //p' "$T/off.h.out")
ok=0
[ "$hrc" = 0 ] && grep -q '^a: stored' "$T/off.h.out" && grep -q '^b: stored' "$T/off.h.out" &&
	cmp -s "$T/off.exp" "$T/off/b" && grep -q '^c: refused checksum mismatch' "$T/off.h.out" &&
	[ ! -e "$T/off/c" ] && ok=1
result $ok "a chunk written inside its slot is stored behind zeros, never the slot's old bytes"
[ $ok = 1 ] || show "$T/off.h.out" "$T/off.h.err" "$T/off.err"
ok=0
# The peer's own checksum for "c" may come back as "sender H"; nothing else.
[ -n "$old" ] && ! grep -v '^oldhash' "$T/off.h.out" | sed 's/sender [0-9a-f]*//' |
	grep -qi -- "$old" && ok=1
result $ok "no hash of the slot's old bytes goes back to the peer"
[ $ok = 1 ] || show "$T/off.h.out"
finish
