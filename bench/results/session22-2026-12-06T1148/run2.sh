#!/bin/bash
cd /work/main
. .deps/env.sh
for i in 2 3 4; do
  for who in base head; do
    b=/work/main/build; [[ $who == base ]] && b=/work/base/build
    python3 bench/restore_bench.py --build $b --footprints 256M,1G --no-cold --no-results --json /tmp/bench/restore-$who-$i.json > /tmp/bench/restore-$who-$i.log 2>&1
    echo "restore $who $i rc=$? $(date +%T)" >> /tmp/bench/progress2
  done
done
for i in 2 3; do
  for who in head base; do
    b=/work/main/build; [[ $who == base ]] && b=/work/base/build
    python3 bench/ckpt_bench.py --build $b --footprints 256M,1G --modes gcr --no-results --json /tmp/bench/ckpt-$who-$i.json > /tmp/bench/ckpt-$who-$i.log 2>&1
    echo "ckpt $who $i rc=$? $(date +%T)" >> /tmp/bench/progress2
  done
done
echo ALL_DONE >> /tmp/bench/progress2
