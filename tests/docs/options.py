#!/usr/bin/env python3
"""A program's options against its man page (TAP): every option of the
program's table is in the page, with the modes it applies to, and the
page names no option the table lacks. The program says its table itself
(--list-options), so this reads what it really parses.

Usage: options.py PROGRAM MANPAGE.md SECTION:KIND...
  KIND terms: the section's definition-list terms (`--opt ARG`), each
              followed by ":   (mode, mode) ..." when not for all modes
  KIND all:   every option the section names (a SYNOPSIS)
"""
import re
import subprocess
import sys

OPT = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[A-Za-z])(?![\w-])")

from tap import case, done


def table(prog):
    """{long name: (short name or None, frozenset of modes: empty for all)}"""
    out = subprocess.run([prog, "--list-options"], capture_output=True, text=True, check=False)
    opts = {}
    for line in out.stdout.splitlines():
        m = re.fullmatch(r"(--[a-z][a-z0-9-]*)(?: (-[A-Za-z]))?(?: \((.*)\))?", line)
        if not m:
            case(False, f"{prog} --list-options prints options", f"line: {line!r}")
            continue
        modes = frozenset(x.strip() for x in m.group(3).split(",")) if m.group(3) else frozenset()
        opts[m.group(1)] = (m.group(2), modes)
    return opts, out.returncode


def section(text, name):
    m = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    return m.group(1) if m else None


def terms(body, known_modes):
    """{option: frozenset of modes} from a definition list."""
    found = {}
    lines = body.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("`") or i + 1 >= len(lines) or not lines[i + 1].startswith(":"):
            continue
        m = re.match(r":\s+\(([^)]*)\)", lines[i + 1])
        words = re.findall(r"[a-z]+", m.group(1)) if m else []
        modes = frozenset(w for w in words if w in known_modes)
        for opt in re.findall(r"`(--?[A-Za-z][A-Za-z0-9-]*)[^`]*`", line):
            found[opt] = modes
    return found


def main():
    prog, page, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    opts, rc = table(prog)
    case(rc == 0 and len(opts) > 0, f"{prog} --list-options: {len(opts)} options")
    known = set().union(*(m for _, m in opts.values())) if opts else set()
    with open(page, encoding="utf-8") as f:
        text = f.read()
    short = {s: l for l, (s, _) in opts.items() if s}
    for spec in specs:
        name, kind = spec.split(":")
        where = f"{page.rsplit('/', 1)[-1]} {name}"
        body = section(text, name)
        if body is None:
            case(False, f"{where}: the section is there")
            continue
        if kind == "terms":
            found = terms(body, known)
        else:
            found = {o: None for o in OPT.findall(body)}
        for opt, (s, modes) in opts.items():
            names = [opt] + ([s] if s else [])
            missing = [x for x in names if x not in found]
            if kind == "all" and len(missing) < len(names):
                missing = []  # a synopsis may give one form
            if missing:
                case(False, f"{where} documents {' '.join(names)}", f"missing: {' '.join(missing)}")
                continue
            if kind == "terms" and found[opt] != modes:
                want = ", ".join(sorted(modes)) or "all modes"
                got = ", ".join(sorted(found[opt])) or "all modes"
                case(False, f"{where} documents {opt} for {want}", f"the page says: {got}")
                continue
            case(True, f"{where} documents {' '.join(names)}")
        extra = sorted(o for o in found if o not in opts and o not in short)
        case(not extra, f"{where} names no option {prog.rsplit('/', 1)[-1]} lacks",
             "not in the table: " + " ".join(extra))
    return done()


if __name__ == "__main__":
    sys.exit(main())
