// data_workers: a trainer fed by forked CPU-only data worker processes, as PyTorch's DataLoader
// with num_workers > 0 feeds one. The trainer initializes CUDA, then forks --workers workers;
// batch b is made by worker b % workers into its slot of a /dev/shm ring (ring.h) and announced
// on a pipe; the trainer copies it to the device, releases the slot with a byte on the other pipe,
// and folds it into a device state with a kernel. At the end it reaps its workers and prints a
// checksum of the state that depends on --steps --rows --width --seed only (not on --workers or
// timing). See ../README.md.
//
// --child-touches-cuda runs fork_probe.h's check instead.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "dw_kernels_fatbin.h"
#include "fork_probe.h"
#include "ring.h"
#include "worker.h"
#include "workload_util.h"

namespace dw {
namespace {

struct Options {
  int workers;
  int steps;
  BatchShape shape;
  std::uint64_t seed;
  int step_delay_ms;
  bool child_touches_cuda;
};

Options parse_options(int argc, char** argv) {
  wl::Flags flags(
      argc, argv,
      "usage: data_workers [--workers N] [--steps S] [--rows R] [--width W] [--seed S]\n"
      "                    [--step-delay-ms M] [--child-touches-cuda]\n"
      "  --workers N           data worker processes (default 2)\n"
      "  --steps S             batches to train on (default 100)\n"
      "  --rows R, --width W   batch shape (default 64 x 256 floats)\n"
      "  --seed S              seed of the data (default 1)\n"
      "  --step-delay-ms M     sleep after each step (default 0)\n"
      "  --child-touches-cuda  only fork a child that calls CUDA, and report what it "
      "got");
  Options o;
  o.workers = static_cast<int>(flags.integer("--workers", 2, 1, 64));
  o.steps = static_cast<int>(flags.integer("--steps", 100, 1, 1 << 24));
  o.shape.rows = static_cast<int>(flags.integer("--rows", 64, 1, 1 << 16));
  o.shape.width = static_cast<int>(flags.integer("--width", 256, 1, 1 << 16));
  o.seed = static_cast<std::uint64_t>(flags.integer("--seed", 1, 0, INT64_MAX));
  o.step_delay_ms = static_cast<int>(flags.integer("--step-delay-ms", 0, 0, 60'000));
  o.child_touches_cuda = flags.boolean("--child-touches-cuda");
  flags.finish();
  return o;
}

class Trainer {
 public:
  Trainer(const Options& o, CUfunction fold)
      : o_(o), fold_(fold), ring_(o.workers, batch_floats()) {
    CU_CHECK(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    CU_CHECK(cuMemAlloc(&state_, state_bytes()));
    CU_CHECK(cuMemsetD8(state_, 0, state_bytes()));
    CU_CHECK(cuMemAlloc(&batch_, ring_.data_bytes()));
  }

  ~Trainer() {
    cuCtxSynchronize();
    cuMemFree(batch_);
    cuMemFree(state_);
    cuStreamDestroy(stream_);
  }

  // Forks the workers; each gets its slot and its two pipe ends and closes everything else.
  void start_workers() {
    for (int w = 0; w < o_.workers; ++w) {
      Channel c = open_channel();
      std::fflush(nullptr);
      pid_t pid = fork();
      if (pid < 0) {
        std::perror("data_workers: fork");
        std::exit(2);
      }
      if (pid == 0) {
        for (Channel& other : channels_) {
          close_fd(other.ready_read);
          close_fd(other.release_write);
        }
        close_fd(c.ready_read);
        close_fd(c.release_write);
        _exit(run_worker(ring_, c, w, o_.workers, o_.steps, o_.seed, o_.shape));
      }
      close_fd(c.ready_write);
      close_fd(c.release_read);
      channels_.push_back(c);
      workers_.push_back(pid);
    }
  }

  void train() {
    std::printf("config workers %d steps %d rows %d width %d seed %" PRIu64 " pid %d\n", o_.workers,
                o_.steps, o_.shape.rows, o_.shape.width, o_.seed, static_cast<int>(getpid()));
    std::fflush(stdout);
    const wl::Dims dims = wl::cover(static_cast<std::uint64_t>(o_.shape.width));
    for (int step = 0; step < o_.steps; ++step) {
      const int w = step % o_.workers;
      if (!read_byte(channels_[w].ready_read)) fail_worker(w, "closed its pipe");
      const SlotHeader* h = ring_.header(w);
      if (h->batch_index != static_cast<std::uint64_t>(step) ||
          h->rows != static_cast<std::uint32_t>(o_.shape.rows)) {
        std::fprintf(stderr, "data_workers: step %d: slot %d holds batch %" PRIu64 " (rows %u)\n",
                     step, w, h->batch_index, h->rows);
        std::exit(1);
      }
      CU_CHECK(cuMemcpyHtoDAsync(batch_, ring_.data(w), ring_.data_bytes(), stream_));
      CU_CHECK(cuStreamSynchronize(stream_));  // the copy has read the slot
      if (!write_byte(channels_[w].release_write)) fail_worker(w, "stopped listening");
      CU_CHECK(wl::launch(fold_, dims, stream_, state_, batch_, o_.shape.rows, o_.shape.width));
      float first = 0.0f;
      CU_CHECK(cuMemcpyDtoHAsync(&first, state_, sizeof first, stream_));
      CU_CHECK(cuStreamSynchronize(stream_));
      std::printf("step %d worker %d state0 %.9g t_ms %.1f\n", step, w, first,
                  wl::ms_since_start());
      std::fflush(stdout);
      if (o_.step_delay_ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(o_.step_delay_ms));
    }
  }

  // Every worker has had its last batch released: each exits 0 by itself.
  bool reap_workers() {
    bool ok = true;
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      close_fd(channels_[i].release_write);
      close_fd(channels_[i].ready_read);
      int status = 0;
      while (waitpid(workers_[i], &status, 0) < 0 && errno == EINTR) {
      }
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "data_workers: worker %zu (pid %d) ended with status %#x\n", i,
                     static_cast<int>(workers_[i]), status);
        ok = false;
      }
    }
    workers_.clear();
    return ok;
  }

  std::uint64_t checksum() {
    std::vector<float> host(static_cast<std::size_t>(o_.shape.width));
    CU_CHECK(cuCtxSynchronize());
    CU_CHECK(cuMemcpyDtoH(host.data(), state_, state_bytes()));
    wl::Fnv1a h;
    h.add(host.data(), state_bytes());
    return h.value();
  }

 private:
  std::size_t batch_floats() const {
    return static_cast<std::size_t>(o_.shape.rows) * o_.shape.width;
  }
  std::size_t state_bytes() const { return static_cast<std::size_t>(o_.shape.width) * 4; }

  [[noreturn]] void fail_worker(int w, const char* what) {
    std::fprintf(stderr, "data_workers: worker %d (pid %d) %s\n", w, static_cast<int>(workers_[w]),
                 what);
    for (pid_t pid : workers_) kill(pid, SIGTERM);
    std::exit(1);
  }

  const Options& o_;
  CUfunction fold_;
  Ring ring_;
  CUstream stream_ = nullptr;
  CUdeviceptr state_ = 0, batch_ = 0;
  std::vector<Channel> channels_;
  std::vector<pid_t> workers_;
};

int probe() {
  constexpr unsigned kBytes = 4096;
  constexpr unsigned char kFill = 0x5a;
  CUdeviceptr buffer = 0;
  CU_CHECK(cuMemAlloc(&buffer, kBytes));
  CU_CHECK(cuMemsetD8(buffer, kFill, kBytes));
  CU_CHECK(cuCtxSynchronize());
  int rc = probe_child_cuda(buffer, kBytes, kFill);
  CU_CHECK(cuMemFree(buffer));
  return rc;
}

}  // namespace
}  // namespace dw

int main(int argc, char** argv) {
  wl::ms_since_start();
  const dw::Options options = dw::parse_options(argc, argv);
  const wl::PrimaryContext primary;
  const CUdevice device = primary.device;
  int rc = 0;
  if (options.child_touches_cuda) {
    rc = dw::probe();
  } else {
    CUmodule module = wl::load_module(embedded::dw_kernels::fatbin);
    CUfunction fold = wl::get_function(module, embedded::dw_kernels::kernel::dw_fold);
    {
      dw::Trainer trainer(options, fold);
      trainer.start_workers();
      trainer.train();
      if (!trainer.reap_workers()) return 1;
      std::printf("checksum %016" PRIx64 "\n", trainer.checksum());
    }
    CU_CHECK(cuModuleUnload(module));
  }
  CU_CHECK(cuDevicePrimaryCtxRelease(device));
  return rc;
}
