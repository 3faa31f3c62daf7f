#!/bin/bash
# Not a test: ringrdma-cp send --mpi with 1, 2 and 4 send ranks (1 VM x
# 1, 2 VMs x 1, 2 VMs x 2) to 2 serve ranks on a third VM, in one boot of
# four lab VMs, each send rank under `strace -f -c`: per rank, the
# syscalls, the MPI requests to rank 0 and the chunks (RDMA WRITEs with
# immediate) per file and per MiB, which should not grow with the ranks
# (syscalls split into waits, which MPI's progress and the sleeps make
# per second of the run, and the rest, made per file and per MiB);
# and the copy's files/s and MB/s beside ib_write_bw lab1 -> lab3 (1 MiB
# messages) in the same boot; then one send process on lab1 with
# --threads 1, 2 and 4 (a connection each). The lab's VMs have one vCPU
# each: the rates say little of a host with cores to spare, the counts
# do. STRACE=0 leaves strace out (the rates of item 6, one boot a run:
# take the median of three runs).
#   tests/cp/measure_ranks.sh [BUILD]    (FILES=2000, MB=256 size it;
#   KEEP=DIR keeps the straces and logs)
set -u
BUILD=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CP=$root/$BUILD/cp/ringrdma-cp
FILES=${FILES:-2000}
MB=${MB:-256}
STRACE=${STRACE:-1}
D=$(mktemp -d "$root/$BUILD/measure-ranks.XXXXXX") || exit 1
trap 'rm -rf "$D"' EXIT
python3 -S "$here/make_src.py" "$D/src" "$FILES" "$MB" || exit 1
(umask 077 && printf 'measure-ranks-%05d%05d\n' "$RANDOM" "$RANDOM" >"$D/token")
cat >"$D/guest.sh" <<'GUEST'
set -u
CP=$1 D=$2 PORT=7720 L=/run/rdma-lab/disk
a3=$(getent hosts lab3 | awk '{print $1; exit}')
on3() { "$RDMA_LAB_AGENT" lab3 "$@"; }
on3 ib_write_bw -s 1048576 -n 2000 >/dev/null 2>&1 &
sleep 2
echo "@@ bw $(ib_write_bw -s 1048576 -n 2000 "$a3" 2>&1 | awk '$1 == 1048576 {print $4}')"
wait
for hosts in lab1:1 lab1:1,lab2:1 lab1:2,lab2:2; do
	R=$(($(tr ',' '\n' <<<"$hosts" | cut -d: -f2 | paste -sd+)))
	on3 rm -rf $L/dst
	on3 mkdir -p $L/dst
	mpirun -n 2 --host lab3:2 "$CP" serve --mpi --listen "$a3:$PORT" --dir $L/dst \
		--token-file "$D/token" >"$D/serve.$R" 2>&1 &
	spid=$!
	for _ in $(seq 600); do [ "$(grep -c 'listening on' "$D/serve.$R")" = 2 ] && break; sleep 0.1; done
	t0=$(date +%s.%N)
	mpirun -n "$R" --host "$hosts" bash -c \
		'[ "$2" = 1 ] || exec "${@:3}"; exec strace -f -c -o "$0/st.$1.$OMPI_COMM_WORLD_RANK" "${@:3}"' \
		"$D" "$R" "$STRACE" "$CP" send --mpi -r --conns 1 --chunk 256K --window 16 --stripe 4M --no-progress \
		--token-file "$D/token" --json "$D/send.$R.json" "$D/src" "$a3:$PORT,$a3:$((PORT + 1))" \
		>"$D/send.$R" 2>&1
	echo "@@ ranks $R rc=$? secs=$(echo "$(date +%s.%N) - $t0" | bc)"
	kill $spid 2>/dev/null # serve's ranks end on SIGTERM through mpirun
	wait $spid
