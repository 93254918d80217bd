// What gcr's SPANK plugin has done as root on a node (Note [gcr under Slurm] in spank_gcr.cpp):
// the job's address taken or given back, and what a step's restored tasks left behind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::slurm {

// The job's address `ip` ("A.B.C.D") on this node: added as a /32 on the interface whose subnet
// holds it and announced (Note [Addresses that move with a rank] in daemon/address_takeover.h),
// or nothing when the node has it already.
Status take_job_address(const std::string& ip);
// Removed, when this node has it.
Status release_job_address(const std::string& ip);

// Every process of user `uid` in this network namespace (this node) whose environment names
// Slurm job `job` and step `step` (SLURM_JOB_ID, SLURM_STEP_ID), but this one: what is left of a
// step once its tasks ended is a restored rank (not a task's child, so Slurm's tracking misses it).
std::vector<pid_t> leftovers_of_step(std::uint32_t job, std::uint32_t step, uid_t uid);

}  // namespace gcr::slurm
