#!/bin/bash
# The installed man pages, as a user gets them after `meson install`, TAP
# output:
#  - every symbol of src/libringrdma.map has a page under man3 (its own or
#    a .so link) that names it and shows its prototype in SYNOPSIS;
#  - every type, callback, enum and macro of <ringrdma.h> is on a page
#    (types and callbacks in a SYNOPSIS);
#  - every page renders without a single groff warning (groff -ww, and
#    man --warnings as lintian runs it), has the sections a page of its
#    kind needs, and every .so link points at an installed page.
#
#   man_pages.sh BUILD_DIR SOURCE_DIR MANDIR
set -u
build=${1:?usage: man_pages.sh BUILD_DIR SOURCE_DIR MANDIR}
src=${2:?} mandir=${3:?}

tmp=$(mktemp -d /tmp/rr-man.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=tests/tap.sh
. "$(dirname "$0")/../tap.sh"

if ! meson install -C "$build" --no-rebuild --quiet --tags man --destdir "$tmp/root" \
	>"$tmp/install.log" 2>&1; then
	sed 's/^/# /' "$tmp/install.log"
	tap_bail "meson install --tags man failed"
fi
man=$tmp/root$mandir
[ -d "$man/man3" ] || tap_bail "nothing installed under $mandir/man3"

# section FILE NAME: the roff lines of one .SH section.
section() {
	awk -v want=".SH $2" '/^\.SH /{on = ($0 == want || $0 == want "\"" || $0 == ".SH \"" substr(want, 5) "\""); next} on' "$1"
}
# target FILE: the page a .so link points to ("" if FILE is a page).
target() {
	sed -n '1s/^\.so \(.*\)$/\1/p' "$1"
}

# --- every page renders cleanly and has its sections ------------------------
pages=0
for f in "$man"/man[137]/*; do
	rel=${f#"$man"/}
	to=$(target "$f")
	if [ -n "$to" ]; then
		ok=0
		[ -f "$man/$to" ] && [ -z "$(target "$man/$to")" ] && ok=1
		tap_result $ok "$rel: .so link to an installed page ($to)"
		continue
	fi
	pages=$((pages + 1))
	out=$(groff -k -Kutf8 -t -ww -z -man -Tutf8 "$f" 2>&1)
	out+=${out:+$'\n'}$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 \
		man --warnings -E UTF-8 -l -Tutf8 -Z "$f" 2>&1 >/dev/null)
	ok=0
	[ -z "$out" ] && ok=1
	tap_result $ok "$rel: renders without warnings" "$out"

	need="NAME DESCRIPTION"
	case $rel in
	man1/*) need+=" SYNOPSIS" ;;
	man3/*) need+=" SYNOPSIS RETURN VALUE" ;;
	esac
	need+=" SEE ALSO"
	missing=
	for s in NAME SYNOPSIS DESCRIPTION "RETURN VALUE" "SEE ALSO"; do
		case " $need " in *" $s "*) ;; *) continue ;; esac
		grep -Eq "^\.SH \"?$s\"?$" "$f" || missing+=" [$s]"
	done
	ok=0
	[ -z "$missing" ] && ok=1
	tap_result $ok "$rel: has its sections${missing:+ (missing$missing)}"
done
[ "$pages" -ge 3 ] || tap_bail "only $pages pages installed"
for p in man7/ringrdma.7 man1/ringrdma-bench.1 man1/ringrdma-cp.1; do
	ok=0
	[ -f "$man/$p" ] && ok=1
	tap_result $ok "$p installed"
done

# --- every exported symbol has a page -----------------------------------------
# Symbol lines of the version script: "rr_name;" in any version block.
syms=$(sed -n 's/^[[:space:]]*\(rr_[A-Za-z0-9_]*\);[[:space:]]*$/\1/p' "$src/src/libringrdma.map")
[ "$(printf '%s\n' "$syms" | grep -c .)" -ge 30 ] || tap_bail "cannot read the symbols of libringrdma.map"
for s in $syms; do
	f=$man/man3/$s.3
	if [ ! -f "$f" ]; then
		tap_result 0 "$s: has a page (no man3/$s.3)"
		continue
	fi
	to=$(target "$f")
	[ -n "$to" ] && f=$man/$to
	why=
	[ -f "$f" ] || why="link to a missing page"
	[ -z "$why" ] && ! section "$f" NAME | grep -qw -- "$s" && why="not on the NAME line of ${f##*/}"
	[ -z "$why" ] && ! section "$f" SYNOPSIS | grep -q "[ *]$s(" &&
		why="no prototype in the SYNOPSIS of ${f##*/}"
	ok=0
	[ -z "$why" ] && ok=1
	tap_result $ok "$s: documented in ${f##*/}${why:+: $why}"
done

# --- and that prototype is the header's, argument for argument --------------
# Whitespace aside; a SYNOPSIS that kept an old signature fails here.
flat() { tr -s ' \t\n' '  ' | sed -e 's/( /(/g' -e 's/ )/)/g'; }
sed -n '/^```c$/,/^```$/p' "$src"/docs/man/*.3.md | flat >"$tmp/protos"
for s in $syms; do
	want=$(awk -v s="$s" '
		!on && /^[a-z]/ && index($0, " " s "(") + index($0, "*" s "(") { on = 1 }
		on { print; if (/;[[:space:]]*$/) exit }' "$src/include/ringrdma.h" | flat)
	ok=0
	[ -n "$want" ] && grep -qF -- "$want" "$tmp/protos" && ok=1
	tap_result $ok "$s: SYNOPSIS prototype matches ringrdma.h" "header: ${want:-(not found)}"
done

# --- every type, callback, enum and macro of the header is on a page ----------
hdr=$src/include/ringrdma.h
types=$(sed -n -e 's/^typedef struct \(rr_[a-z0-9_]*\) rr_[a-z0-9_]*;.*/\1/p' \
	-e 's/^typedef .*(\*\(rr_[a-z0-9_]*\))(.*/\1/p' \
	-e 's/^struct \(rr_[a-z0-9_]*\) {.*/\1/p' \
	-e 's/^enum \(rr_[a-z0-9_]*\) {.*/\1/p' "$hdr" | sort -u)
consts=$(sed -n -e 's/^#define \(RR_[A-Z0-9_]*\).*/\1/p' \
	-e 's/^[[:space:]]*\(RR_[A-Z0-9_]*\) = .*/\1/p' "$hdr" | sort -u)
[ "$(printf '%s\n' "$types" | grep -c .)" -ge 10 ] || tap_bail "cannot read the types of ringrdma.h"
for f in "$man"/man3/*.3; do
	[ -z "$(target "$f")" ] && section "$f" SYNOPSIS
done >"$tmp/synopses"
cat "$man"/man3/*.3 "$man"/man7/*.7 >"$tmp/all"
for t in $types; do
	ok=0
	grep -qw -- "$t" "$tmp/synopses" && ok=1
	tap_result $ok "type $t: in a SYNOPSIS"
done
for c in $consts; do
	ok=0
	grep -qw -- "$c" "$tmp/all" && ok=1
	tap_result $ok "constant $c: on a page"
done

tap_done
