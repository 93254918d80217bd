// A small JSON writer for `--json` output (and the benchmarks' result files): objects, arrays,
// strings, integers, booleans and null, pretty-printed with two-space indents.
//
//   JsonWriter j;
//   j.begin_object().field("id", id.hex()).key("tags").begin_array();
//   for (auto& t : tags) j.value(t);
//   j.end_array().end_object();
//   std::string text = j.take();  // ends with a newline
//
// Strings are escaped per RFC 8259, and bytes that are not valid UTF-8 become U+FFFD, so the
// output is valid JSON whatever a manifest holds. Misuse (a value where a key is due, unbalanced
// ends) is a programming error and aborts. Floating-point values are written with enough digits
// to read back; NaN and infinities become null. It does not parse.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gcr {

// s as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

class JsonWriter {
 public:
  explicit JsonWriter(bool pretty = true) : pretty_(pretty) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b);
  JsonWriter& value(std::int64_t n);
  JsonWriter& value(std::uint64_t n);
  JsonWriter& value(int n) { return value(static_cast<std::int64_t>(n)); }
  JsonWriter& value(unsigned n) { return value(static_cast<std::uint64_t>(n)); }
  JsonWriter& value(double d);
  JsonWriter& null();

  template <typename T>
  JsonWriter& field(std::string_view name, const T& v) {
    key(name);
    return value(v);
  }

  // The document, once every object and array is closed; ends with a newline.
  std::string take();

 private:
  enum class Scope { object, array };
  void before_value();
  void newline_indent();

  std::string out_;
  std::vector<Scope> stack_;
  bool pretty_;
  bool first_in_scope_ = true;
  bool after_key_ = false;
  bool done_ = false;
};

// The fields of a gcrd answer (or one like it), each key to its text: numbers (all digits, but
// never "id", a hex id that may happen to be all digits) as numbers, the rest as strings.
void json_fields(JsonWriter& j, const std::map<std::string, std::string>& f);

}  // namespace gcr
