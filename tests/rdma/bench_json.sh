#!/bin/bash
# ringrdma-bench runs every strategy on every workload (and perftest's
# reference rows) with tiny iteration counts and writes complete, sane JSON
# and CSV: one record per run, every field present, counts equal to what was
# asked, percentiles ordered, file bytes counted in the mixed workload.
# --threads 2 on the conns workload: the server's connections spread over two
# poll groups (group_conns sums to the count, within one of each other);
# --threads 2 with a strategy groups cannot run is refused.
# --quick conns runs at least 64 round trips a connection.
# --no-count: no syscall figures. --client-threads 2 --repeat 2: the
# client's CPU per thread, each round's figures behind the medians; syscall
# columns from the counting pass (verbs' posts and arms plus the crossings
# that remain add up).
# Posting: every raw row makes one ibv_post_send()/_recv() call per work
# request; the -ep rows post through the library's endpoints, and at rate
# qd 64 both sides chain what a pass posts (more than one work request per
# call): a structural fact, not a timing. busy-ep is busy polling through
# the same endpoints, and chains as they do.
# Every record names the kernel it ran on (uname -r). The mixed rows, the
# page-cache one and mixed-direct (O_DIRECT on the lab's disk), say where
# their reads ran: pread() rows inline; the ring's O_DIRECT reads inline
# (issued in the enter); the ring's tmpfs reads inline before 6.5 and in
# io-wq from 6.5, where tmpfs lacks non-blocking reads.
# mixed-direct runs at 1 and 4 file reads in flight (--file-qd; 16 in a
# run of its own): above 1 only the ring's rows and epoll-aio (epoll with
# Linux AIO and an eventfd, where the bench was built with libaio: HAS_AIO
# from meson), each of which has had that many reads in flight at once
# (file_inflight_max); pread() rows have one. Syscalls per read, counted
# where the bench makes them: a pread() row's exactly one; epoll-aio's
# io_submit(), eventfd read(), io_getevents() and lone wake-ups, some.
# Never asserts on speed.
bench=${1:?usage: bench_json.sh PATH/TO/ringrdma-bench [HAS_AIO]}
has_aio=${2:-1}
. "$(dirname "${BASH_SOURCE[0]}")/../support/require.sh"
rr_require_rdma 1
addr=$RR_ADDR
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
iters=120
"$bench" --addr "$addr" --iters $iters --idle-ms 300 --conns 1,3 --qd 16 --with-perftest \
	--no-count --json "$out/b.json" --csv "$out/b.csv" --timeout 120 >"$out/table" 2>&1
rc=$?
"$bench" --addr "$addr" --iters $iters --strategies hybrid --workloads pingpong --ops send \
	--spin-fixed --ring-read --json "$out/f.json" --timeout 120 >>"$out/table" 2>&1 || rc=$?
"$bench" --addr "$addr" --iters $iters --strategies uring,hybrid,uring-ep --workloads conns \
	--conns 5 --threads 1,2 --json "$out/g.json" --csv "$out/g.csv" --timeout 120 \
	>>"$out/table" 2>&1 || rc=$?
"$bench" --addr "$addr" --iters 2000 --strategies busy,uring,uring-ep,hybrid-ep,busy-ep --workloads rate \
	--qd 64 --no-count --json "$out/r.json" --timeout 120 >>"$out/table" 2>&1 || rc=$?
"$bench" --addr "$addr" --iters 2000 --strategies uring-ep --workloads rate --qd 64 --no-count \
	--post-now --json "$out/n.json" --timeout 120 >>"$out/table" 2>&1 || rc=$?
"$bench" --addr "$addr" --iters $iters --strategies busy,uring --workloads conns --conns 4 \
	--client-threads 2 --repeat 2 --json "$out/c.json" --timeout 120 >>"$out/table" 2>&1 || rc=$?
"$bench" --addr "$addr" --quick --strategies busy --workloads conns --conns 40 --no-count \
	--json "$out/q.json" --timeout 120 >>"$out/table" 2>&1 || rc=$?
