#!/bin/bash
# Does tools/abi-check catch what it must? Builds the toy library
# (tests/abi/toy/) as a baseline release and as later releases that change
# its ABI in one way each, and runs the check's compare step on each.
#
#   tests/abi/selftest.sh ABI_CHECK TOY_DIR
# CC: the compiler (default cc). Exit 77 (skipped) when abigail-tools is
# missing, except under CI=true, where that is a failure.
set -euo pipefail
CHECK=$1 TOY=$2
CC=${CC:-cc}

for t in abidw abidiff; do
	command -v $t >/dev/null && continue
	if [ "${CI:-}" = true ]; then
		echo "selftest: $t not found; CI must install abigail-tools (tools/setup-deps)" >&2
		exit 1
	fi
	echo "selftest: $t not found: skipped (install abigail-tools)"
	exit 77
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
sed '/toy_get;/d' "$TOY/toy.map" >"$TMP/toy-removed.map"

# lib NAME SONAME MAP [CFLAGS...]: build the toy as $TMP/NAME/libtoy.so,
# with -g as the real library has.
lib() {
	local name=$1 soname=$2 map=$3
	shift 3
	mkdir -p "$TMP/$name"
	$CC -g -O2 -fPIC -shared -I"$TOY" "$@" -o "$TMP/$name/libtoy.so" "$TOY/toy.c" \
		-Wl,-soname,"$soname" -Wl,--version-script="$map"
}

BASE=$TMP/base.abi
SIZED=()
check() {
	"$CHECK" --lib "$TMP/$1/libtoy.so" --headers "$TOY" --header-file "$TOY/toy.h" \
		--baseline "$BASE" "${SIZED[@]}"
}

fails=0
# expect NAME WANT_RC GREP_PATTERN: the check's status and a line of its output.
expect() {
	local name=$1 want=$2 pattern=$3 rc=0 label=$1${SIZED[*]:+ (--sized)}
	check "$name" >"$TMP/$name.out" 2>&1 || rc=$?
	if [ "$rc" = "$want" ] && grep -q -- "$pattern" "$TMP/$name.out"; then
		echo "ok: $label: status $rc"
	else
		echo "FAIL: $label: status $rc, wanted $want and \"$pattern\"; its output:"
		sed 's/^/    /' "$TMP/$name.out"
		fails=$((fails + 1))
	fi
}

lib base libtoy.so.1 "$TOY/toy.map"
"$CHECK" --update --lib "$TMP/base/libtoy.so" --headers "$TOY" --header-file "$TOY/toy.h" \
	--baseline "$BASE"
# Only types of the public header count: neither toy.c's internal struct
# nor libc's make it into the baseline.
if grep -q "name='toy' .*size-in-bits" "$BASE" || ! grep -q "name='toy_opts'" "$BASE"; then
	echo "FAIL: the baseline holds private types, or lacks toy_opts"
	fails=$((fails + 1))
fi
# No source locations: a baseline that moves with line numbers is stale
# after every edit of the header.
if grep -q " line='\| filepath='" "$BASE"; then
	echo "FAIL: the baseline holds source locations"
	fails=$((fails + 1))
fi

lib same libtoy.so.1 "$TOY/toy.map"
expect same 0 'matches'
# A baseline written with locations (by an older check) is stale.
cp "$BASE" "$TMP/base-nolocs.abi"
sed -i "s|<function-decl name='toy_create'|& filepath='toy.h' line='1'|" "$BASE"
expect same 3 'holds source locations'
cp "$TMP/base-nolocs.abi" "$BASE"
lib private libtoy.so.1 "$TOY/toy.map" -DTOY_PRIVATE
expect private 0 'matches'
lib added-fn libtoy.so.1 "$TOY/toy-added.map" -DTOY_ADD_FN
expect added-fn 3 'refresh the baseline in this commit'
lib added-enumerator libtoy.so.1 "$TOY/toy.map" -DTOY_ADD_ENUMERATOR
expect added-enumerator 0 'matches'

# The deliberate layout changes: each must fail.
lib inserted-member libtoy.so.1 "$TOY/toy.map" -DTOY_INSERT
expect inserted-member 1 'public ABI changed without a soname bump'
lib resized-member libtoy.so.1 "$TOY/toy.map" -DTOY_RESIZE
expect resized-member 1 'public ABI changed without a soname bump'
lib grown-struct libtoy.so.1 "$TOY/toy.map" -DTOY_TAIL
expect grown-struct 1 'type size changed'
lib changed-fn libtoy.so.1 "$TOY/toy.map" -DTOY_CHANGE_FN
expect changed-fn 1 'public ABI changed without a soname bump'
lib renumbered libtoy.so.1 "$TOY/toy.map" -DTOY_RENUMBER
expect renumbered 1 'public ABI changed without a soname bump'
lib removed-fn libtoy.so.1 "$TMP/toy-removed.map"
expect removed-fn 1 'Removed function'
lib moved-version libtoy.so.1 "$TOY/toy-moved.map"
expect moved-version 1 'public ABI changed without a soname bump'

# Members added at the end of a struct passed with its size: fine when
# the struct is listed as such, and only at its very end.
lib stats-grown libtoy.so.1 "$TOY/toy.map" -DTOY_STATS_TAIL
expect stats-grown 1 'type size changed'
echo toy_stats >"$TMP/sized"
SIZED=(--sized "$TMP/sized")
expect stats-grown 3 'struct toy_stats grew at its end from 128 to 192 bits: more'
lib stats-padding libtoy.so.1 "$TOY/toy.map" -DTOY_STATS_PAD
expect stats-padding 1 'public ABI changed without a soname bump'
echo toy_opts >>"$TMP/sized"
expect grown-struct 3 'struct toy_opts grew at its end'
expect inserted-member 1 'public ABI changed without a soname bump'
lib grown-and-resized libtoy.so.1 "$TOY/toy.map" -DTOY_TAIL -DTOY_RESIZE
expect grown-and-resized 1 'public ABI changed without a soname bump'
SIZED=()

# A new soname: the baseline must be refreshed with it, even where the
# ABI did not change.
lib new-soname libtoy.so.2 "$TOY/toy.map" -DTOY_INSERT
expect new-soname 1 'refresh it in the same commit'
lib new-soname-same-abi libtoy.so.2 "$TOY/toy.map"
expect new-soname-same-abi 1 'soname changed from libtoy.so.1 to libtoy.so.2'

# Two outputs shown whole: what a developer sees.
for name in grown-and-resized stats-grown; do
	echo "--- tools/abi-check on $name:"
	sed 's/^/    /' "$TMP/$name.out"
done

[ "$fails" = 0 ] || { echo "selftest: $fails case(s) failed"; exit 1; }
echo "selftest: all cases passed"
