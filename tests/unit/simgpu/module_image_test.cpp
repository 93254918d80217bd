// Tests of parse_module_image (tools/simgpu/module_image.h) against images nvcc wrote at build
// time from kernels/module_image_kernels.cu (paths come in as MODULE_IMAGE_* definitions), against
// hand-written PTX, and against truncated, bit-flipped and hand-corrupted images. Does not test
// loading modules or launching kernels (simgpu's own tests do).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "module_image.h"

using gcr::Errc;
using gcr::simgpu::GlobalInfo;
using gcr::simgpu::KernelInfo;
using gcr::simgpu::KernelParam;
using gcr::simgpu::ModuleImage;
using gcr::simgpu::parse_module_image;

namespace Catch {
template <>
struct StringMaker<KernelParam> {
  static std::string convert(const KernelParam& p) {
    return "{#" + std::to_string(p.ordinal) + " @" + std::to_string(p.offset) + " " +
           std::to_string(p.size) + "B}";
  }
};
}  // namespace Catch

namespace {

using Bytes = std::vector<std::byte>;

Bytes read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

// PTX as cuModuleLoadData gets it: NUL-terminated text.
Bytes read_ptx(const char* path) {
  Bytes bytes = read_file(path);
  bytes.push_back(std::byte{0});
  return bytes;
}

Bytes text_bytes(const std::string& text) {
  Bytes bytes(text.size() + 1);
  std::memcpy(bytes.data(), text.c_str(), text.size() + 1);
  return bytes;
}

ModuleImage parse_ok(const Bytes& image, int device_sm = 90) {
  auto result = parse_module_image(image.data(), image.size(), device_sm);
  INFO((result ? std::string("ok") : result.error().message));
  REQUIRE(result.has_value());
  return *result;
}

std::string parse_error(const Bytes& image, int device_sm = 90) {
  auto result = parse_module_image(image.data(), image.size(), device_sm);
  REQUIRE_FALSE(result.has_value());
  return result.error().message;
}

const KernelInfo& kernel(const ModuleImage& m, const std::string& name) {
  for (const auto& k : m.kernels) {
    if (k.name == name) return k;
  }
  FAIL("no kernel " << name);
  throw;
}

const GlobalInfo& global(const ModuleImage& m, const std::string& name) {
  for (const auto& g : m.globals) {
    if (g.name == name) return g;
  }
  FAIL("no variable " << name);
  throw;
}

bool has_kernel(const ModuleImage& m, const std::string& name) {
  for (const auto& k : m.kernels) {
    if (k.name == name) return true;
  }
  return false;
}

// `init`, or `size` zero bytes when it is empty.
Bytes contents(const GlobalInfo& g) {
  return g.init.empty() ? Bytes(g.size, std::byte{0}) : g.init;
}

template <typename T>
T read_at(const Bytes& bytes, size_t offset) {
  T v;
  REQUIRE(offset + sizeof(T) <= bytes.size());
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

template <typename T>
void write_at(Bytes& bytes, size_t offset, T v) {
  REQUIRE(offset + sizeof(T) <= bytes.size());
  std::memcpy(bytes.data() + offset, &v, sizeof(T));
}

std::vector<KernelParam> params(std::initializer_list<KernelParam> list) {
  return list;
}

// A fatbin entry's kind, arch and flags, read the way the docs describe them.
struct EntrySummary {
  uint16_t kind;
  uint32_t arch;
  uint64_t flags;
};
std::vector<EntrySummary> fatbin_entries(const Bytes& fatbin) {
  std::vector<EntrySummary> out;
  uint64_t end = read_at<uint16_t>(fatbin, 6) + read_at<uint64_t>(fatbin, 8);
  uint64_t off = read_at<uint16_t>(fatbin, 6);
  while (off < end) {
    out.push_back({read_at<uint16_t>(fatbin, off), read_at<uint32_t>(fatbin, off + 0x1c),
                   read_at<uint64_t>(fatbin, off + 0x28)});
    off += read_at<uint32_t>(fatbin, off + 4) + read_at<uint64_t>(fatbin, off + 8);
  }
  return out;
}

constexpr uint64_t kLz4 = 0x2000;
constexpr uint64_t kZstd = 0x8000;

// The C++ kernels' mangled names.
const std::string kAxpy = "_Z4axpyPfPKffi";
const std::string kTakeStruct = "_Z11take_structi8Params24Pi";
const std::string kCharDouble = "_Z11char_doublecdPf";
const std::string kVec3 = "_Z8vec3_a16c7Vec3A16sPf";
const std::string kBigParam = "_Z9big_paramc7Big5000Pi";
const std::string kNoParams = "_Z9no_paramsv";
const std::string kPlainC = "plain_c";

// Checks everything module_image_kernels.cu declares, whatever image it was read from.
void check_test_kernels(const ModuleImage& m) {
  CHECK(m.kernels.size() == 7);
  CHECK(kernel(m, kAxpy).params == params({{0, 0, 8}, {1, 8, 8}, {2, 16, 4}, {3, 20, 4}}));
  CHECK(kernel(m, kAxpy).param_bytes == 24);
  CHECK(kernel(m, kTakeStruct).params == params({{0, 0, 4}, {1, 8, 24}, {2, 32, 8}}));
  CHECK(kernel(m, kTakeStruct).param_bytes == 40);
  CHECK(kernel(m, kCharDouble).params == params({{0, 0, 1}, {1, 8, 8}, {2, 16, 8}}));
  CHECK(kernel(m, kVec3).params == params({{0, 0, 1}, {1, 16, 16}, {2, 32, 2}, {3, 40, 8}}));
  CHECK(kernel(m, kBigParam).params == params({{0, 0, 1}, {1, 1, 5000}, {2, 5008, 8}}));
  CHECK(kernel(m, kBigParam).param_bytes == 5016);
  CHECK(kernel(m, kNoParams).params.empty());
  CHECK(kernel(m, kNoParams).param_bytes == 0);
  CHECK(kernel(m, kPlainC).params == params({{0, 0, 8}}));

  const GlobalInfo& init = global(m, "g_init");
  CHECK(init.size == 16);
  REQUIRE(init.init.size() == 16);
  for (int i = 0; i < 4; ++i) CHECK(read_at<int32_t>(init.init, 4 * i) == i + 1);
  const GlobalInfo& zero = global(m, "g_zero");
  CHECK(zero.size == 32);
  CHECK(contents(zero) == Bytes(32, std::byte{0}));
  const GlobalInfo& scalar = global(m, "g_scalar");
  CHECK(scalar.size == 8);
  CHECK(read_at<double>(contents(scalar), 0) == 3.25);
  const GlobalInfo& table = global(m, "c_table");
  CHECK(table.size == 12);
  CHECK(read_at<float>(contents(table), 8) == 3.0f);
}

}  // namespace

// --- what nvcc writes ----------------------------------------------------------------------------

TEST_CASE("nvcc's default fatbin holds an uncompressed sm_90 cubin and a zstd-compressed PTX") {
  auto entries = fatbin_entries(read_file(MODULE_IMAGE_FATBIN));
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].kind == 2);
  CHECK(entries[0].arch == 90);
  CHECK((entries[0].flags & (kLz4 | kZstd)) == 0);
  CHECK(entries[1].kind == 1);
  CHECK(entries[1].arch == 90);
  CHECK((entries[1].flags & (kLz4 | kZstd)) == kZstd);
}

