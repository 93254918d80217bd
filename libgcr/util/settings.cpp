// gcr/settings.h: the GCR_* variables of gcr and gcrd, parsed once. Each parse_* function below
// takes one group, in the order of docs/configuration.md; what a variable accepts is written once,
// in the call that reads it, and the warning repeats it.
#include "gcr/settings.h"

#include <errno.h>  // program_invocation_short_name

#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "store/fault.h"

namespace gcr {
namespace {

constexpr std::uint64_t kMaxU64 = std::numeric_limits<std::uint64_t>::max();

// Digits only, in `base`, without sign, blanks or overflow.
std::optional<std::uint64_t> unsigned_number(std::string_view s, int base = 10) {
  std::uint64_t n = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n, base);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return n;
}

// Decimal, or hex after 0x.
std::optional<std::uint64_t> decimal_or_hex(std::string_view s) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    return unsigned_number(s.substr(2), 16);
  return unsigned_number(s);
}

// A number of bytes, or of KiB, MiB, GiB or TiB with K, M, G or T (either case) after it.
std::optional<std::uint64_t> bytes_with_unit(std::string_view s) {
  if (s.empty()) return std::nullopt;
  constexpr std::string_view kUnits = "KMGT";  // 2^10, 2^20, 2^30, 2^40
  const std::size_t at =
      kUnits.find(static_cast<char>(std::toupper(static_cast<unsigned char>(s.back()))));
  const std::uint64_t unit = at == std::string_view::npos ? 1 : 1ull << (10 * (at + 1));
  if (unit != 1) s.remove_suffix(1);
  auto n = unsigned_number(s);
  if (!n || *n > kMaxU64 / unit) return std::nullopt;
  return *n * unit;
}

std::optional<store::Fault> fault_named(std::string_view name) {
  for (store::Fault f : store::kAllFaults)
    if (store::fault_name(f) == name) return f;
  return std::nullopt;
}

std::string fault_names() {
  std::string names;
  for (store::Fault f : store::kAllFaults)
    names += (names.empty() ? "" : ", ") + std::string(store::fault_name(f));
  return names;
}

// One parse: where values come from and where warnings go.
class Reader {
 public:
  Reader(const EnvLookup& lookup, std::vector<std::string>* warnings)
      : lookup_(lookup), warnings_(warnings) {}

