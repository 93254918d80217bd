#!/usr/bin/env bash
# Description: kill -9 of CRIU during the dump of `gcr checkpoint --leave-running`: as it starts
# (before the process is quiesced), while it waits for gcrd's go with the process parked, with its
# parasite inside the process, and with everything dumped and the process still frozen. gcr reports the failure; the process runs to the end with the checksum of
# an uninterrupted run; the good checkpoint taken before restores to that checksum.
#
#   kill_criu_test.sh BUILD_DIR CRIU     (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
for phase in criu-start parked criu-parasite criu-frozen; do
  kill_at criu "$phase"
done
finish
