// mlp_train: trains a small MLP with Adam on a synthetic regression task, printing the loss of
// every step and, at the end, a checksum of the parameters that depends only on the flags that
// change the math (not on --streams, --step-delay-ms, --delay-while, --hold-while or --quiet). See
// ../README.md.
#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "data.h"
#include "mlp_kernels_fatbin.h"
#include "model.h"
#include "options.h"
#include "workload_util.h"

namespace mlp {
namespace {

constexpr float kTableScale = 0.05f;  // how strongly the ballast row perturbs the inputs
constexpr int kTableDim = kInputDim;  // floats per ballast row

// Stream roles: streams[0] computes, streams[1 % K] prefetches batches, and the Adam steps
// rotate over all K.
class Trainer {
 public:
  Trainer(const Options& o, const Kernels& k) : o_(o), k_(k), model_(k, o), teacher_(o.seed) {
    if (o.host_footprint) fill_host();
    for (int i = 0; i < o.streams; ++i) {
      CUstream s;
      CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
      streams_.push_back(s);
    }
    compute_ = streams_[0];
    copy_ = streams_[1 % streams_.size()];
    batch_floats_ = static_cast<std::size_t>(o.batch) * (kInputDim + kOutputDim);
    for (Slot& slot : slots_) {
      void* host = nullptr;
      CU_CHECK(cuMemHostAlloc(&host, batch_floats_ * sizeof(float), 0));
      slot.host = static_cast<float*>(host);
      CU_CHECK(cuEventCreate(&slot.ready, CU_EVENT_DISABLE_TIMING));
    }
    void* losses = nullptr;
    CU_CHECK(cuMemAllocHost(&losses, o.steps * sizeof(float)));
    host_losses_ = static_cast<float*>(losses);
    CU_CHECK(cuMemAlloc(&device_losses_, o.steps * sizeof(float)));
    if (o.pinned_footprint) fill_pinned();
    if (o.footprint > 0) {
      std::uint64_t row_bytes = kTableDim * sizeof(float);
      table_rows_ = (o.footprint + row_bytes - 1) / row_bytes;
      std::uint64_t n = table_rows_ * kTableDim;
      CU_CHECK(cuMemAlloc(&table_, n * sizeof(float)));
      std::uint64_t seed = draw_state(o.seed, Draw::kTable, 0);
      CU_CHECK(wl::launch(k_.fill_table, wl::cover(n, 256), compute_, table_, n, seed));
    }
  }

  ~Trainer() {
    cuCtxSynchronize();
    if (table_) cuMemFree(table_);
    cuMemFree(device_losses_);
    cuMemFreeHost(host_losses_);
    if (pinned_) cuMemFreeHost(pinned_);
    if (mailbox_) cuMemFreeHost(mailbox_);
    for (Slot& slot : slots_) {
      cuMemFreeHost(slot.host);
      cuEventDestroy(slot.ready);
    }
    for (CUstream s : streams_) cuStreamDestroy(s);
  }

  void run() {
    std::printf("config steps %d batch %d hidden %d layers %d streams %d seed %" PRIu64
                " footprint %" PRIu64 " params %zu\n",
                o_.steps, o_.batch, o_.hidden, o_.layers, o_.streams, o_.seed, o_.footprint,
                model_.parameter_count());
    stage(0);
    for (int step = 0; step < o_.steps; ++step) {
      // --hold-while: a test's checkpoint may take its time on a busy machine; the run must not
      // end under it.
      if (step + 1 == o_.steps) wl::hold_while(o_.hold_while);
      if (step + 1 < o_.steps) stage(step + 1);
      train(step);
      touch_host(step);
      touch_pinned(step);
      if (!o_.quiet || step % 50 == 0 || step == o_.steps - 1) {
        CU_CHECK(cuStreamSynchronize(compute_));
        std::printf("step %d loss %.9g t_ms %.1f\n", step, host_losses_[step],
                    wl::ms_since_start());
        std::fflush(stdout);
      }
      wl::step_delay(o_.step_delay_ms, o_.delay_while);
    }
    CU_CHECK(cuCtxSynchronize());
    std::printf("final_loss %.9g\n", host_losses_[o_.steps - 1]);
    std::printf("checksum %016" PRIx64 "\n", model_.checksum());
    if (!host_.empty()) std::printf("host_checksum %016" PRIx64 "\n", host_checksum());
    if (pinned_) std::printf("pinned_checksum %016" PRIx64 "\n", pinned_checksum());
  }

