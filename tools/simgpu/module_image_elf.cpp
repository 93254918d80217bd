// Cubins: the CUDA ELF (ELF64, little-endian, e_machine 190 EM_CUDA) that ptxas writes. Owns
// section headers, the symbol table, and which symbols are kernels (STT_FUNC with STO_CUDA_ENTRY
// in st_other) and which are variables (STT_OBJECT or STT_CUDA_OBJECT in .nv.global,
// .nv.global.init or .nv.constant<N>). Does not own the .nv.info attribute format
// (module_image_nvinfo.cpp) nor relocations: a variable initialised with another's address
// (`__device__ int* p = &x;`) gets its bytes as stored, i.e. without that address.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "module_image_internal.h"

namespace gcr::simgpu::detail {
namespace {

constexpr uint64_t kElfHeaderBytes = 64;
constexpr uint64_t kSectionHeaderBytes = 64;
constexpr uint64_t kProgramHeaderBytes = 56;
constexpr uint64_t kSymbolBytes = 24;
constexpr uint16_t kEmCuda = 190;
constexpr uint64_t kMaxSections = 1u << 20;  // sanity bound for a table sized by a header field

constexpr uint32_t kShtSymtab = 2;
constexpr uint32_t kShtNobits = 8;
constexpr uint32_t kShtSymtabShndx = 18;
// Processor-specific section types that, like SHT_NOBITS, occupy no file bytes; relocatable
// cubins use them for .nv.global, .nv.local.<k> and .nv.shared.<k>.
constexpr uint32_t kShtCudaGlobal = 0x70000007;
constexpr uint32_t kShtCudaLocal = 0x70000009;
constexpr uint32_t kShtCudaShared = 0x7000000a;
constexpr uint16_t kShnUndef = 0;
constexpr uint16_t kShnLoreserve = 0xff00;
constexpr uint16_t kShnXindex = 0xffff;

constexpr uint8_t kSttObject = 1;
constexpr uint8_t kSttFunc = 2;
constexpr uint8_t kSttCudaObject = 13;  // STT_LOPROC: variables in relocatable (-rdc) cubins
constexpr uint8_t kStoCudaEntry = 0x10;

struct Section {
  std::string_view name;
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;
};

class Cubin {
 public:
  explicit Cubin(ByteView image) : image_(image) {}

  Status read_headers();
  Result<ModuleImage> read_module();

 private:
  Status read_program_headers() const;
  bool occupies_no_bytes(const Section& s) const {
    return s.type == kShtNobits || s.type == kShtCudaGlobal || s.type == kShtCudaLocal ||
           s.type == kShtCudaShared || s.name == ".nv.global" ||
           s.name.substr(0, 10) == ".nv.shared" || s.name.substr(0, 9) == ".nv.local";
  }
  std::string where(size_t index) const {
    std::string s = "section " + std::to_string(index);
    if (index < sections_.size() && !sections_[index].name.empty()) {
      s += " (" + std::string(sections_[index].name) + ")";
    }
    return s;
  }
  // The file bytes of a section, checked against the image size.
  Result<ByteView> bytes_of(size_t index) const;
  Result<std::string_view> string_at(ByteView table, uint64_t offset,
                                     const std::string& what) const;
  Status read_symbol(ByteView symtab, ByteView strtab, ByteView xindex, uint64_t i,
                     ModuleImage& module) const;
  Result<GlobalInfo> read_variable(const std::string& name, uint64_t value, uint64_t size,
                                   uint32_t shndx) const;
  static bool is_variable_section(std::string_view name);