TEST_CASE("the default fatbin is read from its sm_90 cubin, with every kernel and variable") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_FATBIN));
  CHECK(m.sm == 90);
  CHECK_FALSE(m.from_ptx);
  check_test_kernels(m);
}

TEST_CASE("pointer parameters, const or not, are 8 bytes at 8-aligned offsets") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_CUBIN));
  const KernelInfo& k = kernel(m, kAxpy);
  REQUIRE(k.params.size() == 4);
  CHECK(k.params[0] == KernelParam{0, 0, 8});  // float* y
  CHECK(k.params[1] == KernelParam{1, 8, 8});  // const float* x
}

TEST_CASE("a struct parameter of 24 bytes is one 24-byte param at an 8-aligned offset") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_CUBIN));
  const KernelInfo& k = kernel(m, kTakeStruct);
  REQUIRE(k.params.size() == 3);
  CHECK(k.params[1].size == 24);
  CHECK(k.params[1].offset == 8);  // after a 4-byte int, padded to 8
}

TEST_CASE("a char followed by a double is padded: the double starts at offset 8") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_CUBIN));
  CHECK(kernel(m, kCharDouble).params == params({{0, 0, 1}, {1, 8, 8}, {2, 16, 8}}));
  CHECK(kernel(m, kCharDouble).param_bytes == 24);
}

