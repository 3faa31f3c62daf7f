#!/bin/bash
# ringrdma-cp's ranks across four lab VMs (suite boots-lab): MPI started
# through the lab's agent, every byte over RDMA. From the host: the data
# is made here, one boot of four VMs runs tests/cp/ranks_guest.sh on
# lab1, and the results are checked here. TAP output.
#   - serve ranks on two hosts sharing --dir over 9p (locks each host's
#     own) are refused before they listen, and so are two sharing it
#     over NFS with its name cache (a renamed name lingers);
#   - a tree of small files and a striped big file, 2 hosts x 2 send
#     ranks to serve ranks on 2 hosts, one --dir over NFS 4.2 (lab3's
#     disk, tools/lab/nfs), stored identical; --json at rank 0 has
#     every rank's figures, and every rank sent; the tree was walked
#     once, by rank 0 (the others took its list);
#   - a wrong token: every rank refused, nothing stored;
#   - a send rank SIGKILLed mid-file: the job fails, nothing named; the
#     same copy again completes without resending a completed range, and
#     resends less than one stripe per cut range;
#   - a serve rank SIGKILLed mid-file: the send job fails saying why,
#     nothing named.
# RR_CP_RANKS_CP runs another ringrdma-cp (tools/test: the plain build's).
# RR_CP_RANKS_FILES (default 200) and RR_CP_RANKS_MB (default 32) size
# the copy: 10000 and 1024 are issue 47's, with RR_CP_RANKS_DST=/tmp/nfs
# (lab3 exports its RAM; its disk is 1 GiB) and RR_CP_RANKS_MEM=3072 (MB
# per VM; default 1536).
#   ranks_lab.sh PATH/TO/rdma-lab PATH/TO/ringrdma-cp BUILD_DIR [mpi|none]
set -u
LAB=${1:?usage: ranks_lab.sh PATH/TO/rdma-lab PATH/TO/ringrdma-cp BUILD_DIR}
CP=${2:?usage: ranks_lab.sh PATH/TO/rdma-lab PATH/TO/ringrdma-cp BUILD_DIR}
BUILD=${3:?usage: ranks_lab.sh PATH/TO/rdma-lab PATH/TO/ringrdma-cp BUILD_DIR}
# tools/test runs the plain build's ranks when the build is sanitized:
# with its own library, not the one meson's LD_LIBRARY_PATH names.
if [ -n "${RR_CP_RANKS_CP:-}" ]; then
	CP=$RR_CP_RANKS_CP
	LD_LIBRARY_PATH=$(cd "$(dirname "$CP")/../src" && pwd) || exit 1
	export LD_LIBRARY_PATH
fi
echo "# ringrdma-cp: $CP"
FILES=${RR_CP_RANKS_FILES:-200}
MB=${RR_CP_RANKS_MB:-32}
STRIPE=$((4 << 20))
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tap.sh"
if ! help=$("$CP" --help 2>&1); then
	echo "1..1"
	echo "not ok 1 - $CP --help runs"
	sed 's/^/# /' <<<"$help" | head -n 5
	exit 1
fi
if [ "${4:-mpi}" = none ]; then
	# --help lists --mpi in every build; this one refuses it.
	echo "1..0 # SKIP built without MPI (-Dmpi=disabled, or no MPI installed)"
	exit 0
fi
if [ "${RR_REQUIRE_RDMA:-}" != 1 ] && ! command -v mpirun >/dev/null; then
	echo "1..0 # SKIP mpirun is missing (apt-get install openmpi-bin)"
	exit 0
fi
# The guests see the checkout (writable) but not the host's /tmp.
D=$(mktemp -d "$BUILD/cp-ranks-lab.XXXXXX") || exit 1
# RR_CP_RANKS_KEEP=1 keeps it (logs, JSON) for a look afterwards.
[ "${RR_CP_RANKS_KEEP:-}" = 1 ] && echo "# kept: $D" || trap 'rm -rf "$D"' EXIT
tap_plan 12

