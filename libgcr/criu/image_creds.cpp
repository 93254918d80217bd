// gcr/criu_creds.h: Note [Who a peer may run].
#include "gcr/criu_creds.h"

#include <charconv>
#include <fstream>
#include <iterator>

#include "criu/protobuf_reader.h"

namespace gcr::criu {
namespace {

constexpr std::uint32_t kCoreMagic = 0x55053847;  // CORE_MAGIC
constexpr std::uint64_t kMaxCoreImage = 16u << 20;

Error bad(const std::string& image, const std::string& what) {
  return Error{Errc::corrupt_image, "CRIU image " + image + ": " + what};
}

// A repeated uint32 field, packed or not: any nonzero value sets `any`.
void note_nonzero(ProtoBytes packed, bool& any) {
  while (!packed.empty())
    if (auto v = packed.varint(); !v || *v != 0) any = true;
}

Result<ThreadCreds> parse_core(std::span<const std::byte> image, const std::string& name) {
  ProtoBytes in(image);
  auto m1 = in.u32(), m2 = in.u32(), size = in.u32();
  if (!m1 || !m2 || *m1 != kCommonMagic || *m2 != kCoreMagic) return bad(name, "not a core image");
  if (!size) return bad(name, "no entry");
  auto core = in.take(*size);
  if (!core) return bad(name, "its entry is cut off");
  ThreadCreds c;
  c.image = name;
  bool found = false, ok = true;
  auto creds_field = [&](std::uint64_t n, std::uint64_t v) {
    if (n >= 1 && n <= 8) (n % 2 ? c.uids : c.gids)[(n - 1) / 2] = static_cast<std::uint32_t>(v);
    if ((n >= 9 && n <= 11) || n == 19) c.capabilities |= v != 0;
    if (n == 14) c.groups.push_back(static_cast<std::uint32_t>(v));
  };
  auto creds_bytes = [&](std::uint64_t n, ProtoBytes b) {  // packed repeated fields
    if ((n >= 9 && n <= 11) || n == 19) note_nonzero(b, c.capabilities);
    if (n != 14) return;
    while (!b.empty()) {
      auto v = b.varint();
      if (!v) break;
      c.groups.push_back(static_cast<std::uint32_t>(*v));
    }
  };
  auto thread_core = [&](std::uint64_t n, ProtoBytes b) {
    if (n != 10) return;
    found = true;
    ok = ok && for_each_field(b, creds_field, creds_bytes);
  };
  auto core_entry = [&](std::uint64_t n, ProtoBytes b) {
    if (n == 5)
      ok = ok && for_each_field(
                     b, [](std::uint64_t, std::uint64_t) {}, thread_core);
  };
  if (!for_each_field(
          *core, [](std::uint64_t, std::uint64_t) {}, core_entry) ||
      !ok)
    return bad(name, "a malformed message");
  if (!found) return bad(name, "no credentials (thread_core.creds)");
  return c;
}

}  // namespace

Result<std::vector<ThreadCreds>> read_image_creds(const std::filesystem::path& dir) {
  std::vector<ThreadCreds> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_regular_file() || !name.starts_with("core-") || !name.ends_with(".img")) continue;
    const std::string rel = std::filesystem::relative(it->path(), dir).string();
    if (it->file_size() > kMaxCoreImage) return bad(rel, "larger than 16 MiB");
    std::ifstream f(it->path(), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    GCR_TRY_ASSIGN(ThreadCreds c, parse_core(std::as_bytes(std::span(bytes)), rel));
    out.push_back(std::move(c));
  }
  if (ec) return errno_error("reading CRIU's images in " + dir.string(), ec.value());
  if (out.empty()) return Error{Errc::corrupt_image, "no core image in " + dir.string()};
  return out;
}

Result<std::set<uid_t>> parse_uid_list(const std::string& text) {
  std::set<uid_t> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const std::size_t dash = item.find('-');
    std::uint32_t lo = 0, hi = 0;
    auto number = [](const std::string& s, std::uint32_t& v) {
      auto [p, e] = std::from_chars(s.data(), s.data() + s.size(), v);
      return !s.empty() && e == std::errc() && p == s.data() + s.size();
    };
    const bool good = dash == std::string::npos
                          ? number(item, lo) && (hi = lo, true)
                          : number(item.substr(0, dash), lo) && number(item.substr(dash + 1), hi);
    if (!good || hi < lo || hi - lo > 1'000'000)
      return Error{Errc::invalid_argument,
                   "'" + item + "' in '" + text + "' is not a uid or a range LOW-HIGH of uids"};
    for (std::uint64_t u = lo; u <= hi; ++u) out.insert(static_cast<uid_t>(u));
    at = comma + 1;
  }
  return out;
}

Status check_peer_may_run(const std::vector<ThreadCreds>& threads, const std::set<uid_t>& allowed) {
  const bool root_allowed = allowed.contains(0);
  for (const ThreadCreds& c : threads) {
    for (std::uint32_t u : c.uids)
      if (!allowed.contains(u))
        return Error{Errc::permission_denied,
                     "the checkpoint's process would run as uid " + std::to_string(u) + " (" +
                         c.image +
                         "), which this gcrd's operator did not allow for other hosts "
                         "(gcrd --allow-uids)"};
    if (root_allowed) continue;
    if (c.capabilities)
      return Error{Errc::permission_denied,
                   "the checkpoint's process would hold capabilities (" + c.image +
                       "); this gcrd restores such a process for other hosts only where uid 0 is "
                       "allowed (gcrd --allow-uids 0)"};
    bool gid0 = false;
    for (std::uint32_t g : c.gids) gid0 |= g == 0;
    for (std::uint32_t g : c.groups) gid0 |= g == 0;
    if (gid0)
      return Error{Errc::permission_denied,
                   "the checkpoint's process would be in group 0 (" + c.image +
                       "); this gcrd restores such a process for other hosts only where uid 0 is "
                       "allowed (gcrd --allow-uids 0)"};
  }
  return ok();
}

}  // namespace gcr::criu
