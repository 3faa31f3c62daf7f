#!/bin/bash
# ringrdma-cp's command line on the host (TAP): what it refuses before it
# looks for a device: its token files, and each option's modes, range
# and message. Usage: cli.sh RINGRDMA_CP
set -u
exe=$1
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/../tap.sh"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
# token TEXT: a private token file holding TEXT
token() {
	printf '%s\n' "$1" >"$t/tok"
	chmod 600 "$t/tok"
}
# run: send a file to a port nothing listens on, with $t/tok; its stderr
# in $t/err, its status in $rc (never 0: nothing is there).
run() {
	echo data >"$t/f"
	timeout 20 "$exe" send --token-file "$t/tok" "$t/f" 127.0.0.1:9 2>"$t/err" >/dev/null
	rc=$?
}

# Issue 40: a 1-byte token was accepted; a secret wants at least 16 bytes.
token 0123456789abcde
run
if [ "$rc" = 2 ] && grep -q 'at least 16 bytes' "$t/err"; then
	tap_ok "a 15-byte token is refused"
else
	tap_not_ok "a 15-byte token is refused (status $rc: $(head -1 "$t/err"))"
fi
token 0123456789abcdef
run
if ! grep -q 'token-file' "$t/err"; then
	tap_ok "a 16-byte token is taken"
else
	tap_not_ok "a 16-byte token is taken ($(head -1 "$t/err"))"
fi
# Issue 49: a file over 128 bytes was taken when its bytes 129-130 were
# white space (130 bytes were read, stripped, then measured).
long=$(printf 'a%.0s' $(seq 128))
token "$long"
run
if ! grep -q 'token-file' "$t/err"; then
	tap_ok "a 128-byte token and a newline are taken"
else
	tap_not_ok "a 128-byte token and a newline are taken ($(head -1 "$t/err"))"
fi
token "$long  more"
run
if [ "$rc" = 2 ] && grep -q 'at most 128' "$t/err"; then
	tap_ok "a token file of 128 bytes, 2 blanks and more is refused"
else
	tap_not_ok "a token file of 128 bytes, 2 blanks and more is refused (status $rc: $(head -1 "$t/err"))"
fi
printf '%s%*s\n' "$long" 100 "" >"$t/tok"
printf 'x\n' >>"$t/tok"
run
if [ "$rc" = 2 ] && grep -q 'at most 128' "$t/err"; then
	tap_ok "a token file of 128 bytes, 100 blanks and more is refused"
else
	tap_not_ok "a token file of 128 bytes, 100 blanks and more is refused (status $rc: $(head -1 "$t/err"))"
fi
# A token file of another user's: theirs to read and change.
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
	chown nobody "$t/tok"
	run
	if [ "$rc" = 2 ] && grep -q 'owned by' "$t/err"; then
		tap_ok "a token file of another user's is refused"
	else
		tap_not_ok "a token file of another user's is refused (status $rc: $(head -1 "$t/err"))"
	fi
else
	tap_skip "not root" "a token file of another user's is refused"
fi

# Each option: where it applies, its range, its words. Without a device
# every mode stops at "no RDMA device" (status 1) once its options were
# taken, so reaching that is taking them.
# shellcheck disable=SC2034 # tap_check runs it
CLI=("$exe")
nodev="no RDMA device"
mkdir "$t/d"
echo x >"$t/d/f"
tap_check "no mode: the usage, status 2" 2 "^usage: " 
tap_check "--help lists every mode's options" 0 "^  --partial-age SECS" --help
tap_check "-h in a mode prints the usage" 0 "^all modes:" send -h
tap_check "--help in a mode prints the usage" 0 "^  -r, --recursive" serve --help
tap_check "an unknown mode is refused" 2 'unknown mode "copy"' copy
tap_check "an unknown option is refused" 2 "unrecognized option '--bogus'" send --bogus a b
tap_check "an option without its argument is refused" 2 "requires an argument" send a b --chunk
tap_check "a serve option in send is refused" 2 "--listen does not apply to send" \
	send --listen x a b
tap_check "a send option in serve is refused" 2 "--as does not apply to serve" \
	serve --listen a --dir "$t" --no-auth --as x
