// Test kernels for module_image_test.cpp: one kernel per parameter-layout case and a few
// __device__/__constant__ variables. Only their signatures and variables matter; nvcc compiles
// this file into cubin, PTX and several fatbin variants at build time (CMakeLists.txt).
#include <cstdint>

struct Params24 {  // 24 bytes, 8-aligned
  double scale;
  float bias;
  int count;
  long long seed;
};
static_assert(sizeof(Params24) == 24 && alignof(Params24) == 8);

struct alignas(16) Vec3A16 {  // 16 bytes, 16-aligned
  float x, y, z;
};

struct Big5000 {  // pushes the parameter buffer past ~4 KiB: ptxas then writes KPARAM_INFO_V2
  char bytes[5000];
};

__device__ int g_init[4] = {1, 2, 3, 4};
__device__ float g_zero[8];
__device__ double g_scalar = 3.25;
__constant__ float c_table[3] = {1.0f, 2.0f, 3.0f};

__global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i] + g_init[i & 3] + g_zero[i & 7] + c_table[i % 3];
}

__global__ void take_struct(int flag, Params24 p, int* out) {
  out[0] = flag + p.count + static_cast<int>(p.scale + p.bias + p.seed + g_scalar);
}

__global__ void char_double(char c, double d, float* out) {
  out[0] = c + d;
}

__global__ void vec3_a16(char c, Vec3A16 v, short s, float* out) {
  out[0] = c + v.z + s;
}

__global__ void big_param(char c, Big5000 b, int* out) {
  out[0] = c + b.bytes[4999];
}

__global__ void no_params() {}

extern "C" __global__ void plain_c(int* p) {
  p[0] = 1;
}
