#!/bin/bash
# ringrdma-cp proxy in the lab: several TCP clients at once on 127.0.0.1,
# each byte stream forwarded over its own RDMA connection to a serve peer
# and stored as a file; each client gets "OK BYTES xxh3:HEX NAME" back and
# the stored file must equal what it sent. A client that resets its
# connection mid-stream leaves nothing behind. Then the TCP side's gate:
# --tcp-allow, and --min-rate against a trickling client.
#   proxy.sh PATH/TO/ringrdma-cp
CP=${1:?usage: proxy.sh PATH/TO/ringrdma-cp}
. "$(dirname "$0")/lib.sh" 9
PORT=7520 TCP=7521 CLIENTS=5

mkdir -p "$T/in" "$T/dst"
sizes=(0 1 300000 3000000 9000000)
for i in $(seq 0 $((CLIENTS - 1))); do
	head -c "${sizes[$i]}" /dev/urandom >"$T/in/c$i"
done
start_serve s $PORT --dir "$T/dst" --count $((CLIENTS + 1)) --chunk 64K
"$CP" proxy --tcp-listen 127.0.0.1:$TCP --to "$ADDR:$PORT" --count $((CLIENTS + 1)) \
	--chunk 64K --window 8 --prefix client --json "$T/p.json" >"$T/p.out" 2>"$T/p.err" &
ppid=$!
PIDS+=("$ppid")
for _ in $(seq 300); do
	grep -q listening "$T/p.out" 2>/dev/null && break
	sleep 0.1
done

# Each client: send everything, half-close, read the one-line answer.
python3 -S - "$T" "$TCP" "$CLIENTS" "$ppid" <<'PY' >"$T/clients.out" 2>&1
import os, signal, socket, sys, threading, time
tmp, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def client(i):
    data = open(f"{tmp}/in/c{i}", "rb").read()
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    reply = b""
    while not reply.endswith(b"\n"):
        b = s.recv(512)
        if not b:
            break
        reply += b
    s.close()
    open(f"{tmp}/reply{i}", "wb").write(reply)
