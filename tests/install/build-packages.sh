#!/bin/bash
# Build the Debian packages (debian/) from a copy of the checkout and check
# them with lintian; the checkout itself stays clean. Needs
# `tools/setup-deps --packaging`. Leaves the .debs in OUTDIR.
#
#   tests/install/build-packages.sh [OUTDIR]     (default /tmp/ringrdma-debs)
#
# Exits non-zero if the build fails or lintian reports an error.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-/tmp/ringrdma-debs}
work=$(mktemp -d /tmp/rr-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Tracked files and new ones not ignored: the tree as it is, without builds.
src=$work/ringrdma
mkdir -p "$src"
git -C "$root" ls-files -z -co --exclude-standard |
	(cd "$root" && xargs -0 cp --parents -t "$src" 2>/dev/null || true)
[ -f "$src/debian/control" ] || { echo "build-packages: no debian/ in the copy" >&2; exit 1; }

(cd "$src" && DEB_BUILD_OPTIONS=${DEB_BUILD_OPTIONS:-nocheck} \
	dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1 || {
	tail -40 "$work/build.log" >&2
	echo "build-packages: dpkg-buildpackage failed" >&2
	exit 1
}
mkdir -p "$out"
rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
mv "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo "$out"/
ls -1 "$out"/*.deb

# lintian: E: lines fail; warnings and info are shown. Between releases
# the top stanza is UNRELEASED (CONTRIBUTING.md): a snapshot, not an
# upload, so lintian's complaint about that distribution is no error here.
lintian --info --display-info "$out"/*.changes | tee "$work/lintian.log" || true
unreleased='^$'
if head -n 1 "$src/debian/changelog" | grep -q ') UNRELEASED;'; then
	unreleased='unreleased-changes\|bad-distribution-in-changes-file'
fi
if grep '^E: ' "$work/lintian.log" | grep -qv "$unreleased"; then
	echo "build-packages: lintian reports errors" >&2
	exit 1
fi
echo "build-packages: $(grep -c '^W: ' "$work/lintian.log" || true) lintian warnings, no errors"
