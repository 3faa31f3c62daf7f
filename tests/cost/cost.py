#!/usr/bin/env python3
"""The cost harness's driver: every strategy of rr-cost, both provider
personalities, K completions per wake-up. Syscalls come from a native run
(the kernel's tracepoints), user-space instructions from a run under
callgrind, split by where the code lives. Prints a table, writes JSON, and
with --check fails when a count rose above its recorded bound.

  cost.py --bin BUILD/tests/cost/rr-cost [--ks 1,16,48,64] [--wakeups N]
          [--fan-ns 1,64,1024] [--strategies S,...] [--providers P,...]
          [--json FILE] [--check BOUNDS] [--record BOUNDS [--changelog FILE]]

--check fails when a count rose above its recorded bound (2 %, and less
than one instruction per completion from K=16), fell far below it, when
a syscall invariant breaks, or when a bridge row is above what the gate
enforces against the floor (ENFORCE_*). --record merges the rows it
measured into BOUNDS and refuses to raise a bound unless the newest
stanza of the changelog has an entry naming tests/cost and the row.

The fan-* rows hold N CQs on one channel (fan-cqs), N channels of one CQ
each (fan-chans) or N endpoints (fan-eps), one of which fires per wake-up
with one completion; their columns are N, not K. --fan-ns
1,64,1024,16384 adds the largest N (fan-chans then needs 2 fds a channel:
a hard RLIMIT_NOFILE above 32,768).
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

STRATEGIES = ["busy", "thread", "epoll", "uring", "bridge", "bridge-embed",
              "bridge-batch", "bridge-read", "bridge-waits", "bridge-read-waits", "ep",
              "busy-spin", "hybrid-spin", "fan-cqs", "fan-chans", "fan-eps"]
PROVIDERS = ["rxe", "mlx5"]
# Where an instruction's code lives, by its file (inlined code keeps the
# file it was written in) or, without debug information, its object.
PARTS = [("library", re.compile(r"(^|/)src/")),
         ("liburing", re.compile(r"liburing")),
         ("provider", re.compile(r"fake_verbs\.c|fake_cm\.c|infiniband/|libibverbs")),
         ("app", re.compile(r"tests/cost/")),
         ("libc", re.compile(r"libc\.so|^\./(nptl|io|string|misc|sysdeps)/"))]
# Bounds: instructions may rise this much above the recorded count before
# the gate fails (they are exact; the margin is for a compiler update).
MARGIN = 0.02
# ...but at K completions a wake-up, less than K: one more instruction per
# completion fails the gate (2 % of a K=64 wake-up would let 1.3 through).
DRIFT_PER_WC_FROM_K = 16
# A count this far below its bound leaves the gate slack: record again.
STALE = 0.10
# Targets of the bridge against the hand-written io_uring loop (uring), in
# both personalities, for the built-in loop, rr_bridge_handle_cqe() and
# ring reads: what docs/performance.md aims at.
TARGET_WAKE_K1 = 500      # per wake-up at K=1: uring's + this
TARGET_WC = 1.30          # per completion at K=48 and K=64: uring's x this
TARGET_EP_WC_K64 = 1.6    # the endpoint layer's, at K=64
# on_wc_batch per completion at K=48 and K=64 (one call per poll, not per WC)
TARGET_BATCH_WC = 1.15
WC_KS = (48, 64)
BRIDGE_ROWS = ("bridge", "bridge-embed", "bridge-read")
# What the gate enforces (--check fails above it): the targets where they
# are met, else the figure reached so far, so no change can lose what was
# gained; docs/performance.md gives the arithmetic of each gap. Lower these
# as the code gets there; never raise them. ENFORCE_WC: one figure for
# K=48 and K=64, or one for each K.
ENFORCE_WAKE_K1 = {"bridge": TARGET_WAKE_K1, "bridge-embed": TARGET_WAKE_K1,
                   "bridge-read": TARGET_WAKE_K1}
ENFORCE_WC = {"bridge": TARGET_WC, "bridge-embed": TARGET_WC, "bridge-read": TARGET_WC,
              "bridge-batch": TARGET_BATCH_WC}
# fan-*: a wake-up with N objects costs at most this much more than with one
TARGET_FAN = 0.05


def is_fan(strategy):
    return strategy.startswith("fan-")


def part_of(where):
    for name, rx in PARTS:
        if rx.search(where):
            return name
    return "other"


def instructions(dump):
    """Ir per part of one callgrind dump: the exclusive cost of each
    function, read from the file itself (the cost lines after a calls=
    line are the callee's inclusive cost, not this function's)."""
    names = {"fl": {}, "fi": {}, "fe": {}, "ob": {}}
    cur = {"fl": "", "fi": "", "ob": ""}
    parts, total, after_call = {}, 0, False
    with open(dump) as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^(fl|fi|fe|ob|fn|cfl|cfi|cfn|cob)=(\((\d+)\))?\s*(.*)$", line)
            if m:
                key, ident, name = m.group(1), m.group(3), m.group(4)
                table = names.get({"cfl": "fl", "cfi": "fl", "fi": "fl", "fe": "fl"}.get(key, key))
                if table is not None and ident:
                    if name:
                        table[ident] = name
                    name = table.get(ident, name)
                if key == "fl":
                    cur["fl"] = cur["fi"] = name
                elif key in ("fi", "fe"):
                    cur["fi"] = name
                elif key == "fn":
                    cur["fi"] = cur["fl"]
                elif key == "ob":
                    cur["ob"] = name
                continue
            if line.startswith("calls="):
                after_call = True
                continue
            if not line or not (line[0].isdigit() or line[0] in "+-*"):
                continue
            if after_call:
                after_call = False
                continue
            n = int(line.split()[-1])
            where = cur["fi"]
            if where in ("", "???"):
                where = cur["ob"]
            p = part_of(where)
            parts[p] = parts.get(p, 0) + n
            total += n
    return total, parts


def run_one(binary, strategy, provider, ks, wakeups, tmp):
    """{k: {"syscalls": ..., "instr": ...}} of one strategy and provider."""
    args = [binary, strategy, provider, ",".join(map(str, ks)), str(wakeups)]
    native = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    res = {}
    for line in native.splitlines():
        o = json.loads(line)
        res[o.get("n", o["k"])] = {"syscalls": o["syscalls"]}
    out = os.path.join(tmp, "cg.%s.%s" % (strategy, provider))
    subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
                    "--instr-atstart=no",
                    "--separate-threads=yes", "--callgrind-out-file=" + out] + args,
                   check=True, capture_output=True)
    for i, k in enumerate(ks):
        # Part i+1, the loop's thread (01) only: an injecting thread's
        # instructions are the device's, not the waiter's.
        dumps = glob.glob("%s.%d-01" % (out, i + 1)) or glob.glob("%s.%d" % (out, i + 1))
        total, parts = instructions(dumps[0])
        n = wakeups
        per = 1 if is_fan(strategy) else k  # fan-*: one completion, N objects
        res[k]["instr"] = {"wake": total / n, "wc": total / (n * per),
                           "parts": {p: v / n for p, v in sorted(parts.items())}}
    return res


def sys_brief(s):
    if s is None:
        return "-"
    keys = [("io_uring_enter", "enter"), ("epoll_wait", "epoll"), ("read", "read"),
            ("write", "write"), ("ioctl", "ioctl")]
    bits = ["%s %g" % (short, s[k]) for k, short in keys if s.get(k)]
    rest = s["all"] - sum(s.get(k, 0) for k, _ in keys)
    if rest > 0.0005:
        bits.append("other %g" % rest)
    return "%g (%s)" % (s["all"], ", ".join(bits)) if bits else "0"


def fan_table(results, ns):
    lines = []
    for prov, rows in results.items():
        fans = {s: byn for s, byn in rows.items() if is_fan(s)}
        if not fans:
            continue
        lines.append("\n%s personality: N objects, one fires with one completion: "
                     "instructions per wake-up\n" % prov)
        head = ["layout"] + ["N=%d" % n for n in ns] + ["max / N=%d" % ns[0],
                                                        "syscalls /wake (N=%d)" % ns[-1]]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for strat, byn in fans.items():
            w = [byn[n]["instr"]["wake"] for n in ns]
            cells = [strat] + ["%.0f" % v for v in w]
            cells.append("%+.1f %%" % (100 * (max(w) / w[0] - 1)))
            cells.append(sys_brief(byn[ns[-1]]["syscalls"]))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(results, ks):
    results = {p: {s: v for s, v in rows.items() if not is_fan(s)}
               for p, rows in results.items()}
    lines = []
    for prov, rows in results.items():
        if not rows:
            continue
        lines.append("\n%s personality: instructions per wake-up, per completion, "
                     "and syscalls per wake-up\n" % prov)
        head = ["strategy"] + ["K=%d /wake" % k for k in ks] + \
               ["K=%d /wc" % k for k in ks[1:]] + ["syscalls /wake (K=%d)" % ks[0],
                                                    "library / liburing / provider / libc / app "
                                                    "(K=%d)" % ks[0]]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for strat, byk in rows.items():
            cells = [strat]
            cells += ["%.0f" % byk[k]["instr"]["wake"] for k in ks]
            cells += ["%.1f" % byk[k]["instr"]["wc"] for k in ks[1:]]
            cells.append(sys_brief(byk[ks[0]]["syscalls"]))
            p = byk[ks[0]]["instr"]["parts"]
            cells.append(" / ".join("%.0f" % p.get(k, 0) for k in
                                    ("library", "liburing", "provider", "libc", "app")))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets(results, ks):
    """The instruction targets: (what, ok, held) each, held False when the
    gate's enforced figure (ENFORCE_*) is passed, None where none is."""
    out = []
    for prov, rows in results.items():
        for strat, byn in rows.items():
            if not is_fan(strat) or len(byn) < 2:
                continue
            ns = sorted(byn)
            one = byn[ns[0]]["instr"]["wake"]
            for n in ns[1:]:
                w = byn[n]["instr"]["wake"]
                ok = w <= one * (1 + TARGET_FAN)
                out.append(("%s %s: %.0f instructions per wake-up at N=%d, N=%d's %.0f "
                            "(%+.1f %%, target <= %+.0f %%)"
                            % (prov, strat, w, n, ns[0], one, 100 * (w / one - 1),
                               100 * TARGET_FAN), ok, ok))
        u = rows.get("uring")
        if not u:
            continue
        for strat in BRIDGE_ROWS + ("bridge-batch",):
            b = rows.get(strat)
            if not b:
                continue
            if 1 in ks and 1 in u and strat in ENFORCE_WAKE_K1:
                w, floor = b[1]["instr"]["wake"], u[1]["instr"]["wake"]
                lim, held = floor + TARGET_WAKE_K1, floor + ENFORCE_WAKE_K1[strat]
                out.append(("%s %s: %.0f instructions per wake-up at K=1, floor + %.0f "
                            "(target <= floor + %d, enforced <= floor + %d)"
                            % (prov, strat, w, w - floor, TARGET_WAKE_K1,
                               ENFORCE_WAKE_K1[strat]), w <= lim, w <= held))
            tgt = TARGET_BATCH_WC if strat == "bridge-batch" else TARGET_WC
            for k in WC_KS:
                if k not in ks or k not in u:
                    continue
                wc, floor = b[k]["instr"]["wc"], u[k]["instr"]["wc"]
                enf = ENFORCE_WC.get(strat)
                if isinstance(enf, dict):
                    enf = enf.get(k)
                out.append(("%s %s: %.1f per completion at K=%d, %.2fx the floor's %.1f "
                            "(target <= %.2fx%s)"
                            % (prov, strat, wc, k, wc / floor, floor, tgt,
                               ", enforced <= %.2fx" % enf if enf else ""),
                            wc <= floor * tgt, wc <= floor * enf if enf else None))
        e = rows.get("ep")
        kmax = ks[-1]
        if e and kmax in u:
            lim = u[kmax]["instr"]["wc"] * TARGET_EP_WC_K64
            out.append(("%s ep: %.1f per completion at K=%d, target <= %.1f"
                        % (prov, e[kmax]["instr"]["wc"], kmax, lim),
                        e[kmax]["instr"]["wc"] <= lim, None))
        b, h = rows.get("busy-spin"), rows.get("hybrid-spin")
        if b and h:
            k1 = ks[0]
            out.append(("%s hybrid-spin: %.0f instructions per empty pass, busy loop's empty "
                        "poll %.0f" % (prov, h[k1]["instr"]["wake"], b[k1]["instr"]["wake"]),
                        h[k1]["instr"]["wake"] <= b[k1]["instr"]["wake"], None))
    return out


