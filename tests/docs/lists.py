#!/usr/bin/env python3
"""The lists of tests and files in the docs against the tree (TAP).

Each list has one place, and the others link there:
  - each folder's tests (as registered, from the build's
    meson-info/intro-tests.json): CONTRIBUTING.md's "What each folder
    covers", under the folder's bullet; tests/cp's in
    docs/ringrdma-cp-tests.md's "Tests" (a bullet's leading names must be
    registered tests too);
  - the folders of tests/: that same section, and tests/meson.build's
    opening comment;
  - the files of src/: CONTRIBUTING.md's "The layers", the endpoint
    files in the order src/ep_internal.h gives; of cp/: docs/ringrdma-cp.md's
    "Files"; of bench/ and tools/: CONTRIBUTING.md's "Where things are".
    Each file is named there, and each file named there exists.
  - every source file opens with a comment saying what it is for, and
    every test() of tests/*/meson.build has a comment above it (after
    the test before it) saying what it checks.

Usage: lists.py SOURCE_ROOT BUILD_ROOT
"""
import json
import os
import re
import subprocess
import sys

from tap import case, done


def read(path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def section(text, heading):
    """The text under a markdown heading ("## Files"), to the next heading
    of its level or above."""
    level = heading.split(" ")[0]
    m = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^#{{1,{len(level)}}} |\Z)", text, re.S | re.M)
    return m.group(1) if m else ""


def bullets(text, mark):
    """{first backticked word: the bullet's text} of a markdown list."""
    out = {}
    for b in re.split(rf"^{re.escape(mark)} ", text, flags=re.M)[1:]:
        m = re.match(r"`([^`]*)`", b)
        if m:
            out[m.group(1)] = b
    return out


def named(name, text):
    """Whether text names a test or file, as a whole word, or by a
    `prefix-*` glob."""
    if re.search(rf"(?:^|[^\w./-])(?:[\w.-]+/)*{re.escape(name)}(?![\w-])", text, re.M):
        return True
    return any(name.startswith(g) for g in re.findall(r"`([\w-]+-)\*`", text))


def git_files(folder):
    """The tracked files under folder; outside a git checkout (a release
    tarball) the files there, build output aside."""
    out = subprocess.run(["git", "-C", root, "ls-files", "--", folder], capture_output=True,
                         text=True, check=False)
    if out.returncode == 0 and out.stdout:
        return sorted(out.stdout.split())
    found = []
    for d, subdirs, files in os.walk(os.path.join(root, folder)):
        subdirs[:] = [x for x in subdirs if not x.startswith((".", "build"))]
        found += [os.path.relpath(os.path.join(d, f), root) for f in files]
    return sorted(found)


def check_tests():
    with open(os.path.join(build, "meson-info", "intro-tests.json"), encoding="utf-8") as f:
        tests = json.load(f)
    by_folder = {}
    for t in tests:
        suites = [s.split(":", 1)[-1] for s in t["suite"]]
        by_folder.setdefault(suites[0], []).append(t["name"])
    contributing = section(read("CONTRIBUTING.md"), "### What each folder covers")
    folders = bullets(contributing, "-")
    cp_tests = section(read("docs/ringrdma-cp-tests.md"), "## Tests")
    for folder, names in sorted(by_folder.items()):
        if folder == "cp":
            where, text = "docs/ringrdma-cp-tests.md Tests", cp_tests
        else:
            where = f"CONTRIBUTING.md, tests/{folder}/"
            text = folders.get(f"tests/{folder}/", "")
        missing = sorted(x for x in names if not named(x, text))
        case(not missing, f"{where} names the {len(names)} tests of tests/{folder}",
             "missing: " + " ".join(missing))
    # The other way: what the cp catalogue describes is registered.
    registered = {t["name"] for t in tests}
    gone = []
    for b in re.split(r"^\* ", cp_tests, flags=re.M)[1:]:
        lead = b.split(" (")[0]
        gone += [x for x in re.findall(r"`([a-z0-9-]+)`", lead) if x not in registered]
    case(not gone, "docs/ringrdma-cp-tests.md Tests describes registered tests only",
         "not registered: " + " ".join(gone))
    # The folders, in CONTRIBUTING and tests/meson.build's opening comment.
    head = re.match(r"((?:#.*\n)*)", read("tests/meson.build")).group(1)
    dirs = sorted(d for d in os.listdir(os.path.join(root, "tests"))
                  if os.path.exists(os.path.join(root, "tests", d, "meson.build"))
                  and d != "support")
    missing = [d for d in dirs if f"tests/{d}/" not in folders]
    case(not missing, "CONTRIBUTING.md's What each folder covers has every folder of tests/",
         "missing: " + " ".join(missing))
    missing = [d for d in dirs if not re.search(rf"^#\s+{d}\s", head, re.M)]
    case(not missing, "tests/meson.build's opening comment has every folder of tests/",
         "missing: " + " ".join(missing))


def check_files(folder, where, text, top_only=False):
    files = git_files(folder + "/")
    if top_only:
        names = sorted({f.split("/")[1] for f in files})
    else:
        names = sorted(os.path.basename(f) for f in files if os.path.dirname(f) == folder)
    names = [x for x in names if x != "meson.build"]
    missing = [x for x in names if not named(x, text)]
    case(not missing, f"{where} names every file of {folder}/ ({len(names)})",
         "missing: " + " ".join(missing))
    # The other way: each source file named there is in the tree.
    gone = []
    for tok in sorted(set(re.findall(r"(?<![\w.-])((?:[\w-]+/)*[\w-]+\.[ch])(?![\w.])", text))):
        path = tok if "/" in tok else f"{folder}/{tok}"
        if not os.path.exists(os.path.join(root, path)):
            gone.append(tok)
    case(not gone, f"{where} names no file of {folder}/ that is not there",
         "not there: " + " ".join(gone))


def where_block(text, entry):
    """An entry of CONTRIBUTING's "Where things are" block: its line and
    those indented under it."""
    m = re.search(rf"^{re.escape(entry)}\s.*\n(?:\s+.*\n)*", text, re.M)
    return m.group(0) if m else ""


def check_sources():
    contributing = read("CONTRIBUTING.md")
    layers = section(contributing, "## The layers")
    where = section(contributing, "## Where things are")
    check_files("src", "CONTRIBUTING.md The layers", layers)
    check_files("cp", "docs/ringrdma-cp.md Files", section(read("docs/ringrdma-cp.md"), "## Files"))
    check_files("bench", "CONTRIBUTING.md Where things are, bench/", where_block(where, "bench/"))
    check_files("tools", "CONTRIBUTING.md Where things are, tools/", where_block(where, "tools/"),
                top_only=True)
    # The endpoint files in ep_internal.h's order, its comment being the one place.
    order = list(dict.fromkeys(re.findall(r"\b((?:eps|srq|ep_\w+|mr)\.c)\b",
                                          read("src/ep_internal.h").split("#ifndef")[0])))
    said = list(dict.fromkeys(re.findall(r"`((?:eps|srq|ep_\w+|mr)\.c)`", layers)))
    case(said == order, "CONTRIBUTING.md gives the endpoint files in ep_internal.h's order",
         f"ep_internal.h: {' '.join(order)}\nCONTRIBUTING.md: {' '.join(said)}")
    # Each source file says what it is for, at its top.
    bare = []
    for folder in ("src", "cp", "bench", "tools"):
        for f in git_files(folder + "/"):
            if not f.endswith((".c", ".h")):
                continue
            top = read(f).splitlines()[:4]
            if not any(re.match(r"\s*(/\*|\*|//)\s*\w", line) and "SPDX" not in line
                       for line in top):
                bare.append(f)
    case(not bare, "every source file opens with a comment saying what it is for",
         "without: " + " ".join(bare))


def check_descriptions():
    bare = []
    for folder in sorted(os.listdir(os.path.join(root, "tests"))):
        path = os.path.join("tests", folder, "meson.build")
        if not os.path.exists(os.path.join(root, path)):
            continue
        lines = read(path).splitlines()
        for i, line in enumerate(lines):
            if not re.match(r"\s*test\(", line):
                continue
            j = i - 1
            while j >= 0 and not re.match(r"\s*(test\(|#)", lines[j]):
                j -= 1
            if j < 0 or not lines[j].lstrip().startswith("#"):
                bare.append(f"{path}:{i + 1}")
    case(not bare, "every test() registered has a comment saying what it checks",
         "without: " + " ".join(bare))


def main():
    global root, build
    root, build = sys.argv[1], sys.argv[2]
    check_tests()
    check_sources()
    check_descriptions()
    return done()


if __name__ == "__main__":
    sys.exit(main())
