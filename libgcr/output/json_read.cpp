// json_read.h: a recursive-descent JSON reader, bounded in depth.
#include "gcr/json_read.h"

namespace gcr {
namespace {

constexpr int kMaxDepth = 64;

struct Parser {
  std::string_view s;
  std::size_t i = 0;

  Error fail(const std::string& what) const {
    return Error{Errc::corrupt_image, "JSON: " + what + " at offset " + std::to_string(i)};
  }
  void skip_space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool literal(std::string_view word) {
    if (s.substr(i, word.size()) != word) return false;
    i += word.size();
    return true;
  }
  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  Result<unsigned> hex4() {
    if (i + 4 > s.size()) return fail("a short \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k, ++i) {
      char c = s[i];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) return fail("a bad \\u escape");
      v = v * 16 + static_cast<unsigned>(d);
    }
    return v;
  }
  Result<std::string> string() {
    ++i;  // the opening quote
    std::string out;
    for (;;) {
      if (i >= s.size()) return fail("an unterminated string");
      char c = s[i++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return fail("a control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= s.size()) return fail("an unterminated escape");
      char e = s[i++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          GCR_TRY_ASSIGN(unsigned cp, hex4());
          if (cp >= 0xD800 && cp < 0xDC00 && literal("\\u")) {
            GCR_TRY_ASSIGN(unsigned lo, hex4());
            if (lo < 0xDC00 || lo > 0xDFFF) return fail("a lone surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(out, cp);
          break;
        }
        default:
          return fail("an unknown escape");
      }
    }
  }
  Result<std::string> number() {
    const std::size_t start = i;
    if (s[i] == '-') ++i;
    bool digits = false;
    while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == 'e' ||
                            s[i] == 'E' || s[i] == '+' || s[i] == '-')) {
      digits |= s[i] >= '0' && s[i] <= '9';
      ++i;
    }
    if (!digits) return fail("a malformed number");
    return std::string(s.substr(start, i - start));
  }
  Status container(JsonValue& v, int depth, bool object) {
    ++i;  // '{' or '['
    v.kind = object ? JsonValue::Kind::object : JsonValue::Kind::array;
    const char close = object ? '}' : ']';
    skip_space();
    if (i < s.size() && s[i] == close) return ++i, ok();
    for (;;) {
      skip_space();
      std::string key;
      if (object) {
        if (i >= s.size() || s[i] != '"') return fail("an object key expected");
        GCR_TRY_ASSIGN(key, string());
        skip_space();
        if (i >= s.size() || s[i++] != ':') return fail("':' expected");
      }
      GCR_TRY_ASSIGN(JsonValue item, value(depth + 1));
      if (object)
        v.members[key] = std::move(item);
      else
        v.items.push_back(std::move(item));
      skip_space();
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      if (i < s.size() && s[i] == close) return ++i, ok();
      return fail(object ? "',' or '}' expected" : "',' or ']' expected");
    }
  }
  Result<JsonValue> value(int depth) {
    if (depth > kMaxDepth) return fail("nesting deeper than 64 levels");
    skip_space();
    if (i >= s.size()) return fail("a value expected");
    JsonValue v;
    const char c = s[i];
    if (c == '{' || c == '[') {
      GCR_TRY(container(v, depth, c == '{'));
    } else if (c == '"') {
      v.kind = JsonValue::Kind::string;
      GCR_TRY_ASSIGN(v.text, string());
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = JsonValue::Kind::number;
      GCR_TRY_ASSIGN(v.text, number());
    } else if (literal("true") || literal("false")) {
      v.kind = JsonValue::Kind::boolean;
      v.boolean = s[i - 1] == 'e' && s[i - 2] == 'u';
    } else if (!literal("null")) {
      return fail("a value expected");
    }
    return v;
  }
};

}  // namespace

const JsonValue* JsonValue::get(std::string_view key) const {
  if (kind != Kind::object) return nullptr;
  auto it = members.find(std::string(key));
  return it == members.end() ? nullptr : &it->second;
}

Result<JsonValue> json_parse(std::string_view text) {
  Parser p{text};
  GCR_TRY_ASSIGN(JsonValue v, p.value(0));
  p.skip_space();
  if (p.i != text.size()) return p.fail("text after the document");
  return v;
}

}  // namespace gcr