  ByteView image_;
  int sm_ = 0;
  std::vector<Section> sections_;
  std::unordered_map<std::string_view, size_t> by_name_;
};

std::string image_size(ByteView image) {
  return image.size() == SIZE_MAX ? std::string("(unknown)") : hex(image.size());
}

Result<ByteView> Cubin::bytes_of(size_t index) const {
  const Section& s = sections_[index];
  if (!image_.contains(s.offset, s.size)) {
    return corrupt("cubin: " + where(index) + " offset " + hex(s.offset) + " size " + hex(s.size) +
                   " beyond image size " + image_size(image_));
  }
  return image_.sub(s.offset, s.size);
}

Result<std::string_view> Cubin::string_at(ByteView table, uint64_t offset,
                                          const std::string& what) const {
  if (offset >= table.size()) {
    return corrupt("cubin: " + what + " name offset " + hex(offset) + " beyond string table size " +
                   hex(table.size()));
  }
  const char* start = reinterpret_cast<const char*>(table.data()) + offset;
  const void* nul = std::memchr(start, 0, table.size() - offset);
  if (!nul) return corrupt("cubin: " + what + " name at " + hex(offset) + " is not NUL-terminated");
  return std::string_view(start, static_cast<const char*>(nul) - start);
}

Status Cubin::read_headers() {
  if (!image_.contains(0, kElfHeaderBytes)) {
    return corrupt("cubin: ELF header needs 0x40 bytes, limit is " + hex(image_.size()));
  }
  auto ei_class = image_.load<uint8_t>(4);
  auto ei_data = image_.load<uint8_t>(5);
  auto abi_version = image_.load<uint8_t>(8);
  auto machine = image_.load<uint16_t>(0x12);
  if (ei_class != 2) {
    return unsupported("cubin: EI_CLASS " + std::to_string(ei_class) +
                       " at offset 0x4; only 64-bit ELF (2) is supported");
  }
  if (ei_data != 1) {
    return unsupported("cubin: EI_DATA " + std::to_string(ei_data) +
                       " at offset 0x5; only little-endian (1) is supported");
  }
  if (machine != kEmCuda) {
    return corrupt("cubin: e_machine " + std::to_string(machine) +
                   " at offset 0x12 is not EM_CUDA (190)");
  }
  // sm_90 is 0x5a in bits 8-15 of e_flags from ELF ABI version 8 (CUDA 12.x+), bits 0-7 before.
  auto flags = image_.load<uint32_t>(0x30);
  sm_ = abi_version >= 8 ? static_cast<int>((flags >> 8) & 0xff) : static_cast<int>(flags & 0xff);

  uint64_t shoff = image_.load<uint64_t>(0x28);
  uint64_t shentsize = image_.load<uint16_t>(0x3a);
  uint64_t shnum = image_.load<uint16_t>(0x3c);
  uint64_t shstrndx = image_.load<uint16_t>(0x3e);
  if (shoff == 0) return corrupt("cubin: no section header table (e_shoff 0 at offset 0x28)");
  if (shentsize != kSectionHeaderBytes) {
    return corrupt("cubin: e_shentsize " + hex(shentsize) + " at offset 0x3a (expected 0x40)");
  }
  if (!image_.contains(shoff, kSectionHeaderBytes)) {
    return corrupt("cubin: section header table offset " + hex(shoff) +
                   " (e_shoff, offset 0x28) beyond image size " + image_size(image_));
  }
  // Extended numbering: section 0 holds the real count and string table index.
  if (shnum == 0) shnum = image_.load<uint64_t>(shoff + 0x20);
  if (shstrndx == kShnXindex) shstrndx = image_.load<uint32_t>(shoff + 0x28);
  if (shnum == 0 || shnum > kMaxSections) {
    return corrupt("cubin: section count " + hex(shnum) + " is 0 or above " + hex(kMaxSections));
  }
  if (!image_.contains(shoff, shnum * kSectionHeaderBytes)) {
    return corrupt("cubin: section header table at offset " + hex(shoff) + " with " +
                   std::to_string(shnum) + " entries beyond image size " + image_size(image_));
  }
  if (shstrndx >= shnum) {
    return corrupt("cubin: e_shstrndx " + std::to_string(shstrndx) + " at offset 0x3e beyond " +
                   std::to_string(shnum) + " sections");
  }

  std::vector<uint32_t> name_offsets(shnum);
  sections_.resize(shnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    uint64_t h = shoff + i * kSectionHeaderBytes;
    name_offsets[i] = image_.load<uint32_t>(h + 0x00);
    sections_[i].type = image_.load<uint32_t>(h + 0x04);
    sections_[i].offset = image_.load<uint64_t>(h + 0x18);
    sections_[i].size = image_.load<uint64_t>(h + 0x20);
    sections_[i].link = image_.load<uint32_t>(h + 0x28);
  }
  auto shstrtab = bytes_of(shstrndx);
  if (!shstrtab) return std::move(shstrtab).error();
  for (uint64_t i = 0; i < shnum; ++i) {
    auto name = string_at(*shstrtab, name_offsets[i], "section header " + std::to_string(i));
    if (!name) return std::move(name).error();
    sections_[i].name = *name;
    by_name_.emplace(*name, i);
  }
  // Every section with file bytes must lie in the image, read or not: a cut-short image fails
  // here rather than loading with some sections missing.
  for (uint64_t i = 0; i < shnum; ++i) {
    const Section& s = sections_[i];
    if (!occupies_no_bytes(s) && !image_.contains(s.offset, s.size)) {
      return corrupt("cubin: section header " + std::to_string(i) + " (" + std::string(s.name) +
                     ") offset " + hex(s.offset) + " size " + hex(s.size) + " beyond image size " +
                     image_size(image_));
    }
  }
  return read_program_headers();
}

// Only checked to lie in the image: a loader needs nothing from them.
Status Cubin::read_program_headers() const {
  uint64_t phoff = image_.load<uint64_t>(0x20);
  uint64_t phentsize = image_.load<uint16_t>(0x36);
  uint64_t phnum = image_.load<uint16_t>(0x38);
  if (phnum == 0) return ok();
  if (phentsize != kProgramHeaderBytes) {
    return corrupt("cubin: e_phentsize " + hex(phentsize) + " at offset 0x36 (expected 0x38)");
  }
  if (!image_.contains(phoff, phnum * kProgramHeaderBytes)) {
    return corrupt("cubin: program header table at offset " + hex(phoff) + " (e_phoff) with " +
                   std::to_string(phnum) + " entries beyond image size " + image_size(image_));
  }
  return ok();
}

bool Cubin::is_variable_section(std::string_view name) {
  if (name == ".nv.global" || name == ".nv.global.init") return true;
  constexpr std::string_view kConstant = ".nv.constant";
  if (name.substr(0, kConstant.size()) != kConstant || name.size() == kConstant.size()) {
    return false;
  }
  for (char c : name.substr(kConstant.size())) {
    if (c < '0' || c > '9') return false;  // .nv.constant0.<kernel> is a kernel's parameter bank
  }
  return true;
}

Result<GlobalInfo> Cubin::read_variable(const std::string& name, uint64_t value, uint64_t size,
                                        uint32_t shndx) const {
  const Section& s = sections_[shndx];
  if (!fits(value, size, s.size)) {
    return corrupt("cubin: variable " + name + " value " + hex(value) + " size " + hex(size) +
                   " beyond " + where(shndx) + " size " + hex(s.size));
  }
  GlobalInfo g{name, size, {}};
  if (!occupies_no_bytes(s) && size > 0) {
    auto bytes = bytes_of(shndx);
    if (!bytes) return std::move(bytes).error();
    const std::byte* p = bytes->data() + value;
    g.init.assign(p, p + size);
  }
  return g;
}

Status Cubin::read_symbol(ByteView symtab, ByteView strtab, ByteView xindex, uint64_t i,
                          ModuleImage& module) const {
  uint64_t at = i * kSymbolBytes;
  auto name_offset = symtab.load<uint32_t>(at + 0);
  auto info = symtab.load<uint8_t>(at + 4);
  auto other = symtab.load<uint8_t>(at + 5);
  uint32_t shndx = symtab.load<uint16_t>(at + 6);
  auto value = symtab.load<uint64_t>(at + 8);
  auto size = symtab.load<uint64_t>(at + 16);
  uint8_t type = info & 0xf;

  bool kernel = type == kSttFunc && (other & kStoCudaEntry);
  bool object = type == kSttObject || type == kSttCudaObject;
  if (!kernel && !object) return ok();
  if (shndx == kShnXindex) {
    if (!xindex.contains(i * 4, 4)) {
      return corrupt("cubin: symbol " + std::to_string(i) +
                     " has SHN_XINDEX but .symtab_shndx has " + hex(xindex.size()) + " bytes");
    }
    shndx = xindex.load<uint32_t>(i * 4);
  } else if (shndx == kShnUndef || shndx >= kShnLoreserve) {
    return ok();  // undefined, absolute or common: not something this module defines
  }
  if (shndx >= sections_.size()) {
    return corrupt("cubin: symbol " + std::to_string(i) + " st_shndx " + std::to_string(shndx) +
                   " beyond " + std::to_string(sections_.size()) + " sections");
  }
  auto name = string_at(strtab, name_offset, "symbol " + std::to_string(i));
  if (!name) return std::move(name).error();

  if (kernel) {
    KernelInfo k{std::string(*name), {}, 0};
    auto it = by_name_.find(".nv.info." + k.name);
    if (it != by_name_.end()) {
      auto bytes = bytes_of(it->second);
      if (!bytes) return std::move(bytes).error();
      GCR_TRY(parse_kernel_nv_info(*bytes, "cubin: " + where(it->second), k));
    }
    module.kernels.push_back(std::move(k));
  } else if (is_variable_section(sections_[shndx].name)) {
    auto g = read_variable(std::string(*name), value, size, shndx);
    if (!g) return std::move(g).error();
    module.globals.push_back(std::move(*g));
  }
  return ok();
}

Result<ModuleImage> Cubin::read_module() {
  ModuleImage module;
  module.sm = sm_;
  size_t symtab_index = sections_.size();
  for (size_t i = 0; i < sections_.size(); ++i) {
    if (sections_[i].type == kShtSymtab) {
      symtab_index = i;
      break;
    }
  }
  if (symtab_index == sections_.size()) return module;  // nothing named, nothing to launch

  auto symtab = bytes_of(symtab_index);
  if (!symtab) return std::move(symtab).error();
  if (symtab->size() % kSymbolBytes != 0) {
    return corrupt("cubin: " + where(symtab_index) + " size " + hex(symtab->size()) +
                   " is not a multiple of 0x18");
  }
  uint32_t strtab_index = sections_[symtab_index].link;
  if (strtab_index >= sections_.size()) {
    return corrupt("cubin: " + where(symtab_index) + " sh_link " + std::to_string(strtab_index) +
                   " beyond " + std::to_string(sections_.size()) + " sections");
  }
  auto strtab = bytes_of(strtab_index);
  if (!strtab) return std::move(strtab).error();
  ByteView xindex;
  for (size_t i = 0; i < sections_.size(); ++i) {
    if (sections_[i].type == kShtSymtabShndx && sections_[i].link == symtab_index) {
      auto bytes = bytes_of(i);
      if (!bytes) return std::move(bytes).error();
      xindex = *bytes;
    }
  }
  uint64_t count = symtab->size() / kSymbolBytes;
  for (uint64_t i = 1; i < count; ++i) {
    GCR_TRY(read_symbol(*symtab, *strtab, xindex, i, module));
  }
  return module;
}

}  // namespace

Result<ModuleImage> parse_cubin(ByteView image) {
  Cubin cubin(image);
  GCR_TRY(cubin.read_headers());
  return cubin.read_module();
}

}  // namespace gcr::simgpu::detail
