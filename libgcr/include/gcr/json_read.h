// A small JSON reader for documents other programs wrote (a container runtime's configuration):
// the whole text into a tree of values, numbers kept as their text. Depth and size are bounded,
// and anything that is not RFC 8259 JSON is refused with the offset where it went wrong. Not for
// hot paths; gcr's own formats are not JSON (JsonWriter writes --json output only).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gcr/result.h"

namespace gcr {

struct JsonValue {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  std::string text;  // a string's value, or a number as written
  std::vector<JsonValue> items;
  std::map<std::string, JsonValue> members;  // a key given twice: the last one

  // Member `key` of an object, or nullptr (not an object, or no such member).
  const JsonValue* get(std::string_view key) const;
  bool is_string() const { return kind == Kind::string; }
  bool is_array() const { return kind == Kind::array; }
  bool is_object() const { return kind == Kind::object; }
};

// Parses `text` (at most 64 levels deep). Errc::corrupt_image naming the offset on any error.
Result<JsonValue> json_parse(std::string_view text);

}  // namespace gcr
