// The MLP on the device: parameters and Adam state per layer, and the kernels of a training step.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "options.h"
#include "vmm_segment.h"

namespace mlp {

struct Kernels {
  CUfunction linear_forward, linear_backward_params, linear_backward_input;
  CUfunction mse_loss, mse_grad, adam_step;
  CUfunction fill_table, add_row;
  static Kernels load(CUmodule module);
};

// One linear layer. param, grad, adam_m and adam_v each hold [w (n_out x n_in) | bias (n_out)]
// in their own cuMemAlloc allocation.
struct Layer {
  int n_in = 0, n_out = 0;
  CUdeviceptr param = 0, grad = 0, adam_m = 0, adam_v = 0;
  CUevent grads_ready = nullptr;  // on the compute stream: this step's gradients are complete
  CUevent updated = nullptr;      // on the layer's update stream: its Adam step is done

  std::size_t weight_count() const { return static_cast<std::size_t>(n_out) * n_in; }
  std::size_t count() const { return weight_count() + n_out; }
  CUdeviceptr bias() const { return param + weight_count() * sizeof(float); }
  CUdeviceptr grad_bias() const { return grad + weight_count() * sizeof(float); }
};

// A step's activations and gradients, from cuMemAllocAsync. act[0] is the input batch,
// act[l + 1] the output of layer l; grad[l + 1] is the loss's gradient with respect to act[l + 1]
// (grad[0] is unused).
struct StepBuffers {
  std::vector<CUdeviceptr> act, grad;
};

class Model {
 public:
  Model(const Kernels& kernels, const Options& options);  // allocates and initializes
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  std::size_t parameter_count() const;

  StepBuffers alloc_step(CUstream stream, CUdeviceptr input) const;
  void free_step(CUstream stream, const StepBuffers& buffers) const;

  // Enqueues the forward pass on `compute`; layer l first waits for its previous Adam step.
  void forward(CUstream compute, const StepBuffers& buffers) const;
  // loss_out[0] = MSE of the output against target; fills buffers.grad[layers].
  void loss(CUstream compute, const StepBuffers& buffers, CUdeviceptr target,
            CUdeviceptr loss_out) const;
  // Backward pass on `compute`; as soon as layer l's gradients are complete, its Adam step runs
  // on streams[l % streams.size()].
  void backward_and_update(CUstream compute, const std::vector<CUstream>& streams,
                           const StepBuffers& buffers);

  // FNV-1a over every layer's parameters, read back synchronously (the caller syncs first).
  std::uint64_t checksum() const;

 private:
  CUdeviceptr allocate(std::size_t bytes);

  const Kernels& k_;
  int batch_;
  std::unique_ptr<VmmSegment> segment_;  // --vmm: where the layers' buffers live
  std::vector<Layer> layers_;
  double beta1_power_ = 1.0, beta2_power_ = 1.0;  // beta^t, by repeated multiplication
};

}  // namespace mlp