# The source: FILES small files in 20 directories (1 to 8 KiB), and big.
python3 -S "$here/make_src.py" "$D/src" "$FILES" "$MB" || exit 1
(umask 077 && printf 'ranks-%05d%05d\n' "$RANDOM" "$RANDOM" >"$D/token")

start=$SECONDS
"$LAB" run --hosts 4 --mem "${RR_CP_RANKS_MEM:-1536}" --timeout $((1800 + FILES / 5)) -- \
	bash "$here/ranks_guest.sh" "$CP" "$D" ${RR_CP_RANKS_DST:+"$RR_CP_RANKS_DST"} >"$D/lab.out" 2>&1
rc=$?
echo "# lab run: status $rc, $((SECONDS - start))s in all"
grep '^@@' "$D/lab.out" | sed 's/^/# /'
field() { sed -n "s/^@@ $1 .*$2=\([0-9]*\).*/\1/p" "$D/lab.out"; }
js() { # FILE EXPR: a value of the JSON file (python expression over d)
	python3 -S -c 'import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print(eval(sys.argv[2]))
except Exception:
    pass' "$1" "$2"
}
tap_is $([ "$rc" = 0 ]; echo $?) "four VMs booted and the ranks' script ran (lab status $rc)" \
	"$(tail -n 30 "$D/lab.out")"

r=$(field split rc)
tap_is $([ "$r" = 3 ] && grep -q 'does not share locks' "$D/split.out"; echo $?) \
	"serve ranks on lab3 and lab4 sharing --dir over 9p are refused (status ${r:-none}): its locks are each host's own" \
	"$(tail -n 5 "$D/split.out" 2>/dev/null)"

r=$(field cached rc)
tap_is $([ "$(field nfs rc)" = 0 ] && [ "$r" = 3 ] && grep -q 'under its old name' "$D/cached.out"; echo $?) \
	"serve ranks on lab3 and lab4 sharing --dir over NFS with its name cache are refused (NFS up: status $(field nfs rc); serve ${r:-none}): a renamed name lingers" \
	"$(grep -a ringrdma-cp "$D/cached.out" 2>/dev/null | tail -n 3)"

r=$(field send1 rc)
diffs=$(head -n 5 "$D/diff1" 2>/dev/null)
tap_is $([ "$r" = 0 ] && [ "$(field serve1 rc)" = 0 ] && [ "$(field same1 rc)" = 0 ]; echo $?) \
	"$FILES files and $MB MiB, 2 hosts x 2 send ranks to serve ranks on 2 hosts over NFS: stored identical (send ${r:-none}, serve $(field serve1 rc), $(field send1 secs)s)" \
	"$diffs" "$(grep -a 'ringrdma-cp' "$D/send1.out" 2>/dev/null | head -n 10)"

r=$(field dirs1 rc)
tap_is $([ "$r" = 0 ]; echo $?) \
	"every directory's mode and time as the source's, set by the serve rank that made it (diff ${r:-none})" \
	"$(head -n 6 "$D/dirs.diff" 2>/dev/null)"

want_files=$((FILES + 1))
ranks=$(js "$D/send1.json" 'd["ranks"]')
# Every rank connects; which of them get work is the queue's choice (a
# rank that connects last may find a small job taken), but both hosts'
# ranks send.
busy=$(js "$D/send1.json" 'sum(1 for k in d["rank_figs"] if k["files"] + k["ranges"] > 0)')
joined=$(js "$D/send1.json" 'sum(1 for k in d["rank_figs"] if k["connections"] > 0)')
hosts=$(js "$D/send1.json" 'len(set(k["host"] for k in d["rank_figs"] if k["files"] + k["ranges"] > 0))')
files=$(js "$D/send1.json" 'd["files"]')
ranges=$(js "$D/send1.json" 'd["ranges"]')
tap_is $([ "$ranks" = 4 ] && [ "$joined" = 4 ] && [ "$hosts" = 2 ] && [ "$files" = "$want_files" ] && [ "$ranges" = $(((MB << 20) / STRIPE)) ]; echo $?) \
	"rank 0's --json: 4 ranks, each connected ($joined did), ranks of $hosts hosts sent ($busy ranks), $files files and $ranges ranges in all" \
	"$(js "$D/send1.json" 'd.get("rank_figs")')"

