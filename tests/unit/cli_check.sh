# Sourced by the command-line tests: check DESCRIPTION WANT_STATUS
# WANT_TEXT ARGS... runs "${CLI[@]}" ARGS and prints one TAP line: ok if
# it exits WANT_STATUS and says WANT_TEXT.
n=0 failed=0
check() {
	local desc=$1 want=$2 text=$3 out rc
	shift 3
	out=$("${CLI[@]}" "$@" 2>&1)
	rc=$?
	n=$((n + 1))
	if [ "$rc" = "$want" ] && grep -q -- "$text" <<<"$out"; then
		echo "ok $n - $desc"
	else
		echo "not ok $n - $desc (status $rc, output: ${out//$'\n'/ | })"
		failed=1
	fi
}
