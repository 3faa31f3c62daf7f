#!/bin/bash
# Install the build tree into a scratch root (meson install --destdir), then
# build tests/install/consumer.c out of tree with nothing but
# `pkg-config --cflags --libs ringrdma` and run it. TAP output.
#
#   consumer.sh BUILD_DIR CONSUMER_C CC PREFIX LIBDIR [SANITIZE]
#
# SANITIZE is meson's b_sanitize: a sanitized library needs the sanitizer
# runtime in the program too.
set -u
build=${1:?usage: consumer.sh BUILD_DIR CONSUMER_C CC PREFIX LIBDIR [SANITIZE]}
csrc=${2:?} cc=${3:?} prefix=${4:?} libdir=${5:?} san=${6:-none}
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac

tmp=$(mktemp -d /tmp/rr-consumer.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root

# shellcheck source=tests/tap.sh
. "$(dirname "$0")/../tap.sh"
tap_plan 4
if meson install -C "$build" --no-rebuild --quiet --destdir "$root" >"$tmp/install.log" 2>&1; then
	tap_ok "meson install --destdir"
else
	tap_not_ok "meson install --destdir" "$(cat "$tmp/install.log")"
	tap_done
fi

missing=
for f in "$prefix/include/ringrdma.h" "$prefix/include/ringrdma_version.h" \
	"$libdir/pkgconfig/ringrdma.pc" "$libdir/libringrdma.so" "$libdir/libringrdma.so.1"; do
	[ -e "$root$f" ] || missing+=" $f"
done
[ -z "$missing" ]
tap_is $? "header, version header, ringrdma.pc and the library installed${missing:+ (not:$missing)}"

# Only the scratch root's ringrdma.pc; the sysroot prefixes its -I and -L.
export PKG_CONFIG_PATH=$root$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
flags=$(pkg-config --cflags --libs ringrdma 2>"$tmp/pc.err")
extra=()
[ "$san" != none ] && extra=(-fsanitize="$san")
cp "$csrc" "$tmp/consumer.c"
# shellcheck disable=SC2086 # pkg-config's output is a list of words
if [ -n "$flags" ] && (cd "$tmp" && "$cc" -Wall -Werror "${extra[@]}" consumer.c -o consumer $flags) \
	>"$tmp/cc.log" 2>&1; then
	tap_ok "cc consumer.c \$(pkg-config --cflags --libs ringrdma): $flags"
else
	tap_not_ok "cc consumer.c \$(pkg-config --cflags --libs ringrdma): ${flags:-no flags}" \
		"$(cat "$tmp/pc.err" "$tmp/cc.log")"
	tap_not_ok "consumer runs # not built"
	tap_done
fi

LD_LIBRARY_PATH=$root$libdir "$tmp/consumer" "$root$libdir/" >"$tmp/run.log" 2>&1
tap_is $? "consumer: version check, bridge created and destroyed on a plain ring" \
	"$(cat "$tmp/run.log")"
sed 's/^/# /' "$tmp/run.log"
tap_done
