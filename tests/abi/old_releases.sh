#!/bin/bash
# Binaries built against a previous release must either run correctly on
# today's library or be refused by the loader (soname or symbol version
# not found); never run and misbehave. TAP, one case per release kept in
# tests/abi/<version>/: its ringrdma.h, ringrdma_version.h, libringrdma.map
# and soname (one line). A release adds its directory when it ships.
#
#   tests/abi/old_releases.sh ABI_DIR LIB VERSION
#     ABI_DIR  tests/abi
#     LIB      today's built library, the real file (libringrdma.so.X.Y.Z)
#     VERSION  today's version, which the loaded library must report
# CC: the compiler; ABI_CFLAGS: flags for the consumer (the build's
# sanitizers, so that it runs with an ASan library).
#
# old_consumer.c is built against the old header and linked against a stub
# with the old soname and symbol versions (made from the old map), exactly
# what an application built then records. It runs with only today's library
# on LD_LIBRARY_PATH, under today's soname.
set -uo pipefail
DIR=$1 LIB=$2 VERSION=$3
CC=${CC:-cc}
read -r -a CFLAGS <<<"${ABI_CFLAGS:-}"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

today_so=$(readelf -d "$LIB" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
if [ -z "$today_so" ]; then
	echo "Bail out! $LIB has no soname"
	exit 1
fi
deps_cflags=() deps_libs=(-luring)
if command -v pkg-config >/dev/null; then
	read -r -a deps_cflags <<<"$(pkg-config --cflags liburing libibverbs librdmacm)"
	read -r -a deps_libs <<<"$(pkg-config --libs liburing)"
fi

# stub_c MAP: one empty function per symbol the map exports.
stub_c() {
	sed -e 's,/\*.*\*/,,g' "$1" | awk '
		/global:/ { g = 1; next }
		/local:/ || /}/ { g = 0 }
		g && /;/ { gsub(/[ \t;]/, ""); if ($0 != "") print "void " $0 "(void);\nvoid " $0 "(void) {}" }'
}

# run_release DIR: prints "ok ..." or "not ok ..." lines' text after the number.
run_release() {
	local rel=$1 v old_so w rc out err line
	v=$(basename "$rel")
	old_so=$(cat "$rel/soname")
	w=$TMP/$v
	mkdir -p "$w/stub" "$w/run"

	stub_c "$rel/libringrdma.map" >"$w/stub.c"
	if ! $CC -shared -fPIC -o "$w/stub/$old_so" "$w/stub.c" -Wl,-soname,"$old_so" \
		-Wl,--version-script="$rel/libringrdma.map" 2>"$w/build.err" ||
		! $CC "${CFLAGS[@]}" -g -I"$rel" "${deps_cflags[@]}" -o "$w/consumer" \
			"$DIR/old_consumer.c" "$w/stub/$old_so" "${deps_libs[@]}" 2>>"$w/build.err"; then
		echo "not ok - $v: cannot build the consumer"
		sed 's/^/# /' "$w/build.err"
		return
	fi

	# Only today's library, under its soname: never a stale older one.
	ln -s "$(readlink -f "$LIB")" "$w/run/$today_so"
	line=$(LD_TRACE_LOADED_OBJECTS=1 LD_LIBRARY_PATH=$w/run "$w/consumer" 2>/dev/null |
		grep "^[[:space:]]*$old_so => " || true)
	case $line in
	*"=> $w/run/"* | *"not found"* | "") ;;
	*)
		echo "ok - $v # SKIP another $old_so shadows today's library:$line"
		return
		;;
	esac

	rc=0
	LD_LIBRARY_PATH=$w/run timeout 60 "$w/consumer" >"$w/out" 2>"$w/err" || rc=$?
	out=$(cat "$w/out") err=$(cat "$w/err")
	if [ "$rc" = 127 ] && grep -q "$old_so: cannot open shared object file" "$w/err"; then
		echo "ok - $v: the loader refuses it: no $old_so (today: $today_so)"
	elif [ "$rc" != 0 ] && grep -q "version \`RINGRDMA_[^']*' not found (required by" "$w/err"; then
		# ld.so exits 1 here, 127 for a missing library.
		echo "ok - $v: the loader refuses it: $(grep -o "version \`RINGRDMA_[^']*' not found" "$w/err" | head -1)"
	elif [ "$rc" = 0 ] && [ "$out" = "rr_version=$VERSION" ]; then
		echo "ok - $v: runs correctly on $VERSION ($today_so)"
	else
		echo "not ok - $v: status $rc on $VERSION ($today_so), neither refused nor correct"
		printf '%s\n%s\n' "$out" "$err" | sed 's/^/# /'
	fi
}

rels=()
for m in "$DIR"/*/libringrdma.map; do
	[ -e "$m" ] && rels+=("$(dirname "$m")")
done
echo "1..${#rels[@]}"
n=0
for rel in "${rels[@]}"; do
	n=$((n + 1))
	res=$(run_release "$rel")
	# Number the case: "ok - x" becomes "ok N - x".
	printf '%s\n' "$res" | sed -e "1s/^ok -/ok $n -/" -e "1s/^not ok -/not ok $n -/"
done
exit 0
