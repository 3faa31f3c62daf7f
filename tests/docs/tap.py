"""TAP for the docs checks: numbered ok / not ok lines, the plan at the end.

Shared by lists.py and options.py (sourced shell tests use tests/tap.sh).
"""
n = 0
failed = False


def case(ok, desc, diag=None):
    """One case: ok when OK is true; DIAG's lines follow a failure as "# ..."."""
    global n, failed
    n += 1
    print(("ok" if ok else "not ok") + f" {n} - {desc}")
    if not ok:
        failed = True
        if diag:
            for line in diag.splitlines():
                print("# " + line)


def done():
    """The plan; the exit status: 1 when a case failed."""
    print(f"1..{n}")
    return 1 if failed else 0
