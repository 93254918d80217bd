// Note [A job across hosts] (job_link.h): the coordinator's checkpoint and a part's.
#include "job_serve.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "checkpoint_txn.h"
#include "gcr/store_backend.h"
#include "gcr/store_transfer.h"
#include "gcrd_client.h"
#include "gcrd_protocol.h"
#include "job_hosts.h"
#include "net_store.h"
#include "pause_point.h"

namespace gcr::gcrd {

namespace {

Result<store::CheckpointId> parse_part_id(const std::string& id) {
  auto cid = store::CheckpointId::from_hex(id);
  if (!cid) return Error{Errc::corrupt_image, "a job part's id reads '" + id + "'"};
  return *cid;
}

std::string new_job_id() {
  unsigned char b[8];
  if (RAND_bytes(b, sizeof b) != 1) return "job";
  char hex[17];
  for (int i = 0; i < 8; ++i) std::snprintf(hex + 2 * i, 3, "%02x", b[i]);
  return hex;
}

store::BackendOptions local_backend() {
  return {};
}

// Note [A job across hosts]: `part` for the host at `to`, from the fastest place that holds it
// (part_sources: Note [Checkpoints in peers' memory]). A place `to` can reach itself (a peer's
// memory, the old host) is left for it to pull while it restores (`pull_from`); this host's own
// store is copied there first.
struct Placed {
  std::string where;  // what it is read from
  std::string pull_from;
  bool pull_memory = false;
};
Result<Placed> place_part(const JobPart& part, const std::string& to, store::Store& store,
                          const JobOptions& options, const Progress& progress) {
  GCR_TRY_ASSIGN(store::CheckpointId cid, parse_part_id(part.id));
  auto holders = options.holders.find(part.address);
  std::string tried;
  for (const PartSource& source : part_sources(
           part.address, store.options().root, options.memory_store, options.peer.self_address,
           holders == options.holders.end() ? std::vector<std::string>{} : holders->second,
           options.key)) {
    auto from = source.open();
    auto has = from ? store::has_checkpoint(**from, cid) : Result<bool>(from.error());
    if (!has || !*has) {
      tried += "; " + source.where + ": " + (has ? std::string("not there") : has.error().message);
      continue;
    }
    if (!source.pull_from.empty()) {
      progress("the part of " + part.address + " is pulled by " + to + " from " + source.where +
               " as it is restored");
      return Placed{source.where, source.pull_from, source.pull_memory};
    }
    auto dest = open_net_backend(to, options.key);
    if (!dest) return std::move(dest).context("placing the part of " + part.address).error();
    auto r = store::copy_checkpoint(**from, **dest, cid, {});
    if (!r)
      return std::move(r).context("placing the part of " + part.address + " on " + to).error();
    progress(store::describe_transfer(*r, "placed", to + " from " + source.where));
    return Placed{source.where, "", false};
  }
  return Error{Errc::not_found, "the part of " + part.address + " (" + part.id.substr(0, 12) +
                                    ") is nowhere to be read (checkpoint with --copy-parts or "
                                    "--peer-copies to keep copies off its host)" +
                                    tried};
}

// Note [A job across hosts]: the part `id` of the host at `address`, into this host's store.
Status copy_part(const std::string& address, const std::string& id, store::Store& store,
                 const NetKey& key, const Progress& progress) {
  GCR_TRY_ASSIGN(store::CheckpointId cid, parse_part_id(id));
  auto from = open_net_backend(address, key);
  if (!from) return std::move(from).context("copying the part of host " + address).error();
  GCR_TRY_ASSIGN(auto to, store::open_dir_backend(store.options().root, local_backend()));
  auto r = store::copy_checkpoint(**from, *to, cid, {});
  if (!r) return std::move(r).context("copying the part of host " + address).error();
  progress(store::describe_transfer(*r, "copied", "this host's store from " + address));
  return ok();
}

}  // namespace

// Sends the host whose gcrd is at `address` a request (`verb` with `fields`) without waiting: its
// part answers on the wire.
Result<RemotePart> ask_host(const std::string& address, const NetKey& key,
                            std::chrono::milliseconds idle, const std::string& verb,
                            const WireFields& fields) {
  RemotePart p;
  p.address = address;
  auto conn = net_connect(address, key, "request");
  if (!conn) return std::move(conn).context("the job's host " + address).error();
  p.conn = std::move(conn).value();
  p.wire = std::make_unique<JobWire>(p.conn.get(), "host " + address, idle);
  if (!send_line(p.conn.get(), std::string(kProtocol) + " " + verb + " " + encode_fields(fields)))
    return Error{Errc::unreachable, "the job's host " + address + " closed the connection"};
  return p;
}

// Note [Checkpoints in peers' memory]: the job's committed checkpoint (this host's part `rep`, the
// others' in `ids`) into the holders' memory; what was made goes into `rep`.
static void copy_job_to_peers(store::Store& store, CheckpointReport& rep,
                              std::map<std::string, std::string> ids,
                              const std::map<std::string, std::vector<std::string>>& holders,
                              const JobOptions& options, const std::string& name,
                              const Progress& progress) {
  PeerCopyOptions peer = options.peer;
  // A series is its name and its coordinator: two jobs of one name never touch each other's copies.
  peer.series = (peer.series.empty() ? name : peer.series) + "_" + peer.self_address;
  for (char& c : peer.series)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '-';
  if (peer.series.size() > 128) peer.series.resize(128);
  // The holders pull this host's part from the store gcrd serves: there it goes first.
  if (!options.served_store.empty() && options.served_store != store.options().root) {
    auto cid = store::CheckpointId::from_hex(rep.id);
    auto from = store::open_dir_backend(store.options().root, local_backend());
    store::BackendOptions o;
    o.create = true;
    auto to = from ? store::open_dir_backend(options.served_store, o)
                   : Result<std::unique_ptr<store::Backend>>(from.error());
    auto copied = to ? store::copy_checkpoint(**from, **to, *cid, {})
                     : Result<store::TransferReport>(to.error());
    if (!copied) {
      const std::string why =
          "this host's part is not copied into any peer's memory: putting it "
          "where the peers read it (" +
          options.served_store.string() + "): " + copied.error().message;
      progress(why);
      rep.warnings.push_back(why);
      ids.erase(options.peer.self_address);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  PeerCopiesReport copies = copy_to_peers(ids, holders, peer, options.key, progress);
  rep.times_ns["peer_copies"] = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  rep.peer_copies = copies.made;
  rep.peer_copies_wanted = copies.wanted;
  for (const std::string& e : copies.errors) {
    progress(e);
    rep.warnings.push_back(e);
  }
}

// Note [Checkpoints in peers' memory]: the ring of `--peer-copies`, with this gcrd reachable.
Result<std::map<std::string, std::vector<std::string>>> plan_peer_copies(
    const PeerCopyOptions& peer, const std::vector<JobHost>& hosts) {
  const std::string& self = peer.self_address;
  if (!reachable_address(self))
    return Error{Errc::invalid_argument,
                 "--peer-copies: the other hosts pull this host's part from its gcrd, which "
                 "must listen on an address they reach (gcr daemon --listen HOST:PORT, not " +
                     (self.empty() ? std::string("none") : self) + ")"};
  std::vector<std::string> ring{self};
  for (const JobHost& h : hosts) ring.push_back(h.address);
  return ring_holders(ring, peer.copies);
}

Result<CheckpointReport> checkpoint_across_hosts(store::Store& store, const criu::Tools& tools,
                                                 CheckpointRequest req,
                                                 const std::vector<JobHost>& hosts,
                                                 const JobOptions& options,
                                                 const Progress& progress, WorkRegistry* work) {
  const NetKey& key = options.key;
  const std::chrono::milliseconds idle = options.idle;
  // Note [Checkpoints in peers' memory]: where each part's copies go, known before anything stops.
  std::map<std::string, std::vector<std::string>> holders;
  if (options.peer.copies) {
    GCR_TRY_ASSIGN(holders, plan_peer_copies(options.peer, hosts));
  }
  const std::string job = new_job_id();
  std::vector<RemotePart> parts;
  CoordinatorLink link(parts);
  // Each host's part starts at once: it inspects its trees and meets the others at "tcp".
  for (const JobHost& h : hosts) {
    WireFields f{{"pids", pid_list(h.pids)},
                 {"leave_running", req.leave_running ? "1" : "0"},
                 {"timeout_ms", std::to_string(req.quiesce_timeout.count())},
                 {"idle_ms", std::to_string(idle.count())},
                 {"job", job}};
    auto p = ask_host(h.address, key, idle, "job_part", f);
    if (!p) {
      link.abort_all();
      return std::move(p).error();
    }
    p->pids = h.pids;
    parts.push_back(std::move(p).value());
  }
  progress("checkpointing a job across " + std::to_string(hosts.size() + 1) + " hosts");
  const std::string name = req.tag.value_or("job-" + job);
  if (!req.tag) req.tag = name;
  req.link = &link;
  req.extra_meta["job_id"] = job;
  bool committed = false;
  req.decide = [&](CheckpointTransaction& tx) -> Status {
    GCR_TRY(link.prepared().context("the job's other parts"));
    std::vector<JobPart> stored;
    for (const RemotePart& p : parts) stored.push_back({p.address, p.id, p.pids});
    tx.set_meta("job_parts", encode_job_parts(stored));
    if (!holders.empty()) tx.set_meta("peer_copies", encode_peer_copies(holders));
    GCR_TRY(tx.commit());  // the commit point: the job's manifest, naming every part
    committed = true;
    pause_point("job-committed");
    if (Status told = link.commit_all(name); !told) {
      progress(told.error().message);
      tx.report().warnings.push_back(told.error().message);
    }
    // The job's stall is its longest part's: every rank waits for every other.
    auto& times = tx.report().times_ns;
    std::uint64_t job_stall = times["stall"];
    for (std::size_t i = 0; i < parts.size(); ++i) {
      auto it = parts[i].reply.find("time.stall_ns");
      if (it == parts[i].reply.end()) continue;
      std::uint64_t s = std::strtoull(it->second.c_str(), nullptr, 10);
      times["part" + std::to_string(i + 1) + "_stall"] = s;
      job_stall = std::max(job_stall, s);
    }
    times["job_stall"] = job_stall;
    if (options.copy_parts)
      for (const RemotePart& p : parts)
        if (Status copied = copy_part(p.address, p.id, store, key, progress); !copied) {
          progress(copied.error().message);
          tx.report().warnings.push_back(copied.error().message);
        }
    return ok();
  };
  auto rep = checkpoint_process(store, tools, req, progress, work);
  if (!rep && !committed) link.abort_all();
  if (!rep || holders.empty()) return rep;
  // Committed: the copies into peers' memory, each holder pulling its parts.
  std::map<std::string, std::string> ids{{options.peer.self_address, rep->id}};
  for (const RemotePart& p : parts) ids[p.address] = p.id;
  copy_job_to_peers(store, *rep, std::move(ids), holders, options, name, progress);
  return rep;
}

Result<CheckpointReport> checkpoint_part(store::Store& store, const criu::Tools& tools,
                                         CheckpointRequest req, int fd,
                                         std::chrono::milliseconds idle, const Progress& progress,
                                         WorkRegistry* work) {
  JobWire wire(fd, "the job's coordinator", idle);
  PartLink link(wire);
  req.link = &link;
  req.tag.reset();  // named only once the job is committed
  req.extra_meta["job_part"] = "1";
  req.decide = [&](CheckpointTransaction& tx) -> Status {
    GCR_TRY(tx.commit_manifest_only());
    const std::string id = tx.report().id;
    auto name = link.prepared(id);
    if (!name) {
      // In doubt: the job may have committed with this part in it. Kept unnamed (a restore of the
      // job finds it by id); everything else is undone.
      tx.transaction().forget_undo("the job's part");
      tx.abort();
      return Error{name.error().code, "this host's part is stored (checkpoint " + id.substr(0, 12) +
                                          ", unnamed) but the coordinator was lost before it "
                                          "decided; kept for a restore of the job: " +
                                          name.error().message};
    }
    if (!*name) {
      tx.abort();
      return Error{Errc::busy, "the job's checkpoint was aborted (another host's part failed)"};
    }
    GCR_TRY_ASSIGN(store::CheckpointId cid, store.resolve(id));
    GCR_TRY(store.tag(cid, **name));
    return tx.finish_commit();
  };
  return checkpoint_process(store, tools, req, progress, work);
}

Result<RestoreReport> restore_across_hosts(store::Store& store, const criu::Tools& tools,
                                           RestoreRequest& req, const std::vector<JobPart>& parts,
                                           const JobOptions& options, const Progress& progress,
                                           std::vector<RemoteRestored>* restored) {
  const NetKey& key = options.key;
  const std::chrono::milliseconds idle = options.idle;
  for (const auto& [from, to] : options.place)
    if (std::none_of(parts.begin(), parts.end(),
                     [&](const JobPart& p) { return p.address == from; }))
      return Error{Errc::invalid_argument,
                   "--place " + from + "=" + to + ": no part of this job was on " + from};
  std::vector<RemotePart> remote;
  std::map<std::string, std::string> placed_from;  // by the address restoring it
  CoordinatorLink link(remote);
  for (const JobPart& part : parts) {
    auto placed = options.place.find(part.address);
    const std::string& where = placed == options.place.end() ? part.address : placed->second;
    WireFields f{{"name", part.id}, {"job_part", "1"}, {"idle_ms", std::to_string(idle.count())}};
    Status there = ok();
    if (placed != options.place.end()) {
      auto from = place_part(part, where, store, options, progress);
      if (from) {
        placed_from[where] = from->where;
        if (!from->pull_from.empty()) {
          f["pull_from"] = from->pull_from;
          f["pull_memory"] = from->pull_memory ? "1" : "0";
        }
      } else {
        there = std::move(from).error();
      }
      f["take_addresses"] = "1";
    }
    auto p = there ? ask_host(where, key, idle, "restore", f) : Result<RemotePart>(there.error());
    if (!p) {
      link.abort_all();
      return std::move(p).error();
    }
    remote.push_back(std::move(p).value());
  }
  progress("restoring a job across " + std::to_string(parts.size() + 1) + " hosts");
  req.link = &link;
  auto rep = restore_checkpoint(store, tools, req, progress);
  if (!rep) {
    link.abort_all();
    return rep;
  }
  // Every host met at "restored": each one's processes run; their replies say where.
  std::string failed;
  for (RemotePart& p : remote) {
    auto r = p.wire->expect("ok");
    if (!r) {
      failed += (failed.empty() ? "" : "; ") + r.error().message;
      continue;
    }
    std::string pids = (*r)["pid"];
    if (!(*r)["job_pids"].empty()) pids += "," + (*r)["job_pids"];
    if (restored) restored->push_back({p.address, pids, placed_from[p.address]});
  }
  if (!failed.empty())
    rep->warnings.push_back("restored here, but not every other host said it ran its part: " +
                            failed);
  return rep;
}

Result<std::map<std::string, std::string>> restore_for_lost_coordinator(
    const std::string& coordinator, const std::string& id,
    const std::filesystem::path& memory_store, const JobOptions& options,
    const Progress& progress) {
  auto placed = options.place.find(coordinator);
  if (placed == options.place.end())
    return Error{Errc::invalid_argument,
                 "this is this host's part of a job coordinated by " + coordinator +
                     ": restore the job there, or, that host lost, here with --place " +
                     coordinator +
                     "=NEW_HOST:PORT (a spare host's gcrd; this host's memory holds the "
                     "coordinator's part)"};
  const std::string& to = placed->second;
  GCR_TRY_ASSIGN(store::CheckpointId cid, parse_part_id(id));
  GCR_TRY_ASSIGN(auto from, store::open_dir_backend(memory_store, {}));
  auto dest = open_net_backend(to, options.key);
  if (!dest) return std::move(dest).context("placing the coordinator's part on " + to).error();
  auto copied = store::copy_checkpoint(*from, **dest, cid, {});
  from.reset();  // the tier's gc.lock: its gc need not wait for the whole restore
  if (!copied) return std::move(copied).context("placing the coordinator's part on " + to).error();
  progress(store::describe_transfer(*copied, "placed", to + " from this host's peer memory"));
  // The replacement coordinates the restore; every other placement goes with the request.
  std::map<std::string, std::string> f{{"name", id},
                                       {"take_addresses", "1"},
                                       {"net_key_name", options.key.name},
                                       {"net_key", options.key.secret},
                                       {"idle_ms", std::to_string(options.idle.count())}};
  std::size_t n = 0;
  for (const auto& [old_host, new_host] : options.place)
    if (old_host != coordinator) f["place." + std::to_string(n++)] = old_host + "=" + new_host;
  GCR_TRY_ASSIGN(UniqueFd conn, net_connect(to, options.key, "request"));
  GCR_TRY_ASSIGN(
      auto reply,
      call(conn.get(), "restore", f, progress).context("the job's new coordinator " + to));
  reply["restored_on"] = to;
  reply["remote_from.coordinator"] = "this host's peer memory";
  return reply;
}

Result<RestoreReport> restore_part(store::Store& store, const criu::Tools& tools,
                                   RestoreRequest& req, int fd, std::chrono::milliseconds idle,
                                   const Progress& progress) {
  JobWire wire(fd, "the job's coordinator", idle);
  PartLink link(wire);
  req.link = &link;
  return restore_checkpoint(store, tools, req, progress);
}

}  // namespace gcr::gcrd
