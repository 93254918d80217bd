// gcr/human_output.h: sizes, durations, safe display of untrusted text, tables.
#include "gcr/human_output.h"

#include <catch2/catch.hpp>

using namespace gcr;
using namespace std::chrono_literals;

TEST_CASE("byte sizes use binary units with a useful precision") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.0 KiB");
  CHECK(format_bytes(1536ull << 20) == "1.5 GiB");
  CHECK(format_bytes(512ull << 20) == "512 MiB");
  CHECK(format_bytes((1ull << 30) - 1) == "1.0 GiB");  // never "1024 MiB"
  CHECK(format_bytes(~0ull) == "16.0 EiB");
}

TEST_CASE("durations pick a unit") {
  CHECK(format_duration(850ns) == "850 ns");
  CHECK(format_duration(12300ns) == "12.3 µs");
  CHECK(format_duration(1200us) == "1.2 ms");
  CHECK(format_duration(3400ms) == "3.40 s");
  CHECK(format_duration(125s) == "2m05s");
  CHECK(format_duration(3720s) == "1h02m");
}

TEST_CASE("percentages and ages") {
  CHECK(format_percent(1, 8) == "12.5%");
  CHECK(format_percent(1, 0) == "-");
  std::int64_t now = 1'700'000'000'000'000'000;
  CHECK(format_age(now, now) == "just now");
  CHECK(format_age(now - 5'000'000'000, now) == "5 seconds ago");
  CHECK(format_age(now - 60'000'000'000, now) == "1 minute ago");
  CHECK(format_age(now - 3 * 86400'000'000'000, now) == "3 days ago");
}

TEST_CASE("untrusted text cannot drive the terminal") {
  CHECK(display_safe("job-1") == "job-1");
  CHECK(display_safe("a\nb") == "a\\nb");
  CHECK(display_safe("\x1b[2J") == "\\x1b[2J");
  CHECK(display_safe("\xc2\x9b") == "\\xc2\\x9b");  // C1 CSI
  CHECK(display_safe("\xff") == "\\xff");
  CHECK(display_safe("µ") == "µ");
}

TEST_CASE("sizes parse with binary suffixes") {
  CHECK(parse_size("4096").value() == 4096);
  CHECK(parse_size("512M").value() == 512ull << 20);
  CHECK(parse_size("1G").value() == 1ull << 30);
  CHECK(parse_size("2gib").value() == 2ull << 30);
  CHECK_FALSE(parse_size(""));
  CHECK_FALSE(parse_size("1X"));
  CHECK_FALSE(parse_size("-1"));
  CHECK_FALSE(parse_size("99999999999999999999"));
  CHECK_FALSE(parse_size("20000000T"));
}

TEST_CASE("tables align columns by characters, not bytes") {
  Table t({{"NAME"}, {"SIZE", Table::Align::right}});
  t.add_row({"µs", "1 B"});
  t.add_row({"longer", "12 KiB"});
  CHECK(t.render() == "NAME      SIZE\nµs         1 B\nlonger  12 KiB\n");
}