TEST_CASE("a 16-byte-aligned struct parameter starts at a 16-aligned offset") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_CUBIN));
  CHECK(kernel(m, kVec3).params[1] == KernelParam{1, 16, 16});
}

TEST_CASE("parameters past 4 KiB are read from KPARAM_INFO_V2 records") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_CUBIN));
  CHECK(kernel(m, kBigParam).params == params({{0, 0, 1}, {1, 1, 5000}, {2, 5008, 8}}));
}

TEST_CASE("a kernel with no parameters has an empty list and zero parameter bytes") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_CUBIN));
  CHECK(kernel(m, kNoParams).params.empty());
  CHECK(kernel(m, kNoParams).param_bytes == 0);
}

TEST_CASE("C++ kernels keep their mangled names and an extern \"C\" kernel its plain one") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_CUBIN));
  CHECK(has_kernel(m, kAxpy));
  CHECK(has_kernel(m, kPlainC));
  CHECK_FALSE(has_kernel(m, "axpy"));
}

TEST_CASE("a __device__ variable with an initializer carries its bytes; one without is zero") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_CUBIN));
  CHECK(global(m, "g_init").init.size() == 16);
  CHECK(global(m, "g_zero").init.empty());
  CHECK(global(m, "g_zero").size == 32);
}

TEST_CASE("__constant__ variables are listed with the __device__ ones") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_CUBIN));
  CHECK(global(m, "c_table").init.size() == 12);
}

TEST_CASE("a bare cubin reports its sm from e_flags") {
  ModuleImage m = parse_ok(read_file(MODULE_IMAGE_CUBIN));
  CHECK(m.sm == 90);
  CHECK_FALSE(m.from_ptx);
}

TEST_CASE("a relocatable (-rdc) cubin, whose variables are STT_CUDA_OBJECT, reads the same") {
  check_test_kernels(parse_ok(read_file(MODULE_IMAGE_CUBIN_RDC)));
}

TEST_CASE("PTX text gives the same kernels, layouts and variables as the cubin") {
  ModuleImage m = parse_ok(read_ptx(MODULE_IMAGE_PTX));
  CHECK(m.from_ptx);
  CHECK(m.sm == 0);
  check_test_kernels(m);
}

TEST_CASE("every fatbin variant describes the same module") {
  struct Variant {
    const char* path;
    bool from_ptx;
  };
  for (auto v :
       {Variant{MODULE_IMAGE_FATBIN_UNCOMPRESSED, false},
        Variant{MODULE_IMAGE_FATBIN_ZSTD_ALL, false}, Variant{MODULE_IMAGE_FATBIN_LZ4, false},
        Variant{MODULE_IMAGE_FATBIN_PTX_ONLY, true}, Variant{MODULE_IMAGE_FATBIN_MULTI, false}}) {
    INFO(v.path);
    ModuleImage m = parse_ok(read_file(v.path));
    CHECK(m.from_ptx == v.from_ptx);
    check_test_kernels(m);
  }
}

// --- compression
// -----------------------------------------------------------------------------------

TEST_CASE("--no-compress leaves every entry uncompressed") {
  for (const auto& e : fatbin_entries(read_file(MODULE_IMAGE_FATBIN_UNCOMPRESSED))) {
    CHECK((e.flags & (kLz4 | kZstd)) == 0);
  }
}

TEST_CASE("-Xfatbin=-compress-all compresses the cubin with zstd too, and it is decompressed") {
  Bytes fatbin = read_file(MODULE_IMAGE_FATBIN_ZSTD_ALL);
  auto entries = fatbin_entries(fatbin);
  REQUIRE(entries.size() == 2);
  CHECK((entries[0].flags & kZstd) != 0);
  CHECK(parse_ok(fatbin).sm == 90);
}

