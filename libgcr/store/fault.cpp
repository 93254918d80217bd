// GCR_FAULT crash points: see fault.h. The variables are parsed with the rest (gcr/settings.h),
// which reports a name that is no crash point.
#include "store/fault.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "gcr/settings.h"

namespace gcr::store {

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
  if (settings().test_hooks.fault == f) ::_exit(kFaultExitCode);
}

void pause_point(Fault f) {
  const TestHooks& hooks = settings().test_hooks;
  if (hooks.pause != f || !hooks.pause_file) return;
  const char* file = hooks.pause_file->c_str();
  if (FILE* out = std::fopen(file, "w")) {
    std::fprintf(out, "%d\n", static_cast<int>(::getpid()));
    std::fclose(out);
  }
  struct stat st {};
  for (int i = 0; i < 12000 && ::stat(file, &st) == 0; ++i) ::usleep(10000);
}

}  // namespace gcr::store
