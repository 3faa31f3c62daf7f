#!/bin/bash
# The EXAMPLE of ringrdma(7) walks through examples/client.c: every line
# of code it quotes must be a line of that file, in the file's order, so
# the page cannot drift from the program the tests run. TAP output.
#
#   man_example.sh RINGRDMA_7_MD CLIENT_C
set -u
doc=${1:?usage: man_example.sh RINGRDMA_7_MD CLIENT_C}
prog=${2:?}

# shellcheck source=tests/tap.sh
. "$(dirname "$0")/../tap.sh"
tap_plan 2
quoted=$(awk '/^## /{ex = ($0 == "## EXAMPLE")} ex && /^```c$/{code = 1; next}
	ex && /^```$/{code = 0} ex && code && NF' "$doc")
count=$(printf '%s\n' "$quoted" | grep -c .)
[ "$count" -ge 20 ]
tap_is $? "ringrdma(7) EXAMPLE quotes $count lines of code (a walk-through: 20 at least)"

# Each quoted line must be found after the previous one.
missing=$(printf '%s\n' "$quoted" | awk -v prog="$prog" '
	BEGIN { while ((getline l < prog) > 0) src[++n] = l }
	{ for (i = at + 1; i <= n && src[i] != $0; i++) ;
	  if (i > n) print; else at = i }')
[ -z "$missing" ]
tap_is $? "every line quoted in ringrdma(7) is in ${prog##*/}, in order" \
	"${missing:+not there (or out of order):
$missing}"
tap_done