TEST_CASE("--compress-mode=speed compresses the PTX with LZ4, and it is decompressed") {
  Bytes fatbin = read_file(MODULE_IMAGE_FATBIN_LZ4);
  auto entries = fatbin_entries(fatbin);
  REQUIRE(entries.size() == 2);
  CHECK((entries[1].flags & kLz4) != 0);
  // Read the PTX: relabel it compute_80 and ask for sm_80, which the sm_90 cubin does not suit.
  Bytes ptx_fatbin = fatbin;
  uint64_t ptx_entry = read_at<uint16_t>(fatbin, 6) + read_at<uint32_t>(fatbin, 0x10 + 4) +
                       read_at<uint64_t>(fatbin, 0x10 + 8);
  write_at<uint32_t>(ptx_fatbin, ptx_entry + 0x1c, 80);
  ModuleImage m = parse_ok(ptx_fatbin, 80);
  CHECK(m.from_ptx);
  check_test_kernels(m);
}

TEST_CASE("the zstd PTX of the default fatbin is read when no cubin suits the device") {
  Bytes fatbin = read_file(MODULE_IMAGE_FATBIN);
  write_at<uint32_t>(fatbin, 0x10 + 0x1c, 100);  // the cubin now claims sm_100
  ModuleImage m = parse_ok(fatbin, 90);
  CHECK(m.from_ptx);
  check_test_kernels(m);
}

// --- choosing an entry
// -------------------------------------------------------------------------------

TEST_CASE("device_sm picks the exact cubin, else the highest lower one, else the PTX") {
  Bytes multi = read_file(MODULE_IMAGE_FATBIN_MULTI);  // sm_80, sm_90 cubins; compute_75 PTX
  CHECK(parse_ok(multi, 90).sm == 90);
  CHECK(parse_ok(multi, 100).sm == 90);
  CHECK(parse_ok(multi, 89).sm == 80);
  CHECK(parse_ok(multi, 80).sm == 80);
  ModuleImage ptx = parse_ok(multi, 75);
  CHECK(ptx.from_ptx);
  CHECK(ptx.sm == 0);
}

TEST_CASE("a fatbin with nothing for the device is unsupported, listing what it holds") {
  auto result = parse_module_image(read_file(MODULE_IMAGE_FATBIN_MULTI).data(), SIZE_MAX, 70);
  REQUIRE_FALSE(result);
  CHECK(result.error().code == Errc::unsupported);
  CHECK_THAT(result.error().message,
             Catch::Contains("sm_80 cubin") && Catch::Contains("compute_75 PTX"));
}

// --- sizes and wrappers
// ------------------------------------------------------------------------------

TEST_CASE("without a limit, sizes come from the images' own headers") {
  for (const char* path : {MODULE_IMAGE_FATBIN, MODULE_IMAGE_CUBIN}) {
    Bytes image = read_file(path);
    auto m = parse_module_image(image.data(), SIZE_MAX, 90);
    REQUIRE(m);
    CHECK(m->kernels.size() == 7);
  }
  Bytes ptx = read_ptx(MODULE_IMAGE_PTX);
  auto m = parse_module_image(ptx.data(), SIZE_MAX, 90);
  REQUIRE(m);
  CHECK(m->kernels.size() == 7);
}

// A __fatBinC_Wrapper_t as the CUDA runtime registers it.
struct Wrapper {
  int magic;
  int version;
  const void* data;
  void* filename_or_fatbins;
};

TEST_CASE("a fat binary wrapper is followed to its fatbin") {
  Bytes fatbin = read_file(MODULE_IMAGE_FATBIN);
  Wrapper w{0x466243B1, 1, fatbin.data(), nullptr};
  auto m = parse_module_image(&w, SIZE_MAX, 90);
  REQUIRE(m);
  check_test_kernels(*m);

  w.version = 2;  // -rdc's FATBINC_LINK_VERSION
  CHECK(parse_module_image(&w, SIZE_MAX, 90).has_value());
}

