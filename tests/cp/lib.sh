#!/bin/bash
# Shared by ringrdma-cp's lab tests (TAP). Source it with the number of
# checks planned:  . lib.sh N  ; then use result/show/start_serve.
# Without an RDMA device the test skips, unless RDMA_LAB or
# RR_REQUIRE_RDMA=1 is set: then a missing device is a failure.
set -u
CP=${CP:?CP must name the ringrdma-cp binary}
PLAN=${1:?plan}

. "$(dirname "${BASH_SOURCE[0]}")/../support/require.sh"
rr_require_rdma "$PLAN"
ADDR=$RR_ADDR

T=$(mktemp -d /tmp/rrcp-test.XXXXXX) || exit 1
PIDS=()
MOUNTS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
	rm -rf "$T"
}
trap cleanup EXIT

failed=0
n=0
echo "1..$PLAN"
# Each result says how long its part took: where a lab run's time goes.
last=$SECONDS
result() { # OK? DESCRIPTION
	n=$((n + 1))
	if [ "$1" = 1 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		echo "not ok $n - $2" >&2
		failed=1
	fi
	echo "# $((SECONDS - last)) s"
	last=$SECONDS
}
# Failures go to stderr as well: meson prints a failed test's stderr, so
# a CI log says why without its meson-logs.
show() { # FILE...: as TAP diagnostics
	for f in "$@"; do
		[ -s "$f" ] && sed "s|^|# ${f##*/}: |" "$f" | tail -n 40 | tee /dev/stderr
	done
	return 0
}
finish() {
	[ "$n" = "$PLAN" ] || { echo "not ok $((n + 1)) - planned $PLAN checks, ran $n"; failed=1; }
	exit $failed
}

# In the lab every program started costs a good part of a second (TCG,
# libraries over 9p): the waits below use shell builtins only. nap SECS
# sleeps on a FIFO that nobody writes.
mkfifo "$T/.nap" && exec {NAP_FD}<>"$T/.nap" || exit 1
nap() { read -r -t "$1" -u "$NAP_FD" _; }

# await_line FILE WORD PID TENTHS: until WORD appears in FILE; fails once
# PID is gone or after TENTHS tenths of a second.
await_line() {
	local i text
	for ((i = 0; i < $4; i++)); do
		text=
		[ -e "$1" ] && IFS= read -r -d '' text <"$1"
		[[ $text == *"$2"* ]] && return 0
		kill -0 "$3" 2>/dev/null || return 1
		nap 0.1
	done
	return 1
}

# A token file as ringrdma-cp wants it (no one else may read it), for the
# tests that authenticate: serve --token-file "$TOKEN", send likewise.
TOKEN=$T/token
(umask 077 && printf 'lab-secret-%05d%05d%05d\n' "$RANDOM" "$RANDOM" "$RANDOM" >"$TOKEN") || exit 1
# tok FILE TEXT: a token file with TEXT, mode 0600.
tok() { (umask 077 && printf '%s\n' "$2" >"$1"); }

# start_serve NAME PORT ARGS...: serve in the background, logs in $T/NAME.*,
# its pid in SERVE_PID; waits until it listens. Without --token-file in
# ARGS it runs with --no-auth: the test is not about authentication.
start_serve() {
	local name=$1 port=$2 a auth=--no-auth
	shift 2
	for a in "$@"; do
		case $a in --token-file | --no-auth) auth= ;; esac
	done
	"$CP" serve --listen "$ADDR:$port" ${auth:+"$auth"} "$@" >"$T/$name.out" 2>"$T/$name.err" &
	SERVE_PID=$!
	PIDS+=("$SERVE_PID")
	await_line "$T/$name.out" listening "$SERVE_PID" 300
}

# wait_pid PID SECS: its exit status, or 124 after SECS (then it is killed).
wait_pid() {
	local pid=$1 secs=$2
	local i
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		nap 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -9 "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		return 124
	fi
	wait "$pid"
}

