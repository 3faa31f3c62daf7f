#!/bin/bash
# Nothing installed names the tree it was built in: after a full
# `meson install` into a scratch root, `strings -a` of every file (programs,
# libraries, headers, pkg-config, man pages) holds neither the source root
# nor the build root. A program that found its checkout by a compiled-in
# path, or debug info with absolute paths, fails here. TAP output.
#
#   paths.sh BUILD_DIR SOURCE_DIR
set -u
build=${1:?usage: paths.sh BUILD_DIR SOURCE_DIR}
src=${2:?}

tmp=$(mktemp -d /tmp/rr-paths.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

echo "1..2"
if ! meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >"$tmp/install.log" 2>&1; then
	sed 's/^/# /' "$tmp/install.log"
	echo "Bail out! meson install failed"
	exit 1
fi
# Each root as given and with its links resolved.
roots=()
for d in "$src" "$build"; do
	roots+=(-e "$(cd "$d" && pwd)" -e "$(cd "$d" && pwd -P)")
done

files=$(find "$tmp/root" -type f | sort)
count=$(printf '%s\n' "$files" | grep -c .)
ok=0
[ "$count" -gt 0 ] && printf '%s\n' "$files" | grep -q '/bin/ringrdma-cp$' && ok=1
echo "$([ $ok = 1 ] || echo "not ")ok 1 - meson install put $count files in place, ringrdma-cp among them"

bad=()
while IFS= read -r f; do
	strings -a "$f" | grep -q -F "${roots[@]}" && bad+=("$f")
done <<<"$files"
if [ ${#bad[@]} = 0 ]; then
	echo "ok 2 - no installed file names the source or the build root"
else
	echo "not ok 2 - ${#bad[@]} installed files name the source or the build root"
	for f in "${bad[@]}"; do
		echo "# ${f#"$tmp/root"}:"
		strings -a "$f" | grep -F "${roots[@]}" | sort -u | head -n 5 | sed 's/^/#   /'
	done
fi
[ $ok = 1 ] && [ ${#bad[@]} = 0 ]
