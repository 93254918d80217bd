// gcr/json.h: what --json prints must parse, whatever a manifest holds.
#include "gcr/json.h"

#include <catch2/catch.hpp>

using gcr::json_quote;
using gcr::JsonWriter;

TEST_CASE("strings are escaped as RFC 8259 asks") {
  CHECK(json_quote("plain") == "\"plain\"");
  CHECK(json_quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(json_quote("l1\nl2\tx\r") == "\"l1\\nl2\\tx\\r\"");
  CHECK(json_quote(std::string("a\0b", 3)) == "\"a\\u0000b\"");
  CHECK(json_quote("\x1b[31m") == "\"\\u001b[31m\"");
  CHECK(json_quote("\x7f") == "\"\\u007f\"");
}

TEST_CASE("valid UTF-8 passes through and invalid bytes become U+FFFD") {
  CHECK(json_quote("µs ✓ 🙂") == "\"µs ✓ 🙂\"");
  CHECK(json_quote("\xff") == "\"\\ufffd\"");
  CHECK(json_quote("a\xc3") == "\"a\\ufffd\"");                      // truncated sequence
  CHECK(json_quote("\xc0\xaf") == "\"\\ufffd\\ufffd\"");             // overlong '/'
  CHECK(json_quote("\xed\xa0\x80") == "\"\\ufffd\\ufffd\\ufffd\"");  // a surrogate
}

TEST_CASE("objects and arrays nest with commas in the right places") {
  JsonWriter j(/*pretty=*/false);
  j.begin_object()
      .field("n", std::uint64_t{18446744073709551615ull})
      .field("neg", std::int64_t{-5});
  j.key("list").begin_array().value("a").value(true).null().begin_object().end_object().end_array();
  j.key("empty").begin_array().end_array();
  j.field("d", 0.5).end_object();
  CHECK(j.take() ==
        "{\"n\":18446744073709551615,\"neg\":-5,\"list\":[\"a\",true,null,{}],\"empty\":[],\"d\":0."
        "5}\n");
}

TEST_CASE("pretty output indents by two spaces") {
  JsonWriter j;
  j.begin_object().field("a", 1).key("b").begin_array().value(2).end_array().end_object();
  CHECK(j.take() == "{\n  \"a\": 1,\n  \"b\": [\n    2\n  ]\n}\n");
}
