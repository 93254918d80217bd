// Note [Job checkpoint] (job.h): members, shared allocations, the cut.
#include "job.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "hex_address.h"
#include "job_link.h"
#include "proc_info.h"

namespace gcr::gcrd {
namespace {

// Lower-case hex without a prefix, as META shared_views writes addresses.
std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string describe(pid_t pid) {
  std::string cmd = process_cmdline(pid);
  std::replace(cmd.begin(), cmd.end(), '\0', ' ');
  if (cmd.size() > 60) cmd = cmd.substr(0, 57) + "...";
  return "process " + std::to_string(pid) + (cmd.empty() ? "" : " (" + cmd + ")");
}

// Union-find over (member, address) views.
struct Groups {
  std::vector<std::size_t> parent;
  std::size_t find(std::size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  }
  void join(std::size_t a, std::size_t b) { parent[find(a)] = find(b); }
};

}  // namespace

pid_t innermost_pid(pid_t pid) {
  auto nspid = criu::process_status_field(pid, "NSpid");
  if (!nspid) return pid;
  std::istringstream fields(*nspid);
  pid_t last = pid, v;
  while (fields >> v) last = v;
  return last;
}

std::string owner_name(pid_t pid, pid_t root) {
  return pid == root ? std::string() : "pid:" + std::to_string(innermost_pid(pid));
}

pid_t owner_pid(const std::string& owner, pid_t root_pid) {
  if (owner.empty()) return root_pid;
  if (owner.rfind("pid:", 0) != 0 || owner.size() > 16) return 0;
  pid_t p = 0;
  for (char c : owner.substr(4)) {
    if (c < '0' || c > '9') return 0;
    p = p * 10 + (c - '0');
  }
  return p;
}

Result<std::vector<Member>> connect_members(const criu::ProcessTree& tree,
                                            std::chrono::milliseconds timeout) {
  std::vector<Member> out;
  for (pid_t pid : tree.pids) {
    if (pid != tree.root && criu::maps_libcuda(pid) == false) continue;
    auto client = control::Client::connect(pid, pid == tree.root ? timeout : timeout / 2);
    if (!client) {
      if (client.error().code == Errc::not_found) continue;  // not under gcr, or gone
      return std::move(client).context("reaching " + describe(pid)).error();
    }
    out.push_back(Member{pid, owner_name(pid, tree.root), std::move(client).value(),
                         criu::process_start_time(pid).value_or(0)});
  }
  return out;
}

namespace {

// The members' shared regions (Note [Shared regions] in interpose/vmm_handles.h), joined by key:
// each group of views is one allocation.
struct ShareGraph {
  struct Node {
    std::size_t member;
    control::ShareRecord share;
  };
  std::vector<Node> nodes;
  std::map<std::size_t, std::vector<std::size_t>> groups;  // by root node
  // A view alone in the tree: its peer is outside (refused) or gone (private now).
  std::map<std::uint64_t, std::size_t> lonely;  // key -> node
};

Result<ShareGraph> share_graph(std::vector<Member>& members) {
  ShareGraph sg;
  for (std::size_t m = 0; m < members.size(); ++m) {
    auto shares = members[m].client.shares();
    if (!shares) {
      if (shares.error().code == Errc::unsupported) continue;  // an interposer before 1.3
      return std::move(shares).context("asking " + describe(members[m].pid)).error();
    }
    for (control::ShareRecord& s : *shares) sg.nodes.push_back({m, std::move(s)});
  }
  Groups g;
  g.parent.resize(sg.nodes.size());
  std::iota(g.parent.begin(), g.parent.end(), 0);
  std::map<std::uint64_t, std::size_t> first_with_key;
  for (std::size_t i = 0; i < sg.nodes.size(); ++i)
    for (std::uint64_t k : sg.nodes[i].share.keys) {
      auto [it, fresh] = first_with_key.emplace(k, i);
      if (!fresh) g.join(i, it->second);
    }
  for (std::size_t i = 0; i < sg.nodes.size(); ++i) sg.groups[g.find(i)].push_back(i);
  for (const auto& [root, group] : sg.groups)
    if (group.size() == 1)
      for (std::uint64_t k : sg.nodes[group[0]].share.keys) sg.lonely[k] = group[0];
  return sg;
}

// A lonely view's peer under gcr outside the tree: refused, naming it.
Status check_peers_under_gcr(const ShareGraph& sg, const std::vector<Member>& members,
                             const criu::ProcessTree& tree, const std::string& within) {
  std::set<pid_t> in_tree(tree.pids.begin(), tree.pids.end());
  for (pid_t other : control::find_managed_processes()) {
    if (in_tree.contains(other)) continue;
    auto c = control::Client::connect(other, std::chrono::seconds(2));
    if (!c) continue;
    auto shares = c->shares();
    (void)c->close();
    if (!shares) continue;
    for (const control::ShareRecord& s : *shares)
      for (std::uint64_t k : s.keys) {
        auto lonely = sg.lonely.find(k);
        if (lonely == sg.lonely.end()) continue;
        const ShareGraph::Node& mine = sg.nodes[lonely->second];
        return Error{Errc::unsupported,
                     describe(members[mine.member].pid) + " shares device memory (region " +
                         hex_address(mine.share.address) + ") with " + describe(other) +
                         ", which is not in " + within +
                         ": checkpoint a process whose tree holds both (their common parent, "
                         "the job's launcher) or name every process of the job (gcr "
                         "checkpoint --job PID PID...), or both sides would come back with a "
                         "private copy"};
      }
  }
  return ok();
}

// A process not under gcr may hold the memory too (an importer that kept the fd): refused as
// well, since gcr could not give it the memory back.
Status check_peers_outside_gcr(const ShareGraph& sg, const std::vector<Member>& members,
                               const criu::ProcessTree& tree, const std::string& within) {
  std::set<pid_t> in_tree(tree.pids.begin(), tree.pids.end());
  for (pid_t other : criu::proc_pids()) {
    if (in_tree.contains(other)) continue;
    std::error_code ec;
    const std::string dir = "/proc/" + std::to_string(other) + "/fd";
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      struct stat st {};
      if (::stat(e.path().c_str(), &st) != 0) continue;
      auto lonely = sg.lonely.find(control::share_key(st.st_dev, st.st_ino));
      if (lonely == sg.lonely.end()) continue;
      const ShareGraph::Node& mine = sg.nodes[lonely->second];
      return Error{Errc::unsupported,
                   describe(members[mine.member].pid) + " shares device memory (region " +
                       hex_address(mine.share.address) + ") with " + describe(other) + " (its fd " +
                       e.path().filename().string() + "), which is not in " + within +
                       ": checkpoint a tree that holds both, or both sides would come back "
                       "with a private copy"};
    }
  }
  return ok();
}

}  // namespace