done
for T in 1 2 4; do
	on3 rm -rf $L/dst
	on3 mkdir -p $L/dst
	mpirun -n 1 --host lab3:1 "$CP" serve --mpi --threads 2 --listen "$a3:$PORT" --dir $L/dst \
		--token-file "$D/token" >"$D/serve.t$T" 2>&1 &
	spid=$!
	for _ in $(seq 600); do grep -q 'listening on' "$D/serve.t$T" && break; sleep 0.1; done
	t0=$(date +%s.%N)
	"$CP" send -r --threads "$T" --conns "$T" --chunk 256K --window 16 --stripe 4M --no-progress \
		--token-file "$D/token" --json "$D/send.t$T.json" "$D/src" "$a3:$PORT" \
		>"$D/send.t$T" 2>&1
	echo "@@ threads $T rc=$? secs=$(echo "$(date +%s.%N) - $t0" | bc)"
	kill $spid 2>/dev/null
	wait $spid
done
GUEST
"$root/tools/rdma-lab" run --hosts 4 --mem 1536 --timeout 1800 -- env STRACE="$STRACE" bash "$D/guest.sh" "$CP" "$D" \
	>"$D/lab.out" 2>&1
echo "lab: status $?"
[ -z "${KEEP:-}" ] || cp -r "$D" "$KEEP" # the straces and logs, to look into
grep '^@@' "$D/lab.out"
python3 -S - "$D" "$MB" "$STRACE" <<'PY'
import json, os, sys
d, mb, STRACE = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
bw = 0.0
for line in open(os.path.join(d, "lab.out")):
    if line.startswith("@@ bw ") and len(line.split()) > 2:
        bw = float(line.split()[2])
# What a process makes while it waits, per second rather than per file.
WAITS = {"poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait",
         "epoll_pwait2", "nanosleep", "clock_nanosleep", "sched_yield"}
print("ranks  files/s  MB/s(data)  /bw  | per rank: files  MiB  syscalls/file  syscalls/MiB"
      "  mpi/file  chunks/MiB | other/file  other/MiB  waits/s")
for r in (1, 2, 4):
    try:
        j = json.load(open(os.path.join(d, "send.%d.json" % r)))
    except (OSError, ValueError):
        print(r, "no json"); continue
    secs = j.get("data_seconds") or j["seconds"]
    mbs = j["bytes"] / 1e6 / secs
    print("%5d  %7.1f  %10.1f  %.2f" % (r, j["files"] / secs, mbs, mbs / bw if bw else 0))
    job = [0, 0, 0]  # every rank's: other syscalls, waits, MPI requests
    for k in j.get("rank_figs", []):
        st = os.path.join(d, "st.%d.%d" % (r, k["rank"]))
        calls = waits = 0
        try:
            for line in open(st):
                f = line.split()
                if len(f) >= 5 and f[3].isdigit():
                    if f[-1] == "total":
                        calls = int(f[3])
                    elif f[-1] in WAITS:
                        waits += int(f[3])
        except OSError:
            pass
        files = k["files"] or 1
        mib = k["bytes"] / 1048576 or 1
        other = calls - waits
        job[0] += other
        job[1] += waits
        job[2] += k["mpi_requests"]
        print("         rank %d (%s): %6d  %6.1f  %9.1f  %9.1f  %6.2f  %6.2f | %7.1f  %7.1f  %7.0f" % (
            k["rank"], k["host"], k["files"], k["bytes"] / 1048576, calls / files,
            calls / mib, k["mpi_requests"] / files, k["chunks"] / mib,
            other / files, other / mib, waits / j["seconds"]))
    if STRACE:
        print("         job: other syscalls %.1f per file (of %d), %.1f per MiB; "
              "waits %.0f/s; MPI requests %.2f per file" % (
                  job[0] / j["files"], j["files"], job[0] / (j["bytes"] / 1048576),
                  job[1] / j["seconds"], job[2] / j["files"]))
for t in (1, 2, 4):
    try:
        j = json.load(open(os.path.join(d, "send.t%d.json" % t)))
    except (OSError, ValueError):
        print("threads", t, "no json"); continue
    secs = j.get("data_seconds") or j["seconds"]
    mbs = j["bytes"] / 1e6 / secs
    print("threads %d  %7.1f  %10.1f  %.2f" % (t, j["files"] / secs, mbs, mbs / bw if bw else 0))
PY
