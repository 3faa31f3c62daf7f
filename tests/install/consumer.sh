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

echo "1..4"
if meson install -C "$build" --no-rebuild --quiet --destdir "$root" >"$tmp/install.log" 2>&1; then
	echo "ok 1 - meson install --destdir"
else
	echo "not ok 1 - meson install --destdir"
	sed 's/^/# /' "$tmp/install.log"
	exit 1
fi

missing=
for f in "$prefix/include/ringrdma.h" "$prefix/include/ringrdma_version.h" \
	"$libdir/pkgconfig/ringrdma.pc" "$libdir/libringrdma.so" "$libdir/libringrdma.so.1"; do
	[ -e "$root$f" ] || missing+=" $f"
done
if [ -z "$missing" ]; then
	echo "ok 2 - header, version header, ringrdma.pc and the library installed"
else
	echo "not ok 2 - not installed:$missing"
fi

# Only the scratch root's ringrdma.pc; the sysroot prefixes its -I and -L.
export PKG_CONFIG_PATH=$root$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
flags=$(pkg-config --cflags --libs ringrdma 2>"$tmp/pc.err")
extra=()
[ "$san" != none ] && extra=(-fsanitize="$san")
cp "$csrc" "$tmp/consumer.c"
# shellcheck disable=SC2086 # pkg-config's output is a list of words
if [ -n "$flags" ] && (cd "$tmp" && "$cc" -Wall -Werror "${extra[@]}" consumer.c -o consumer $flags) \
	>"$tmp/cc.log" 2>&1; then
	echo "ok 3 - cc consumer.c \$(pkg-config --cflags --libs ringrdma): $flags"
else
	echo "not ok 3 - cc consumer.c \$(pkg-config --cflags --libs ringrdma): ${flags:-no flags}"
	sed 's/^/# /' "$tmp/pc.err" "$tmp/cc.log"
	echo "not ok 4 - consumer runs # not built"
	exit 1
fi

if LD_LIBRARY_PATH=$root$libdir "$tmp/consumer" "$root$libdir/" >"$tmp/run.log" 2>&1; then
	echo "ok 4 - consumer: version check, bridge created and destroyed on a plain ring"
	sed 's/^/# /' "$tmp/run.log"
else
	echo "not ok 4 - consumer failed"
	sed 's/^/# /' "$tmp/run.log"
	exit 1
fi
[ -z "$missing" ]
