// mp_train's command line. The launcher passes its own flags on to every rank, adding --rank and
// --job (launcher.h), and with --transport tcp a --store on loopback unless one was given.
#pragma once

#include <cstdint>
#include <string>

#include "transport.h"

namespace mp {

struct Options {
  int ranks = 2;
  int rank = -1;    // -1: the launcher (or, with ranks == 1, the single-process reference)
  std::string job;  // names the ranks' sockets; the launcher's pid by default (not with tcp)
  int steps = 100;
  int batch = 48;  // the global batch, split into kMicroBatches micro-batches
  int hidden = 64;
  std::uint64_t seed = 1;
  int step_delay_ms = 0;
  std::string delay_while;  // the delay only while this file exists; empty: always
  std::string hold_while;   // the last step waits while this file exists; empty: never
  bool quiet = false;
  bool spread = false;  // rank r on GPU r % (the number of GPUs)
  int lag_rank = -1;
  int lag_ms = 0;
  bool memop_barrier = false;  // a ring barrier of stream memory operations before each all-reduce
  int barrier_gap_ms = 0;      // every rank, on --lag-rank's steps: a sleep after the barrier
  TransportChoice transport = TransportChoice::kRotate;
  // --transport tcp (tcp_ring.h, tcp_store.h)
  std::string store;     // HOST:PORT of the rendezvous store, which rank 0 serves
  std::string listen;    // the address this rank's ring listener binds; "": the store route's
  int store_every = 10;  // a store barrier after every store_every-th step (0: none)
  int connect_timeout_s = 60;
  // For benchmarks, every transport
  std::uint64_t ballast_mib = 0;  // device memory per rank, rewritten a little each step
  std::string step_log;           // appends "step S T_ms" per step
  // --state FILE: the workload's own checkpoint, a framework's (trainer.h, Note [A framework's
  // checkpoint])
  std::string state;
};

inline bool is_tcp(const Options& o) {
  return o.transport == TransportChoice::kTcp;
}

// Exits with the usage (status 2) on a bad command line.
Options parse_options(int argc, char** argv);

}  // namespace mp
