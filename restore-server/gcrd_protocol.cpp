#include "gcrd_protocol.h"

#include <cstdio>
#include <sstream>

namespace gcr::gcrd {

std::string encode_value(const std::string& v) {
  std::string out;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '%' || c == '=' || c >= 0x7f) {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string decode_value(const std::string& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '%' && i + 2 < v.size()) {
      unsigned x = 0;
      if (std::sscanf(v.c_str() + i + 1, "%2x", &x) == 1) {
        out += static_cast<char>(x);
        i += 2;
        continue;
      }
    }
    out += v[i];
  }
  return out;
}

std::string encode_fields(const std::map<std::string, std::string>& fields) {
  std::string out;
  for (const auto& [k, v] : fields) {
    if (!out.empty()) out += ' ';
    out += k + "=" + encode_value(v);
  }
  return out;
}

std::map<std::string, std::string> decode_fields(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string tok; in >> tok;) {
    auto eq = tok.find('=');
    if (eq == std::string::npos) continue;
    out[tok.substr(0, eq)] = decode_value(tok.substr(eq + 1));
  }
  return out;
}

}  // namespace gcr::gcrd