TEST_CASE("with a limit, a wrapper's data must point inside it") {
  Bytes fatbin = read_file(MODULE_IMAGE_FATBIN);
  // A wrapper followed by its fatbin, in one buffer.
  Bytes both(64 + fatbin.size());
  std::memcpy(both.data() + 64, fatbin.data(), fatbin.size());
  Wrapper w{0x466243B1, 1, both.data() + 64, nullptr};
  std::memcpy(both.data(), &w, sizeof w);
  CHECK(parse_ok(both).kernels.size() == 7);

  w.data = fatbin.data();  // elsewhere
  std::memcpy(both.data(), &w, sizeof w);
  CHECK_THAT(parse_error(both), Catch::Contains("outside"));

  w.data = both.data() + 8;  // inside, but not a fatbin
  std::memcpy(both.data(), &w, sizeof w);
  CHECK_THAT(parse_error(both), Catch::Contains("does not point at a fatbin"));
}

// --- PTX details
// ---------------------------------------------------------------------------------------

TEST_CASE("PTX parameters are laid out in order at their alignment") {
  Bytes ptx = text_bytes(R"(
    // a comment with .entry in it
    .version 9.0
    .target sm_90
    .address_size 64
    /* block comment .global .u32 nope; */
    .visible .entry k(
      .param .u8 k_param_0,
      .param .align 4 .b8 k_param_1[12],
      .param .u64 .ptr .global .align 16 k_param_2,
      .param .u16 k_param_3,
      .param .v2 .f32 k_param_4,
      .param .align 8 .b8 k_param_5[2][3]
    )
    .maxntid 128, 1, 1
    {
      .reg .b32 %r<2>;
      ret;
    }
    .entry empty()
    {
      ret;
    }
  )");
  ModuleImage m = parse_ok(ptx);
  CHECK(kernel(m, "k").params == params({{0, 0, 1},
                                         {1, 4, 12},
                                         {2, 16, 8},  // the .align 16 is the pointee's
                                         {3, 24, 2},
                                         {4, 32, 8},
                                         {5, 40, 6}}));
  CHECK(kernel(m, "k").param_bytes == 46);
  CHECK(kernel(m, "empty").params.empty());
}

TEST_CASE("PTX variables get their sizes and decoded initializers") {
  Bytes ptx = text_bytes(R"(
    .version 9.0
    .target sm_90
    .address_size 64
    .extern .global .align 4 .b8 declared_only[4];
    .extern .shared .align 16 .b8 dynamic_smem[];
    .shared .align 4 .b8 static_smem[64];
    .global .align 4 .b8 bytes[8] = {1, 2, 0xff};
    .visible .global .align 4 .u32 words[2] = {-1, 0x10};
    .global .f32 one_f = 0f3F800000;
    .global .f64 half_d = 0d3FE0000000000000, minus_two = -2.0;
    .global .v2 .f32 vec = {1.5, 0f40000000};
    .global .align 1 .b8 open[] = {7, 8, 9};
    .global .align 8 .u64 ptr = generic(bytes);
    .global .attribute(.managed) .align 4 .u32 managed = 5;
    .const .align 4 .u32 k_const = 0b101;
    .global .b8 nothing[1024];
    .func (.param .b32 r) helper(.param .b32 a)
    {
      .local .align 4 .b8 scratch[16];
      ret;
    }
  )");
  ModuleImage m = parse_ok(ptx);
  CHECK(m.kernels.empty());
  CHECK(m.globals.size() == 11);
  CHECK(global(m, "bytes").init == Bytes{std::byte{1}, std::byte{2}, std::byte{0xff}, std::byte{0},
                                         std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0}});
  CHECK(read_at<uint32_t>(global(m, "words").init, 0) == 0xffffffffu);
  CHECK(read_at<uint32_t>(global(m, "words").init, 4) == 0x10u);
  CHECK(read_at<float>(global(m, "one_f").init, 0) == 1.0f);
  CHECK(read_at<double>(global(m, "half_d").init, 0) == 0.5);
  CHECK(read_at<double>(global(m, "minus_two").init, 0) == -2.0);
  CHECK(global(m, "vec").size == 8);
  CHECK(read_at<float>(global(m, "vec").init, 0) == 1.5f);
  CHECK(read_at<float>(global(m, "vec").init, 4) == 2.0f);
  CHECK(global(m, "open").size == 3);
  CHECK(contents(global(m, "ptr")) == Bytes(8, std::byte{0}));
  CHECK(read_at<uint32_t>(global(m, "managed").init, 0) == 5u);
  CHECK(read_at<uint32_t>(global(m, "k_const").init, 0) == 5u);
  CHECK(global(m, "nothing").size == 1024);
  CHECK(global(m, "nothing").init.empty());
}

