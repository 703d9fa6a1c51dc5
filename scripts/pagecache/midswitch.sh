#!/bin/bash
# An investigation aid, not a bench (docs/pagecache.md, "--policy auto"):
# how many pages an agent started mid-run loads, against one started
# before the warm-up and against none. Needs the zipf bench's data file
# (cistern bench pagecache --parts zipf --quick creates it) and fio.
# usage: midswitch.sh MODE CISTERN POLICY -> fio zipf 15 s warm + 25 s measured in a 64 MiB cgroup
# MODE: default (no agent) | start (agent before warm-up) | mid (agent after warm-up)
D=/var/cache/cistern/pagecache/zipf; F=$D/data-256m
CG=/sys/fs/cgroup/memory/cistern-sw
mode=$1; bin=$2; pol=$3
python3 -c "
import os;fd=os.open('$F',os.O_RDONLY);os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)"
rmdir $CG 2>/dev/null; mkdir -p $CG; echo 64M > $CG/memory.limit_in_bytes
fio_run() { sh -c "echo \$\$ > $CG/cgroup.procs && exec fio --name=z --filename=$F --rw=randread --bs=4k --ioengine=psync --random_distribution=zipf:1.1 --size=256M --invalidate=0 --randseed=$1 --time_based --runtime=$2 --output-format=terse" | awk -F';' '{print $8}'; }
AP=
if [ $mode = start ]; then $bin cache agent --cgroup $CG --dir $D --policy $pol > ${TMPDIR:-/tmp}/midswitch-agent.log 2>&1 & AP=$!; sleep 2; fi
fio_run 7 15s > /dev/null
if [ $mode = mid ]; then $bin cache agent --cgroup $CG --dir $D --policy $pol > ${TMPDIR:-/tmp}/midswitch-agent.log 2>&1 & AP=$!; sleep 1; fi
p0=$(awk '/^pgpgin /{print $2}' $CG/memory.stat)
iops=$(fio_run 8 25s)
p1=$(awk '/^pgpgin /{print $2}' $CG/memory.stat)
[ -n "$AP" ] && { kill -INT $AP; wait $AP; }
python3 -c "print('$mode', '$(basename $bin)', '$pol', 'iops', $iops, 'loads/1k', round(1000*($p1-$p0)/($iops*25),1))"
grep "cached before" ${TMPDIR:-/tmp}/midswitch-agent.log 2>/dev/null | head -3 | tr '\n' ' '; echo
