// PTX text: kernels from `.entry` parameter lists, variables from module-scope `.global` and
// `.const` declarations. Owns a tokenizer and a module-scope reader that skips function bodies
// and debug `.section` blocks whole. Does not read instructions, `.func`s or `.extern`
// declarations. Parameters are laid out as ptxas does: in order, each at the next multiple of its
// alignment (`.align N` if given, else the size of its scalar or vector type).
//
// Initializers are decoded to bytes for numeric literals (decimal, 0x/0b/octal integers, 0fXXXXXXXX
// and 0dXXXXXXXXXXXXXXXX float bits, decimal floats); an address expression (`generic(x)`, `x+4`)
// becomes zero bytes, as relocations are out of scope.
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "module_image_internal.h"

namespace gcr::simgpu::detail {
namespace {

constexpr uint64_t kMaxParamBytes = 1u << 20;          // far above CUDA's 32764
constexpr uint64_t kMaxInitializedBytes = 256u << 20;  // sanity bound for initialised variables

struct Token {
  enum class Kind { word, directive, number, string, punct };
  Kind kind;
  std::string_view text;
  uint32_t line;
};

Error ptx_error(uint32_t line, const std::string& message) {
  return corrupt("ptx line " + std::to_string(line) + ": " + message);
}

bool is_word_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%';
}
bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
}
bool has_radix_prefix(std::string_view t) {
  if (t.size() < 2 || t[0] != '0') return false;
  char p = static_cast<char>(std::tolower(static_cast<unsigned char>(t[1])));
  return p == 'x' || p == 'b' || p == 'f' || p == 'd';
}

Result<std::vector<Token>> tokenize(std::string_view s) {
  std::vector<Token> out;
  uint32_t line = 1;
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      uint32_t start_line = line;
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) {
        if (s[i] == '\n') ++line;
        ++i;
      }
      if (i + 1 >= n) return ptx_error(start_line, "unterminated /* comment");
      i += 2;
      continue;
    }
    size_t start = i;
    Token::Kind kind = Token::Kind::punct;
    if (c == '"') {
      uint32_t start_line = line;
      ++i;
      while (i < n && s[i] != '"') {
        if (s[i] == '\n') ++line;
        i += (s[i] == '\\' && i + 1 < n) ? 2 : 1;
      }
      if (i >= n) return ptx_error(start_line, "unterminated string");
      ++i;
      kind = Token::Kind::string;
    } else if (c == '.' && i + 1 < n && is_word_start(s[i + 1])) {
      ++i;
      while (i < n && is_word_char(s[i])) ++i;
      kind = Token::Kind::directive;
    } else if (is_word_start(c)) {
      ++i;
      while (i < n && is_word_char(s[i])) ++i;
      kind = Token::Kind::word;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      ++i;
      while (i < n) {
        char d = s[i];
        if (is_word_char(d) || d == '.') {
          ++i;
        } else if ((d == '+' || d == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E') &&
                   !has_radix_prefix(s.substr(start, i - start))) {
          ++i;  // exponent sign of a decimal float
        } else {
          break;
        }
      }
      kind = Token::Kind::number;
    } else {
      ++i;
    }
    out.push_back(Token{kind, s.substr(start, i - start), line});
  }
  return out;
}

// A scalar PTX type: its size and how a literal is stored in it.
struct ScalarType {
  uint32_t size = 0;
  enum class Class { bits, f32, f64 } cls = Class::bits;
};

bool scalar_type(std::string_view name, ScalarType& type) {
  struct Entry {
    std::string_view name;
    ScalarType type;
  };
  static constexpr Entry kTypes[] = {
      {".b8", {1}},
      {".u8", {1}},
      {".s8", {1}},
      {".b16", {2}},
      {".u16", {2}},
      {".s16", {2}},
      {".f16", {2}},
      {".bf16", {2}},
      {".b32", {4}},
      {".u32", {4}},
      {".s32", {4}},
      {".f16x2", {4}},
      {".bf16x2", {4}},
      {".b64", {8}},
      {".u64", {8}},
      {".s64", {8}},
      {".b128", {16}},
      {".texref", {8}},
      {".samplerref", {8}},
      {".surfref", {8}},
      {".f32", {4, ScalarType::Class::f32}},
      {".f64", {8, ScalarType::Class::f64}},
  };
  for (const auto& e : kTypes) {
    if (e.name == name) {
      type = e.type;
      return true;
    }
  }
  return false;
}

