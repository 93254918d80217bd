#include "gcr/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gcr {
namespace {

[[noreturn]] void misuse(const char* what) {
  std::fprintf(stderr, "gcr: internal error: JsonWriter misuse: %s\n", what);
  std::abort();
}

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one (overlong forms,
// surrogates and code points past U+10FFFF are invalid).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  std::size_t n;
  std::uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  if (n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) return 0;
  if (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) return 0;
  return n;
}

}  // namespace

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\b':
        out += "\\b";
        ++i;
        continue;
      case '\f':
        out += "\\f";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      ++i;
      continue;
    }
    std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  out += '"';
  return out;
}

void JsonWriter::newline_indent() {
  if (!pretty_) return;
  out_ += '\n';
  out_.append(2 * stack_.size(), ' ');
}

void JsonWriter::before_value() {
  if (done_) misuse("value after the document ended");
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (stack_.empty()) return;  // the top-level value
  if (stack_.back() == Scope::object) misuse("value in an object without a key");
  if (!first_in_scope_) out_ += ',';
  first_in_scope_ = false;
  newline_indent();
}

JsonWriter& JsonWriter::key(std::string_view name) {
  if (stack_.empty() || stack_.back() != Scope::object || after_key_)
    misuse("key outside an object");
  if (!first_in_scope_) out_ += ',';
  first_in_scope_ = false;
  newline_indent();
  out_ += json_quote(name);
  out_ += pretty_ ? ": " : ":";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  stack_.push_back(Scope::object);
  first_in_scope_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  stack_.push_back(Scope::array);
  first_in_scope_ = true;
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  if (stack_.empty() || stack_.back() != Scope::object || after_key_)
    misuse("unbalanced end_object");
  stack_.pop_back();
  if (!first_in_scope_) newline_indent();
  out_ += '}';
  first_in_scope_ = false;
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  if (stack_.empty() || stack_.back() != Scope::array) misuse("unbalanced end_array");
  stack_.pop_back();
  if (!first_in_scope_) newline_indent();
  out_ += ']';
  first_in_scope_ = false;
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  before_value();
  out_ += json_quote(s);
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(bool b) {
  before_value();
  out_ += b ? "true" : "false";
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t n) {
  before_value();
  out_ += std::to_string(n);
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t n) {
  before_value();
  out_ += std::to_string(n);
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(double d) {
  before_value();
  if (!std::isfinite(d)) {
    out_ += "null";
  } else {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, d);  // the shortest form that reads back
    out_.append(buf, r.ptr);
  }
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  if (stack_.empty()) done_ = true;
  return *this;
}

void json_fields(JsonWriter& j, const std::map<std::string, std::string>& f) {
  for (const auto& [k, v] : f) {
    bool numeric =
        !v.empty() && v.find_first_not_of("0123456789") == std::string::npos && k != "id";
    if (numeric)
      j.field(k, static_cast<std::uint64_t>(std::strtoull(v.c_str(), nullptr, 10)));
    else
      j.field(k, v);
  }
}

std::string JsonWriter::take() {
  if (!stack_.empty() || after_key_ || !done_) misuse("take() before the document is complete");
  out_ += '\n';
  return std::move(out_);
}

}  // namespace gcr