Result<std::vector<SharedAllocation>> find_shared(std::vector<Member>& members,
                                                  const criu::ProcessTree& tree,
                                                  const std::string& scope) {
  const std::string within =
      scope.empty() ? "the tree of process " + std::to_string(tree.root) : scope;
  GCR_TRY_ASSIGN(ShareGraph sg, share_graph(members));
  if (!sg.lonely.empty()) {
    GCR_TRY(check_peers_under_gcr(sg, members, tree, within));
    GCR_TRY(check_peers_outside_gcr(sg, members, tree, within));
  }
  std::vector<SharedAllocation> out;
  for (const auto& [root, group] : sg.groups) {
    if (group.size() < 2) continue;
    SharedAllocation a;
    std::vector<std::size_t> order = group;
    // Stored under the exporter's view (the allocation's creator), else the first.
    std::stable_partition(order.begin(), order.end(), [&](std::size_t i) {
      return (sg.nodes[i].share.flags & control::kShareExported) &&
             !(sg.nodes[i].share.flags & control::kShareImported);
    });
    for (std::size_t i : order) a.views.push_back({sg.nodes[i].member, sg.nodes[i].share.address});
    out.push_back(std::move(a));
  }
  return out;
}

namespace {

// Members linked by a shared allocation, or by a TCP connection (through their processes'
// sockets: a stream memory operation on host memory that a thread relays to the peer is a
// communication launch), count their communication launches together: `sharing` holds them.
struct CutGroups {
  Groups g;
  std::set<std::size_t> sharing;
};
CutGroups group_members(const std::vector<Member>& members,
                        const std::vector<SharedAllocation>& shared, const CarriedTcp& tcp,
                        bool across_hosts) {
  CutGroups out;
  out.g.parent.resize(members.size());
  std::iota(out.g.parent.begin(), out.g.parent.end(), 0);
  for (const SharedAllocation& a : shared)
    for (const View& v : a.views) {
      out.g.join(v.member, a.views[0].member);
      out.sharing.insert(v.member);
    }
  // Every member that holds a carried socket; the connections' ends by address are not worth
  // matching: a job's ranks connected by TCP are all one group (and across hosts, all are).
  for (const TcpEnd& e : tcp.ends)
    for (std::size_t m = 0; m < members.size(); ++m)
      if (members[m].pid == e.pid) out.sharing.insert(m);
  std::optional<std::size_t> first;
  for (std::size_t m : out.sharing) {
    bool by_tcp = std::any_of(tcp.ends.begin(), tcp.ends.end(),
                              [&](const TcpEnd& e) { return e.pid == members[m].pid; });
    if (!by_tcp && !across_hosts) continue;
    if (!first) first = m;
    out.g.join(m, *first);
  }
  return out;
}

// Until every member of `sharing` has issued its target (by member), or the timeout.
Status wait_issued(std::vector<Member>& members, const std::set<std::size_t>& sharing,
                   const std::map<std::size_t, std::uint64_t>& target,
                   std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<std::string> late;
    for (std::size_t m : sharing) {
      auto c = members[m].client.cut(control::CutOp::read);
      if (!c) {
        end_cut(members);
        return std::move(c).context("reading the cut at " + describe(members[m].pid)).error();
      }
      std::uint64_t t = target.at(m);
      if (c->issued < t)
        late.push_back(describe(members[m].pid) + " issued " + std::to_string(c->issued) + " of " +
                       std::to_string(t));
    }
    if (late.empty()) return ok();
    if (std::chrono::steady_clock::now() > deadline) {
      end_cut(members);
      std::string who;
      for (const std::string& l : late) who += (who.empty() ? "" : "; ") + l;
      return Error{Errc::timeout,
                   "the job did not reach a consistent cut within " +
                       std::to_string(timeout.count()) +
                       " ms (every communication launch issued on every rank): " + who +
                       " communication launches; the job runs on. Retry, or raise --timeout"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

Status reach_cut(std::vector<Member>& members, const std::vector<SharedAllocation>& shared,
                 const CarriedTcp& tcp, JobLink* link, std::chrono::milliseconds timeout,
                 const std::function<void(const std::string&)>& progress) {
  auto [g, sharing] = group_members(members, shared, tcp, link != nullptr);
  // Note [A job across hosts]: every host meets at the cut, ranks or not; the target is the job's.
  if (!link && sharing.size() < 2) return ok();
  std::map<std::size_t, std::uint64_t> group_target;
  for (std::size_t m : sharing) {
    auto c = members[m].client.cut(control::CutOp::begin);
    if (!c) {
      end_cut(members);
      return std::move(c).context("beginning the cut at " + describe(members[m].pid)).error();
    }
    std::uint64_t& t = group_target[g.find(m)];
    t = std::max(t, c->admitted);
  }
  if (link) {
    auto job = link->cut_target(group_target.empty() ? 0 : group_target.begin()->second);
    if (!job) {
      end_cut(members);
      return std::move(job).context("the job's cut").error();
    }
    for (auto& [group, t] : group_target) t = *job;
    if (sharing.empty()) return ok();
  }
  std::map<std::size_t, std::uint64_t> target;  // by member
  for (std::size_t m : sharing) {
    target[m] = group_target[g.find(m)];
    if (auto c = members[m].client.cut(control::CutOp::target, target[m]); !c) {
      end_cut(members);
      return std::move(c).context("setting the cut at " + describe(members[m].pid)).error();
    }
  }
  progress("cutting the job: every communication launch up to " +
           std::to_string(group_target.begin()->second) + " on every rank");
  return wait_issued(members, sharing, target, timeout);
}

void end_cut(std::vector<Member>& members) {
  for (Member& m : members) (void)m.client.cut(control::CutOp::end);
}

Status quiesce_members(std::vector<Member>& members, std::chrono::milliseconds timeout) {
  if (members.size() == 1) return members[0].client.quiesce(timeout);
  std::vector<Status> results(members.size(), ok());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < members.size(); ++i)
    threads.emplace_back([&, i] { results[i] = members[i].client.quiesce(timeout); });
  for (std::thread& t : threads) t.join();
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (results[i]) continue;
    for (Member& m : members) (void)m.client.resume();
    return std::move(results[i]).context("quiescing " + describe(members[i].pid));
  }
  return ok();
}

std::string encode_job_members(const std::vector<std::string>& owners) {
  std::string out;
  for (const std::string& o : owners) out += (out.empty() ? "" : ",") + (o.empty() ? "-" : o);
  return out;
}

std::vector<std::string> decode_job_members(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= text.size();) {
    std::size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    std::string owner = text.substr(at, comma - at);
    out.push_back(owner == "-" ? std::string() : owner);
    at = comma + 1;
  }
  return out;
}

std::string encode_shared_views(const std::vector<SharedView>& views) {
  std::string out;
  auto name = [](const std::string& o) { return o.empty() ? std::string("-") : o; };
  for (const SharedView& v : views)
    out += name(v.owner) + " " + hex(v.address) + " " + name(v.stored_owner) + " " +
           hex(v.stored_address) + "\n";
  return out;
}

Result<std::vector<SharedView>> decode_shared_views(const std::string& text) {
  std::vector<SharedView> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    std::istringstream f(line);
    SharedView v;
    std::string a, b;
    if (!(f >> v.owner >> a >> v.stored_owner >> b))
      return Error{Errc::corrupt_image,
                   "META shared_views: malformed line '" + line.substr(0, 80) + "'"};
    if (v.owner == "-") v.owner.clear();
    if (v.stored_owner == "-") v.stored_owner.clear();
    try {
      v.address = std::stoull(a, nullptr, 16);
      v.stored_address = std::stoull(b, nullptr, 16);
    } catch (...) {
      return Error{Errc::corrupt_image,
                   "META shared_views: bad address in '" + line.substr(0, 80) + "'"};
    }
    out.push_back(std::move(v));
  }
  return out;
}

