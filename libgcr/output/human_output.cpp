#include "gcr/human_output.h"

#include <time.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <mutex>

namespace gcr {

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  std::size_t unit = 0;
  // Promote before rounding would print "1024 MiB".
  while (v >= 1023.95 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (v < 99.95)
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[unit]);
  else
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[unit]);
  return buf;
}

std::string format_rate(std::uint64_t bytes, std::chrono::nanoseconds elapsed) {
  if (elapsed.count() <= 0) return "-";
  double per_s = static_cast<double>(bytes) * 1e9 / static_cast<double>(elapsed.count());
  return format_bytes(static_cast<std::uint64_t>(per_s)) + "/s";
}

std::string format_duration(std::chrono::nanoseconds d) {
  char buf[32];
  std::int64_t ns = d.count();
  if (ns < 0) return "-" + format_duration(std::chrono::nanoseconds(-ns));
  if (ns < 1000) {
    std::snprintf(buf, sizeof buf, "%" PRId64 " ns", ns);
  } else if (ns < 1'000'000) {
    std::snprintf(buf, sizeof buf, "%.1f µs", ns / 1e3);
  } else if (ns < 1'000'000'000) {
    std::snprintf(buf, sizeof buf, ns < 100'000'000 ? "%.1f ms" : "%.0f ms", ns / 1e6);
  } else if (ns < 60'000'000'000) {
    std::snprintf(buf, sizeof buf, "%.2f s", ns / 1e9);
  } else {
    std::int64_t s = ns / 1'000'000'000;
    if (s < 3600)
      std::snprintf(buf, sizeof buf, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
    else
      std::snprintf(buf, sizeof buf, "%" PRId64 "h%02" PRId64 "m", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

std::string format_percent(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%",
                100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return buf;
}

std::string format_age(std::int64_t unix_ns, std::int64_t now_unix_ns) {
  std::int64_t s = (now_unix_ns - unix_ns) / 1'000'000'000;
  auto ago = [](std::int64_t n, const char* unit) {
    return std::to_string(n) + " " + unit + (n == 1 ? "" : "s") + " ago";
  };
  if (s < 0) return format_local_time(unix_ns);  // in the future: clocks differ; show the time
  if (s < 2) return "just now";
  if (s < 60) return ago(s, "second");
  if (s < 3600) return ago(s / 60, "minute");
  if (s < 86400) return ago(s / 3600, "hour");
  if (s < 30 * 86400) return ago(s / 86400, "day");
  return format_local_time(unix_ns).substr(0, 10);
}

std::string format_local_time(std::int64_t unix_ns) {
  time_t t = static_cast<time_t>(unix_ns / 1'000'000'000);
  struct tm tm {};
  if (!localtime_r(&t, &tm)) return "?";
  char buf[64];
  if (std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", &tm) == 0) return "?";
  return buf;
}

std::string format_utc_time(std::int64_t unix_ns) {
  time_t t = static_cast<time_t>(unix_ns / 1'000'000'000);
  struct tm tm {};
  if (!gmtime_r(&t, &tm)) return "?";
  char buf[64];
  if (std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) return "?";
  return buf;
}

std::string display_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    auto escape = [&](unsigned char b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", b);
      out += buf;
    };
    if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (c == '\\') {
      out += "\\\\";
      ++i;
    } else if (c < 0x20 || c == 0x7f) {
      escape(c);
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      // Accept well-formed multi-byte sequences, but not C1 controls (U+0080..U+009F), which some
      // terminals obey.
      std::size_t n = c >= 0xc2 && c <= 0xdf   ? 2
                      : c >= 0xe0 && c <= 0xef ? 3
                      : c >= 0xf0 && c <= 0xf4 ? 4
                                               : 0;
      bool ok = n != 0 && i + n <= text.size();
      for (std::size_t k = 1; ok && k < n; ++k)
        ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      if (ok && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0) ok = false;
      if (ok) {
        out.append(text.substr(i, n));
        i += n;
      } else {
        escape(c);
        ++i;
      }
    }
  }
  return out;
}

Result<std::uint64_t> parse_size(std::string_view text) {
  auto bad = [&] {
    return make_error(Errc::invalid_argument,
                      "invalid size '" + display_safe(text) +
                          "': expected a number with an optional K, M, G or T suffix");
  };
  std::size_t i = 0;
  std::uint64_t n = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    std::uint64_t d = static_cast<std::uint64_t>(text[i] - '0');
    if (n > (UINT64_MAX - d) / 10) return bad();
    n = n * 10 + d;
    ++i;
  }
  if (i == 0) return bad();
  std::string suffix;
  for (; i < text.size(); ++i)
    suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  unsigned shift;
  if (suffix.empty() || suffix == "b")
    shift = 0;
  else if (suffix == "k" || suffix == "kb" || suffix == "kib")
    shift = 10;
  else if (suffix == "m" || suffix == "mb" || suffix == "mib")
    shift = 20;
  else if (suffix == "g" || suffix == "gb" || suffix == "gib")
    shift = 30;
  else if (suffix == "t" || suffix == "tb" || suffix == "tib")
    shift = 40;
  else
    return bad();
  if (shift && n > (UINT64_MAX >> shift)) return bad();
  return n << shift;
}

std::size_t display_width(std::string_view text) {
  std::size_t n = 0;
  for (char c : text)
    if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++n;
  return n;
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render(std::string_view indent) const {
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    width[c] = display_width(columns_[c].title);
    for (const auto& row : rows_) width[c] = std::max(width[c], display_width(row[c]));
  }
  std::string out;
  auto line = [&](auto cell_of) {
    std::string l(indent);
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      const std::string& cell = cell_of(c);
      std::size_t pad = width[c] - display_width(cell);
      if (c > 0) l += "  ";
      if (columns_[c].align == Align::right) l.append(pad, ' ');
      l += cell;
      if (columns_[c].align == Align::left) l.append(pad, ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l;
    out += '\n';
  };
  line([&](std::size_t c) -> const std::string& { return columns_[c].title; });
  for (const auto& row : rows_) line([&](std::size_t c) -> const std::string& { return row[c]; });
  return out;
}

struct ProgressLine::State {
  bool enabled;
  std::string label;
  std::mutex mu;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw{};
  bool drawn = false;
};

ProgressLine::ProgressLine(bool enabled, std::string label) : state_(std::make_unique<State>()) {
  state_->enabled = enabled;
  state_->label = std::move(label);
}

ProgressLine::~ProgressLine() {
  clear();
}

void ProgressLine::update(std::uint64_t done_bytes, std::uint64_t total_bytes) {
  if (!state_->enabled) return;
  std::lock_guard lock(state_->mu);
  auto now = std::chrono::steady_clock::now();
  if (state_->drawn && now - state_->last_draw < std::chrono::milliseconds(100) &&
      done_bytes < total_bytes)
    return;
  state_->last_draw = now;
  state_->drawn = true;
  auto elapsed = now - state_->start;
  std::string line = "\r\033[K" + state_->label + ": " + format_percent(done_bytes, total_bytes) +
                     "  " + format_bytes(done_bytes) + " of " + format_bytes(total_bytes) + ", " +
                     format_rate(done_bytes, elapsed);
  // Time left at the rate so far, once there is a rate to go by.
  if (done_bytes > 0 && done_bytes < total_bytes && elapsed > std::chrono::milliseconds(500)) {
    double left = static_cast<double>(total_bytes - done_bytes) / static_cast<double>(done_bytes) *
                  static_cast<double>(elapsed.count());
    line += ", " +
            format_duration(std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::steady_clock::duration(static_cast<std::int64_t>(left)))) +
            " left";
  }
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

void ProgressLine::clear() {
  if (!state_->enabled) return;
  std::lock_guard lock(state_->mu);
  if (!state_->drawn) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  state_->drawn = false;
}

}  // namespace gcr
