#include "gcrd_protocol.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <sstream>

namespace gcr::gcrd {

bool send_line(int fd, const std::string& line) {
  std::string s = line + "\n";
  for (std::size_t done = 0; done < s.size();) {
    ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

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

std::string bytes_progress(const std::string& what, std::uint64_t done, std::uint64_t total) {
  return "bytes " + what + " " + std::to_string(done) + " " + std::to_string(total);
}

std::optional<BytesProgress> parse_bytes_progress(const std::string& text) {
  if (text.rfind("bytes ", 0) != 0) return std::nullopt;
  BytesProgress p;
  char what[32] = {};
  unsigned long long done = 0, total = 0;
  if (std::sscanf(text.c_str() + 6, "%31s %llu %llu", what, &done, &total) != 3)
    return std::nullopt;
  p.what = what;
  p.done = done;
  p.total = total;
  return p;
}

std::string encode_reference(const ImagesReference& r) {
  return "format=1\nid=" + r.id + "\nstore=" + r.store + "\n";
}

Result<ImagesReference> decode_reference(const std::string& text) {
  ImagesReference r;
  bool format = false;
  std::size_t at = 0;
  while (at < text.size()) {
    auto nl = text.find('\n', at);
    std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? text.size() : nl + 1;
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "format") {
      if (v != "1")
        return make_error(Errc::unsupported, std::string(kImagesReferenceName) + " has format " +
                                                 v + ", which this gcr does not read; update gcr");
      format = true;
    } else if (k == "id") {
      r.id = v;
    } else if (k == "store") {
      r.store = v;
    }
  }
  bool hex = r.id.size() == 32 && r.id.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!format || !hex)
    return make_error(Errc::corrupt_image,
                      std::string(kImagesReferenceName) +
                          " in the images directory is damaged (no format line or "
                          "no checkpoint id)");
  return r;
}

}  // namespace gcr::gcrd
