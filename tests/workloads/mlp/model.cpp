#include "model.h"

#include "data.h"
#include "mlp_kernels_fatbin.h"
#include "workload_util.h"

namespace mlp {

namespace {
constexpr float kLearningRate = 2e-3f;
constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
}  // namespace

Kernels Kernels::load(CUmodule module) {
  namespace name = embedded::mlp_kernels::kernel;
  return {
      wl::get_function(module, name::linear_forward),
      wl::get_function(module, name::linear_backward_params),
      wl::get_function(module, name::linear_backward_input),
      wl::get_function(module, name::mse_loss),
      wl::get_function(module, name::mse_grad),
      wl::get_function(module, name::adam_step),
      wl::get_function(module, name::mlp_fill_table),
      wl::get_function(module, name::mlp_add_row),
  };
}

CUdeviceptr Model::allocate(std::size_t bytes) {
  if (segment_) return segment_->allocate(bytes);
  CUdeviceptr p = 0;
  CU_CHECK(cuMemAlloc(&p, bytes));
  return p;
}

Model::Model(const Kernels& kernels, const Options& o) : k_(kernels), batch_(o.batch) {
  if (o.vmm) {
    std::size_t bytes = 0;
    for (int l = 0; l < o.layers; ++l) {
      std::size_t n_in = l == 0 ? kInputDim : o.hidden,
                  n_out = l == o.layers - 1 ? kOutputDim : o.hidden;
      bytes += 4 * ((n_out * n_in + n_out) * sizeof(float) + 256);
    }
    segment_ = std::make_unique<VmmSegment>(bytes, o.vmm_share);
  }
  for (int l = 0; l < o.layers; ++l) {
    Layer layer;
    layer.n_in = l == 0 ? kInputDim : o.hidden;
    layer.n_out = l == o.layers - 1 ? kOutputDim : o.hidden;
    std::size_t bytes = layer.count() * sizeof(float);
    layer.param = allocate(bytes);
    layer.grad = allocate(bytes);
    layer.adam_m = allocate(bytes);
    layer.adam_v = allocate(bytes);
    std::vector<float> init = initial_layer(o.seed, l, layer.n_in, layer.n_out);
    CU_CHECK(cuMemcpyHtoD(layer.param, init.data(), bytes));
    CU_CHECK(cuMemsetD32(layer.adam_m, 0, layer.count()));
    CU_CHECK(cuMemsetD32(layer.adam_v, 0, layer.count()));
    CU_CHECK(cuEventCreate(&layer.grads_ready, CU_EVENT_DISABLE_TIMING));
    CU_CHECK(cuEventCreate(&layer.updated, CU_EVENT_DISABLE_TIMING));
    layers_.push_back(layer);
  }
  if (o.vmm_share) segment_->share_first_page();
  // Synchronous copies and memsets can still be in flight when they return, and the streams
  // that use these buffers do not synchronize with the legacy stream.
  CU_CHECK(cuCtxSynchronize());
}

Model::~Model() {
  for (Layer& layer : layers_) {
    cuEventDestroy(layer.grads_ready);
    cuEventDestroy(layer.updated);
    if (segment_) continue;  // the segment goes with its pages
    cuMemFree(layer.param);
    cuMemFree(layer.grad);
    cuMemFree(layer.adam_m);
    cuMemFree(layer.adam_v);
  }
}

std::size_t Model::parameter_count() const {
  std::size_t n = 0;
  for (const Layer& layer : layers_) n += layer.count();
  return n;
}

StepBuffers Model::alloc_step(CUstream stream, CUdeviceptr input) const {
  StepBuffers b;
  b.act.push_back(input);
  b.grad.push_back(0);
  for (const Layer& layer : layers_) {
    std::size_t bytes = static_cast<std::size_t>(batch_) * layer.n_out * sizeof(float);
    CUdeviceptr act = 0, grad = 0;
    CU_CHECK(cuMemAllocAsync(&act, bytes, stream));
    CU_CHECK(cuMemAllocAsync(&grad, bytes, stream));
    b.act.push_back(act);
    b.grad.push_back(grad);
  }
  return b;
}

void Model::free_step(CUstream stream, const StepBuffers& b) const {
  for (std::size_t i = 1; i < b.act.size(); ++i) {
    CU_CHECK(cuMemFreeAsync(b.act[i], stream));
    CU_CHECK(cuMemFreeAsync(b.grad[i], stream));
  }
}

void Model::forward(CUstream compute, const StepBuffers& b) const {
  const int last = static_cast<int>(layers_.size()) - 1;
  for (int l = 0; l <= last; ++l) {
    const Layer& layer = layers_[l];
    CU_CHECK(cuStreamWaitEvent(compute, layer.updated, 0));
    CU_CHECK(wl::launch(k_.linear_forward,
                        wl::cover(static_cast<std::uint64_t>(batch_) * layer.n_out), compute,
                        b.act[l + 1], b.act[l], layer.param, layer.bias(), batch_, layer.n_in,
                        layer.n_out, l < last ? 1 : 0));
  }
}

void Model::loss(CUstream compute, const StepBuffers& b, CUdeviceptr target,
                 CUdeviceptr loss_out) const {
  int n = batch_ * layers_.back().n_out;
  CUdeviceptr out = b.act.back();
  CU_CHECK(wl::launch(k_.mse_loss, wl::Dims{1, 1}, compute, loss_out, out, target, n));
  CU_CHECK(wl::launch(k_.mse_grad, wl::cover(n), compute, b.grad.back(), out, target, n));
}

void Model::backward_and_update(CUstream compute, const std::vector<CUstream>& streams,
                                const StepBuffers& b) {
  beta1_power_ *= kBeta1;
  beta2_power_ *= kBeta2;
  const float correction1 = static_cast<float>(1.0 - beta1_power_);
  const float correction2 = static_cast<float>(1.0 - beta2_power_);
  for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
    const Layer& layer = layers_[l];
    // The forward pass waited for this layer's last Adam step, which read these gradients.
    CU_CHECK(cuMemsetD32Async(layer.grad, 0, layer.weight_count(), compute));
    CU_CHECK(cuMemsetD8Async(layer.grad_bias(), 0, layer.n_out * sizeof(float), compute));
    CU_CHECK(wl::launch(k_.linear_backward_params,
                        wl::cover(static_cast<std::uint64_t>(layer.n_out) * (layer.n_in + 1)),
                        compute, layer.grad, layer.grad_bias(), b.grad[l + 1], b.act[l], batch_,
                        layer.n_in, layer.n_out));
    if (l > 0) {
      CU_CHECK(wl::launch(k_.linear_backward_input,
                          wl::cover(static_cast<std::uint64_t>(batch_) * layer.n_in), compute,
                          b.grad[l], b.grad[l + 1], layer.param, b.act[l], batch_, layer.n_in,
                          layer.n_out));
    }
    // Adam may now overwrite this layer's parameters: nothing later in the step reads them.
    CU_CHECK(cuEventRecord(layer.grads_ready, compute));
    CUstream update = streams[l % streams.size()];
    CU_CHECK(cuStreamWaitEvent(update, layer.grads_ready, 0));
    int n = static_cast<int>(layer.count());
    CU_CHECK(wl::launch(k_.adam_step, wl::cover(n), update, layer.param, layer.adam_m, layer.adam_v,
                        layer.grad, n, kLearningRate, kBeta1, kBeta2, kEps, correction1,
                        correction2));
    CU_CHECK(cuEventRecord(layer.updated, update));
  }
}

std::uint64_t Model::checksum() const {
  wl::Fnv1a hash;
  std::vector<float> host;
  for (const Layer& layer : layers_) {
    host.resize(layer.count());
    CU_CHECK(cuMemcpyDtoH(host.data(), layer.param, host.size() * sizeof(float)));
    hash.add(host.data(), host.size() * sizeof(float));
  }
  return hash.value();
}

}  // namespace mlp
