// elf_exports.cpp: a minimal ELF64 .dynsym reader (see elf_exports.h).
#include "elf_exports.h"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

namespace gcr::test {

std::optional<std::vector<std::string>> elf_exported_functions(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  auto fits = [&](std::size_t offset, std::size_t size) {
    return offset <= image.size() && size <= image.size() - offset;
  };
  Elf64_Ehdr header;
  if (!fits(0, sizeof header)) return std::nullopt;
  std::memcpy(&header, image.data(), sizeof header);
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64 ||
      header.e_shentsize != sizeof(Elf64_Shdr) ||
      !fits(header.e_shoff, std::size_t{header.e_shnum} * sizeof(Elf64_Shdr))) {
    return std::nullopt;
  }
  auto section = [&](std::size_t i) {
    Elf64_Shdr s;
    std::memcpy(&s, image.data() + header.e_shoff + i * sizeof s, sizeof s);
    return s;
  };

  for (std::size_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr dynsym = section(i);
    if (dynsym.sh_type != SHT_DYNSYM || dynsym.sh_link >= header.e_shnum) continue;
    Elf64_Shdr strtab = section(dynsym.sh_link);
    if (!fits(dynsym.sh_offset, dynsym.sh_size) || !fits(strtab.sh_offset, strtab.sh_size)) {
      return std::nullopt;
    }
    std::vector<std::string> names;
    for (std::size_t off = 0; off + sizeof(Elf64_Sym) <= dynsym.sh_size; off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, image.data() + dynsym.sh_offset + off, sizeof sym);
      if (sym.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(sym.st_info) != STT_FUNC) continue;
      if (sym.st_name >= strtab.sh_size) return std::nullopt;
      const char* name = image.data() + strtab.sh_offset + sym.st_name;
      names.emplace_back(name, strnlen(name, strtab.sh_size - sym.st_name));
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  return std::nullopt;
}

}  // namespace gcr::test
