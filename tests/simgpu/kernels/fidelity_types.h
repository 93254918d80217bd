// Types shared by the fidelity kernels (fidelity_kernels.cu) and the tests that launch them.
#pragma once

// A kernel parameter passed by value: 24 bytes, 8-aligned, holding a device pointer, so that a
// launch must both lay it out as the image says and translate the pointer inside it for the twin.
struct FidStructArgs {
  unsigned* dst;
  unsigned mul;
  unsigned add;
  unsigned long long add64;
};
static_assert(sizeof(FidStructArgs) == 24 && alignof(FidStructArgs) == 8);
