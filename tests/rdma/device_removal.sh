#!/bin/bash
# Runs the device-removal test (which deletes rxe0) and re-creates rxe0
# afterwards, whatever the outcome, so later tests in the same lab boot
# still have their device. Lab only: it would remove a real device.
bin=${1:?usage: device_removal.sh TEST-BINARY}
if [ -z "${RDMA_LAB:-}" ]; then
	echo "device_removal.sh: destroys the RDMA device; run it in tools/rdma-lab" >&2
	exit 1
fi
"$bin" --tap=- --jobs=1
rc=$?
# The removal completes once the test process (and librdmacm's context of
# the device) is gone; that it does is part of the test.
for _ in $(seq 300); do
	rdma link show rxe0 >/dev/null 2>&1 || break
	sleep 0.1
done
if rdma link show rxe0 >/dev/null 2>&1; then
	echo "device_removal.sh: rxe0 still present 30 s after the test process exited" >&2
	rc=1
else
	nd=$(ip -o link show | awk -F': ' '$2 ~ /^(rlab0|eth0)$/ {print $2; exit}')
	rdma link add rxe0 type rxe netdev "$nd" || rc=1
fi
exit $rc
