// peer_keys.h: Note [Per-peer keys].
#include "peer_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "gcr/criu_creds.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd {
namespace {

constexpr std::size_t kMinSecret = 32;
constexpr std::size_t kMaxName = 64;
constexpr std::size_t kMaxFile = 1u << 20;

bool valid_name(const std::string& n) {
  return !n.empty() && n.size() <= kMaxName && std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

Status check_secret(const std::string& secret, const std::string& where) {
  if (secret.size() >= kMinSecret) return ok();
  return Error{Errc::invalid_argument,
               where +
                   " holds a key of fewer than 32 characters; make one with: head -c 32 "
                   "/dev/urandom | xxd -p -c 64"};
}

// "peer NAME SECRET [allow-uids=LIST]"
Result<NetKey> parse_peer_line(const std::string& line, const std::string& where) {
  std::istringstream in(line);
  std::string word, name, secret, extra;
  in >> word >> name >> secret;
  NetKey key{name, secret, std::nullopt};
  if (!valid_name(name))
    return Error{Errc::invalid_argument,
                 where + ": a peer's name is 1 to 64 of A-Z a-z 0-9 . _ - (got '" + name + "')"};
  GCR_TRY(check_secret(secret, where));
  while (in >> extra) {
    if (extra.rfind("allow-uids=", 0) != 0 || key.allow_uids)
      return Error{Errc::invalid_argument,
                   where + ": unknown '" + extra + "' (a peer line takes allow-uids=LIST only)"};
    const std::string list = extra.substr(11);
    if (list == "none") {
      key.allow_uids.emplace();
      continue;
    }
    GCR_TRY_ASSIGN(auto uids, criu::parse_uid_list(list).context(where + ": allow-uids"));
    key.allow_uids = std::move(uids);
  }
  return key;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  std::size_t i = s.find_first_not_of(" \t");
  return i == std::string::npos ? std::string() : s.substr(i);
}

Status add_key(PeerKeys& keys, NetKey key, const std::string& where) {
  const bool bare = key.name.empty();
  if (!keys.keys.empty() && (bare || keys.keys.front().name.empty()))
    return Error{Errc::invalid_argument,
                 where + ": a bare token and peer lines do not mix (one or the other)"};
  if (!bare && keys.find(key.name))
    return Error{Errc::invalid_argument, where + ": peer '" + key.name + "' is named twice"};
  keys.keys.push_back(std::move(key));
  return ok();
}

Result<std::string> read_private(const std::filesystem::path& path, bool for_server) {
  // What is checked is what is read: the open file, not the path a second time.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) return errno_error("token file " + path.string());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("token file " + path.string());
  if (!S_ISREG(st.st_mode))
    return Error{Errc::invalid_argument, "token file " + path.string() + " is not a regular file"};
  if (for_server && ((st.st_mode & 077) != 0 || st.st_uid != ::geteuid()))
    return Error{Errc::permission_denied,
                 "token file " + path.string() +
                     " must belong to gcrd's user and be readable by it alone (chmod 600): whoever "
                     "reads it may restore processes here"};
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::pread(fd.get(), buf, sizeof buf, static_cast<off_t>(text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("reading token file " + path.string());
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxFile)
      return Error{Errc::invalid_argument, "token file " + path.string() + " is over 1 MiB"};
  }
  return text;
}

}  // namespace

const NetKey* PeerKeys::find(std::string_view name) const {
  for (const NetKey& k : keys)
    if (k.name == name) return &k;
  return nullptr;
}

Result<PeerKeys> parse_peer_keys(std::string_view text, const std::string& what) {
  PeerKeys keys;
  std::istringstream in{std::string(text)};
  int number = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++number;
    const std::string line = trimmed(raw);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = what + " line " + std::to_string(number);
    if (line.rfind("peer ", 0) == 0 || line.rfind("peer\t", 0) == 0) {
      GCR_TRY_ASSIGN(NetKey key, parse_peer_line(line, where));
      GCR_TRY(add_key(keys, std::move(key), where));
      continue;
    }
    if (line.find_first_of(" \t") != std::string::npos)
      return Error{Errc::invalid_argument,
                   where + ": neither a bare token nor 'peer NAME SECRET [allow-uids=LIST]'"};
    GCR_TRY(check_secret(line, what));
    GCR_TRY(add_key(keys, NetKey{"", line, std::nullopt}, where));
  }
  if (keys.keys.empty())
    return Error{Errc::invalid_argument, what +
                                             " holds no key; make one with: head -c 32 "
                                             "/dev/urandom | xxd -p -c 64 > FILE"};
  return keys;
}

Result<PeerKeys> read_peer_keys(const std::filesystem::path& path) {
  GCR_TRY_ASSIGN(std::string text, read_private(path, true));
  return parse_peer_keys(text, "token file " + path.string());
}

Result<NetKey> read_client_key(const std::filesystem::path& path) {
  GCR_TRY_ASSIGN(std::string text, read_private(path, false));
  GCR_TRY_ASSIGN(PeerKeys keys, parse_peer_keys(text, "token file " + path.string()));
  if (keys.keys.size() != 1)
    return Error{Errc::invalid_argument,
                 "token file " + path.string() + " holds " + std::to_string(keys.keys.size()) +
                     " peer keys: a server's file; give gcr a file with this host's own key "
                     "(one 'peer NAME SECRET' line)"};
  NetKey key = std::move(keys.keys.front());
  key.allow_uids.reset();  // the server decides that
  return key;
}

}  // namespace gcr::gcrd
