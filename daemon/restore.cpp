// The restore protocol (restore.h): gcrd's ports (restore_ports_gcrd.h) for the transaction of
// restore_txn.h (Note [Restore phases]).
#include "restore.h"

#include <cstdlib>
#include <set>

#include "gcr/settings.h"
#include "lineage.h"
#include "pause_point.h"
#include "restore_ports_gcrd.h"
#include "restore_txn.h"

namespace gcr::gcrd {

Result<std::map<int, int>> parse_device_map(const std::string& text) {
  std::map<int, int> out;
  std::set<int> targets;
  for (std::size_t at = 0; at <= text.size();) {
    std::size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    std::string pair = text.substr(at, comma - at);
    at = comma + 1;
    std::size_t eq = pair.find('=');
    auto number = [](const std::string& t) {
      if (t.empty() || t.size() > 3 || t.find_first_not_of("0123456789") != std::string::npos)
        return -1;
      return std::atoi(t.c_str());
    };
    int from = eq == std::string::npos ? -1 : number(pair.substr(0, eq));
    int to = eq == std::string::npos ? -1 : number(pair.substr(eq + 1));
    if (from < 0 || to < 0)
      return Error{Errc::invalid_argument,
                   "device map entry '" + pair + "' is not FROM=TO (GPU ordinals, e.g. 0=1,1=0)"};
    if (!out.emplace(from, to).second || !targets.insert(to).second)
      return Error{Errc::invalid_argument,
                   "device map '" + text + "' names GPU " +
                       std::to_string(out.contains(from) && out[from] != to ? from : to) +
                       " twice"};
  }
  return out;
}

Result<RestoreReport> restore_checkpoint(store::Store& store, const criu::Tools& tools,
                                         const RestoreRequest& req, const Progress& progress) {
  StoreToRestore checkpoints(store);
  GpuDevices devices;
  GcrCriuRestorer criu_restorer(tools);
  KeeperProcesses keepers;
  LocalProcesses processes;
  RestorePorts ports{checkpoints,
                     devices,
                     criu_restorer,
                     keepers,
                     processes,
                     [](pid_t pid, const std::string& id) {
                       if (auto key = process_key(pid)) lineage_record(*key, id);
                     },
                     progress,
                     [](const char* point) { pause_point(point); }};
  // Note [Host memory from the store] (host_pages.h); GCR_HOST_PAGES_FROM_STORE=0: CRIU's daemon
  // reads the pages from materialized images instead.
  ports.host_pages_from_store = settings().host_pages_from_store;
  return RestoreTransaction(req, std::move(ports)).run();
}

}  // namespace gcr::gcrd
