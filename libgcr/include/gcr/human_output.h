// Human-readable output for the gcr command: byte sizes ("1.5 GiB"), durations, ages and times,
// and aligned tables. Everything returns text; printing is the caller's. Machine-readable output
// is json.h's.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gcr/result.h"

namespace gcr {

// Binary units: "0 B", "512 B", "1.5 KiB", "12.3 MiB", "512 MiB", "1.5 GiB", "2.0 TiB".
std::string format_bytes(std::uint64_t bytes);
// "1.5 GiB/s" (bytes per second over the given time; "-" for a zero or negative time).
std::string format_rate(std::uint64_t bytes, std::chrono::nanoseconds elapsed);
// "850 ns", "12.3 µs", "1.2 ms", "3.40 s", "2m05s", "1h02m".
std::string format_duration(std::chrono::nanoseconds d);
// "12.3%"; "-" when whole is 0.
std::string format_percent(std::uint64_t part, std::uint64_t whole);
// A past instant relative to now: "just now", "5 minutes ago", "3 days ago", then a date.
std::string format_age(std::int64_t unix_ns, std::int64_t now_unix_ns);
// Local time, "2025-11-29 10:41:07 CET".
std::string format_local_time(std::int64_t unix_ns);
// UTC, ISO 8601: "2025-11-29T09:41:07Z".
std::string format_utc_time(std::int64_t unix_ns);

// Text from an untrusted source (a manifest, a user's argument), made safe to print on a
// terminal: control characters and invalid UTF-8 become \n, \t, \xNN escapes.
std::string display_safe(std::string_view text);

// Parses a size with an optional binary suffix: "4096", "512K", "512M", "1G", "2T" (also "1GiB",
// "1gb"). Fails with invalid_argument naming the text.
Result<std::uint64_t> parse_size(std::string_view text);

// Columns separated by two spaces, widths measured in characters (not bytes), trailing spaces
// trimmed. Cells are printed as given: pass untrusted text through display_safe() first.
class Table {
 public:
  enum class Align { left, right };
  struct Column {
    std::string title;
    Align align = Align::left;
  };

  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void add_row(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }
  // The header line and the rows, each line prefixed by indent and ending in '\n'.
  std::string render(std::string_view indent = "") const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Characters (UTF-8 code points) in text, for alignment.
std::size_t display_width(std::string_view text);

// A single status line on stderr that redraws itself ("verify: 45%  1.2 GiB of 2.6 GiB"), for
// long operations on a terminal. Disabled (every call a no-op) when stderr is not a terminal.
// update() may be called from any thread and as often as wanted; it redraws at most 10 times a
// second. The destructor erases the line.
class ProgressLine {
 public:
  ProgressLine(bool enabled, std::string label);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void update(std::uint64_t done_bytes, std::uint64_t total_bytes);
  void clear();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gcr
