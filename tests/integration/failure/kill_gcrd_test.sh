#!/usr/bin/env bash
# Description: kill -9 of gcrd at each phase of `gcr checkpoint --leave-running` (and gcrd dying
# at the store's crash points of the drain). gcr reports the failure; the process runs to the
# end with the checksum of an uninterrupted run; the store verifies; the good checkpoint taken
# before restores to that checksum.
#
#   kill_gcrd_test.sh BUILD_DIR CRIU     (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
for phase in request quiesced parked criu-start criu-frozen dumped draining \
  crash:after-chunk-write crash:after-index-rename reply; do
  kill_at gcrd "$phase"
done
finish
