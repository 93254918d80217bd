// Note [Checkpoints in peers' memory] (daemon/memory_tier.h): a copy pulled into the tier stays
// within its budget by evicting the oldest copies, never one of the protected checkpoint nor the
// newest copy of a part; a copy that cannot fit so is refused with the sizes; copies older than
// the series keeps are dropped; the tier's index survives a gcrd restart.
#include <catch2/catch.hpp>

#include <algorithm>

#include "../store/test_util.h"
#include "gcr/store_transfer.h"
#include "memory_tier.h"

using namespace gcr;
using namespace gcr::gcrd;

namespace {

constexpr std::size_t kCopy = 1 << 20;  // each checkpoint's bytes, incompressible

struct Source {
  ScratchDir dir;
  std::shared_ptr<store::Store> store = store::test::open_store(dir.path() / "source");
  std::uint64_t seed = 1;
  store::CheckpointId commit() {
    auto w = store->begin_checkpoint({}, std::nullopt);
    REQUIRE(w);
    REQUIRE((*w)->add_region(0x1000, store::test::random_bytes(kCopy, seed++), 0, true));
    auto c = (*w)->commit({});
    REQUIRE(c);
    return c->id;
  }
  std::unique_ptr<store::Backend> backend() {
    return store::test::dir_backend(dir.path() / "source");
  }
};

std::vector<std::string> held(MemoryTier& tier) {  // "origin.seq", oldest first
  std::vector<std::string> out;
  for (const TierCopy& c : tier.copies()) out.push_back(c.origin + "." + std::to_string(c.seq));
  return out;
}

}  // namespace

TEST_CASE("the memory tier evicts the oldest copies, never the protected or a part's newest",
          "[memory_tier]") {
  Source src;
  ScratchDir mem;
  MemoryTierOptions o;
  o.root = mem.path() / "tier";
  o.budget = kCopy * 5 / 2 + (256 << 10);  // two copies and some
  o.reserve_percent = 0;
  auto tier = MemoryTier::open(o);
  REQUIRE(tier);
  auto from = src.backend();
  auto keep = [&](const std::string& origin, std::uint64_t seq, std::uint64_t protect,
                  std::uint64_t oldest = 0) {
    return (*tier)->keep(*from, {{src.commit(), "job", origin, seq}, protect, oldest});
  };

  REQUIRE(keep("a", 1, 0));
  REQUIRE(keep("a", 2, 1));
  CHECK(held(**tier) == std::vector<std::string>{"a.1", "a.2"});
  // A third does not fit: a.1 goes (not protected: 1 is no longer the newest complete).
  auto third = keep("a", 3, 2);
  REQUIRE(third);
  REQUIRE(third->evicted.size() == 1);
  CHECK(third->evicted[0].seq == 1);
  CHECK(held(**tier) == std::vector<std::string>{"a.2", "a.3"});
  CHECK((*tier)->used() <= o.budget);

  // Another part of checkpoint 3: a.2 is the protected checkpoint's, a.3 is a's newest copy.
  auto refused = keep("b", 3, 2);
  REQUIRE(!refused);
  CHECK(refused.error().code == Errc::no_space);
  CHECK(refused.error().message.find("--peer-memory") != std::string::npos);
  CHECK(held(**tier) == std::vector<std::string>{"a.2", "a.3"});

  // Once checkpoint 3 is the complete one, a.2 may go.
  REQUIRE(keep("a", 4, 3));
  CHECK(held(**tier) == std::vector<std::string>{"a.3", "a.4"});

  // Beyond what the series keeps (oldest 5): dropped, but for the protected one (4).
  REQUIRE(keep("a", 5, 4, 5));
  CHECK(held(**tier) == std::vector<std::string>{"a.4", "a.5"});
  CHECK((*tier)->used() <= o.budget);

  // A gcrd started again finds its copies, readable.
  tier->reset();
  auto again = MemoryTier::open(o);
  REQUIRE(again);
  CHECK(held(**again) == std::vector<std::string>{"a.4", "a.5"});
  auto local = store::test::dir_backend(o.root / "store");
  for (const TierCopy& c : (*again)->copies()) CHECK(*store::has_checkpoint(*local, c.id));
}

TEST_CASE("a copy that would leave the host too little memory is refused", "[memory_tier]") {
  Source src;
  ScratchDir mem;
  MemoryTierOptions o;
  o.root = mem.path() / "tier";
  o.budget = 64ull << 30;
  o.reserve_percent = 100;  // all of the host's memory reserved for its own work
  auto tier = MemoryTier::open(o);
  REQUIRE(tier);
  auto from = src.backend();
  auto r = (*tier)->keep(*from, {{src.commit(), "job", "a", 1}, 0, 0});
  REQUIRE(!r);
  CHECK(r.error().code == Errc::no_space);
  CHECK(r.error().message.find("own work") != std::string::npos);
  CHECK((*tier)->copies().empty());
}