bool vector_width(std::string_view name, uint32_t& width) {
  if (name == ".v2")
    width = 2;
  else if (name == ".v4")
    width = 4;
  else if (name == ".v8")
    width = 8;
  else
    return false;
  return true;
}

// A window [pos, end) of the token list with a cursor.
class Cursor {
 public:
  Cursor(const std::vector<Token>& tokens, size_t begin, size_t end)
      : tokens_(tokens), pos_(begin), end_(end) {}

  bool done() const { return pos_ >= end_; }
  bool next_is(std::string_view text) const { return !done() && tokens_[pos_].text == text; }
  bool next_is(Token::Kind kind) const { return !done() && tokens_[pos_].kind == kind; }
  const Token& peek() const { return tokens_[pos_]; }
  const Token& take() { return tokens_[pos_++]; }
  size_t pos() const { return pos_; }
  void seek(size_t pos) { pos_ = pos; }
  // The line of the next token, or of the last one when done.
  uint32_t line() const {
    if (tokens_.empty()) return 1;
    return tokens_[pos_ < tokens_.size() ? pos_ : tokens_.size() - 1].line;
  }
  Error error(const std::string& message) const { return ptx_error(line(), message); }

  Result<std::string_view> expect(Token::Kind kind, const char* what) {
    if (!next_is(kind)) return error("expected " + std::string(what));
    return take().text;
  }
  Status expect(std::string_view text) {
    if (!next_is(text)) return error("expected '" + std::string(text) + "'");
    ++pos_;
    return ok();
  }
  Result<uint64_t> expect_count(const char* what);

 private:
  const std::vector<Token>& tokens_;
  size_t pos_;
  size_t end_;
};

// Parses an unsigned integer literal (decimal, 0x hex, 0b binary, leading-0 octal, U suffix).
bool parse_integer(std::string_view t, uint64_t& value) {
  if (!t.empty() && (t.back() == 'U' || t.back() == 'u')) t.remove_suffix(1);
  unsigned base = 10;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
    base = 16;
    t.remove_prefix(2);
  } else if (t.size() > 2 && t[0] == '0' && (t[1] == 'b' || t[1] == 'B')) {
    base = 2;
    t.remove_prefix(2);
  } else if (t.size() > 1 && t[0] == '0') {
    base = 8;
    t.remove_prefix(1);
  }
  if (t.empty()) return false;
  uint64_t v = 0;
  for (char c : t) {
    unsigned d;
    if (c >= '0' && c <= '9')
      d = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = static_cast<unsigned>(c - 'A' + 10);
    else
      return false;
    if (d >= base) return false;
    if (v > (UINT64_MAX - d) / base) return false;
    v = v * base + d;
  }
  value = v;
  return true;
}

Result<uint64_t> Cursor::expect_count(const char* what) {
  uint64_t v = 0;
  if (!next_is(Token::Kind::number) || !parse_integer(peek().text, v)) {
    return error("expected an integer " + std::string(what));
  }
  ++pos_;
  return v;
}

bool is_hex_digits(std::string_view t) {
  for (char c : t) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return !t.empty();
}

void append_le(std::vector<std::byte>& out, uint64_t bits, uint32_t size) {
  for (uint32_t i = 0; i < size; ++i) {
    out.push_back(static_cast<std::byte>(i < 8 ? (bits >> (8 * i)) & 0xff : 0));
  }
}

