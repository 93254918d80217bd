// GCR_FAULT crash points: see fault.h.
#include "store/fault.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace gcr::store {
namespace {

constexpr Fault kAll[] = {
    Fault::after_pack_create,   Fault::after_chunk_write,      Fault::after_pack_sync,
    Fault::after_index_rename,  Fault::before_manifest_rename, Fault::after_manifest_rename,
    Fault::after_tag_rename,    Fault::gc_after_rewrite,       Fault::gc_after_index_delete,
    Fault::transfer_after_pack, Fault::transfer_before_check,  Fault::transfer_after_stage};

std::optional<Fault> named_by(const char* variable) {
  const char* v = std::getenv(variable);
  if (v == nullptr || *v == '\0') return std::nullopt;
  for (Fault f : kAll) {
    if (fault_name(f) == v) return f;
  }
  // A misspelt name would otherwise make a crash test pass without crashing anything.
  std::string known;
  for (Fault f : kAll) known += " " + std::string(fault_name(f));
  std::fprintf(stderr, "gcr: %s='%s' names no crash point (known:%s); ignored\n", variable, v,
               known.c_str());
  return std::nullopt;
}

std::optional<Fault> configured() {
  static const std::optional<Fault> fault = named_by("GCR_FAULT");
  return fault;
}

}  // namespace

std::string_view fault_name(Fault f) {
  switch (f) {
    case Fault::after_pack_create:
      return "after-pack-create";
    case Fault::after_chunk_write:
      return "after-chunk-write";
    case Fault::after_pack_sync:
      return "after-pack-sync";
    case Fault::after_index_rename:
      return "after-index-rename";
    case Fault::before_manifest_rename:
      return "before-manifest-rename";
    case Fault::after_manifest_rename:
      return "after-manifest-rename";
    case Fault::after_tag_rename:
      return "after-tag-rename";
    case Fault::gc_after_rewrite:
      return "gc-after-rewrite";
    case Fault::gc_after_index_delete:
      return "gc-after-index-delete";
    case Fault::transfer_after_pack:
      return "transfer-after-pack";
    case Fault::transfer_before_check:
      return "transfer-before-check";
    case Fault::transfer_after_stage:
      return "transfer-after-stage";
  }
  return "";
}

void fault_point(Fault f) {
  if (configured() == f) ::_exit(kFaultExitCode);
}

void pause_point(Fault f) {
  static const std::optional<Fault> pause = named_by("GCR_PAUSE");
  if (pause != f) return;
  const char* file = std::getenv("GCR_PAUSE_FILE");
  if (file == nullptr || *file == '\0') return;
  if (FILE* out = std::fopen(file, "w")) {
    std::fprintf(out, "%d\n", static_cast<int>(::getpid()));
    std::fclose(out);
  }
  struct stat st {};
  for (int i = 0; i < 12000 && ::stat(file, &st) == 0; ++i) ::usleep(10000);
}

}  // namespace gcr::store
