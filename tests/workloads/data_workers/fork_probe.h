// data_workers --child-touches-cuda: what a forked child gets when it calls CUDA although its
// parent had initialized it (a DataLoader worker that touches a CUDA tensor).
//
// The CUDA documentation leaves the use of CUDA between fork and exec undefined; the real driver
// answers such calls with CUDA_ERROR_NOT_INITIALIZED (the runtime's "initialization error", which
// is why PyTorch refuses to "re-initialize CUDA in forked subprocess"), cuInit included. The probe
// checks that the driver under test does that promptly, without hanging or letting the child use
// the parent's context, and that the parent's context still works afterwards.
#pragma once

#include <cuda.h>

namespace dw {

// Call with a current context, `buffer` a device allocation of `bytes` bytes filled with the
// byte `fill` (>= 4 bytes). Prints what the child got, one line per call, and returns the
// program's exit code: 0 if every call in the child failed with CUDA_ERROR_NOT_INITIALIZED and the
// parent's context is intact, 1 otherwise (a call that succeeded, another error, a hang).
int probe_child_cuda(CUdeviceptr buffer, unsigned bytes, unsigned char fill);

}  // namespace dw
