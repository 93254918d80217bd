// mp_train: data-parallel training of mlp_train's MLP by --ranks processes that sum their
// gradients with a ring all-reduce of their own, over device memory shared between the processes
// and flags that kernels spin on (ring.h, mp_kernels.cu), or with --transport tcp over TCP through
// pinned staging and proxy threads (tcp_ring.h). Prints what mlp_train prints; the checksum does
// not depend on --ranks (trainer.h). See ../README.md.
#include <cerrno>

#include "launcher.h"
#include "mp_kernels_fatbin.h"
#include "options.h"
#include "trainer.h"
#include "workload_util.h"

int main(int argc, char** argv) {
  wl::ms_since_start();
  mp::Options options = mp::parse_options(argc, argv);
  if (options.ranks > 1 && options.rank < 0) return mp::launch_ranks(options, argc, argv);

  CU_CHECK(cuInit(0));
  CUdevice device;
  int devices = 1;
  CU_CHECK(cuDeviceGetCount(&devices));
  CU_CHECK(cuDeviceGet(&device, options.spread && options.rank > 0 ? options.rank % devices : 0));
  CUcontext context;
  CU_CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CU_CHECK(cuCtxSetCurrent(context));
  CUmodule module = wl::load_module(embedded::mp_kernels::fatbin);
  {
    mp::Kernels kernels = mp::Kernels::load(module);
    mp::Trainer trainer(options, kernels);
    trainer.run();
  }
  CU_CHECK(cuModuleUnload(module));
  CU_CHECK(cuDevicePrimaryCtxRelease(device));
  return 0;
}