namespace {

// Note [A job of several trees]: gcrd's pid namespace only (image directories and META job_trees
// name the roots by the pids CRIU records, which must be the ones gcrd sees), and one owner (the
// checkpoint has one, META owner_uid, whose rights its restore has).
Status check_several_trees(const JobTrees& job) {
  for (const criu::ProcessTree& t : job.trees)
    if (innermost_pid(t.root) != t.root)
      return Error{Errc::unsupported, describe(t.root) +
                                          " runs in a PID namespace of its own: a job of several "
                                          "trees is checkpointed from the namespace its processes "
                                          "run in"};
  for (const criu::ProcessTree& t : job.trees)
    if (process_owner(t.root) != process_owner(job.trees[0].root))
      return Error{Errc::permission_denied,
                   describe(t.root) + " and " + describe(job.trees[0].root) +
                       " belong to different users: a job's trees must have one owner"};
  return ok();
}

// A pipe from one tree into another would come back as two (each tree's end reconnected on its
// own). Trees that only share one end of a pipe (their stdout into the same `| tee`) are fine.
Status check_pipes_between(const JobTrees& job) {
  struct PipeEnd {
    std::size_t tree;
    const criu::OpenFile* file;
  };
  std::map<std::string, std::pair<std::optional<PipeEnd>, std::optional<PipeEnd>>> pipe_ends;
  for (std::size_t k = 0; k < job.trees.size(); ++k)
    for (const criu::OpenFile& f : job.trees[k].files) {
      if (f.kind != criu::FileKind::pipe) continue;
      auto& [read_end, write_end] = pipe_ends[f.key];
      auto& mine = (f.flags & O_ACCMODE) == O_RDONLY ? read_end : write_end;
      auto& other = &mine == &read_end ? write_end : read_end;
      if (!mine) mine = PipeEnd{k, &f};
      if (!other || other->tree == k) continue;
      return Error{Errc::unsupported,
                   "fd " + std::to_string(f.fd) + " of pid " + std::to_string(f.pid) + " is " +
                       f.key + ", a pipe to or from the tree of process " +
                       std::to_string(job.trees[other->tree].root) +
                       ": gcr connects unix sockets between a job's trees, not pipes; close it, "
                       "or checkpoint a tree that holds both ends"};
    }
  return ok();
}

// The unix sockets whose peer another tree holds: external to each dump, connected again on
// restore (CrossSocket). One socket to one, stream or seqpacket.
Status pair_sockets_between(JobTrees& job) {
  std::map<std::string, std::size_t> tree_of_socket;
  for (std::size_t k = 0; k < job.trees.size(); ++k)
    for (const criu::OpenFile& f : job.trees[k].files)
      if (f.kind == criu::FileKind::unix_socket) tree_of_socket[f.path] = k;
  std::set<std::uint64_t> paired;
  auto inode = [](const std::string& link) {  // "socket:[123]"
    return static_cast<std::uint64_t>(std::strtoull(link.c_str() + 8, nullptr, 10));
  };
  for (std::size_t k = 0; k < job.trees.size(); ++k)
    for (criu::OpenFile& f : job.trees[k].files) {
      if (f.kind != criu::FileKind::unix_socket || !f.external) continue;
      auto peer = tree_of_socket.find(f.detail);
      if (peer == tree_of_socket.end() || peer->second == k) continue;
      f.external = false;  // within the job: dumped as external, connected again on restore
      std::uint64_t ino = inode(f.path), peer_ino = inode(f.detail);
      if (paired.contains(ino)) continue;       // the same socket in another fd, or task
      for (const CrossSocket& s : job.sockets)  // a peer several sockets are connected to
        if (s.ino == peer_ino || s.peer_ino == peer_ino)
          return Error{Errc::unsupported,
                       "unix socket " + std::to_string(peer_ino) + " in the tree of process " +
                           std::to_string(job.trees[peer->second].root) +
                           " is the peer of several sockets of other trees: gcr connects one "
                           "socket to one between a job's trees"};
      paired.insert(ino);
      paired.insert(peer_ino);
      job.sockets.push_back({ino, peer_ino, k, peer->second});
    }
  std::set<std::uint64_t> inodes;
  for (const CrossSocket& s : job.sockets) inodes.insert(s.ino);
  auto states = inodes.empty() ? decltype(criu::unix_socket_states(inodes)){}
                               : criu::unix_socket_states(inodes);
  for (CrossSocket& s : job.sockets) {
    auto st = states.find(s.ino);
    s.type = st == states.end() ? 0 : st->second.type;
    // A datagram socket's peer may hear from others too; a socketpair would hear from one.
    if (s.type != SOCK_STREAM && s.type != SOCK_SEQPACKET)
      return Error{Errc::unsupported,
                   "the unix socket " + std::to_string(s.ino) + " between the trees of processes " +
                       std::to_string(job.trees[s.tree].root) + " and " +
                       std::to_string(job.trees[s.peer_tree].root) +
                       (s.type == SOCK_DGRAM ? " is a datagram socket" : " is gone") +
                       ": gcr connects stream and seqpacket sockets between a job's trees"};
  }
  return ok();
}

}  // namespace

