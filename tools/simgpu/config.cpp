// Reads simgpu's configuration once from the environment:
//   SIMGPU_DEVICES   number of devices (default 2)
//   SIMGPU_MEMORY    memory per device, with K/M/G/T suffix (default 16G)
//   SIMGPU_UUIDS     comma-separated UUIDs, 32 hex digits each (dashes allowed); default: derived
//                    from the ordinal, the same on every run and host
//   SIMGPU_NAME      device name (default "NVIDIA H200 (simgpu)")
//   SIMGPU_THREADS   CPU threads a kernel's blocks are spread over (default: 1)
//   SIMGPU_LOG       1: trace unsupported calls and warnings to stderr (they are logged once
//   anyway)
//   SIMGPU_DMA_CHECK 1: a device write to pinned host memory that finds its page write-protected
//                    (userfaultfd) ends the process (dma_check.cpp)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "simgpu.h"

namespace gcr::simgpu {
namespace {

std::uint64_t parse_size(const char* s, std::uint64_t fallback) {
  if (!s || !*s) return fallback;
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v <= 0) return fallback;
  switch (*end) {
    case 'k':
    case 'K':
      v *= 1024.0;
      break;
    case 'm':
    case 'M':
      v *= 1024.0 * 1024;
      break;
    case 'g':
    case 'G':
      v *= 1024.0 * 1024 * 1024;
      break;
    case 't':
    case 'T':
      v *= 1024.0 * 1024 * 1024 * 1024;
      break;
    default:
      break;
  }
  auto bytes = static_cast<std::uint64_t>(v);
  return (bytes + kGranularity - 1) / kGranularity * kGranularity;
}

bool parse_uuid(const std::string& text, CUuuid* out) {
  std::string hex;
  for (char c : text)
    if (c != '-') hex += c;
  if (hex.rfind("GPU", 0) == 0) hex = hex.substr(3);
  if (hex.size() != 32) return false;
  for (int i = 0; i < 16; ++i) {
    unsigned v = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    out->bytes[i] = static_cast<char>(v);
  }
  return true;
}

Config load() {
  Config c;
  if (const char* s = std::getenv("SIMGPU_DEVICES")) c.device_count = std::atoi(s);
  if (c.device_count < 0) c.device_count = 0;
  if (c.device_count > 16) c.device_count = 16;
  c.memory_bytes = parse_size(std::getenv("SIMGPU_MEMORY"), c.memory_bytes);
  if (const char* s = std::getenv("SIMGPU_NAME"); s && *s) c.name = s;
  if (const char* s = std::getenv("SIMGPU_THREADS")) c.worker_threads = std::max(1, std::atoi(s));
  std::vector<std::string> given;
  if (const char* s = std::getenv("SIMGPU_UUIDS")) {
    std::string all = s;
    for (std::size_t pos = 0; pos <= all.size();) {
      std::size_t comma = all.find(',', pos);
      if (comma == std::string::npos) comma = all.size();
      if (comma > pos) given.push_back(all.substr(pos, comma - pos));
      pos = comma + 1;
    }
  }
  for (int i = 0; i < c.device_count; ++i) {
    CUuuid u{};
    if (i < static_cast<int>(given.size()) && parse_uuid(given[i], &u)) {
      c.uuids.push_back(u);
      continue;
    }
    if (i < static_cast<int>(given.size()))
      std::fprintf(stderr, "simgpu: SIMGPU_UUIDS entry '%s' is not 32 hex digits; using default\n",
                   given[i].c_str());
    // "5349 4d47 5055" is "SIMGPU"; the last byte is the ordinal.
    const unsigned char base[16] = {0x53, 0x49, 0x4d, 0x47, 0x50, 0x55, 0x2d, 0x00,
                                    0x48, 0x32, 0x30, 0x30, 0x00, 0x00, 0x00, 0x00};
    std::memcpy(u.bytes, base, 16);
    u.bytes[15] = static_cast<char>(i);
    c.uuids.push_back(u);
  }
  return c;
}

}  // namespace

const Config& config() {
  static const Config c = load();
  return c;
}

void log_once(const std::string& key, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard lock(mu);
  if (!seen.insert(key).second) return;
  std::fprintf(stderr, "simgpu: %s\n", message.c_str());
}

}  // namespace gcr::simgpu
