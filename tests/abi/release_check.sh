#!/bin/bash
# Does the tree say which release its API belongs to? A public header or
# symbol map that differs from the newest release frozen in tests/abi/
# must come with a newer version in meson.build and a debian/changelog
# stanza for that version (UNRELEASED until it ships); a tree whose
# version equals the newest frozen release must ship exactly its header
# and map. That is how 0.8.0 once grew silently: its flags and counters
# changed while the version, and so rr_version_check(), stood still.
#
#   tests/abi/release_check.sh SRC_ROOT VERSION
# TAP, one case per rule.
set -uo pipefail
ROOT=$1 VERSION=$2
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/../tap.sh"

# The frozen releases, newest last (version order, not name order).
newest=$(find "$ROOT/tests/abi" -mindepth 1 -maxdepth 1 -type d -name '[0-9]*.[0-9]*.[0-9]*' \
	-printf '%f\n' | sort -V | tail -n 1)
if [ -z "$newest" ]; then
	tap_bail "no release frozen in tests/abi"
fi
rel=$ROOT/tests/abi/$newest
newer() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" = "$1" ]; }

top=$(sed -n '1s/^ringrdma (\([^)]*\)) \([^;]*\);.*/\1 \2/p' "$ROOT/debian/changelog")
top_ver=${top%% *} top_dist=${top#* }

changed=()
cmp -s "$ROOT/include/ringrdma.h" "$rel/ringrdma.h" || changed+=(include/ringrdma.h)
cmp -s "$ROOT/src/libringrdma.map" "$rel/libringrdma.map" || changed+=(src/libringrdma.map)

if [ "$VERSION" = "$newest" ]; then
	if [ ${#changed[@]} = 0 ]; then
		tap_ok "version $VERSION ships the header and map frozen in tests/abi/$newest"
	else
		tap_not_ok "version $VERSION is released, but ${changed[*]} changed since" \
			"the API grew after $newest: set the next version in meson.build" \
			"and open its UNRELEASED stanza in debian/changelog (see CONTRIBUTING.md)"
	fi
	if [ "$top_ver" = "$VERSION" ] && [ "$top_dist" != UNRELEASED ]; then
		tap_ok "debian/changelog's top stanza is the release $VERSION"
	else
		tap_not_ok "debian/changelog's top stanza is $top_ver $top_dist, not the release $VERSION"
	fi
elif newer "$VERSION" "$newest"; then
	tap_ok "version $VERSION is newer than the newest frozen release $newest${changed[*]:+ (changed: ${changed[*]})}"
	if [ "$top_ver" = "$VERSION" ]; then
		tap_ok "debian/changelog has a stanza for $VERSION ($top_dist)"
	else
		tap_not_ok "debian/changelog's top stanza is $top_ver, not $VERSION" \
			"open a stanza for $VERSION (distribution UNRELEASED until it ships)"
	fi
else
	tap_not_ok "version $VERSION is older than the newest frozen release $newest"
fi

# The frozen version header names its own release.
if grep -q "RR_VERSION_STRING \"$newest\"" "$rel/ringrdma_version.h"; then
	tap_ok "tests/abi/$newest/ringrdma_version.h says $newest"
else
	tap_not_ok "tests/abi/$newest/ringrdma_version.h does not say $newest"
fi
tap_done