  // The value; nullptr when unset or empty (the same to every variable but GCR_QUIET).
  const char* text(const char* name) const {
    const char* v = lookup_(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  }
  bool is_set(const char* name) const { return lookup_(name) != nullptr; }

  // "NAME='VALUE' ignored: expected ACCEPTED; using USED".
  void warn(const char* name, std::string_view value, const std::string& accepted,
            const std::string& used) const {
    if (warnings_ == nullptr) return;
    warnings_->push_back(std::string(name) + "='" + std::string(value) + "' ignored: expected " +
                         accepted + "; using " + used);
  }

  std::optional<std::filesystem::path> path(const char* name) const {
    const char* v = text(name);
    return v ? std::optional<std::filesystem::path>(v) : std::nullopt;
  }

  // "0 or other": off only when the value is 0.
  bool on_unless_zero(const char* name) const {
    const char* v = text(name);
    return v == nullptr || std::string_view(v) != "0";
  }

  // 1 or 0; default off.
  bool one_or_zero(const char* name) const {
    const char* v = text(name);
    if (v == nullptr || std::string_view(v) == "0") return false;
    if (std::string_view(v) == "1") return true;
    warn(name, v, "1 or 0", "0");
    return false;
  }

  // A decimal integer in [lo, hi] (`unit` names what it counts); else `fallback`.
  std::uint64_t integer(const char* name, std::uint64_t lo, std::uint64_t hi,
                        std::uint64_t fallback, const char* unit) const {
    const char* v = text(name);
    if (v == nullptr) return fallback;
    if (auto n = unsigned_number(v); n && *n >= lo && *n <= hi) return *n;
    warn(name, v, std::string(unit) + ", " + std::to_string(lo) + " to " + std::to_string(hi),
         std::to_string(fallback));
    return fallback;
  }

  std::optional<store::Fault> fault(const char* name) const {
    const char* v = text(name);
    if (v == nullptr) return std::nullopt;
    // A misspelt name would otherwise make a crash test pass without crashing anything.
    if (auto f = fault_named(v)) return f;
    warn(name, v, "a crash point (" + fault_names() + ")", "none");
    return std::nullopt;
  }

 private:
  const EnvLookup& lookup_;
  std::vector<std::string>* warnings_;
};

void parse_paths(const Reader& r, Settings& s) {
  if (const char* v = r.text("GCR_STORE")) s.store = v;
  s.gcrd_socket = r.path("GCR_GCRD_SOCKET");
  s.work_dir = r.path("GCR_WORK_DIR");
  s.memory_work_dir = r.path("GCR_MEMORY_WORK_DIR");
  if (s.memory_work_dir == std::filesystem::path("off")) s.memory_work_dir.reset();
  s.cache_dir = r.path("GCR_CACHE_DIR");
  s.gcrd = r.path("GCR_GCRD");
  s.interposer = r.path("GCR_INTERPOSER");
  s.real_libcuda = r.path("GCR_REAL_LIBCUDA");
  s.criu = r.path("GCR_CRIU");
  s.criu_plugin_dir = r.path("GCR_CRIU_PLUGIN_DIR");
  s.quiet = r.is_set("GCR_QUIET");
  s.start_gcrd = r.on_unless_zero("GCR_START_GCRD");
}

void parse_tuning(const Reader& r, Settings& s) {
  s.criu_early = r.on_unless_zero("GCR_CRIU_EARLY");
  s.criu_cow_dump = r.on_unless_zero("GCR_CRIU_COW_DUMP");
  s.criu_cow_track = r.on_unless_zero("GCR_CRIU_COW_TRACK");
  s.criu_track_mem = r.on_unless_zero("GCR_CRIU_TRACK_MEM");
  s.criu_lazy_pages = r.on_unless_zero("GCR_CRIU_LAZY_PAGES");
  s.host_pages_from_store = r.on_unless_zero("GCR_HOST_PAGES_FROM_STORE");
  s.pinned_frozen = r.one_or_zero("GCR_PINNED_FROZEN");
  if (const char* v = r.text("GCR_HOST_TRACK_BLOCK")) {
    // At least a page: 4096 here, and host_tracking.cpp checks the running kernel's page size.
    auto b = decimal_or_hex(v);
    if (b && *b >= 4096 && (*b & (*b - 1)) == 0)
      s.host_track_block_bytes = *b;
    else
      r.warn("GCR_HOST_TRACK_BLOCK", v, "bytes (decimal, or 0x hex), a power of two, at least 4096",
             std::to_string(s.host_track_block_bytes));
  }
  // Up to 1 TiB/s: more is no bound either, and MiB << 20 stays in 64 bits.
  s.drain_mib_per_s = r.integer("GCR_DRAIN_MIB_PER_S", 0, 1 << 20, 0, "MiB/s (0: no bound)");
  s.load_mib_per_s = r.integer("GCR_LOAD_MIB_PER_S", 0, 1 << 20, 0, "MiB/s (0: no bound)");
  s.piece_cache_bytes = r.integer("GCR_PIECE_CACHE_MIB", 0, 16u << 20, 1024, "MiB") << 20;
}

void parse_network_and_cache(const Reader& r, Settings& s) {
  s.net_timeout = std::chrono::milliseconds(
      r.integer("GCR_NET_TIMEOUT_MS", 500, 3'600'000, 15'000, "milliseconds"));
  s.stage_hold = std::chrono::seconds(r.integer("GCR_STAGE_HOLD_S", 1, 86'400, 600, "seconds"));
  if (const char* v = r.text("GCR_CACHE_MAX_BYTES")) {
    if (auto b = bytes_with_unit(v))
      s.cache_max_bytes = *b;
    else
      r.warn("GCR_CACHE_MAX_BYTES", v, "bytes, or a number with K, M, G or T", "20G");
  }
  s.stream_restore = r.on_unless_zero("GCR_STREAM_RESTORE");
  s.arrival_idle = std::chrono::seconds(r.integer("GCR_ARRIVAL_IDLE_S", 1, 86'400, 60, "seconds"));
}

// GCR_GCRD_PAUSE_AT=NAME[:SECONDS].
void parse_gcrd_pause(const Reader& r, TestHooks& h) {
  const char* v = r.text("GCR_GCRD_PAUSE_AT");
  if (v == nullptr) return;
  std::string_view text = v;
  std::string_view name = text.substr(0, text.find(':'));
  bool known = false;
  for (std::string_view p : kGcrdPausePoints) known = known || p == name;
  if (!known) {
    std::string points;
    for (std::string_view p : kGcrdPausePoints)
      points += (points.empty() ? "" : ", ") + std::string(p);
    r.warn("GCR_GCRD_PAUSE_AT", v, "NAME[:SECONDS], NAME a pause point (" + points + ")",
           "no pause");
    return;
  }
  h.gcrd_pause_at = name;
  if (name.size() == text.size()) return;
  auto seconds = unsigned_number(text.substr(name.size() + 1));
  if (seconds && *seconds <= 86'400)
    h.gcrd_pause = std::chrono::seconds(*seconds);
  else
    r.warn("GCR_GCRD_PAUSE_AT", v, "NAME[:SECONDS], SECONDS 0 to 86400",
           std::string(name) + ":" + std::to_string(h.gcrd_pause.count()));
}

void parse_test_hooks(const Reader& r, TestHooks& h) {
  parse_gcrd_pause(r, h);
  h.fault = r.fault("GCR_FAULT");
  h.pause = r.fault("GCR_PAUSE");
  h.pause_file = r.path("GCR_PAUSE_FILE");
  const char* keep = r.text("GCR_KEEP_WORK");
  h.keep_work = keep != nullptr && keep[0] == '1';
  h.no_uring = r.text("GCR_NO_URING") != nullptr && r.on_unless_zero("GCR_NO_URING");
  const char* plaintext = r.text("GCR_NET_PLAINTEXT");
  h.net_plaintext = plaintext != nullptr && std::string_view(plaintext) == "1";
}

}  // namespace

const char* env_lookup(const char* name) {
  return std::getenv(name);
}

Settings parse_settings(const EnvLookup& lookup, std::vector<std::string>* warnings) {
  Reader r(lookup, warnings);
  Settings s;
  parse_paths(r, s);
  parse_tuning(r, s);
  parse_network_and_cache(r, s);
  parse_test_hooks(r, s.test_hooks);
  return s;
}

const Settings& settings() {
  static const Settings parsed = [] {
    std::vector<std::string> warnings;
    Settings s = parse_settings(env_lookup, &warnings);
    for (const std::string& w : warnings)
      std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, w.c_str());
    if (!warnings.empty()) std::fflush(stderr);
    return s;
  }();
  return parsed;
}

}  // namespace gcr