dstrats=epoll,uring
[ "$has_aio" = 1 ] && dstrats=epoll,uring,epoll-aio
"$bench" --addr "$addr" --iters $iters --strategies $dstrats --workloads mixed-direct \
	--file-qd 1,16 --no-count --json "$out/d.json" --timeout 120 >>"$out/table" 2>&1 || rc=$?
"$bench" --addr "$addr" --strategies busy,uring --threads 2 --workloads conns >"$out/refused" 2>&1
refused_rc=$?
# A failure keeps everything the bench said (a sanitizer report included).
[ "$rc" = 0 ] || sed 's/^/# /' "$out/table"
# A run far longer than its watchdog: stopped, and both sides said where.
"$bench" --addr "$addr" --iters 2000000 --strategies busy --workloads pingpong --ops send \
	--timeout 3 >"$out/stuck" 2>&1
stuck_rc=$?
python3 -S - "$out/b.json" "$rc" "$out/table" "$out/b.csv" "$iters" "$out/f.json" "$out/stuck" "$stuck_rc" \
	"$out/g.json" "$out/g.csv" "$out/refused" "$refused_rc" "$out/c.json" "$out/r.json" \
	"$out/n.json" "$out/q.json" "$has_aio" "$out/d.json" <<'PY'
import csv, json, os, re, sys
path, rc, table, csvpath, iters = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
checks = []
def check(ok, what):
    checks.append((bool(ok), what))
# On failure, the bench's own complaints (each names its run) and the table's end.
said = [l for l in open(table).read().splitlines() if l.startswith("ringrdma-bench")]
check(rc == 0, f"ringrdma-bench exited 0 (got {rc}): " + " | ".join(said)[-3000:] + " || "
      + open(table).read().replace("\n", " | ")[-400:])
try:
    recs = json.load(open(path))
except Exception as e:
    recs = []
    check(False, f"JSON parses ({e})")
has_aio = sys.argv[17] == "1"
strats = ["busy", "thread", "epoll", "uring", "hybrid", "hybrid-plain", "uring-ep", "hybrid-ep",
          "busy-ep"] + (["epoll-aio"] if has_aio else [])
ep = ("uring-ep", "hybrid-ep", "busy-ep")
mixed = ("mixed", "mixed-direct")
bridged = ("uring", "hybrid") + ep
# Strategies that keep several file reads in flight; the rest pread().
file_qd_ok = ("uring", "hybrid", "epoll-aio") + ep
# (workload, op, qd, conns, file reads in flight) in the order the bench
# runs them
runs = [("pingpong", "send", 1, 1, None), ("pingpong", "write_imm", 1, 1, None),
        ("rate", "send", 16, 1, None), ("mixed", "send", 1, 1, 1), ("idle", "send", 1, 1, None),
        ("conns", "send", 1, 1, None), ("conns", "send", 1, 3, None),
        ("mixed-direct", "send", 1, 1, 1), ("mixed-direct", "send", 1, 1, 4)]
# By default the -ep strategies leave out mixed, mixed-direct and idle;
# epoll-aio runs mixed-direct only; above one read in flight, no pread().
def planned(s, w, fq):
    return ((s not in ep or w not in mixed + ("idle",)) and (s != "epoll-aio" or w == "mixed-direct")
            and (fq is None or fq == 1 or s in file_qd_ok))
want = [(s, w, o, q, c, fq) for (w, o, q, c, fq) in runs for s in strats if planned(s, w, fq)] + \
       [("file-only", "mixed", "send", 1, 1, 1), ("file-only", "mixed-direct", "send", 1, 1, 1),
        ("perftest", "pingpong", "send", 1, 1, None), ("perftest-e", "pingpong", "send", 1, 1, None)]
got = [(r.get("strategy"), r.get("workload"), r.get("op"), r.get("qd"), r.get("conns"), r.get("file_qd"))
       for r in recs]
