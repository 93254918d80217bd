// Note [Checkpoints in peers' memory] (memory_tier.h): the job's side.
#include "job_tiers.h"

#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "comma_list.h"
#include "gcr/store_transfer.h"
#include "gcrd_client.h"
#include "net_store.h"

namespace gcr::gcrd {

bool reachable_address(const std::string& address) {
  return !address.empty() && !address.starts_with("0.0.0.0:") && !address.starts_with("[::]:");
}

Result<std::map<std::string, std::vector<std::string>>> ring_holders(
    const std::vector<std::string>& hosts, unsigned m) {
  const std::size_t n = hosts.size();
  if (m >= n)
    return Error{Errc::invalid_argument, "--peer-copies " + std::to_string(m) +
                                             " needs more than " + std::to_string(m) +
                                             " hosts in the job (it has " + std::to_string(n) +
                                             "): each part's copies go to other hosts of the job"};
  std::map<std::string, std::vector<std::string>> out;
  for (std::size_t i = 0; i < n; ++i)
    for (unsigned k = 1; k <= m; ++k) out[hosts[i]].push_back(hosts[(i + k) % n]);
  return out;
}

std::string encode_peer_copies(const std::map<std::string, std::vector<std::string>>& holders) {
  std::string out;
  for (const auto& [part, hs] : holders) {
    std::string list;
    for (const std::string& h : hs) list += (list.empty() ? "" : ",") + h;
    out += part + " " + list + "\n";
  }
  return out;
}

std::map<std::string, std::vector<std::string>> decode_peer_copies(const std::string& text) {
  std::map<std::string, std::vector<std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string part, list;
    if (!(f >> part >> list)) continue;
    out[part] = split_commas(list);
  }
  return out;
}

PeerCopiesReport copy_to_peers(const std::map<std::string, std::string>& parts,
                               const std::map<std::string, std::vector<std::string>>& holders,
                               const PeerCopyOptions& options, const NetKey& key,
                               const Progress& progress) {
  PeerCopiesReport rep;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (const auto& [part, id] : parts) {
    auto hs = holders.find(part);
    if (hs == holders.end()) continue;
    for (const std::string& holder : hs->second) {
      ++rep.wanted;
      threads.emplace_back([&, part = part, id = id, holder = holder] {
        std::map<std::string, std::string> f{{"op", "keep"},
                                             {"from", part},
                                             {"id", id},
                                             {"series", options.series},
                                             {"seq", std::to_string(options.seq)},
                                             {"origin", part},
                                             {"protect", std::to_string(options.protect)},
                                             {"oldest", std::to_string(options.oldest)}};
        auto conn = net_connect(holder, key, "request");
        auto reply = conn ? call(conn->get(), "tier", f, [](const std::string&) {})
                          : Result<std::map<std::string, std::string>>(conn.error());
        std::lock_guard lock(mu);
        if (!reply) {
          rep.errors.push_back("the copy of " + part + "'s part into the memory of " + holder +
                               " failed: " + reply.error().message);
          return;
        }
        ++rep.made;
        rep.copied_bytes += field_u64(*reply, "copied_bytes");
        for (const auto& [k, v] : *reply)
          if (k.starts_with("evicted.")) progress(holder + " evicted " + v + " from its memory");
      });
    }
  }
  for (std::thread& t : threads) t.join();
  return rep;
}

std::vector<PartSource> part_sources(const std::string& host,
                                     const std::filesystem::path& local_store,
                                     const std::filesystem::path& memory_store,
                                     const std::string& self_address,
                                     const std::vector<std::string>& holders, const NetKey& key) {
  std::vector<PartSource> out;
  out.push_back({"this host's store",
                 [local_store]() { return store::open_dir_backend(local_store, {}); }, "", false});
  if (!memory_store.empty())
    out.push_back({"this host's peer memory",
                   [memory_store]() { return store::open_dir_backend(memory_store, {}); },
                   reachable_address(self_address) ? self_address : "", true});
  for (const std::string& h : holders)
    if (h != self_address)
      out.push_back({"the peer memory of " + h,
                     [h, key]() { return open_net_backend(h, key, NetStore::memory); }, h, true});
  out.push_back({host, [host, key]() { return open_net_backend(host, key); }, host, false});
  return out;
}

Result<std::string> find_part(const std::vector<PartSource>& sources, const std::string& id) {
  auto cid = store::CheckpointId::from_hex(id);
  if (!cid) return Error{Errc::corrupt_image, "a job part's id reads '" + id + "'"};
  std::string tried;
  for (const PartSource& s : sources) {
    auto backend = s.open();
    auto has = backend ? store::has_checkpoint(**backend, *cid) : Result<bool>(backend.error());
    if (has && *has) return s.where;
    tried += "; " + s.where + ": " + (has ? std::string("not there") : has.error().message);
  }
  return Error{Errc::not_found, "part " + id.substr(0, 12) + " is nowhere to be read" + tried};
}

}  // namespace gcr::gcrd
