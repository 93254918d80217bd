#!/bin/bash
# Same-run comparison: the commit before this session (f9d0607, base) against HEAD, alternating.
cd /work/main
. .deps/env.sh
for who in base head; do
  b=/work/main/build; [[ $who == base ]] && b=/work/base/build
  python3 bench/ckpt_bench.py --build $b --footprints 256M,1G --modes gcr --no-results --json /tmp/bench/ckpt-$who-1.json > /tmp/bench/ckpt-$who-1.log 2>&1
  echo "ckpt $who rc=$? $(date +%T)" >> /tmp/bench/progress
done
for who in head base; do
  b=/work/main/build; [[ $who == base ]] && b=/work/base/build
  python3 bench/restore_bench.py --build $b --footprints 256M,1G --no-cold --no-results --json /tmp/bench/restore-$who-1.json > /tmp/bench/restore-$who-1.log 2>&1
  echo "restore $who rc=$? $(date +%T)" >> /tmp/bench/progress
done
echo ALL_DONE >> /tmp/bench/progress