check(got == want, f"one record per strategy and run, in order ({len(got)} of {len(want)})")
fields = ["strategy", "workload", "op", "msg_size", "qd", "conns", "iters", "idle_ms", "spin_us",
          "spin", "ring_read", "signal_every", "reference", "threads", "group_conns", "group_cpu_us_per_op",
          "client_threads", "client_thread_cpu_us_per_op", "repeat", "p50_us_range", "ops_per_s_range",
          "p50_us", "p99_us", "p999_us", "max_us", "ops_per_s", "cpu_us_per_op",
          "client_cpu_us_per_op", "server_cpu_us_per_op", "sys_cpu_us_per_op", "syscalls_per_op",
          "verbs_syscalls_per_op", "crossings_per_op",
          "ctx_switches_per_op", "wcs_per_wakeup", "wakeups_per_op", "cpu_pct_per_side", "file_mb_per_s",
          "posts_per_op", "chains_per_op", "wrs_per_chain", "client_wrs_per_chain",
          "server_wrs_per_chain", "kernel", "file_iowq_pct", "file_reads", "file_qd",
          "file_inflight_max", "file_syscalls_per_read"]
kernel = os.uname().release
kver = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", kernel).groups())
for r in recs:
    name = f"{r.get('strategy')} {r.get('workload')} {r.get('op')} conns={r.get('conns')}"
    check(all(f in r for f in fields), f"{name}: all fields present")
    check(r.get("kernel") == kernel, f"{name}: kernel {r.get('kernel')} is uname -r's {kernel}")
    fr, fp = r.get("file_reads"), r.get("file_iowq_pct")
    fq, fm = r.get("file_qd"), r.get("file_inflight_max")
    if r.get("workload") in mixed:
        name += f" file_qd={fq}"
        most = fq if r.get("strategy") in file_qd_ok else 1
        check(fm == most, f"{name}: {most} file reads in flight at once (said {fm})")
        spr = r.get("file_syscalls_per_read")
        if r.get("strategy") in file_qd_ok:
            check(isinstance(spr, (int, float)) and (spr > 0 if r.get("strategy") == "epoll-aio" else spr >= 0),
                  f"{name}: syscalls per read counted ({spr})")
        else:
            check(spr == 1, f"{name}: one pread() a read (said {spr})")
    else:
        check(fq is None and fm is None, f"{name}: no file reads in flight ({fq}, {fm})")
    if r.get("workload") not in mixed:
        check(fr is None and fp is None, f"{name}: no file reads, none said ({fr}, {fp})")
    elif r.get("strategy") in ("uring", "hybrid"):
        where = "io-wq" if r.get("workload") == "mixed" and kver >= (6, 5) else "inline"
        check(fr == where and isinstance(fp, (int, float)) and 0 <= fp <= 100,
              f"{name}: the ring's reads ran {where} on {kernel} (said {fr}, {fp}% in io-wq)")
    else:
        check(fr == "inline" and fp == 0, f"{name}: pread() runs inline ({fr}, {fp}% in io-wq)")
    check(r.get("msg_size") == 64, f"{name}: msg_size as asked")
    check(r.get("threads") == 1, f"{name}: one server thread unless asked")
    if not r.get("reference"):
        check(r.get("group_conns") == [r.get("conns")], f"{name}: its one thread served every connection")
    spin = {"hybrid": "adaptive", "hybrid-ep": "adaptive", "hybrid-plain": "fixed"}.get(r.get("strategy"))
    check(r.get("spin") == (None if r.get("reference") else spin),
          f"{name}: spin is hybrid's adaptive window, hybrid-plain's fixed one, null elsewhere")
    check(r.get("ring_read") == (False if r.get("strategy") in bridged and not r.get("reference") else None),
          f"{name}: ring_read false where a bridge waits, null elsewhere")
    if r.get("strategy") == "file-only":
        check(r.get("reference") is True and (r.get("file_mb_per_s") or 0) > 0
              and r.get("p50_us") is None, f"{name}: a reference row with file MB/s only")
        continue
    lat = [r.get(k) for k in ("p50_us", "p99_us", "p999_us", "max_us")]
    if r.get("workload") == "idle":
        check(r.get("iters") == 0 and r.get("idle_ms") == 300, f"{name}: idle for the time asked")
        check(all(v is None for v in lat) and r.get("ops_per_s") is None, f"{name}: no latency when idle")
        check(r.get("cpu_pct_per_side") is not None and 0 <= r["cpu_pct_per_side"] <= 400,
              f"{name}: CPU per side measured")
        continue
    check(r.get("iters") == iters, f"{name}: iterations as asked")
    check(all(isinstance(v, (int, float)) for v in lat) and 0 < lat[0] <= lat[1] <= lat[2] <= lat[3],
          f"{name}: 0 < p50 <= p99 <= p99.9 <= max")
    if r.get("reference"):
        continue
    check(r.get("ops_per_s", 0) > 0 and r.get("cpu_us_per_op", -1) >= 0
          and r.get("ctx_switches_per_op", -1) >= 0, f"{name}: rates positive")
    wpw = r.get("wcs_per_wakeup")
    if r.get("strategy") in ("busy", "busy-ep"):
        check(wpw is None and r.get("wakeups_per_op") == 0,
              f"{name}: busy polling never wakes (wcs_per_wakeup null, wakeups_per_op 0)")
    elif r.get("strategy") in ("thread", "epoll", "uring", "uring-ep", "epoll-aio"):
        # A side that slept woke for completions; one message in flight
        # always sleeps, while many in flight may keep a bridge's CQ
        # polled from start to end (the row then never woke).
        wpo = r.get("wakeups_per_op")
        check(isinstance(wpo, (int, float)) and wpo >= 0
              and (wpw > 0 if wpo > 0 else wpw is None)
              and (wpo > 0 or (r.get("qd") or 1) > 1 and r.get("strategy") in ("uring", "uring-ep")),
              f"{name}: completions per wake-up counted (wakeups_per_op {wpo}, wcs_per_wakeup {wpw})")
    check(all(r.get(k) is None for k in ("syscalls_per_op", "verbs_syscalls_per_op", "crossings_per_op")),
          f"{name}: --no-count: no syscall figures")
    check(isinstance(r.get("sys_cpu_us_per_op"), (int, float)) and r["sys_cpu_us_per_op"] >= 0,
          f"{name}: the machine's CPU per op measured")
    check(r.get("repeat") == 1 and r.get("p50_us_range") == [r.get("p50_us")] * 2
          and r.get("client_threads") == 1, f"{name}: one round, one client thread unless asked")
    if r.get("workload") in mixed:
        check((r.get("file_mb_per_s") or 0) > 0, f"{name}: file bytes read while measuring")
    # Each message: a send and a receive posted on each side.
    check(3 <= (r.get("posts_per_op") or 0) <= 5, f"{name}: posts_per_op {r.get('posts_per_op')} about 4")
    if r.get("strategy") not in ep:
        check(r.get("wrs_per_chain") == 1 and r.get("chains_per_op") == r.get("posts_per_op"),
              f"{name}: raw posts, one work request per call")