# json_load FILE...: parse each JSON file once (python3 starts slowly in
# the lab), for json_field. Only complete files: a file is parsed once.
declare -A JSON_CACHE=()
json_load() {
	local f k v
	for f in "$@"; do
		JSON_CACHE["$f"]=1
	done
	# Through a file: the lab's /dev has no /dev/fd for <(...).
	python3 -S -c 'import json, sys
for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
    except (OSError, ValueError):
        continue
    if isinstance(d, dict):
        for k, v in d.items():
            sys.stdout.write(f"{f}\0{k}\0{v}\0")' "$@" >"$T/.json_load" 2>/dev/null
	while IFS= read -r -d '' f && IFS= read -r -d '' k && IFS= read -r -d '' v; do
		JSON_CACHE["$f/$k"]=$v
	done <"$T/.json_load"
}

# json_field FILE FIELD: a top-level field of a JSON file, empty if the
# file is missing or no JSON (parsed here unless json_load did).
json_field() {
	[ -n "${JSON_CACHE["$1"]+set}" ] || json_load "$1"
	[ -z "${JSON_CACHE["$1/$2"]+set}" ] || printf '%s\n' "${JSON_CACHE["$1/$2"]}"
}

# await_partial DST NAME: until NAME's partial in DST holds data (60 s
# at most).
await_partial() {
	local i
	for ((i = 0; i < 600; i++)); do
		[ -s "$1/.$2.rrcp-partial" ] && return 0
		nap 0.1
	done
	return 1
}

# cut_midway DST NAME LOG CMD...: CMD (a send of NAME into serve's DST)
# in the background, SIGKILLed 3 s after NAME's partial in DST began to
# grow, and serve's LOG saying the cut; HELD: the partial's data bytes
# then (ranges never written are holes), 0 without one.
cut_midway() {
	local dst=$1 name=$2 log=$3 pid
	shift 3
	"$@" >"$T/cut.out" 2>"$T/cut.err" &
	pid=$!
	PIDS+=("$pid")
	await_partial "$dst" "$name"
	nap 3
	kill -9 "$pid"
	wait "$pid" 2>/dev/null
	await_line "$log" "during $name after" "$SERVE_PID" 300
	HELD=$(du -B1 "$dst/.$name.rrcp-partial" 2>/dev/null | cut -f1)
	HELD=${HELD:-0}
}

# resend NAME ARGS...: the script's own send NAME ARGS..., again while a
# cut run's connections still let go (exit 5, "another connection"); its
# status.
resend() {
	local i rc
	for ((i = 0; i < 10; i++)); do
		send "$@"
		rc=$?
		[ "$rc" = 5 ] && grep -q 'another connection' "$T/$1.err" || break
		nap 1
	done
	return "$rc"
}

# same_tree SRC DST LINKS: compare both listings; prints the differences
# (none: success). Modes as serve stores them: permission bits less its
# umask (022); links only with LINKS=1; special files never.
same_tree() {
	python3 -S - "$@" <<'PY'
import hashlib, os, stat, sys
src, dst, links = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def listing(root, expect):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                if expect and not links:
                    continue
                out[rel] = ("l", os.readlink(p), st.st_mtime_ns)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", mode & 0o777 & ~0o022 if expect else mode, st.st_mtime_ns)
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    h = hashlib.sha256(fh.read()).hexdigest()
                out[rel] = ("f", mode & 0o777 & ~0o022 if expect else mode, st.st_mtime_ns,
                            st.st_size, h)
            elif not expect:
                out[rel] = ("other",)
    return out
a, b = listing(src, True), listing(dst, False)
bad = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
for k in bad[:10]:
    print("%s: sent %s, stored %s" % (k, a.get(k), b.get(k)))
if bad:
    print("%d of %d entries differ" % (len(bad), len(a)))
PY
}
