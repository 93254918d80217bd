// mlp_train (tests/workloads) under gcr computes bit for bit what it computes without it, over
// stream counts and footprints that give it both slab (small) and large allocations.
#include <thread>

#include "common.h"

namespace ipt {
namespace {

struct MlpResult {
  std::string status, final_loss, checksum;
};

MlpResult run_mlp(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<std::string> argv = {mlp_train_path(), "--quiet"};
  argv.insert(argv.end(), args.begin(), args.end());
  Child c = Child::program(argv, env);
  MlpResult r;
  for (const std::string& l : c.read_all(120000)) {
    if (l.rfind("final_loss ", 0) == 0) r.final_loss = l.substr(11);
    if (l.rfind("checksum ", 0) == 0) r.checksum = l.substr(9);
  }
  r.status = describe_status(c.wait());
  return r;
}

TEST_CASE("mlp_train gives the same checksum under gcr as without it", "[mlp]") {
  const std::vector<std::vector<std::string>> configs = {
      {"--steps", "20", "--streams", "1"},
      {"--steps", "20", "--streams", "3", "--footprint", "24M"},
      {"--steps", "12", "--streams", "4", "--footprint", "5M", "--hidden", "600", "--batch", "32"},
  };
  for (const auto& args : configs) {
    std::string label;
    for (auto& a : args) label += a + " ";
    INFO("mlp_train " << label);
    MlpResult plain = run_mlp(args, plain_env());
    MlpResult gcr = run_mlp(args, gcr_env());
    REQUIRE(plain.status == "exit 0");
    REQUIRE(gcr.status == "exit 0");
    REQUIRE_FALSE(plain.checksum.empty());
    CHECK(gcr.checksum == plain.checksum);
    CHECK(gcr.final_loss == plain.final_loss);
  }
}

TEST_CASE("mlp_train under gcr holds its small tensors in slabs and its ballast in a large region",
          "[mlp]") {
  std::vector<std::string> argv = {mlp_train_path(),  "--quiet", "--steps",     "400",
                                   "--streams",       "3",       "--footprint", "24M",
                                   "--step-delay-ms", "5"};
  Child c = Child::program(argv, gcr_env());
  REQUIRE(c.read_until("step 0", 60000));
  control::Client client = connect(c.pid());
  auto regions = client.regions();
  auto status = client.status();
  REQUIRE(regions);
  REQUIRE(status);
  REQUIRE(client.close());
  bool slab = false, large = false;
  for (const auto& r : *regions) {
    if (r.size == (2u << 20)) slab = true;
    if (r.size >= (24u << 20)) large = true;
  }
  CHECK(slab);
  CHECK(large);
  CHECK(status->requested_bytes >= (24u << 20));
  CHECK(status->region_bytes >= status->requested_bytes);
  std::printf(
      "mlp_train --footprint 24M under gcr: %llu regions, %llu region bytes for %llu requested\n",
      static_cast<unsigned long long>(status->regions),
      static_cast<unsigned long long>(status->region_bytes),
      static_cast<unsigned long long>(status->requested_bytes));
  c.kill();
}

}  // namespace
}  // namespace ipt