try:
    rows = list(csv.DictReader(open(csvpath)))
except Exception as e:
    rows = []
check([(x["strategy"], x["workload"], x["op"]) for x in rows] == [(r.get("strategy"), r.get("workload"), r.get("op")) for r in recs],
      "CSV has the same records as the JSON")
check(bool(rows) and set(fields) <= set(rows[0].keys()), "CSV has every field as a column")
try:
    fixed = json.load(open(sys.argv[6]))
except Exception as e:
    fixed = []
check(len(fixed) == 1 and fixed[0].get("strategy") == "hybrid" and fixed[0].get("spin") == "fixed"
      and fixed[0].get("iters") == iters, "--spin-fixed: one hybrid record with the fixed window")
check(len(fixed) == 1 and fixed[0].get("ring_read") is True, "--ring-read: said in the record")
stuck = open(sys.argv[7]).read()
check(int(sys.argv[8]) != 0 and "busy pingpong timed out" in stuck,
      "a run past its watchdog is stopped and reported: " + stuck.replace("\n", " | ")[-600:])
# Each report on a line of its own: logs and the check above look there.
for side in ("client", "server"):
    check(any(l.startswith(f"ringrdma-bench: at the deadline the {side} was running; ")
              and "completions handled" in l for l in stuck.splitlines()),
          f"the stopped run says where its {side} was, on a line of its own")
# --threads 1,2 on conns 5: uring and hybrid, one thread then two groups.
try:
    grecs = json.load(open(sys.argv[9]))
