// Name rules shared by writers and readers: see names.h. valid_tag (gcr/store.h) is in layout.cpp.
#include "store/names.h"

namespace gcr::store {

bool valid_key(std::string_view key) {
  if (key.empty() || key.size() > 255) return false;
  for (char c : key) {
    bool okc = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
    if (!okc) return false;
  }
  return true;
}

bool valid_relative_name(std::string_view name) {
  if (name.empty() || name.size() > 4096 || name.front() == '/') return false;
  if (name.find('\0') != std::string_view::npos) return false;
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    std::string_view part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace gcr::store
