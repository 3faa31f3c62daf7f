# shellcheck shell=bash
# The host test scripts' TAP, sourced by each: numbered "ok" / "not ok"
# lines, skips, the plan and the exit status, in one place.
#   tap_ok DESC                   a passed case
#   tap_not_ok DESC [DIAG...]     a failed one; DIAG lines follow as "# ..."
#   tap_is STATUS DESC [DIAG...]  ok when STATUS is 0 (a command's $?)
#   tap_result OK DESC [DIAG...]  ok when OK is 1 (a flag the script set)
#   tap_skip REASON DESC          a case that cannot run here
#   tap_check DESC WANT_STATUS WANT_TEXT ARGS...
#                                 runs "${CLI[@]}" ARGS: ok when it exits
#                                 WANT_STATUS saying WANT_TEXT (grep)
#   tap_plan N                    the plan up front (else tap_done prints it)
#   tap_done                      the plan if not printed; exits 1 if a case failed
#   tap_bail REASON               stops the run: nothing after it can be checked
tap_n=0 tap_failed=0 tap_planned=0

tap_ok() {
	tap_n=$((tap_n + 1))
	echo "ok $tap_n - $1"
}

tap_not_ok() {
	tap_n=$((tap_n + 1))
	tap_failed=1
	echo "not ok $tap_n - $1"
	shift
	local d
	for d in "$@"; do
		[ -n "$d" ] && printf '%s\n' "$d" | sed 's/^/# /'
	done
	return 0
}

tap_is() {
	local st=$1
	shift
	if [ "$st" = 0 ]; then tap_ok "$1"; else tap_not_ok "$@"; fi
}

tap_result() {
	local ok=$1
	shift
	if [ "$ok" = 1 ]; then tap_ok "$1"; else tap_not_ok "$@"; fi
}

tap_skip() {
	tap_n=$((tap_n + 1))
	echo "ok $tap_n - $2 # SKIP $1"
}

tap_check() {
	local desc=$1 want=$2 text=$3 out rc
	shift 3
	out=$("${CLI[@]}" "$@" 2>&1)
	rc=$?
	if [ "$rc" = "$want" ] && grep -q -- "$text" <<<"$out"; then
		tap_ok "$desc"
	else
		tap_not_ok "$desc (status $rc, output: ${out//$'\n'/ | })"
	fi
}

tap_plan() {
	tap_planned=1
	echo "1..$1"
}

tap_done() {
	[ "$tap_planned" = 1 ] || echo "1..$tap_n"
	exit "$tap_failed"
}

tap_bail() {
	echo "Bail out! $*"
	exit 1
}