TEST_CASE("PTX that is malformed is an error naming the line") {
  CHECK_THAT(parse_error(text_bytes(".version 9.0\n.entry k(.param .u32 a\n{ ret; }")),
             Catch::Contains("ptx line"));
  CHECK_THAT(parse_error(text_bytes(".version 9.0\n.global .u8 x[2] = {1, 2, 3};")),
             Catch::Contains("ptx line 2") && Catch::Contains("longer"));
  CHECK_THAT(parse_error(text_bytes(".version 9.0\n.entry k() {")), Catch::Contains("matching"));
  CHECK_THAT(parse_error(text_bytes("hello, world")), Catch::Contains(".version"));
  CHECK_THAT(parse_error(text_bytes("")), Catch::Contains(".version"));
}

// --- hostile input
// ---------------------------------------------------------------------------------------

TEST_CASE("a truncated fatbin or cubin is an error at every cut point, never a crash") {
  for (const char* path : {MODULE_IMAGE_FATBIN, MODULE_IMAGE_FATBIN_ZSTD_ALL,
                           MODULE_IMAGE_FATBIN_LZ4, MODULE_IMAGE_CUBIN, MODULE_IMAGE_CUBIN_RDC}) {
    Bytes image = read_file(path);
    INFO(path);
    for (size_t cut = 0; cut < image.size();
         cut += (cut < 1024 || cut + 4096 > image.size()) ? 1 : 5) {
      // A copy of exactly `cut` bytes, so that a sanitizer sees any read past it.
      Bytes prefix(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(cut));
      auto result = parse_module_image(prefix.empty() ? image.data() : prefix.data(), cut, 90);
      if (result) FAIL("cut at " << cut << " parsed");
    }
  }
}

TEST_CASE("truncated PTX never crashes") {
  Bytes ptx = read_ptx(MODULE_IMAGE_PTX);
  for (size_t cut = 1; cut < ptx.size(); cut += 7) {
    Bytes prefix(ptx.begin(), ptx.begin() + static_cast<std::ptrdiff_t>(cut));
    (void)parse_module_image(prefix.data(), prefix.size(), 90);
  }
}

TEST_CASE("random byte flips give a module or an error, never a crash") {
  std::mt19937_64 rng(12345);
  for (const char* path :
       {MODULE_IMAGE_FATBIN, MODULE_IMAGE_FATBIN_UNCOMPRESSED, MODULE_IMAGE_FATBIN_ZSTD_ALL,
        MODULE_IMAGE_FATBIN_LZ4, MODULE_IMAGE_FATBIN_MULTI, MODULE_IMAGE_CUBIN,
        MODULE_IMAGE_CUBIN_RDC, MODULE_IMAGE_PTX}) {
    const Bytes original = read_file(path);
    INFO(path);
    for (int round = 0; round < 300; ++round) {
      Bytes image = original;
      int flips = 1 + static_cast<int>(rng() % 8);
      for (int f = 0; f < flips; ++f) {
        // Bias towards the headers, where the offsets and sizes live.
        size_t span = (rng() % 2) ? std::min<size_t>(image.size(), 512) : image.size();
        image[rng() % span] ^= static_cast<std::byte>(1u << (rng() % 8));
      }
      (void)parse_module_image(image.data(), image.size(), 90);
    }
  }
}