tap_check "-r in serve is refused by its long name" 2 "--recursive does not apply to serve" \
	serve --listen a --dir "$t" --no-auth -r
tap_check "a proxy option in serve is refused" 2 "--tcp-allow does not apply to serve" \
	serve --listen a --dir "$t" --no-auth --tcp-allow 10.0.0.0/8
tap_check "a common option is taken in proxy" 1 "$nodev" \
	proxy --tcp-listen 127.0.0.1:1 --to 192.0.2.1:1 --chunk 64K --window 16 --timeout 0 \
	--json "$t/j" --quiet
tap_check "--count is refused in send" 2 "--count does not apply to send" send --count 3 a b
tap_check "--count is taken in serve" 1 "$nodev" \
	serve --listen 192.0.2.1:1 --dir "$t" --no-auth --count 3
tap_check "--count is taken in proxy" 1 "$nodev" \
	proxy --tcp-listen 127.0.0.1:1 --to 192.0.2.1:1 --count 3
tap_check "every serve option is taken" 1 "$nodev" \
	serve --listen 192.0.2.1:1 --dir "$t" --no-auth --force --direct --max-conns 2 \
	--max-pending 2 --hello-timeout 2 --threads 2 --require-mw --any-links --max-size 1G \
	--min-free 0 --partial-age 0
tap_check "every send option is taken" 1 "$nodev" \
	send -r --links --as x --limit-rate 1M --conns 2 --no-resume --stripe 8M --progress \
	--no-progress --threads 2 \
	"$t/d" 192.0.2.1:1
tap_check "every proxy option is taken" 1 "$nodev" \
	proxy --tcp-listen 127.0.0.1:1 --to 192.0.2.1:1 --prefix p --max-clients 2 \
	--tcp-allow 10.0.0.0/8 --tcp-allow ::1 --min-rate 0 --max-time 60
tap_check "--links needs -r" 2 "--links needs -r" send --links "$t/d/f" 192.0.2.1:1
tap_check "--as needs one FILE" 2 "--as needs exactly one FILE" \
	send --as x "$t/d/f" "$t/d/f" 192.0.2.1:1
# OPTION VALUE MESSAGE: the value is refused, in the option's words.
refused() {
	tap_check "--$1 $2 is refused" 2 "^ringrdma-cp: --$1 $2: $3\$" send "--$1" "$2" a b
}
refused count 0 "want 1 to 1000000"
refused max-conns 4097 "want 1 to 4096"
refused max-pending 0 "want 1 to 4096"
refused hello-timeout 3601 "want 1 to 3600 seconds"
refused threads 65 "want 1 to 64"
refused threads 17 "want 1 to 16 in send"
refused conns 17 "want 1 to 16"
refused max-clients 0 "want 1 to 4096"
refused partial-age -1 "want seconds, 0 to keep them"
refused max-size 0 "want a positive byte count"
refused min-free 1Q "want a byte count"
refused limit-rate 0 "want a positive byte count"
refused min-rate 5G "want a byte count per second"
refused max-time 2592001 "want 0 to 2592000 seconds"
refused chunk 5000 "want a multiple of 4096 from 4K to 16M"
refused chunk 32M "want a multiple of 4096 from 4K to 16M"
refused window 3 "want a power of two from 1 to 256"
refused window 512 "want a power of two from 1 to 256"
refused timeout 86401 "want 0 to 86400 seconds"
refused stripe lots "want a byte count, 0 for off"
tap_check "send takes --stripe 0" 1 "$nodev" send --stripe 0 "$t/d/f" 192.0.2.1:1
tap_check "--stripe is refused in serve" 2 "--stripe does not apply to serve" \
	serve --listen a --dir "$t" --no-auth --stripe 1M
allow=()
for i in $(seq 17); do allow+=(--tcp-allow "10.0.0.$i"); done
tap_check "a 17th --tcp-allow is refused" 2 "--tcp-allow 10.0.0.17: at most 16 of them" \
	proxy --tcp-listen 127.0.0.1:1 --to 192.0.2.1:1 "${allow[@]}"
tap_done