Result<JobTrees> inspect_job_trees(const std::vector<pid_t>& roots) {
  JobTrees job;
  for (pid_t root : roots) {
    GCR_TRY_ASSIGN(criu::ProcessTree t, criu::inspect_tree(root));
    job.trees.push_back(std::move(t));
  }
  for (std::size_t a = 0; a < job.trees.size(); ++a)
    for (std::size_t b = 0; b < job.trees.size(); ++b) {
      const auto& pids = job.trees[b].pids;
      if (a == b || std::find(pids.begin(), pids.end(), job.trees[a].root) == pids.end()) continue;
      return Error{Errc::invalid_argument,
                   describe(job.trees[a].root) + " is in the tree of process " +
                       std::to_string(job.trees[b].root) +
                       ", which is checkpointed with all its descendants: leave it out"};
    }
  if (job.trees.size() > 1) {  // Note [A job of several trees]
    GCR_TRY(check_several_trees(job));
    GCR_TRY(check_pipes_between(job));
  }
  GCR_TRY(pair_sockets_between(job));
  job.all = job.trees[0];
  for (std::size_t k = 1; k < job.trees.size(); ++k) {
    job.all.pids.insert(job.all.pids.end(), job.trees[k].pids.begin(), job.trees[k].pids.end());
    job.all.files.insert(job.all.files.end(), job.trees[k].files.begin(), job.trees[k].files.end());
  }
  return job;
}

