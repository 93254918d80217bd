// One rank's share of data-parallel training (or, with one rank, the whole of it: the reference).
//
// Every step's global batch (mlp_train's synthetic task, --batch samples) is cut into
// kMicroBatches micro-batches; rank r of R holds micro-batches [12 r / R, 12 (r + 1) / R). Each
// micro-batch's gradient and squared error are summed in float in a fixed order, converted to
// 64-bit fixed point and added up as integers (mp_kernels.cu), first over the rank's own
// micro-batches, then over the ranks by the ring all-reduce. Integer sums do not depend on their
// order, so every rank ends every step with the same bits as one process computing all twelve:
// the checksum does not depend on --ranks.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "options.h"

namespace mp {

// Divisible by every rank count of the shared-memory transports (1 to 4); with tcp, up to 12
// ranks hold one micro-batch or more each.
inline constexpr int kMicroBatches = 12;

struct Kernels {
  CUfunction linear_forward, linear_backward_input, adam_step;
  CUfunction backward_params, squared_error, mse_grad, from_fixed, ring_allreduce;
  CUfunction accumulate, ballast_write;
  static Kernels load(CUmodule module);
};

class Ballast;
class Ring;
class StepLog;
class StoreClient;
class StoreServer;
class TcpRing;

// Note [A framework's checkpoint]
// --state FILE is what a training framework does for itself (bench/slurm_bench.sh's baseline
// against gcr under Slurm): SIGUSR1 asks for a checkpoint; the ranks agree on one step (at the
// next store barrier each adds 1 to "save/STEP" if it was asked, and all read the sum after it),
// each writes FILE.rR (the step, the Adam powers, every layer's weights and moments, the ballast)
// and exits 75 (EX_TEMPFAIL: requeue me). A rank started with FILE.rR there reads it and goes on
// from the next step, ending bit-identical to a run never stopped.
class Trainer {
 public:
  Trainer(const Options& options, const Kernels& kernels);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains --steps steps, printing the loss lines (rank 0) and the checksum (every rank).
  void run();

 private:
  struct Layer {
    int n_in = 0, n_out = 0;
    CUdeviceptr param = 0, adam_m = 0, adam_v = 0;
    std::size_t offset = 0;  // of its [w | bias] in the fixed-point and float gradient buffers
    std::size_t count() const { return static_cast<std::size_t>(n_out) * (n_in + 1); }
  };

  void connect_tcp();
  void step(int step);
  double store_barrier(int step);    // the ms it took
  bool all_asked_to_save(int step);  // Note [A framework's checkpoint]
  [[noreturn]] void save_state_and_exit(int step);
  void load_state();
  void leave_store();
  std::uint64_t checksum() const;

  const Options& o_;
  const Kernels& k_;
  int m_begin_, m_end_;  // this rank's micro-batches
  int sample0_, local_;  // its first sample in the global batch, and how many it holds
  std::vector<Layer> layers_;
  std::size_t words_ = 0;  // every layer's gradient, then the squared error
  CUdeviceptr fixed_ = 0, grads_ = 0;
  std::vector<CUdeviceptr> act_, grad_;  // as mlp's StepBuffers, for the local samples
  CUdeviceptr target_ = 0;
  float* host_batch_ = nullptr;  // pinned: the local [x | y]
  float* host_loss_ = nullptr;   // pinned: the summed squared error, after the all-reduce
  CUstream stream_ = nullptr;
  std::unique_ptr<Ring> ring_;
  std::unique_ptr<StoreServer> store_server_;  // tcp, rank 0
  std::unique_ptr<StoreClient> store_;         // tcp
  std::unique_ptr<TcpRing> tcp_ring_;
  std::unique_ptr<Ballast> ballast_;
  std::unique_ptr<StepLog> step_log_;
  double beta1_power_ = 1.0, beta2_power_ = 1.0;
  int first_step_ = 0;  // --state: the step after the one read back
};

}  // namespace mp