def invariants(results):
    """What must hold of syscalls whatever the instructions: (what, ok)."""
    out = []
    for prov, rows in results.items():
        for strat, ref in (("bridge", "epoll"), ("bridge-embed", "epoll"),
                           ("bridge-batch", "epoll"),
                           ("bridge-waits", "epoll"),
                           # ring reads: a blocked thread's on rxe (mlx5 reads
                           # with ibv_get_cq_event(), as epoll's loop does)
                           ("bridge-read", "thread" if prov == "rxe" else "epoll"),
                           ("bridge-read-waits", "thread" if prov == "rxe" else "epoll")):
            if strat not in rows or ref not in rows:
                continue
            for k, v in rows[strat].items():
                s, r = v["syscalls"], rows[ref][k]["syscalls"]
                if s is None or r is None:
                    continue
                out.append(("%s %s K=%d: %g syscalls per wake-up, %s's %g"
                            % (prov, strat, k, s["all"], ref, r["all"]),
                            s["all"] <= r["all"] + 0.001))
                # Nothing of the application's is queued here: one enter.
                out.append(("%s %s K=%d: %g io_uring_enter per wake-up"
                            % (prov, strat, k, s["io_uring_enter"]),
                            s["io_uring_enter"] <= 1.001))
    return out


def bounds_of(results):
    return {prov: {strat: {str(k): {"instr_wake": round(v["instr"]["wake"], 1),
                                   "syscalls": v["syscalls"]["all"] if v["syscalls"] else None}
                           for k, v in byk.items()}
                   for strat, byk in rows.items()}
            for prov, rows in results.items()}