void carry_tcp(JobTrees& job) {
  std::vector<std::vector<criu::OpenFile>*> files;
  for (criu::ProcessTree& t : job.trees) files.push_back(&t.files);
  job.tcp = carry_tcp_within(files);
  (void)carry_tcp_within({&job.all.files});  // the same files, in the union
}

std::vector<TcpConnection> outward_tcp(const JobTrees& job) {
  std::vector<const std::vector<criu::OpenFile>*> files;
  for (const criu::ProcessTree& t : job.trees) files.push_back(&t.files);
  return outward_tcp(files);
}

void carry_tcp_listed(JobTrees& job, const std::vector<TcpConnection>& listed) {
  std::vector<std::vector<criu::OpenFile>*> files;
  for (criu::ProcessTree& t : job.trees) files.push_back(&t.files);
  carry_listed(files, listed, job.tcp);
  CarriedTcp union_ends;  // the same files, in the union
  carry_listed({&job.all.files}, listed, union_ends);
}

std::vector<std::string> cross_socket_arguments(const JobTrees& job, std::size_t k) {
  std::vector<std::string> args;
  for (const CrossSocket& s : job.sockets) {
    if (s.tree == k) {
      args.push_back("--external");
      args.push_back("unix[" + std::to_string(s.ino) + "]");
    }
    if (s.peer_tree == k) {
      args.push_back("--external");
      args.push_back("unix[" + std::to_string(s.peer_ino) + "]");
    }
  }
  return args;
}

