#!/bin/bash
# Boots the packed lab BOOTS times with one job and keeps each boot's
# /job/out as JOB_DIR/out.N; for cp-speed.sh, prints each boot's MEDIAN
# line and the median of the boots' medians.
#   boots.sh RUN_SH PACK JOB_DIR [BOOTS] [SMP] [MEM_MB] [TIMEOUT_S per boot]
# e.g. (there, after unpacking): bash boots.sh run.sh /tmp/p/pack job 3 2 4096 180
set -u
run=${1:?usage: boots.sh RUN_SH PACK JOB_DIR [BOOTS] [SMP] [MEM_MB] [TIMEOUT_S]}
pack=${2:?pack}
job=${3:?job dir}
boots=${4:-3}
smp=${5:-2}
mem=${6:-4096}
to=${7:-240}
med() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }
for i in $(seq "$boots"); do
	rm -rf "$job/out" "$job/out.$i"
	start=$(date +%s)
	bash "$run" "$pack" "$job" "$smp" "$mem" "$to" >"$job/console.$i" 2>&1
	mkdir -p "$job/out"
	mv "$job/console.$i" "$job/out/console"
	mv "$job/out" "$job/out.$i"
	echo "boot $i ($(($(date +%s) - start)) s, -smp $smp): $(grep -h '^MEDIAN' "$job/out.$i/job.log" 2>/dev/null ||
		echo "no MEDIAN line; rc $(cat "$job/out.$i/rc" 2>/dev/null)")"
done
for k in ratio_data ratio_whole cp_per_tcp; do
	v=$(cat "$job"/out.*/job.log 2>/dev/null | sed -n "s/^MEDIAN.* $k=\([0-9.]*\).*/\1/p" | tr '\n' ' ')
	echo "$k: boots $v-> median $(echo "$v" | med)"
done
