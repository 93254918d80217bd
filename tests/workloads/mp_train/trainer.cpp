#include "trainer.h"

#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "../mlp/data.h"
#include "ballast.h"
#include "mp_kernels_fatbin.h"
#include "ring.h"
#include "step_log.h"
#include "tcp_ring.h"
#include "tcp_store.h"
#include "workload_util.h"

namespace mp {

namespace {
constexpr int kInputDim = 64, kOutputDim = 16;  // mlp_train's task
constexpr float kLearningRate = 2e-3f;
constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
constexpr int kLagPeriod = 4;  // --lag-rank lags on steps s with s % kLagPeriod == 1

int micro_begin(int m, int batch) {
  return static_cast<int>(static_cast<long long>(m) * batch / kMicroBatches);
}

CUdeviceptr alloc(std::size_t bytes) {
  CUdeviceptr p = 0;
  CU_CHECK(cuMemAlloc(&p, bytes));
  return p;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}
}  // namespace

Kernels Kernels::load(CUmodule module) {
  namespace name = embedded::mp_kernels::kernel;
  return {
      wl::get_function(module, name::linear_forward),
      wl::get_function(module, name::linear_backward_input),
      wl::get_function(module, name::adam_step),
      wl::get_function(module, name::mp_backward_params),
      wl::get_function(module, name::mp_squared_error),
      wl::get_function(module, name::mp_mse_grad),
      wl::get_function(module, name::mp_from_fixed),
      wl::get_function(module, name::mp_ring_allreduce),
      wl::get_function(module, name::mp_accumulate),
      wl::get_function(module, name::mp_ballast_write),
  };
}

Trainer::Trainer(const Options& o, const Kernels& k) : o_(o), k_(k) {
  int rank = o.rank < 0 ? 0 : o.rank;
  m_begin_ = kMicroBatches * rank / o.ranks;
  m_end_ = kMicroBatches * (rank + 1) / o.ranks;
  sample0_ = micro_begin(m_begin_, o.batch);
  local_ = micro_begin(m_end_, o.batch) - sample0_;

  CU_CHECK(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  const int dims[] = {kInputDim, o.hidden, o.hidden, kOutputDim};
  for (int l = 0; l < 3; ++l) {
    Layer layer;
    layer.n_in = dims[l];
    layer.n_out = dims[l + 1];
    layer.offset = words_;
    words_ += layer.count();
    std::size_t bytes = layer.count() * sizeof(float);
    layer.param = alloc(bytes);
    layer.adam_m = alloc(bytes);
    layer.adam_v = alloc(bytes);
    std::vector<float> init = mlp::initial_layer(o.seed, l, layer.n_in, layer.n_out);
    CU_CHECK(cuMemcpyHtoD(layer.param, init.data(), bytes));
    CU_CHECK(cuMemsetD32(layer.adam_m, 0, layer.count()));
    CU_CHECK(cuMemsetD32(layer.adam_v, 0, layer.count()));
    layers_.push_back(layer);
  }
  words_ += 1;  // the squared error
  fixed_ = alloc(words_ * sizeof(unsigned long long));
  grads_ = alloc(words_ * sizeof(float));
  act_.push_back(alloc(static_cast<std::size_t>(local_) * kInputDim * sizeof(float)));
  grad_.push_back(0);
  for (const Layer& layer : layers_) {
    act_.push_back(alloc(static_cast<std::size_t>(local_) * layer.n_out * sizeof(float)));
    grad_.push_back(alloc(static_cast<std::size_t>(local_) * layer.n_out * sizeof(float)));
  }
  target_ = alloc(static_cast<std::size_t>(local_) * kOutputDim * sizeof(float));
  void* host = nullptr;
  CU_CHECK(cuMemHostAlloc(
      &host, static_cast<std::size_t>(local_) * (kInputDim + kOutputDim) * sizeof(float), 0));
  host_batch_ = static_cast<float*>(host);
  CU_CHECK(cuMemHostAlloc(&host, sizeof(float), 0));
  host_loss_ = static_cast<float*>(host);
  if (o.ballast_mib > 0)
    ballast_ = std::make_unique<Ballast>(o.ballast_mib, rank, k.ballast_write, stream_);
  CU_CHECK(cuCtxSynchronize());
  if (!o.step_log.empty()) step_log_ = std::make_unique<StepLog>(o.step_log);
  if (!o.state.empty()) load_state();  // before the ring: it runs the steps left
  if (is_tcp(o) && o.rank >= 0)
    connect_tcp();
  else if (o.ranks > 1)
    ring_ = std::make_unique<Ring>(o, k.ring_allreduce, words_);
}

namespace {
std::atomic<bool> save_asked{false};
void ask_to_save(int) {
  save_asked = true;
}
std::string state_file(const Options& o) {
  return o.state + ".r" + std::to_string(o.rank < 0 ? 0 : o.rank);
}
}  // namespace

void Trainer::load_state() {
  std::signal(SIGUSR1, ask_to_save);
  std::FILE* in = std::fopen(state_file(o_).c_str(), "rb");
  if (!in) return;  // a first start
  char magic[16] = {};
  int step = 0;
  bool good = std::fread(magic, 1, sizeof magic, in) == sizeof magic &&
              std::string(magic, 15) == "mp_train state1" &&
              std::fread(&step, sizeof step, 1, in) == 1 &&
              std::fread(&beta1_power_, sizeof(double), 1, in) == 1 &&
              std::fread(&beta2_power_, sizeof(double), 1, in) == 1;
  std::vector<float> host;
  for (Layer& layer : layers_)
    for (CUdeviceptr p : {layer.param, layer.adam_m, layer.adam_v}) {
      host.resize(layer.count());
      good = good && std::fread(host.data(), sizeof(float), host.size(), in) == host.size();
      if (good) CU_CHECK(cuMemcpyHtoD(p, host.data(), host.size() * sizeof(float)));
    }
  if (ballast_) good = good && ballast_->load(in);
  std::fclose(in);
  if (!good) {
    std::fprintf(stderr, "mp_train: %s is not a whole state file\n", state_file(o_).c_str());
    std::exit(1);
  }
  first_step_ = step + 1;
  std::printf("rank %d read its state at step %d from %s\n", o_.rank < 0 ? 0 : o_.rank, step,
              state_file(o_).c_str());
  std::fflush(stdout);
}

void Trainer::save_state_and_exit(int s) {
  CU_CHECK(cuCtxSynchronize());
  const std::string file = state_file(o_), tmp = file + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  char magic[16] = "mp_train state1";
  bool good = out && std::fwrite(magic, 1, sizeof magic, out) == sizeof magic &&
              std::fwrite(&s, sizeof s, 1, out) == 1 &&
              std::fwrite(&beta1_power_, sizeof(double), 1, out) == 1 &&
              std::fwrite(&beta2_power_, sizeof(double), 1, out) == 1;
  std::vector<float> host;
  for (const Layer& layer : layers_)
    for (CUdeviceptr p : {layer.param, layer.adam_m, layer.adam_v}) {
      host.resize(layer.count());
      CU_CHECK(cuMemcpyDtoH(host.data(), p, host.size() * sizeof(float)));
      good = good && std::fwrite(host.data(), sizeof(float), host.size(), out) == host.size();
    }
  if (ballast_) good = good && ballast_->save(out);
  good = out && std::fflush(out) == 0 && ::fsync(fileno(out)) == 0 && good;
  if (out) std::fclose(out);
  if (!good || std::rename(tmp.c_str(), file.c_str()) != 0) {
    std::fprintf(stderr, "mp_train: cannot write %s\n", file.c_str());
    std::exit(1);
  }
  std::printf("rank %d saved its state at step %d to %s\n", o_.rank < 0 ? 0 : o_.rank, s,
              file.c_str());
  std::fflush(stdout);
  if (store_) {  // every rank saved before any hangs up on its peers
    store_->barrier("saved/" + std::to_string(s), o_.ranks);
    peers_may_leave(75);
    leave_store();  // rank 0 serves the store until every rank has hung up
  }
  std::_Exit(75);
}

// Note [A framework's checkpoint]: every rank learns whether any was asked, at the same step.
bool Trainer::all_asked_to_save(int s) {
  if (o_.state.empty()) return false;
  if (!store_) return save_asked;
  const std::string key = "save/" + std::to_string(s);
  store_->add(key, save_asked ? 1 : 0);
  store_->barrier("asked/" + std::to_string(s), o_.ranks);
  return store_->add(key, 0) > 0;
}

// Rank 0 serves the store; every rank keeps one connection to it for the run.
void Trainer::connect_tcp() {
  HostPort store;
  parse_host_port(o_.store, &store);  // checked by parse_options
  if (o_.rank == 0) store_server_ = std::make_unique<StoreServer>(store);
  store_ = std::make_unique<StoreClient>(store, o_.rank, o_.connect_timeout_s * 1000, o_.listen);
  if (o_.ranks > 1)
    tcp_ring_ = std::make_unique<TcpRing>(o_, *store_, k_.accumulate, words_,
                                          static_cast<std::uint64_t>(o_.steps - first_step_));
}

Trainer::~Trainer() {
  cuCtxSynchronize();
  ring_.reset();
  tcp_ring_.reset();
  ballast_.reset();
  for (Layer& layer : layers_) {
    cuMemFree(layer.param);
    cuMemFree(layer.adam_m);
    cuMemFree(layer.adam_v);
  }
  for (CUdeviceptr p : act_) cuMemFree(p);
  for (CUdeviceptr p : grad_)
    if (p) cuMemFree(p);
  cuMemFree(target_);
  cuMemFree(fixed_);
  cuMemFree(grads_);
  cuMemFreeHost(host_batch_);
  cuMemFreeHost(host_loss_);
  cuStreamDestroy(stream_);
}

void Trainer::run() {
  std::size_t params = words_ - 1;
  if (o_.rank <= 0) {
    std::printf("config ranks %d steps %d batch %d hidden %d seed %" PRIu64
                " micro_batches %d params %zu\n",
                o_.ranks, o_.steps, o_.batch, o_.hidden, o_.seed, kMicroBatches, params);
    std::fflush(stdout);
  }
  mlp::Teacher teacher(o_.seed);
  std::vector<float> x(static_cast<std::size_t>(o_.batch) * kInputDim);
  std::vector<float> y(static_cast<std::size_t>(o_.batch) * kOutputDim);
  const float total_outputs = static_cast<float>(o_.batch * kOutputDim);
  float loss = 0.0f;
  for (int s = first_step_; s < o_.steps; ++s) {
    if (s + 1 == o_.steps) wl::hold_while(o_.hold_while);  // no checksum out while a test holds
    const auto start = std::chrono::steady_clock::now();
    teacher.make_batch(static_cast<std::uint64_t>(s), o_.batch, x.data(), y.data());
    std::size_t nx = static_cast<std::size_t>(local_) * kInputDim;
    std::size_t ny = static_cast<std::size_t>(local_) * kOutputDim;
    std::memcpy(host_batch_, x.data() + static_cast<std::size_t>(sample0_) * kInputDim,
                nx * sizeof(float));
    std::memcpy(host_batch_ + nx, y.data() + static_cast<std::size_t>(sample0_) * kOutputDim,
                ny * sizeof(float));
    CU_CHECK(cuMemcpyHtoDAsync(act_[0], host_batch_, nx * sizeof(float), stream_));
    CU_CHECK(cuMemcpyHtoDAsync(target_, host_batch_ + nx, ny * sizeof(float), stream_));
    step(s);
    CU_CHECK(cuStreamSynchronize(stream_));  // also: host_batch_ may be refilled
    loss = *host_loss_ / total_outputs;
    if (o_.rank <= 0 && (!o_.quiet || s % 50 == 0 || s == o_.steps - 1)) {
      std::printf("step %d loss %.9g t_ms %.1f\n", s, loss, wl::ms_since_start());
      std::fflush(stdout);
    }
    double ms = ms_since(start);
    wl::step_delay(o_.step_delay_ms, o_.delay_while);
    ms += store_barrier(s);
    if (step_log_) step_log_->add(s, ms);
  }
  CU_CHECK(cuCtxSynchronize());
  if (ring_) ring_->close();
  if (tcp_ring_) tcp_ring_->close();
  std::uint64_t sum = checksum();
  if (ballast_) {
    std::printf("rank %d ballast %016" PRIx64 "\n", o_.rank < 0 ? 0 : o_.rank, ballast_->digest());
  }
  if (o_.rank <= 0) {
    std::printf("final_loss %.9g\n", loss);
    std::printf("checksum %016" PRIx64 "\n", sum);
  } else {
    std::printf("rank %d checksum %016" PRIx64 "\n", o_.rank, sum);
  }
  std::fflush(stdout);
  leave_store();
}

// Every --store-every steps, after the step's delay: a rank that gets here first blocks in a
// receive from the store until the last one arrives.
double Trainer::store_barrier(int s) {
  if (!store_ || o_.store_every == 0 || (s + 1) % o_.store_every != 0) {
    if (!store_ && all_asked_to_save(s)) save_state_and_exit(s);  // one process: at once
    return 0.0;
  }
  const auto start = std::chrono::steady_clock::now();
  store_->barrier("barrier/" + std::to_string(s), o_.ranks);
  if (all_asked_to_save(s)) save_state_and_exit(s);
  return ms_since(start);
}

// Hangs up on the store; rank 0 serves it until every rank has.
void Trainer::leave_store() {
  store_.reset();
  if (store_server_) store_server_->finish(o_.connect_timeout_s * 1000);
  store_server_.reset();
}

void Trainer::step(int s) {
  if (ballast_) ballast_->rewrite(stream_, s);
  const int last = static_cast<int>(layers_.size()) - 1;
  for (int l = 0; l <= last; ++l) {
    const Layer& layer = layers_[l];
    CU_CHECK(
        wl::launch(k_.linear_forward, wl::cover(static_cast<std::uint64_t>(local_) * layer.n_out),
                   stream_, act_[l + 1], act_[l], layer.param,
                   layer.param + static_cast<std::size_t>(layer.n_out) * layer.n_in * sizeof(float),
                   local_, layer.n_in, layer.n_out, l < last ? 1 : 0));
  }
  CUdeviceptr squared_error = fixed_ + (words_ - 1) * sizeof(unsigned long long);
  CU_CHECK(wl::launch(k_.squared_error, wl::Dims{1, 1}, stream_, squared_error, act_.back(),
                      target_, kOutputDim, o_.batch, kMicroBatches, m_begin_, m_end_, sample0_));
  int outputs = local_ * kOutputDim;
  float scale = 2.0f / static_cast<float>(o_.batch * kOutputDim);
  CU_CHECK(wl::launch(k_.mse_grad, wl::cover(outputs), stream_, grad_.back(), act_.back(), target_,
                      outputs, scale));
  for (int l = last; l >= 0; --l) {
    const Layer& layer = layers_[l];
    CU_CHECK(wl::launch(k_.backward_params, wl::cover(layer.count()), stream_,
                        fixed_ + layer.offset * sizeof(unsigned long long), grad_[l + 1], act_[l],
                        layer.n_in, layer.n_out, o_.batch, kMicroBatches, m_begin_, m_end_,
                        sample0_));
    if (l > 0) {
      CU_CHECK(wl::launch(
          k_.linear_backward_input, wl::cover(static_cast<std::uint64_t>(local_) * layer.n_in),
          stream_, grad_[l], grad_[l + 1], layer.param, act_[l], local_, layer.n_in, layer.n_out));
    }
  }
  if (ring_ || tcp_ring_) {
    const bool lag_step = o_.lag_rank >= 0 && s % kLagPeriod == 1;
    const bool lag = o_.rank == o_.lag_rank && lag_step;
    // Without the barrier the peers' all-reduce kernels are already spinning on this rank's
    // flags; with it, the peers' streams (and hosts) wait on this rank's barrier write, with
    // only memory operations, no kernel, between the ranks.
    if (lag) std::this_thread::sleep_for(std::chrono::milliseconds(o_.lag_ms));
    if (o_.memop_barrier) ring_->barrier(stream_);
    if (lag_step && o_.barrier_gap_ms)
      std::this_thread::sleep_for(std::chrono::milliseconds(o_.barrier_gap_ms));
    if (ring_)
      ring_->allreduce(stream_, fixed_);
    else
      tcp_ring_->allreduce(stream_, fixed_);
  }
  int words = static_cast<int>(words_);
  CU_CHECK(wl::launch(k_.from_fixed, wl::cover(words), stream_, grads_, fixed_, words));
  beta1_power_ *= kBeta1;
  beta2_power_ *= kBeta2;
  const float correction1 = static_cast<float>(1.0 - beta1_power_);
  const float correction2 = static_cast<float>(1.0 - beta2_power_);
  for (const Layer& layer : layers_) {
    int n = static_cast<int>(layer.count());
    CU_CHECK(wl::launch(k_.adam_step, wl::cover(n), stream_, layer.param, layer.adam_m,
                        layer.adam_v, grads_ + layer.offset * sizeof(float), n, kLearningRate,
                        kBeta1, kBeta2, kEps, correction1, correction2));
  }
  CU_CHECK(
      cuMemcpyDtoHAsync(host_loss_, grads_ + (words_ - 1) * sizeof(float), sizeof(float), stream_));
}

std::uint64_t Trainer::checksum() const {
  wl::Fnv1a hash;
  std::vector<float> host;
  for (const Layer& layer : layers_) {
    host.resize(layer.count());
    CU_CHECK(cuMemcpyDtoH(host.data(), layer.param, host.size() * sizeof(float)));
    hash.add(host.data(), host.size() * sizeof(float));
  }
  return hash.value();
}

}  // namespace mp