Status check_nothing_in_flight(const JobTrees& job) {
  std::set<std::uint64_t> inodes;
  for (const CrossSocket& s : job.sockets) inodes.insert({s.ino, s.peer_ino});
  auto states = criu::unix_socket_states(inodes);
  for (const CrossSocket& s : job.sockets)
    for (auto [ino, k, other] :
         {std::tuple{s.ino, s.tree, s.peer_tree}, std::tuple{s.peer_ino, s.peer_tree, s.tree}}) {
      auto q = states.find(ino);
      // The trees are stopped: a socket of theirs cannot have gone; missing, the query failed.
      if (q == states.end())
        return Error{Errc::io_error, "cannot tell whether bytes were in flight on unix socket " +
                                         std::to_string(ino) +
                                         " between the job's trees (sock_diag did not list it); "
                                         "every process runs on: checkpoint again"};
      if (q->second.queued == 0) continue;
      return Error{Errc::busy,
                   std::to_string(q->second.queued) +
                       " bytes were in flight to the tree of process " +
                       std::to_string(job.trees[k].root) + " from the tree of process " +
                       std::to_string(job.trees[other].root) +
                       " on a unix socket when the job was stopped, and gcr cannot carry them "
                       "between trees dumped apart; every process runs on: checkpoint again"};
    }
  return ok();
}

std::string encode_job_trees(const JobTrees& job) {
  std::string out;
  for (const criu::ProcessTree& t : job.trees)
    out += std::to_string(innermost_pid(t.root)) + (t.shell_job() ? " shell_job" : "") + "\n";
  return out;
}

Result<std::vector<JobTree>> decode_job_trees(const std::string& text) {
  std::vector<JobTree> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::istringstream f(line);
    JobTree t;
    std::string flag;
    if (!(f >> t.pid) || t.pid <= 0 || ((f >> flag) && flag != "shell_job"))
      return Error{Errc::corrupt_image, "manifest META job_trees: a line reads '" +
                                            line.substr(0, 60) + "', not 'PID [shell_job]'"};
    t.shell_job = flag == "shell_job";
    out.push_back(t);
  }
  return out;
}

namespace {
constexpr std::pair<int, const char*> kSocketTypes[] = {
    {SOCK_STREAM, "stream"}, {SOCK_DGRAM, "dgram"}, {SOCK_SEQPACKET, "seqpacket"}};
}  // namespace

std::string encode_job_sockets(const JobTrees& job) {
  std::string out;
  for (const CrossSocket& s : job.sockets)
    for (auto [type, name] : kSocketTypes)
      if (type == s.type)
        out += std::to_string(s.ino) + " " + std::to_string(s.peer_ino) + " " + name + "\n";
  return out;
}

Result<std::vector<JobSocket>> decode_job_sockets(const std::string& text) {
  std::vector<JobSocket> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::istringstream f(line);
    JobSocket s;
    std::string type, rest;
    f >> s.ino >> s.peer_ino >> type;
    for (auto [t, name] : kSocketTypes)
      if (type == name) s.type = t;
    if (!f || s.ino == 0 || s.peer_ino == 0 || s.type == 0 || (f >> rest))
      return Error{Errc::corrupt_image, "manifest META job_sockets: a line reads '" +
                                            line.substr(0, 60) +
                                            "', not 'INODE PEER_INODE stream|dgram|seqpacket'"};
    out.push_back(s);
  }
  return out;
}

std::string tree_images_dir(pid_t tree_pid) {
  return "trees/" + std::to_string(tree_pid);
}

}  // namespace gcr::gcrd
