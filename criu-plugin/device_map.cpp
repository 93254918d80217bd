// Parsing GCR_DEVICE_MAP (device_map.h).
#include "device_map.h"

#include <cstdio>
#include <cstring>

namespace gcr::criu_plugin {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<DeviceRef> parse_ref(std::string_view text) {
  DeviceRef ref;
  ref.text = std::string(text);
  if (text.empty()) return make_error(Errc::invalid_argument, "empty device");
  bool digits = text.size() <= 4;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (digits) {
    ref.ordinal = 0;
    for (char c : text) ref.ordinal = ref.ordinal * 10 + (c - '0');
    return ref;
  }
  GCR_TRY_ASSIGN(ref.uuid, parse_uuid(text));
  return ref;
}

bool same_device(const DeviceRef& a, const DeviceRef& b) {
  if ((a.ordinal >= 0) != (b.ordinal >= 0)) return false;  // mixed forms: the driver judges
  if (a.ordinal >= 0) return a.ordinal == b.ordinal;
  return std::memcmp(a.uuid.bytes, b.uuid.bytes, sizeof a.uuid.bytes) == 0;
}

}  // namespace

Result<CUuuid> parse_uuid(std::string_view text) {
  std::string_view s = text;
  if (s.size() >= 4 && (s.substr(0, 4) == "GPU-" || s.substr(0, 4) == "gpu-")) s.remove_prefix(4);
  CUuuid out{};
  int nibbles = 0;
  for (char c : s) {
    if (c == '-') continue;
    int v = hex_value(c);
    if (v < 0 || nibbles >= 32)
      return make_error(
          Errc::invalid_argument,
          "'" + std::string(text) + "' is neither an ordinal nor a GPU UUID (GPU-<32 hex digits>)");
    auto& byte = out.bytes[nibbles / 2];
    byte = static_cast<char>(nibbles % 2 == 0 ? v << 4 : (static_cast<unsigned char>(byte) | v));
    ++nibbles;
  }
  if (nibbles != 32)
    return make_error(
        Errc::invalid_argument,
        "'" + std::string(text) + "' is neither an ordinal nor a GPU UUID (GPU-<32 hex digits>)");
  return out;
}

std::string format_uuid(const CUuuid& uuid) {
  char buf[64];
  auto b = [&](int i) { return static_cast<unsigned>(static_cast<unsigned char>(uuid.bytes[i])); };
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b(0),
                b(1), b(2), b(3), b(4), b(5), b(6), b(7), b(8), b(9), b(10), b(11), b(12), b(13),
                b(14), b(15));
  return buf;
}

Result<std::vector<DevicePair>> parse_device_map(std::string_view text) {
  std::vector<DevicePair> pairs;
  std::string_view rest = text;
  for (;;) {
    std::size_t comma = rest.find(',');
    std::string_view entry = trim(rest.substr(0, comma));
    std::string where = "GCR_DEVICE_MAP entry '" + std::string(entry) + "'";
    std::size_t eq = entry.find('=');
    if (entry.empty() || eq == std::string_view::npos ||
        entry.find('=', eq + 1) != std::string_view::npos)
      return make_error(
          Errc::invalid_argument,
          where + ": expected OLD=NEW, e.g. 0=1 or GPU-<uuid>=GPU-<uuid>, comma-separated");
    DevicePair pair;
    auto from = parse_ref(trim(entry.substr(0, eq)));
    if (!from) return std::move(from).context(where).error();
    auto to = parse_ref(trim(entry.substr(eq + 1)));
    if (!to) return std::move(to).context(where).error();
    pair.from = std::move(*from);
    pair.to = std::move(*to);
    for (const DevicePair& p : pairs) {
      if (same_device(p.from, pair.from))
        return make_error(Errc::invalid_argument,
                          where + ": device " + pair.from.text + " is mapped twice");
      if (same_device(p.to, pair.to))
        return make_error(Errc::invalid_argument,
                          where + ": device " + pair.to.text + " is the target of two devices");
    }
    pairs.push_back(std::move(pair));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return pairs;
}

}  // namespace gcr::criu_plugin
