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

# shellcheck source=tests/tap.sh
. "$(dirname "$0")/../tap.sh"
tap_plan 2
if ! meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >"$tmp/install.log" 2>&1; then
	sed 's/^/# /' "$tmp/install.log"
	tap_bail "meson install failed"
fi
# Each root as given and with its links resolved.
roots=()
for d in "$src" "$build"; do
	roots+=(-e "$(cd "$d" && pwd)" -e "$(cd "$d" && pwd -P)")
done

files=$(find "$tmp/root" -type f | sort)
count=$(printf '%s\n' "$files" | grep -c .)
[ "$count" -gt 0 ] && printf '%s\n' "$files" | grep -q '/bin/ringrdma-cp$'
tap_is $? "meson install put $count files in place, ringrdma-cp among them"

bad=()
while IFS= read -r f; do
	strings -a "$f" | grep -q -F "${roots[@]}" && bad+=("$f")
done <<<"$files"
if [ ${#bad[@]} = 0 ]; then
	tap_ok "no installed file names the source or the build root"
else
	tap_not_ok "${#bad[@]} installed files name the source or the build root"
	for f in "${bad[@]}"; do
		echo "# ${f#"$tmp/root"}:"
		strings -a "$f" | grep -F "${roots[@]}" | sort -u | head -n 5 | sed 's/^/#   /'
	done
fi
tap_done
