// criu-plugin/device_map.cpp: GCR_DEVICE_MAP, by ordinal and by UUID.
#include "device_map.h"

#include <catch2/catch.hpp>
#include <cstring>

using namespace gcr::criu_plugin;

TEST_CASE("ordinal pairs parse in order, with spaces allowed around entries") {
  auto map = parse_device_map("0=1, 1 = 0");
  REQUIRE(map);
  REQUIRE(map->size() == 2);
  CHECK((*map)[0].from.ordinal == 0);
  CHECK((*map)[0].to.ordinal == 1);
  CHECK((*map)[1].from.ordinal == 1);
  CHECK((*map)[1].to.ordinal == 0);
}

TEST_CASE("UUIDs parse in nvidia-smi's form, without dashes or prefix, and mixed with ordinals") {
  auto map = parse_device_map(
      "GPU-53494d47-5055-2d00-4832-303000000000=1,53494d4750552d004832303000000001=GPU-53494d47-"
      "5055-2d00-4832-303000000000");
  REQUIRE(map);
  REQUIRE(map->size() == 2);
  CHECK((*map)[0].from.ordinal < 0);
  CHECK(format_uuid((*map)[0].from.uuid) == "GPU-53494d47-5055-2d00-4832-303000000000");
  CHECK((*map)[0].to.ordinal == 1);
  CHECK(format_uuid((*map)[1].from.uuid) == "GPU-53494d47-5055-2d00-4832-303000000001");
  CHECK((*map)[1].from.text == "53494d4750552d004832303000000001");
}

TEST_CASE("format_uuid and parse_uuid round-trip every byte") {
  CUuuid u{};
  for (int i = 0; i < 16; ++i) u.bytes[i] = static_cast<char>(0xf0 + i);
  auto back = parse_uuid(format_uuid(u));
  REQUIRE(back);
  CHECK(std::memcmp(back->bytes, u.bytes, 16) == 0);
  CHECK(format_uuid(u) == "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff");
}

TEST_CASE("malformed maps are refused, naming the entry") {
  for (const char* bad : {"", "0", "0=", "=1", "0=1=2", "0=1,", ",0=1", "0=x", "GPU-1234=0", "-1=0",
                          "0=GPU-53494d47-5055-2d00-4832-30300000000000"}) {
    INFO(bad);
    auto map = parse_device_map(bad);
    REQUIRE_FALSE(map);
    CHECK(map.error().code == gcr::Errc::invalid_argument);
    CHECK(map.error().message.find("GCR_DEVICE_MAP entry") != std::string::npos);
  }
}

TEST_CASE("a device named twice as a source or as a target is refused") {
  auto twice_from = parse_device_map("0=1,0=2");
  REQUIRE_FALSE(twice_from);
  CHECK(twice_from.error().message.find("mapped twice") != std::string::npos);
  auto twice_to = parse_device_map("0=1,2=1");
  REQUIRE_FALSE(twice_to);
  CHECK(twice_to.error().message.find("target of two devices") != std::string::npos);
  CHECK(parse_device_map("0=1,1=0"));  // a swap is fine
}