// One initializer element: a number literal, optionally negated, stored as `type`.
Status append_literal(std::string_view t, bool negative, const ScalarType& type, uint32_t line,
                      std::vector<std::byte>& out) {
  enum class Kind { integer, f32_bits, f64_bits, decimal } kind;
  uint64_t bits = 0;
  double real = 0;
  if (t.size() == 10 && t[0] == '0' && (t[1] == 'f' || t[1] == 'F') && is_hex_digits(t.substr(2))) {
    kind = Kind::f32_bits;
    parse_integer("0x" + std::string(t.substr(2)), bits);
    float f;
    uint32_t b32 = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b32, 4);
    real = f;
  } else if (t.size() == 18 && t[0] == '0' && (t[1] == 'd' || t[1] == 'D') &&
             is_hex_digits(t.substr(2))) {
    kind = Kind::f64_bits;
    parse_integer("0x" + std::string(t.substr(2)), bits);
    std::memcpy(&real, &bits, 8);
  } else if (parse_integer(t, bits)) {
    kind = Kind::integer;
    real = static_cast<double>(bits);
  } else {
    std::string s(t);
    char* end = nullptr;
    real = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return ptx_error(line, "bad number '" + s + "'");
    kind = Kind::decimal;
  }
  if (negative) real = -real;

  if (type.cls == ScalarType::Class::f32) {
    // A double beyond float's range converts to infinity here, not undefined behaviour.
    float f = std::isnan(real)             ? std::numeric_limits<float>::quiet_NaN()
              : std::fabs(real) <= FLT_MAX ? static_cast<float>(real)
              : real > 0                   ? HUGE_VALF
                                           : -HUGE_VALF;
    uint32_t b;
    if (kind == Kind::f32_bits && !negative) {
      b = static_cast<uint32_t>(bits);
    } else {
      std::memcpy(&b, &f, 4);
    }
    append_le(out, b, 4);
  } else if (type.cls == ScalarType::Class::f64) {
    uint64_t b = bits;
    if (kind != Kind::f64_bits || negative) std::memcpy(&b, &real, 8);
    append_le(out, b, 8);
  } else {
    if (kind == Kind::decimal) {
      return ptx_error(line, "decimal float '" + std::string(t) + "' for an integer type");
    }
    append_le(out, negative ? 0 - bits : bits, type.size);
  }
  return ok();
}

class ModuleReader {
 public:
  explicit ModuleReader(const std::vector<Token>& tokens) : tokens_(tokens) {}
  Result<ModuleImage> read();

 private:
  Status skip_block(Cursor& c);
  Status module_directive(Cursor& c, bool& handled);
  Status declaration(size_t begin, size_t end);
  Status entry(Cursor& c);
  Status param(Cursor& c, const std::string& kernel, uint64_t& end_of_params, KernelInfo& k);
  Status variables(Cursor& c);
  Status initializer(Cursor& c, const ScalarType& type, uint64_t max_bytes,
                     std::vector<std::byte>& out);

  const std::vector<Token>& tokens_;
  ModuleImage module_;
  bool saw_version_ = false;
};

// At a '{': moves past its matching '}'.
Status ModuleReader::skip_block(Cursor& c) {
  uint32_t start = c.line();
  uint64_t depth = 0;
  while (!c.done()) {
    std::string_view t = c.take().text;
    if (t == "{")
      ++depth;
    else if (t == "}" && --depth == 0)
      return ok();
  }
  return ptx_error(start, "'{' without a matching '}'");
}

// The module-scope directives that are not ';'-terminated declarations.
Status ModuleReader::module_directive(Cursor& c, bool& handled) {
  handled = true;
  std::string_view d = c.peek().text;
  if (d == ".version") {
    c.take();
    GCR_TRY(c.expect(Token::Kind::number, "a version after .version"));
    saw_version_ = true;
  } else if (d == ".target") {
    c.take();
    GCR_TRY(c.expect(Token::Kind::word, "a target after .target"));
    while (c.next_is(",")) {
      c.take();
      GCR_TRY(c.expect(Token::Kind::word, "a target after ','"));
    }
  } else if (d == ".address_size") {
    c.take();
    GCR_TRY(c.expect(Token::Kind::number, "a size after .address_size"));
  } else if (d == ".file") {
    c.take();
    GCR_TRY(c.expect(Token::Kind::number, "a file number after .file"));
    GCR_TRY(c.expect(Token::Kind::string, "a file name"));
    while (c.next_is(",")) {
      c.take();
      GCR_TRY(c.expect(Token::Kind::number, "a number after ','"));
    }
  } else if (d == ".section") {
    c.take();
    while (!c.done() && !c.next_is("{")) c.take();
    if (c.done()) return c.error(".section without a '{' block");
    GCR_TRY(skip_block(c));
  } else {
    handled = false;
  }
  return ok();
}

Result<ModuleImage> ModuleReader::read() {
  Cursor c(tokens_, 0, tokens_.size());
  while (!c.done()) {
    if (c.next_is(Token::Kind::directive)) {
      bool handled = false;
      GCR_TRY(module_directive(c, handled));
      if (handled) continue;
    }
    if (!saw_version_) return c.error("expected .version before anything else");
    // A declaration runs to ';' or to the '{' of a body; an initializer's braces are its own.
    size_t begin = c.pos();
    uint32_t begin_line = c.line();
    bool after_equals = false;
    size_t end = 0;
    bool terminated = false;
    while (!c.done()) {
      std::string_view t = c.peek().text;
      if (t == ";") {
        end = c.pos();
        c.take();
        terminated = true;
        break;
      }
      if (t == "{") {
        if (after_equals) {
          GCR_TRY(skip_block(c));
          continue;
        }
        end = c.pos();
        GCR_TRY(skip_block(c));
        terminated = true;
        break;
      }
      if (t == "}") return c.error("'}' without a matching '{'");
      if (t == "=") after_equals = true;
      c.take();
    }
    if (!terminated) return ptx_error(begin_line, "declaration without ';' or a body");
    GCR_TRY(declaration(begin, end));
  }
  if (!saw_version_) return ptx_error(1, "no .version directive: empty or not PTX");
  return std::move(module_);
}