 private:
  // --host-footprint: words that differ in every page (CRIU must copy each), --host-writes pages
  // of which each step rewrites (one by default, so that a second checkpoint finds little of it
  // changed).
  static constexpr std::size_t kPageWords = 4096 / sizeof(std::uint64_t);
  void fill_host() {
    host_.resize(o_.host_footprint / sizeof(std::uint64_t));
    std::uint64_t x = o_.seed * 0x9e3779b97f4a7c15ull + 1;
    for (auto& w : host_) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      w = x;
    }
  }
  void touch_host(int step) {
    if (host_.size() < kPageWords) return;
    std::size_t pages = host_.size() / kPageWords;
    std::uint64_t first = static_cast<std::uint64_t>(step) * o_.host_writes;
    for (std::uint64_t k = 0; k < std::min<std::uint64_t>(o_.host_writes, pages); ++k) {
      std::size_t page = ((first + k) * 7919) % pages;
      for (std::size_t i = 0; i < kPageWords; ++i)
        host_[page * kPageWords + i] =
            host_[page * kPageWords + i] * 31 + static_cast<unsigned>(step);
    }
  }
  std::uint64_t host_checksum() const {
    std::uint64_t h = 1469598103934665603ull;
    for (std::uint64_t w : host_) h = (h ^ w) * 1099511628211ull;
    return h;
  }
  std::vector<std::uint64_t> host_;