def drift_margin(strat, k, bound):
    """How far a count may rise above its bound: MARGIN, but at K >=
    DRIFT_PER_WC_FROM_K completions a wake-up less than one instruction
    per completion."""
    m = bound * MARGIN
    if not is_fan(strat) and k >= DRIFT_PER_WC_FROM_K:
        m = min(m, k - 0.5)
    return m


def check(results, bounds):
    """Each measured count against its bound; bounds of rows not measured
    in this run (another --strategies or --providers) are not checked."""
    bad = []
    for prov, rows in bounds.items():
        if prov not in results:
            continue
        for strat, byk in rows.items():
            if strat not in results[prov]:
                continue
            for k, b in byk.items():
                got = results[prov][strat].get(int(k))
                if got is None:
                    bad.append("%s %s K=%s: not measured" % (prov, strat, k))
                    continue
                w = got["instr"]["wake"]
                if w > b["instr_wake"] + drift_margin(strat, int(k), b["instr_wake"]):
                    bad.append("%s %s K=%s: %.1f instructions per wake-up, bound %.1f "
                               "(+%.1f allowed)" % (prov, strat, k, w, b["instr_wake"],
                                                    drift_margin(strat, int(k),
                                                                 b["instr_wake"])))
                elif w < b["instr_wake"] * (1 - STALE):
                    bad.append("%s %s K=%s: %.1f instructions per wake-up, far below its "
                               "bound %.1f: record the bounds again (--record)"
                               % (prov, strat, k, w, b["instr_wake"]))
                s = got["syscalls"]
                if s is not None and b["syscalls"] is not None and \
                        s["all"] > b["syscalls"] + 0.001:
                    bad.append("%s %s K=%s: %g syscalls per wake-up, bound %g"
                               % (prov, strat, k, s["all"], b["syscalls"]))
    return bad


