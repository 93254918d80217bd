// gcr/json_read.h: a runtime's configuration read as JSON, and anything else refused.
#include "gcr/json_read.h"

#include <catch2/catch.hpp>

using gcr::json_parse;
using gcr::JsonValue;

TEST_CASE("a document with every kind of value reads back") {
  auto v = json_parse(R"({"name":"job","n":-12.5e3,"on":true,"off":false,"none":null,
                          "list":[1,"two",{"k":[]}],"esc":"a\"b\\c\u00b5\ud83d\ude42\n"})");
  REQUIRE(v);
  CHECK(v->get("name")->text == "job");
  CHECK(v->get("n")->kind == JsonValue::Kind::number);
  CHECK(v->get("n")->text == "-12.5e3");
  CHECK(v->get("on")->boolean);
  CHECK_FALSE(v->get("off")->boolean);
  CHECK(v->get("none")->kind == JsonValue::Kind::null);
  REQUIRE(v->get("list")->items.size() == 3);
  CHECK(v->get("list")->items[2].get("k")->is_array());
  CHECK(v->get("esc")->text == "a\"b\\c\xc2\xb5\xf0\x9f\x99\x82\n");
  CHECK(v->get("missing") == nullptr);
}

TEST_CASE("what is not JSON is refused, naming the offset") {
  for (const char* bad : {"", "{", "{\"a\" 1}", "[1,]", "{\"a\":1}x", "\"\x01\"", "tru", "\"\\q\"",
                          "[-]", "{\"a\":\"\\ud800\\u0041\"}"}) {
    auto v = json_parse(bad);
    CHECK_FALSE(v);
    if (!v) CHECK(v.error().message.find("offset") != std::string::npos);
  }
}

TEST_CASE("nesting is bounded") {
  CHECK(json_parse(std::string(64, '[') + std::string(64, ']')));
  CHECK_FALSE(json_parse(std::string(100000, '[') + std::string(100000, ']')));
}