  // --pinned-footprint: memory a device writes by DMA on a GPU (Note [Device writes to pinned host
  // memory] in interpose/pinned.h). Each step a copy of the losses so far changes one page of it
  // and the CPU another, and a kernel writes one page of a small mapped buffer of its own through
  // the device pointer (gcr counts a kernel's pointer as reaching its whole allocation).
  static constexpr std::uint64_t kMailboxPages = 16;
  void fill_pinned() {
    void* p = nullptr;
    CU_CHECK(cuMemHostAlloc(&p, o_.pinned_footprint, CU_MEMHOSTALLOC_DEVICEMAP));
    pinned_ = static_cast<std::uint64_t*>(p);
    pinned_pages_ = o_.pinned_footprint / 4096;
    CU_CHECK(cuMemHostAlloc(&p, kMailboxPages * 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    mailbox_ = static_cast<std::uint64_t*>(p);
    CU_CHECK(cuMemHostGetDevicePointer(&mailbox_device_, p, 0));
    std::uint64_t x = o_.seed * 0xc2b2ae3d27d4eb4full + 3;
    auto fill = [&](std::uint64_t* w, std::uint64_t n) {
      for (std::uint64_t i = 0; i < n; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        w[i] = x;
      }
    };
    fill(pinned_, o_.pinned_footprint / sizeof(std::uint64_t));
    fill(mailbox_, kMailboxPages * 4096 / sizeof(std::uint64_t));
    // The copies read the losses of steps not taken yet too: the same bytes in every run.
    CU_CHECK(cuMemsetD8(device_losses_, 0, o_.steps * sizeof(float)));
  }
  void touch_pinned(int step) {
    if (pinned_pages_ < 2) return;
    const auto s = static_cast<std::uint64_t>(step);
    const std::uint64_t by_copy = (s * 2) % pinned_pages_;  // in order: changes stay together
    const std::uint64_t by_cpu = (s * 2 + 1) % pinned_pages_;
    const std::uint64_t n = 4096 / sizeof(float);
    CUdeviceptr page = mailbox_device_ + (s % kMailboxPages) * 4096;
    CU_CHECK(wl::launch(k_.fill_table, wl::cover(n, 256), compute_, page, n,
                        draw_state(o_.seed, Draw::kTable, s + 1)));
    const std::size_t bytes = std::min<std::size_t>(o_.steps * sizeof(float), 4096);
    CU_CHECK(cuMemcpyDtoHAsync(reinterpret_cast<char*>(pinned_) + by_copy * 4096, device_losses_,
                               bytes, compute_));
    CU_CHECK(cuStreamSynchronize(compute_));  // the CPU's page may be one the device writes
    std::uint64_t* words = pinned_ + by_cpu * (4096 / sizeof(std::uint64_t));
    for (std::size_t i = 0; i < 4096 / sizeof(std::uint64_t); ++i) words[i] = words[i] * 31 + s;
  }
  std::uint64_t pinned_checksum() const {
    std::uint64_t h = 1469598103934665603ull;
    for (std::uint64_t i = 0; i < o_.pinned_footprint / sizeof(std::uint64_t); ++i)
      h = (h ^ pinned_[i]) * 1099511628211ull;
    for (std::uint64_t i = 0; i < kMailboxPages * 4096 / sizeof(std::uint64_t); ++i)
      h = (h ^ mailbox_[i]) * 1099511628211ull;
    return h;
  }
  std::uint64_t* mailbox_ = nullptr;
  CUdeviceptr mailbox_device_ = 0;
  std::uint64_t* pinned_ = nullptr;
  std::uint64_t pinned_pages_ = 0;

  // A pinned host buffer for a batch ([x | y]) and its device copy; two of them, so that the
  // next step's batch is generated and copied while this one trains.
  struct Slot {
    float* host = nullptr;
    CUdeviceptr device = 0;
    CUevent ready = nullptr;  // on the copy stream, after the H2D copy
  };

  // Generates the batch of `step` and starts copying it to the device on the copy stream.
  void stage(int step) {
    Slot& slot = slots_[step % 2];
    CU_CHECK(cuEventSynchronize(slot.ready));  // the copy out of slot.host two steps ago
    teacher_.make_batch(step, o_.batch, slot.host,
                        slot.host + static_cast<std::size_t>(o_.batch) * kInputDim);
    std::size_t bytes = batch_floats_ * sizeof(float);
    CU_CHECK(cuMemAllocAsync(&slot.device, bytes, copy_));
    CU_CHECK(cuMemcpyHtoDAsync(slot.device, slot.host, bytes, copy_));
    CU_CHECK(cuEventRecord(slot.ready, copy_));
  }

  void train(int step) {
    Slot& slot = slots_[step % 2];
    CU_CHECK(cuStreamWaitEvent(compute_, slot.ready, 0));
    CUdeviceptr x = slot.device;
    CUdeviceptr y = x + static_cast<std::size_t>(o_.batch) * kInputDim * sizeof(float);
    if (table_) {
      std::uint64_t row = draw_state(o_.seed, Draw::kTableRow, step) % table_rows_;
      CU_CHECK(wl::launch(k_.add_row, wl::cover(static_cast<std::uint64_t>(o_.batch) * kInputDim),
                          compute_, x, table_, row * kTableDim, o_.batch, kTableDim, kTableScale));
    }
    StepBuffers buffers = model_.alloc_step(compute_, x);
    model_.forward(compute_, buffers);
    CUdeviceptr loss = device_losses_ + step * sizeof(float);
    model_.loss(compute_, buffers, y, loss);
    model_.backward_and_update(compute_, streams_, buffers);
    CU_CHECK(cuMemcpyDtoHAsync(host_losses_ + step, loss, sizeof(float), compute_));
    model_.free_step(compute_, buffers);
    CU_CHECK(cuMemFreeAsync(slot.device, compute_));
  }

  const Options& o_;
  const Kernels& k_;
  Model model_;
  Teacher teacher_;
  std::vector<CUstream> streams_;
  CUstream compute_ = nullptr, copy_ = nullptr;
  Slot slots_[2];
  std::size_t batch_floats_ = 0;
  float* host_losses_ = nullptr;
  CUdeviceptr device_losses_ = 0;
  CUdeviceptr table_ = 0;
  std::uint64_t table_rows_ = 0;
};

}  // namespace
}  // namespace mlp

int main(int argc, char** argv) {
  wl::ms_since_start();
  mlp::Options options = mlp::parse_options(argc, argv);
  const wl::PrimaryContext primary;
  const CUdevice device = primary.device;
  CUmodule module = wl::load_module(embedded::mlp_kernels::fatbin);
  {
    mlp::Kernels kernels = mlp::Kernels::load(module);
    mlp::Trainer trainer(options, kernels);
    trainer.run();
  }
  CU_CHECK(cuModuleUnload(module));
  CU_CHECK(cuDevicePrimaryCtxRelease(device));
  return 0;
}