def raised(old, new):
    """The rows whose bound a record would raise: {strategy: [what, ...]}."""
    out = {}
    for prov, rows in new.items():
        for strat, byk in rows.items():
            for k, b in byk.items():
                o = old.get(prov, {}).get(strat, {}).get(k)
                if o is None:
                    continue
                if b["instr_wake"] > o["instr_wake"] or \
                        (b["syscalls"] or 0) > (o["syscalls"] or 0) + 0.001:
                    out.setdefault(strat, []).append(
                        "%s %s K=%s: %.1f -> %.1f instructions, %s -> %s syscalls"
                        % (prov, strat, k, o["instr_wake"], b["instr_wake"],
                           o["syscalls"], b["syscalls"]))
    return out


def changelog_entries(path):
    """The entries of the changelog's newest stanza (debian/changelog: up
    to its first ' -- ' trailer), each joined into one line."""
    entries, cur = [], None
    with open(path) as f:
        next(f, None)  # the stanza's heading
        for line in f:
            if line.startswith(" -- "):
                break
            if line.lstrip().startswith("* "):
                cur = line.strip()[2:]
                entries.append(cur)
            elif line.strip() and entries:
                entries[-1] += " " + line.strip()
    return entries


def record_refusals(old, new, changelog):
    """Why a --record must not go ahead: each raised row whose strategy no
    entry of the changelog's newest stanza that names tests/cost names."""
    up = raised(old, new)
    if not up:
        return []
    try:
        entries = [e for e in changelog_entries(changelog) if "tests/cost" in e]
    except OSError as e:
        entries = []
        print("cost: %s: %s" % (changelog, e), file=sys.stderr)
    bad = []
    for strat, what in sorted(up.items()):
        if not any(re.search(r"(^|[^\w-])%s([^\w-]|$)" % re.escape(strat), e)
                   for e in entries):
            bad += ["would raise the bound of " + w for w in what]
    if bad:
        bad.append("a bound rises only with an entry in the newest stanza of %s that names "
                   "tests/cost and the row (e.g. 'bridge-batch'), saying why" % changelog)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--ks", default="1,16,48,64")
    ap.add_argument("--wakeups", type=int, default=100)
    ap.add_argument("--fan-ns", default="1,64,1024")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--providers", default=",".join(PROVIDERS))
    ap.add_argument("--json")
    ap.add_argument("--check")
    ap.add_argument("--record")
    ap.add_argument("--changelog",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                         "..", "..", "debian", "changelog"),
                    help="where a raised bound must be explained (--record)")
    a = ap.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    ns = [int(n) for n in a.fan_ns.split(",")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="rr-cost.") as tmp:
        for prov in a.providers.split(","):
            results[prov] = {}
            for strat in a.strategies.split(","):
                results[prov][strat] = run_one(a.bin, strat, prov, ns if is_fan(strat) else ks,
                                               a.wakeups, tmp)
    print(table(results, ks))
    print(fan_table(results, ns))
    tgt = targets(results, ks)
    inv = invariants(results)
    if tgt:
        print("\nTargets (ok / MISS; FAIL: above what the gate enforces):")
        for what, ok, held in tgt:
            print("  %s %s" % ("ok  " if ok else "MISS" if held is not False else "FAIL",
                               what))
    if inv:
        print("\nSyscalls: %d of %d checks hold (each bridge way <= epoll's, ring reads <= "
              "a blocked thread's on rxe, one io_uring_enter per wake-up)"
              % (sum(ok for _, ok in inv), len(inv)))
        for what, ok in inv:
            if not ok:
                print("  FAIL " + what)
    if any(r["syscalls"] is None for rows in results.values() for byk in rows.values()
           for r in byk.values()):
        print("\nsyscalls not counted: the kernel's syscall tracepoints cannot be read here")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ks": ks, "fan_ns": ns, "wakeups": a.wakeups, "results": results,
                       "targets": [{"what": w, "ok": ok, "held": held}
                                   for w, ok, held in tgt],
                       "syscall_checks": [{"what": w, "ok": ok} for w, ok in inv]}, f, indent=1)
    status = 0
    if a.record:
        # Merged into what is there: a run of some rows records those.
        old = {}
        if os.path.exists(a.record):
            with open(a.record) as f:
                old = json.load(f)
        new = bounds_of(results)
        refused = record_refusals(old, new, a.changelog)
        for b in refused:
            print("cost: " + b, file=sys.stderr)
        if refused:
            print("\ncost: bounds not recorded")
            return 1
        for prov, rows in new.items():
            old.setdefault(prov, {}).update(rows)
        with open(a.record, "w") as f:
            json.dump(old, f, indent=1, sort_keys=True)
            f.write("\n")
    if a.check:
        with open(a.check) as f:
            bad = check(results, json.load(f))
        bad += [w for w, ok in inv if not ok]
        bad += ["above what the gate enforces: " + w for w, _, held in tgt if held is False]
        for b in bad:
            print("cost: " + b, file=sys.stderr)
        status = 1 if bad else 0
        print("\ncost: %s" % ("counts within their bounds" if not bad else
                              "%d check(s) failed" % len(bad)))
    return status


if __name__ == "__main__":
    sys.exit(main())