except Exception as e:
    grecs = []
    check(False, f"--threads JSON parses ({e})")
check([(r.get("strategy"), r.get("threads")) for r in grecs]
      == [("uring", 1), ("hybrid", 1), ("uring-ep", 1), ("uring", 2), ("hybrid", 2), ("uring-ep", 2)],
      f"--threads 1,2: one record per strategy and thread count ({len(grecs)} of 6)")
for r in grecs:
    name = f"{r.get('strategy')} conns={r.get('conns')} threads={r.get('threads')}"
    gc, cpu = r.get("group_conns"), r.get("group_cpu_us_per_op")
    check(r.get("conns") == 5 and r.get("iters") == iters, f"{name}: conns and iterations as asked")
    check(isinstance(gc, list) and len(gc) == r.get("threads") and sum(gc) == 5
          and max(gc) - min(gc) <= 1, f"{name}: group_conns {gc} sums to 5, within one of each other")
    check(isinstance(cpu, list) and len(cpu) == r.get("threads")
          and all(isinstance(v, (int, float)) and v >= 0 for v in cpu),
          f"{name}: group_cpu_us_per_op {cpu}, one figure per group")
    check(r.get("ops_per_s", 0) > 0 and r.get("server_cpu_us_per_op", -1) >= 0
          and r.get("client_cpu_us_per_op", -1) >= 0
          and abs(r["server_cpu_us_per_op"] + r["client_cpu_us_per_op"] - r["cpu_us_per_op"]) < 0.01,
          f"{name}: rates positive, CPU per side adds up")
    lat = [r.get(k) for k in ("p50_us", "p99_us", "p999_us", "max_us")]
    check(all(isinstance(v, (int, float)) for v in lat) and 0 < lat[0] <= lat[1] <= lat[2] <= lat[3],
          f"{name}: 0 < p50 <= p99 <= p99.9 <= max")
    sc = r.get("syscalls_per_op")
    check(sc is None or sc > 0, f"{name}: syscalls_per_op null or > 0")
try:
    grows = list(csv.DictReader(open(sys.argv[10])))
except Exception as e:
    grows = []
check([(x.get("threads"), x.get("group_conns")) for x in grows]
      == [(str(r.get("threads")), ";".join(str(v) for v in r.get("group_conns") or []))
          for r in grecs] and len(grows) == 6,
      "--threads CSV: threads and group_conns (joined by ';') as in the JSON")
refused = open(sys.argv[11]).read()
check(int(sys.argv[12]) == 2 and "only the uring and hybrid" in refused,
      "--threads 2 with busy is refused as a usage error: " + refused.replace("\n", " | ")[:300])
# --client-threads 2 --repeat 2 on conns 4.
try:
    crecs = json.load(open(sys.argv[13]))
except Exception as e:
    crecs = []
    check(False, f"--client-threads JSON parses ({e})")
check([(r.get("strategy"), r.get("client_threads"), r.get("repeat")) for r in crecs]
      == [("busy", 2, 2), ("uring", 2, 2)],
      f"--client-threads 2 --repeat 2: one record per strategy ({len(crecs)} of 2)")
for r in crecs:
    name = f"{r.get('strategy')} conns=4 client_threads=2"
    cpu = r.get("client_thread_cpu_us_per_op")
    check(isinstance(cpu, list) and len(cpu) == 2 and all(v >= 0 for v in cpu),
          f"{name}: client CPU per thread {cpu}")
    for key, med in (("p50_us_range", "p50_us"), ("ops_per_s_range", "ops_per_s")):
        rg = r.get(key)
        check(isinstance(rg, list) and len(rg) == 2 and rg[0] <= r.get(med, -1) <= rg[1],
              f"{name}: {key} {rg} holds the median {r.get(med)}")
    check(r.get("iters") == iters and r.get("ops_per_s", 0) > 0, f"{name}: iterations as asked")
    sc, vs, kx = r.get("syscalls_per_op"), r.get("verbs_syscalls_per_op"), r.get("crossings_per_op")
    check(sc is None or sc > 0, f"{name}: syscalls_per_op null or > 0")
    check(sc is None or (vs is not None and kx is not None and vs > 0 and kx >= 0
                         and abs(vs + kx - sc) < 0.01),
          f"{name}: verbs syscalls {vs} and crossings {kx} add up to syscalls {sc}")
