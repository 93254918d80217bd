// Device allocations of the program, backed by regions (Note [Regions and slabs]).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "regions.h"

namespace gcr::interpose {

CUresult alloc_device(std::uint64_t bytes, std::uint32_t device, bool async, CUdeviceptr* out)
    GCR_REQUIRES(g_region_mu);
// Frees an allocation made by alloc_device (the caller has drained work that may use it).
// False if `address` is not the start of one.
bool free_device(CUdeviceptr address) GCR_REQUIRES(g_region_mu);
bool owns_allocation(CUdeviceptr address) GCR_REQUIRES(g_region_mu);
// The allocation holding address: its start and size. False if none.
bool find_allocation(CUdeviceptr address, CUdeviceptr* base, std::uint64_t* size)
    GCR_REQUIRES(g_region_mu);
// Frees the stream-ordered frees whose streams have passed them; all of them when drained.
void reap_async_frees(bool all) GCR_REQUIRES(g_region_mu);
std::uint64_t requested_bytes();

// Note [Pinned host memory is gcr's] (host_alloc.cpp): with GCR_PARK_PINNED=1, at park the driver
// lets go of every pinned host range and at unpark it takes them again; best effort per range
// (what fails is said on stderr and left as it is).
void park_host_memory();
void unpark_host_memory();

// True in a forked child that has not exec'd: gcr leaves it alone (every call goes straight
// to the driver).
extern bool g_unmanaged;

}  // namespace gcr::interpose
