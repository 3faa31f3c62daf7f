#!/bin/bash
# ringrdma-cp with big files striped into ranges (protocol 8), in the
# lab: a file above --stripe goes as ranges over --conns 4 and is stored
# byte for byte; a copy cut mid-file (sender killed) and sent again does
# not send a completed range again and resends less than one stripe per
# cut range (counted from --json and what the partial held). Two striped
# files over one connection: the ranges of the second pass the first's
# FILE_COMMIT, and what follows it waits for its FILE_DONE.
#   stripe.sh PATH/TO/ringrdma-cp
CP=${1:?usage: stripe.sh PATH/TO/ringrdma-cp}
. "$(dirname "$0")/lib.sh" 5
PORT=7590
GEOM=(--chunk 64K --window 8)
STRIPE=$((1 << 20))

mkdir -p "$T/src" "$T/dst"
start_serve srv $PORT --dir "$T/dst" --token-file "$TOKEN" "${GEOM[@]}"

# send NAME ARGS...: a send to serve, logs in $T/NAME.*; its exit status.
send() {
	local name=$1
	shift
	timeout 300 "$CP" send --token-file "$TOKEN" "${GEOM[@]}" --stripe $STRIPE --conns 4 \
		--json "$T/$name.json" "$@" "$ADDR:$PORT" >"$T/$name.out" 2>"$T/$name.err"
}

# --- 24 MiB and a tail, as 25 ranges over 4 connections
head -c $((24 * STRIPE + 12345)) /dev/urandom >"$T/src/big"
send s1 "$T/src/big"
rc=$?
ok=0
[ "$rc" = 0 ] && cmp -s "$T/src/big" "$T/dst/big" && [ ! -e "$T/dst/.big.rrcp-partial" ] &&
	[ "$(json_field "$T/s1.json" ranges)" = 25 ] && [ "$(json_field "$T/s1.json" files)" = 1 ] && ok=1
result $ok "a file of 25 ranges over --conns 4 is stored byte for byte (exit $rc, $(json_field "$T/s1.json" ranges) ranges)"
[ $ok = 1 ] || show "$T/s1.err" "$T/srv.err"

# --- cut mid-file: the sender killed about 2 s after the partial grew
head -c $((16 * STRIPE)) /dev/urandom >"$T/src/cutme"
cut_midway "$T/dst" cutme "$T/srv.err" "$CP" send --token-file "$TOKEN" "${GEOM[@]}" \
	--stripe $STRIPE --conns 4 --limit-rate 2M "$T/src/cutme" "$ADDR:$PORT"
held=$HELD
ok=0
[ ! -e "$T/dst/cutme" ] && [ "$held" -gt 0 ] && ok=1
result $ok "a striped copy killed mid-file leaves a partial holding $held bytes, nothing named"

# Sent again (again while the last connections let go: "busy" is retried).
resend s2 "$T/src/cutme"
rc=$?
json_load "$T/s2.json"
size=$((16 * STRIPE))
bytes=$(json_field "$T/s2.json" bytes)
resumed=$(json_field "$T/s2.json" bytes_resumed)
rheld=$(json_field "$T/s2.json" ranges_held)
rcut=$(json_field "$T/s2.json" ranges_cut)
sent=$((${bytes:-0} - ${resumed:-0}))
# Beyond what the partial was missing, what went again: chunks written
# but not whole, or past a hole of a range (writes complete out of order).
extra=$((sent - (size - held)))
cuts=$((${rcut:-0} > 0 ? ${rcut:-0} : 1))
ok=0
[ "$rc" = 0 ] && cmp -s "$T/src/cutme" "$T/dst/cutme" && [ ! -e "$T/dst/.cutme.rrcp-partial" ] && ok=1
result $ok "sent again it is stored byte for byte (exit $rc), no partial left"
[ $ok = 1 ] || show "$T/s2.err" "$T/srv.err"
ok=0
[ "${rheld:-0}" -ge 1 ] && [ "$extra" -lt $((cuts * STRIPE)) ] && ok=1
result $ok "completed ranges not resent ($rheld held whole, $rcut cut), $extra bytes resent for $cuts cut ranges (< one stripe each)"
[ $ok = 1 ] || show "$T/s2.json"

# --- two striped files over one connection: the FILE_COMMIT of the
# first goes between ranges of the second, and the range after it waits
# for its FILE_DONE (the receiver takes no FILE_START before it).
head -c $((3 * STRIPE + 100)) /dev/urandom >"$T/src/two1"
head -c $((3 * STRIPE + 200)) /dev/urandom >"$T/src/two2"
timeout 300 "$CP" send --token-file "$TOKEN" "${GEOM[@]}" --stripe $STRIPE --json "$T/two.json" \
	"$T/src/two1" "$T/src/two2" "$ADDR:$PORT" >"$T/two.out" 2>"$T/two.err"
rc=$?
ok=0
[ "$rc" = 0 ] && cmp -s "$T/src/two1" "$T/dst/two1" && cmp -s "$T/src/two2" "$T/dst/two2" &&
	[ "$(json_field "$T/two.json" ranges)" = 8 ] && [ "$(json_field "$T/two.json" files)" = 2 ] && ok=1
result $ok "two striped files over one connection are stored byte for byte (exit $rc)"
[ $ok = 1 ] || show "$T/two.err" "$T/srv.err"
finish
