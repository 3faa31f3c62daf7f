#!/bin/bash
# The EXAMPLE of ringrdma(7) walks through examples/client.c: every line
# of code it quotes must be a line of that file, in the file's order, so
# the page cannot drift from the program the tests run. TAP output.
#
#   man_example.sh RINGRDMA_7_MD CLIENT_C
set -u
doc=${1:?usage: man_example.sh RINGRDMA_7_MD CLIENT_C}
prog=${2:?}

echo "1..2"
quoted=$(awk '/^## /{ex = ($0 == "## EXAMPLE")} ex && /^```c$/{code = 1; next}
	ex && /^```$/{code = 0} ex && code && NF' "$doc")
count=$(printf '%s\n' "$quoted" | grep -c .)
if [ "$count" -ge 20 ]; then
	echo "ok 1 - ringrdma(7) EXAMPLE quotes $count lines of code"
else
	echo "not ok 1 - ringrdma(7) EXAMPLE quotes $count lines of code, expected a walk-through"
fi

# Each quoted line must be found after the previous one.
missing=$(printf '%s\n' "$quoted" | awk -v prog="$prog" '
	BEGIN { while ((getline l < prog) > 0) src[++n] = l }
	{ for (i = at + 1; i <= n && src[i] != $0; i++) ;
	  if (i > n) print; else at = i }')
if [ -z "$missing" ]; then
	echo "ok 2 - every quoted line is in ${prog##*/}, in order"
else
	echo "not ok 2 - lines quoted in ringrdma(7) but not in ${prog##*/} (or out of order)"
	printf '%s\n' "$missing" | sed 's/^/# /'
fi
[ "$count" -ge 20 ] && [ -z "$missing" ]