Status ModuleReader::declaration(size_t begin, size_t end) {
  bool is_extern = false;
  for (size_t i = begin; i < end; ++i) {
    std::string_view t = tokens_[i].text;
    if (t == ".entry") {
      Cursor c(tokens_, i + 1, end);
      return entry(c);
    }
    if (t == ".func" || t == ".callprototype" || t == ".alias") return ok();
    if (t == ".extern") is_extern = true;
    if (t == ".shared" || t == ".local" || t == ".reg" || t == ".param" || t == ".tex") return ok();
    if (t == ".global" || t == ".const") {
      if (is_extern) return ok();
      Cursor c(tokens_, begin, end);
      return variables(c);
    }
  }
  return ok();  // .pragma and other module-scope statements
}

Status ModuleReader::entry(Cursor& c) {
  auto name = c.expect(Token::Kind::word, "a kernel name after .entry");
  if (!name) return std::move(name).error();
  KernelInfo k{std::string(*name), {}, 0};
  uint64_t end_of_params = 0;
  if (c.next_is("(")) {
    c.take();
    if (c.next_is(")")) {
      c.take();
    } else {
      while (true) {
        GCR_TRY(param(c, k.name, end_of_params, k));
        if (c.next_is(",")) {
          c.take();
          continue;
        }
        GCR_TRY(c.expect(")"));
        break;
      }
    }
  }
  k.param_bytes = static_cast<uint32_t>(end_of_params);
  module_.kernels.push_back(std::move(k));
  return ok();  // performance directives (.maxntid ...) after the list are not needed
}

