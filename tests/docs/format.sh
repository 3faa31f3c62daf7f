#!/bin/bash
# Every C file of the tree as the top .clang-format writes it: one case per
# folder, naming the files that differ and the first lines of the change.
# Fix with: git ls-files '*.c' '*.h' | xargs clang-format -i
src=${1:?usage: format.sh SOURCE_ROOT}
cd "$src" || exit 1
# shellcheck source=tests/tap.sh
. tests/tap.sh
command -v clang-format >/dev/null || tap_bail "clang-format is not installed (tools/setup-deps installs it)"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	mapfile -t files < <(git ls-files '*.c' '*.h')
else
	mapfile -t files < <(find . -path ./build\* -prune -o \( -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||' | sort)
fi
[ ${#files[@]} -gt 0 ] || tap_bail "no C file found under $src"
declare -A bad=() seen=()
for f in "${files[@]}"; do
	top=${f%%/*}
	seen[$top]=1
	d=$(clang-format --style=file "$f" | diff -u "$f" - | sed -n '3,12p')
	[ -z "$d" ] || bad[$top]+="$f:"$'\n'"$d"$'\n'
done
for top in $(printf '%s\n' "${!seen[@]}" | sort); do
	if [ -z "${bad[$top]:-}" ]; then
		tap_ok "$top/ is formatted"
	else
		tap_not_ok "$top/ is formatted" "${bad[$top]}"
	fi
done
tap_done
