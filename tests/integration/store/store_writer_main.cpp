// store_writer: the process the store's integration tests kill. Writes one checkpoint of
// content_for(seed) into a store and prints its id, or runs gc; exits 0, or 10 + the Errc of a
// failure (message on stderr). GCR_FAULT makes it _exit(86) at a named step (store/fault.h).
//
//   store_writer write <store> <seed> <size_kib> <scratch-dir> [parent-id|-] [tag]
//   store_writer gc <store>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "store_content.h"

using namespace gcr;
using namespace gcr::store;

namespace {

int fail(const Error& e) {
  std::fprintf(stderr, "store_writer: %s (%s)\n", e.message.c_str(), errc_name(e.code));
  return 10 + static_cast<int>(e.code);
}

int write(int argc, char** argv) {
  if (argc < 6) return 2;
  std::filesystem::path root = argv[2];
  std::uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  auto size_kib = static_cast<std::uint32_t>(std::strtoul(argv[4], nullptr, 10));
  std::filesystem::path scratch = argv[5];
  std::optional<CheckpointId> parent;
  if (argc > 6 && std::string(argv[6]) != "-") parent = Id128::from_hex(argv[6]);
  std::optional<std::string> tag;
  if (argc > 7) tag = argv[7];

  StoreOptions opts;
  opts.root = root;
  opts.chunk_bytes = itest::kBlock;
  opts.worker_threads = 2;
  auto store = Store::open(opts, true);
  if (!store) return fail(store.error());
  itest::Content content = itest::content_for(seed, size_kib);
  std::filesystem::create_directories(scratch);
  for (const auto& [name, bytes] : content.files) {
    std::ofstream(scratch / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  auto w = (*store)->begin_checkpoint(
      {{"seed", std::to_string(seed)}, {"size_kib", std::to_string(size_kib)}, {"kind", "test"}},
      parent);
  if (!w) return fail(w.error());
  for (const auto& [address, bytes] : content.regions) {
    if (auto s = (*w)->add_region(address, bytes, 0, true); !s) return fail(s.error());
  }
  for (const auto& [name, bytes] : content.files) {
    if (auto s = (*w)->add_file(name, 0600, scratch / name); !s) return fail(s.error());
  }
  for (const auto& [name, bytes] : content.blobs) {
    if (auto s = (*w)->add_blob(name, bytes); !s) return fail(s.error());
  }
  auto c = (*w)->commit(tag);
  if (!c) return fail(c.error());
  std::printf("%s\n", c->id.hex().c_str());
  return 0;
}

int gc(int argc, char** argv) {
  if (argc < 3) return 2;
  auto store = Store::open({.root = argv[2]}, false);
  if (!store) return fail(store.error());
  auto r = (*store)->gc();
  if (!r) return fail(r.error());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "write") return write(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "gc") return gc(argc, argv);
  std::fprintf(stderr,
               "usage: store_writer write <store> <seed> <size_kib> <scratch> [parent|-] [tag]\n"
               "       store_writer gc <store>\n");
  return 2;
}