TEST_CASE("hostile fatbin fields are rejected with the field's name and offset") {
  const Bytes fatbin = read_file(MODULE_IMAGE_FATBIN_UNCOMPRESSED);
  const size_t entry = read_at<uint16_t>(fatbin, 6);

  Bytes big = fatbin;
  write_at<uint64_t>(big, 8, ~0ull);
  CHECK_THAT(parse_error(big), Catch::Contains("fat_size"));

  Bytes header = fatbin;
  write_at<uint32_t>(header, entry + 4, 0x10);
  CHECK_THAT(parse_error(header), Catch::Contains("header_size 0x10"));

  Bytes payload = fatbin;
  write_at<uint64_t>(payload, entry + 8, 1ull << 40);
  CHECK_THAT(parse_error(payload),
             Catch::Contains("payload_size") && Catch::Contains("offset 0x10"));

  Bytes both = fatbin;
  write_at<uint64_t>(both, entry + 0x28, read_at<uint64_t>(fatbin, entry + 0x28) | kLz4 | kZstd);
  CHECK_THAT(parse_error(both), Catch::Contains("both"));

  Bytes huge = read_file(MODULE_IMAGE_FATBIN_ZSTD_ALL);
  write_at<uint64_t>(huge, entry + 0x38, 1ull << 40);
  CHECK_THAT(parse_error(huge), Catch::Contains("decompressed_size"));

  Bytes wrong = read_file(MODULE_IMAGE_FATBIN_ZSTD_ALL);
  write_at<uint64_t>(wrong, entry + 0x38, read_at<uint64_t>(wrong, entry + 0x38) - 1);
  CHECK_THAT(parse_error(wrong), Catch::Contains("zstd"));

  Bytes version = fatbin;
  write_at<uint16_t>(version, 4, 2);
  auto result = parse_module_image(version.data(), version.size(), 90);
  REQUIRE_FALSE(result);
  CHECK(result.error().code == Errc::unsupported);
}

TEST_CASE("hostile cubin fields are rejected with the field's name and offset") {
  const Bytes cubin = read_file(MODULE_IMAGE_CUBIN);
  const uint64_t shoff = read_at<uint64_t>(cubin, 0x28);
  const uint16_t shnum = read_at<uint16_t>(cubin, 0x3c);

  Bytes section = cubin;
  write_at<uint64_t>(section, shoff + 7 * 64 + 0x18, 0x7fff0000);  // section 7's sh_offset
  CHECK_THAT(parse_error(section), Catch::Contains("section header 7") &&
                                       Catch::Contains("offset 0x7fff0000") &&
                                       Catch::Contains("beyond image size"));

  Bytes count = cubin;
  write_at<uint16_t>(count, 0x3c, 0xfff0);
  CHECK_THAT(parse_error(count), Catch::Contains("section header table"));

  Bytes strndx = cubin;
  write_at<uint16_t>(strndx, 0x3e, shnum);
  CHECK_THAT(parse_error(strndx), Catch::Contains("e_shstrndx"));

  Bytes machine = cubin;
  write_at<uint16_t>(machine, 0x12, 62);
  CHECK_THAT(parse_error(machine), Catch::Contains("e_machine"));

  Bytes name = cubin;
  write_at<uint32_t>(name, shoff + 3 * 64, 0x7fffffff);  // section 3's sh_name
  CHECK_THAT(parse_error(name), Catch::Contains("section header 3"));
}

TEST_CASE("a corrupt .nv.info record is an error naming the section") {
  Bytes cubin = read_file(MODULE_IMAGE_CUBIN);
  // Find .nv.info._Z4axpyPfPKffi's section and make its first record an unknown format.
  const uint64_t shoff = read_at<uint64_t>(cubin, 0x28);
  const uint16_t shnum = read_at<uint16_t>(cubin, 0x3c);
  const uint16_t shstrndx = read_at<uint16_t>(cubin, 0x3e);
  const uint64_t strtab = read_at<uint64_t>(cubin, shoff + shstrndx * 64 + 0x18);
  bool found = false;
  for (uint16_t i = 0; i < shnum; ++i) {
    uint64_t h = shoff + i * 64;
    const char* name =
        reinterpret_cast<const char*>(cubin.data()) + strtab + read_at<uint32_t>(cubin, h);
    if (std::string(name) != ".nv.info." + kAxpy) continue;
    cubin[read_at<uint64_t>(cubin, h + 0x18)] = std::byte{0x77};
    found = true;
  }
  REQUIRE(found);
  CHECK_THAT(parse_error(cubin),
             Catch::Contains(".nv.info." + kAxpy) && Catch::Contains("unknown format 0x77"));
}

TEST_CASE("a null image or a zero limit is an error") {
  CHECK_FALSE(parse_module_image(nullptr, SIZE_MAX, 90).has_value());
  Bytes cubin = read_file(MODULE_IMAGE_CUBIN);
  CHECK_FALSE(parse_module_image(cubin.data(), 0, 90).has_value());
}
