// forget.h: Note [A job's old checkpoints].
#include "forget.h"

#include "gcr/store.h"
#include "job_parts.h"
#include "net_store.h"
#include "peer_keys.h"

namespace gcr::slurm {

Result<Forgotten> forget_checkpoints(const std::vector<std::string>& names,
                                     const std::vector<std::string>& also,
                                     const std::string& token_file) {
  Forgotten out;
  GCR_TRY_ASSIGN(auto st, store::Store::open({store::Store::default_root()}, false));
  std::optional<gcrd::NetKey> key;
  for (const std::string& name : names) {
    auto id = st->resolve(name);
    if (!id) continue;  // gone already
    GCR_TRY_ASSIGN(store::Manifest m, st->read_manifest(*id));
    GCR_TRY_ASSIGN(std::vector<gcrd::JobPart> parts,
                   gcrd::decode_job_parts(m.meta_or("job_parts")));
    if (!parts.empty() && !key) {
      GCR_TRY_ASSIGN(key, gcrd::read_client_key(token_file));
    }
    for (const gcrd::JobPart& p : parts) {
      if (Status gone = gcrd::remove_remote_part(p.address, p.id, *key); !gone)
        out.warnings.push_back("the part of " + name + " on " + p.address +
                               " stays there: " + gone.error().message);
      for (const std::string& host : also)
        if (host != p.address) (void)gcrd::remove_remote_part(host, p.id, *key);  // where placed
      if (auto copy = store::CheckpointId::from_hex(p.id); copy && st->read_manifest(*copy))
        GCR_TRY(st->remove(*copy));
      ++out.parts;
    }
    GCR_TRY(st->remove(*id));
    ++out.checkpoints;
  }
  if (out.checkpoints) (void)st->gc();
  return out;
}

}  // namespace gcr::slurm