# rate qd 64: the raw rows post each request alone, the -ep rows chain
# on both sides.
try:
    rrecs = json.load(open(sys.argv[14]))
except Exception as e:
    rrecs = []
    check(False, f"rate qd 64 JSON parses ({e})")
check([r.get("strategy") for r in rrecs] == ["busy", "uring", "uring-ep", "hybrid-ep", "busy-ep"],
      f"rate qd 64: one record per strategy ({len(rrecs)} of 5)")
for r in rrecs:
    name = f"{r.get('strategy')} rate qd 64"
    wpc = [r.get(k) for k in ("wrs_per_chain", "client_wrs_per_chain", "server_wrs_per_chain")]
    if r.get("strategy") in ep:
        check(all(isinstance(v, (int, float)) and v > 1 for v in wpc)
              and r.get("chains_per_op", 9) < r.get("posts_per_op", 0),
              f"{name}: both sides chain their posts (WRs per chain, both/client/server: {wpc})")
    else:
        check(wpc == [1, 1, 1], f"{name}: one WR per post call on both sides ({wpc})")
    want = False if r.get("strategy") in ep else None
    check(r.get("post_now", "absent") == want, f"{name}: post_now {want} ({r.get('post_now', 'absent')})")
# --post-now: the same -ep row, each post alone on both sides.
try:
    nrecs = json.load(open(sys.argv[15]))
except Exception as e:
    nrecs = []
    check(False, f"rate qd 64 --post-now JSON parses ({e})")
check(len(nrecs) == 1 and nrecs[0].get("post_now") is True,
      f"--post-now: one uring-ep record, post_now true ({[r.get('post_now') for r in nrecs]})")
for r in nrecs:
    wpc = [r.get(k) for k in ("wrs_per_chain", "client_wrs_per_chain", "server_wrs_per_chain")]
    check(wpc == [1, 1, 1] and r.get("chains_per_op") == r.get("posts_per_op"),
          f"uring-ep rate qd 64 --post-now: one WR per post call on both sides ({wpc})")
# --quick conns: at least 64 round trips a connection (40 x 64 = 2560 > 2000).
try:
    qrecs = json.load(open(sys.argv[16]))
except Exception as e:
    qrecs = []
    check(False, f"--quick conns 40 JSON parses ({e})")
check([r.get("iters") for r in qrecs] == [2560],
      f"--quick conns 40: 2560 round trips, 64 a connection ({[r.get('iters') for r in qrecs]})")
# --file-qd 1,16 on mixed-direct: the same rows at 16 reads in flight.
try:
    drecs = json.load(open(sys.argv[18]))
except Exception as e:
    drecs = []
    check(False, f"--file-qd 1,16 JSON parses ({e})")
dstrats = ["epoll", "uring"] + (["epoll-aio"] if has_aio else [])
dwant = [(s, q) for q in (1, 16) for s in dstrats if q == 1 or s != "epoll"] + [("file-only", 1)]
check([(r.get("strategy"), r.get("file_qd")) for r in drecs] == dwant,
      f"--file-qd 1,16: pread() at 1 only, the ring and epoll-aio at both ({len(drecs)} of {len(dwant)})")
for r in drecs:
    if r.get("reference"):
        continue
    fq, fm = r.get("file_qd"), r.get("file_inflight_max")
    name = f"{r.get('strategy')} mixed-direct file_qd={fq}"
    check(fm == fq and (r.get("file_mb_per_s") or 0) > 0 and r.get("file_reads") == "inline",
          f"{name}: {fq} reads in flight at once ({fm}), bytes read, inline ({r.get('file_reads')})")
print(f"1..{len(checks)}")
for i, (ok, what) in enumerate(checks, 1):
    print(f"{'ok' if ok else 'not ok'} {i} - {what}")
sys.exit(0 if all(ok for ok, _ in checks) else 1)
PY