# The tree is walked once, by rank 0: the others take its list.
walked=$(js "$D/send1.json" '[k.get("walked") for k in d["rank_figs"]]')
once=$(js "$D/send1.json" 'int(not (d["rank_figs"][0]["walked"] > '"$FILES"' and all(k["walked"] == 0 for k in d["rank_figs"][1:])))')
tap_is "${once:-1}" \
	"the tree walked once, by rank 0 (entries each rank's walk listed: $walked)"

# Both serve hosts received (each send rank's connection goes to one of
# them, and big's ranges are spread over all four), into one DIR over NFS.
sfiles=$(js "$D/serve1.json" 'd["files"]')
schunks=$(js "$D/serve1.json" '[k["chunks"] for k in d["rank_figs"]]')
shosts=$(js "$D/serve1.json" 'sorted(k["host"] for k in d["rank_figs"] if k["chunks"] > 0)')
tap_is $([ "$(js "$D/serve1.json" 'd["ranks"]')" = 2 ] && [ "$sfiles" = "$want_files" ] &&
	[ "$shosts" = "['lab3', 'lab4']" ]; echo $?) \
	"serve's rank 0 --json: 2 ranks, $sfiles files stored in all, chunks received per rank $schunks"

r=$(field wrong rc)
tap_is $([ "$r" = 5 ] && [ "$(field empty2 rc)" = 0 ]; echo $?) \
	"a wrong token: every rank refused (status ${r:-none}), nothing stored" \
	"$(grep -a 'ringrdma-cp' "$D/wrong.out" 2>/dev/null | head -n 8)"

held=$(cat "$D/held" 2>/dev/null)
held=${held:-0}
r=$(field cut rc)
tap_is $([ -n "$r" ] && [ "$r" != 0 ] && [ "$held" -gt 0 ] && [ "$(field named3 rc)" = 0 ]; echo $?) \
	"a send rank SIGKILLed mid-file: the job fails (status ${r:-none}), the partial holds $held bytes, nothing named" \
	"$(grep -a 'ringrdma-cp' "$D/cut.out" 2>/dev/null | head -n 8)"

r=$(field resend rc)
bytes=$(js "$D/resend.json" 'd["bytes"]')
resumed=$(js "$D/resend.json" 'd["bytes_resumed"]')
rheld=$(js "$D/resend.json" 'd["ranges_held"]')
rcut=$(js "$D/resend.json" 'd["ranges_cut"]')
sent=$((${bytes:-0} - ${resumed:-0}))
extra=$((sent - ((MB << 20) - held)))
cuts=$((${rcut:-0} > 0 ? ${rcut:-0} : 1))
tap_is $([ "$r" = 0 ] && [ "$(field same3 rc)" = 0 ] && [ "${rheld:-0}" -ge 1 ] && [ "$extra" -lt $((cuts * STRIPE)) ]; echo $?) \
	"sent again by 4 ranks: identical (status ${r:-none}), $rheld ranges held whole, $rcut cut, $extra bytes resent for $cuts cut ranges (< one stripe each)" \
	"$(grep -a 'ringrdma-cp' "$D/resend.out" 2>/dev/null | head -n 8)"
r=$(field lost rc)
tap_is $([ -n "$r" ] && [ "$r" != 0 ] && [ "$(field named5 rc)" = 0 ] &&
	grep -aq 'ringrdma-cp: send: ' "$D/lost.out"; echo $?) \
	"a serve rank SIGKILLed mid-file: the send job fails (status ${r:-none}) saying why, nothing named" \
	"$(grep -a 'ringrdma-cp: send' "$D/lost.out" 2>/dev/null | head -n 4)"
tap_done