ts = [threading.Thread(target=client, args=(i,)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
# One more that resets its connection half-way: nothing may be stored.
# It resets while the proxy is stopped, before the proxy took it from the
# backlog: getpeername() then finds no address, accept's own does.
os.kill(int(sys.argv[4]), signal.SIGSTOP)
try:
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    s.sendall(b"x" * 60000)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
    time.sleep(0.2)
finally:
    os.kill(int(sys.argv[4]), signal.SIGCONT)
PY
prc=0
wait_pid "$ppid" 120 || prc=$?
wait_pid "$SERVE_PID" 60
src=$?

good=0
for i in $(seq 0 $((CLIENTS - 1))); do
	read -r word bytes sum name <"$T/reply$i" 2>/dev/null
	[ "$word" = OK ] && [ "$bytes" = "${sizes[$i]}" ] && [ -n "$name" ] &&
		cmp -s "$T/in/c$i" "$T/dst/$name" && good=$((good + 1))
done
ok=0
[ "$good" = $CLIENTS ] && ok=1
result $ok "$CLIENTS concurrent TCP clients: $good answered OK and stored byte for byte"
[ $ok = 1 ] || { show "$T/clients.out" "$T/p.err" "$T/s.err"; cat "$T"/reply* | sed 's/^/# reply: /'; }
ok=0
[ "$(ls "$T/dst" | wc -l)" = $CLIENTS ] && [ -z "$(ls -A "$T/dst" | grep -v '^client-')" ] && ok=1
result $ok "only the complete streams are in DIR, no temp files ($(ls -A "$T/dst" | wc -l) entries)"
[ $ok = 1 ] || ls -la "$T/dst" | sed 's/^/# /'
ok=0
grep -q "client $((CLIENTS + 1)): reading TCP client: Connection reset" "$T/p.err" && ok=1
result $ok "the reset client is reported by the proxy"
[ $ok = 1 ] || show "$T/p.err"
ok=0
[ "$prc" = 3 ] && [ "$(json_field "$T/p.json" files)" = $CLIENTS ] &&
	[ "$(json_field "$T/p.json" failures)" = 1 ] && ok=1
result $ok "proxy exits 3 (one client failed) with a summary of $CLIENTS files (exit $prc)"
[ $ok = 1 ] || show "$T/p.json" "$T/p.err"
ok=0
[ "$src" = 4 ] && grep -q "sender gave up: aborted: reading TCP client" "$T/s.err" && ok=1
result $ok "serve was told why the last stream was dropped (exit $src)"
[ $ok = 1 ] || show "$T/s.err"
# --- the TCP side's own gate. A --tcp-listen others can reach needs
# --tcp-allow; clients from elsewhere are refused. A client that trickles
# a byte every 2 s is cut by --min-rate (default 1K/s over 10 s) and frees
# its RDMA session and serve's only --max-conns place for the next one.
"$CP" proxy --tcp-listen "$ADDR:$((TCP + 2))" --to "$ADDR:$((PORT + 4))" \
	>"$T/open.out" 2>"$T/open.err"
orc=$?
ok=0
[ "$orc" = 2 ] && grep -q "reachable from other hosts.*--tcp-allow" "$T/open.err" && ok=1
result $ok "proxy on a non-loopback address without --tcp-allow refuses to start (exit $orc)"
[ $ok = 1 ] || show "$T/open.err"
mkdir -p "$T/dst2"
start_serve s2 $((PORT + 4)) --dir "$T/dst2" --max-conns 1 --chunk 64K
"$CP" proxy --tcp-listen "0.0.0.0:$((TCP + 2))" --tcp-allow 127.0.0.0/8 \
	--to "$ADDR:$((PORT + 4))" --chunk 64K --window 8 --prefix gate >"$T/g.out" 2>"$T/g.err" &
gpid=$!
PIDS+=("$gpid")
await_line "$T/g.out" listening "$gpid" 300
python3 -S - "$T" $((TCP + 2)) "$ADDR" <<'PY' >"$T/gate.out" 2>&1
import os, select, socket, sys, time
tmp, port, addr = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def reply_of(s):
    r = b""
    while not r.endswith(b"\n"):
        b = s.recv(512)
        if not b:
            break
        r += b
    return r.decode(errors="replace").strip()
x = socket.socket()
x.settimeout(20)
x.bind((addr, 0))
x.connect((addr, port))
try:
    print("outsider:", reply_of(x))
except OSError as e:
    print("outsider: no answer:", e)
x.close()
t = socket.create_connection(("127.0.0.1", port), timeout=5)
start, got = time.time(), b""
while time.time() - start < 60 and not got.endswith(b"\n"):
    try:
        t.send(b"x")
    except OSError:
        break
    if select.select([t], [], [], 2)[0]:
        b = t.recv(512)
        if not b:
            break
        got += b
print("trickler:", got.decode(errors="replace").strip(), "after", int(time.time() - start), "s")
d = os.urandom(1 << 20)
c = socket.create_connection(("127.0.0.1", port), timeout=60)
c.sendall(d)
c.shutdown(socket.SHUT_WR)
r = reply_of(c)
w = r.split()
same = len(w) == 4 and w[0] == "OK" and open(f"{tmp}/dst2/{w[3]}", "rb").read() == d
print("next:", r, "same" if same else "DIFFERENT")
PY
kill "$gpid" "$SERVE_PID" 2>/dev/null
wait_pid "$gpid" 30
wait_pid "$SERVE_PID" 30
ok=0
grep -q "^outsider: ERROR not allowed from this address (--tcp-allow)" "$T/gate.out" && ok=1
result $ok "a TCP client from outside --tcp-allow is refused with a clear line"
[ $ok = 1 ] || show "$T/gate.out" "$T/g.err"
ok=0
grep -q "^trickler: ERROR TCP client too slow: [0-9]* bytes in 10 s (--min-rate 1024)" "$T/gate.out" &&
	ok=1
result $ok "a client trickling a byte every 2 s is cut by --min-rate ($(grep '^trickler' "$T/gate.out"))"
[ $ok = 1 ] || show "$T/gate.out" "$T/g.err" "$T/s2.err"
ok=0
grep -q "^next: OK 1048576 .* same" "$T/gate.out" && ok=1
result $ok "its serve place (--max-conns 1) is free again: the next stream is stored"
[ $ok = 1 ] || show "$T/gate.out" "$T/g.err" "$T/s2.err"
finish