Status ModuleReader::param(Cursor& c, const std::string& kernel, uint64_t& end_of_params,
                           KernelInfo& k) {
  GCR_TRY(c.expect(".param"));
  uint64_t align = 0;
  bool after_ptr = false;  // `.ptr .global .align N` describes the pointee, not the parameter
  ScalarType type;
  uint32_t width = 1;
  while (c.next_is(Token::Kind::directive)) {
    std::string_view d = c.take().text;
    if (d == ".align") {
      auto n = c.expect_count("after .align");
      if (!n) return std::move(n).error();
      if (*n == 0 || (*n & (*n - 1)) != 0 || *n > 4096) {
        return c.error(".align " + std::to_string(*n) + " is not a power of two up to 4096");
      }
      if (!after_ptr) align = *n;
    } else if (d == ".ptr") {
      after_ptr = true;
    } else if (vector_width(d, width) || scalar_type(d, type)) {
      // recorded
    } else if (d == ".global" || d == ".const" || d == ".shared" || d == ".local") {
      // the pointee's state space
    } else {
      return unsupported("ptx line " + std::to_string(c.line()) + ": parameter attribute " +
                         std::string(d) + " in kernel " + kernel);
    }
  }
  if (type.size == 0) return c.error("parameter of kernel " + kernel + " has no type");
  auto pname = c.expect(Token::Kind::word, "a parameter name");
  if (!pname) return std::move(pname).error();
  uint64_t element = uint64_t{type.size} * width;
  uint64_t size = element;
  while (c.next_is("[")) {
    c.take();
    auto n = c.expect_count("array length");
    if (!n) return std::move(n).error();
    GCR_TRY(c.expect("]"));
    if (*n == 0 || *n > kMaxParamBytes || size > kMaxParamBytes / *n) {
      return c.error("parameter " + std::string(*pname) + " has a size of 0 or over " +
                     hex(kMaxParamBytes));
    }
    size *= *n;
  }
  if (align == 0) align = element;
  uint64_t offset = (end_of_params + align - 1) / align * align;
  if (offset + size > kMaxParamBytes) {
    return c.error("parameters of kernel " + kernel + " exceed " + hex(kMaxParamBytes) + " bytes");
  }
  k.params.push_back(KernelParam{static_cast<uint32_t>(k.params.size()),
                                 static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
  end_of_params = offset + size;
  return ok();
}

Status ModuleReader::variables(Cursor& c) {
  ScalarType type;
  uint32_t width = 1;
  while (c.next_is(Token::Kind::directive)) {
    std::string_view d = c.take().text;
    if (d == ".visible" || d == ".weak" || d == ".common" || d == ".global") continue;
    if (d == ".const") {
      if (c.next_is("[")) {  // old syntax for a constant bank: .const[2]
        c.take();
        GCR_TRY(c.expect_count("constant bank"));
        GCR_TRY(c.expect("]"));
      }
    } else if (d == ".attribute") {
      GCR_TRY(c.expect("("));
      while (!c.done() && !c.next_is(")")) c.take();
      GCR_TRY(c.expect(")"));
    } else if (d == ".align") {
      GCR_TRY(c.expect_count("after .align"));
    } else if (!vector_width(d, width) && !scalar_type(d, type)) {
      return unsupported("ptx line " + std::to_string(c.line()) + ": variable attribute or type " +
                         std::string(d));
    }
  }
  if (type.size == 0) return c.error("variable without a type");
  const uint64_t element = uint64_t{type.size} * width;
  while (true) {
    auto name = c.expect(Token::Kind::word, "a variable name");
    if (!name) return std::move(name).error();
    GlobalInfo g{std::string(*name), element, {}};
    bool open_length = false;  // name[] = {...}: the initializer gives the length
    while (c.next_is("[")) {
      c.take();
      if (c.next_is("]")) {
        open_length = true;
      } else {
        auto n = c.expect_count("array length");
        if (!n) return std::move(n).error();
        if (*n != 0 && g.size > UINT64_MAX / 2 / *n) return c.error("array size overflows");
        g.size *= *n;
      }
      GCR_TRY(c.expect("]"));
    }
    if (c.next_is("=")) {
      c.take();
      uint64_t max_bytes = open_length ? kMaxInitializedBytes : g.size;
      if (max_bytes > kMaxInitializedBytes) {
        return unsupported("ptx line " + std::to_string(c.line()) + ": initialised variable " +
                           g.name + " of " + hex(g.size) + " bytes is too large");
      }
      GCR_TRY(initializer(c, type, max_bytes, g.init));
      if (open_length) g.size = (g.init.size() + element - 1) / element * element;
      g.init.resize(g.size, std::byte{0});
    } else if (open_length) {
      return c.error("variable " + g.name + "[] without an initializer");
    }
    module_.globals.push_back(std::move(g));
    if (c.done()) return ok();
    GCR_TRY(c.expect(","));
  }
}

// `{ 1, 2, {3, 4} }` or a single element, flattened into `type`-sized little-endian values.
Status ModuleReader::initializer(Cursor& c, const ScalarType& type, uint64_t max_bytes,
                                 std::vector<std::byte>& out) {
  uint64_t depth = 0;
  do {
    if (c.done()) return c.error("initializer ends early");
    std::string_view t = c.peek().text;
    if (t == "{") {
      c.take();
      ++depth;
      continue;
    }
    if (t == "}") {
      if (depth == 0) return c.error("'}' without '{' in initializer");
      c.take();
      --depth;
      continue;
    }
    if (t == ",") {
      if (depth == 0) return c.error("empty initializer");
      c.take();
      continue;
    }
    // An element: every token up to ',', '{' or '}'.
    uint32_t line = c.line();
    size_t first = c.pos();
    while (!c.done() && !c.next_is(",") && !c.next_is("{") && !c.next_is("}")) c.take();
    size_t count = c.pos() - first;
    const Token* e = &tokens_[first];
    bool negative = count == 2 && e[0].text == "-";
    if (negative) ++e;
    if ((count == 1 || negative) && e->kind == Token::Kind::number) {
      GCR_TRY(append_literal(e->text, negative, type, line, out));
    } else {
      append_le(out, 0, type.size);  // an address expression: relocations are not applied
    }
    if (out.size() > max_bytes) {
      return ptx_error(line, "initializer longer than its variable (" + hex(max_bytes) + " bytes)");
    }
  } while (depth > 0);
  return ok();
}

}  // namespace

Result<ModuleImage> parse_ptx(std::string_view text) {
  auto tokens = tokenize(text);
  if (!tokens) return std::move(tokens).error();
  ModuleReader reader(*tokens);
  auto module = reader.read();
  if (module) module->from_ptx = true;
  return module;
}

}  // namespace gcr::simgpu::detail
