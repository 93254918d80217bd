#include "config.h"

#include <cstdlib>
#include <cstring>

#include "locks.h"

namespace gcr::interpose {
namespace {

std::uint64_t parse_bytes(const char* s, std::uint64_t fallback) {
  if (!s || !*s) return fallback;
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) return fallback;
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
  return static_cast<std::uint64_t>(v);
}

Config load() {
  Config c;
  if (const char* s = std::getenv("GCR_REAL_LIBCUDA")) c.real_libcuda = s;
  if (const char* s = std::getenv("GCR_TRACK")) {
    if (!std::strcmp(s, "conservative"))
      c.track = TrackMode::conservative;
    else if (!std::strcmp(s, "precise"))
      c.track = TrackMode::precise;
    else if (!std::strcmp(s, "validate"))
      c.track = TrackMode::validate;
  }
  c.arena_bytes = parse_bytes(std::getenv("GCR_ARENA_BYTES"), 0);
  c.small_bytes = parse_bytes(std::getenv("GCR_SMALL_BYTES"), c.small_bytes);
  if (const char* s = std::getenv("GCR_LOG")) c.log = *s && *s != '0';
  if (const char* s = std::getenv("GCR_COW_COPY")) c.cow_copy = !(*s == '0' && !s[1]);
  if (const char* s = std::getenv("GCR_LOCK_ORDER")) c.lock_order_abort = !std::strcmp(s, "abort");
  return c;
}

}  // namespace

const Config& config() {
  static const Config c = [] {
    Config loaded = load();
    lock_order_abort_on_violation(loaded.lock_order_abort);
    return loaded;
  }();
  return c;
}

}  // namespace gcr::interpose
