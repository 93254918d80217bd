// elf_exports.h: reads the defined function symbols a 64-bit ELF shared object exports (its
// .dynsym), without dlopen. Used to compare the generated driver symbol list with the CUDA stub.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gcr::test {

// Names of the defined STT_FUNC symbols in `path`'s dynamic symbol table, sorted; nullopt if the
// file is missing or is not a 64-bit ELF with a .dynsym section.
std::optional<std::vector<std::string>> elf_exported_functions(const std::string& path);

}  // namespace gcr::test
