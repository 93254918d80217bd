#!/usr/bin/env bash
# Description: kill -9 of the gcr command at each phase of `gcr checkpoint --leave-running`. gcrd
# goes on without its client: the process runs to the end with the checksum of an uninterrupted
# run, the checkpoint is committed and restores, and so does the good one taken before.
#
#   kill_gcr_test.sh BUILD_DIR CRIU      (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
for phase in request quiesced parked criu-start criu-frozen dumped draining reply; do
  kill_at gcr "$phase"
done
finish
