// The two sides of Note [A job across hosts] (job_link.h): the coordinator's link to the other
// hosts' parts, and a part's link to its coordinator, each a JobLink over gcrd-net connections
// (docs/protocol.md §15).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gcr/result.h"
#include "gcr/unique_fd.h"
#include "job_link.h"

namespace gcr::gcrd {

using WireFields = std::map<std::string, std::string>;

// One line of the job protocol: a word, then fields ("cut admitted=12").
struct WireLine {
  std::string word;
  WireFields fields;
};

// Lines on one connection. Reading skips "progress" lines (each counts as a sign of life) and
// fails when the peer says nothing for `idle` (a host gone, a link cut), ends the connection, or
// sends its final "error" line (its part failed: that error, said to come from `who`).
class JobWire {
 public:
  JobWire(int fd, std::string who, std::chrono::milliseconds idle)
      : fd_(fd), who_(std::move(who)), idle_(idle) {}
  Status send(const std::string& word, const WireFields& fields = {});
  Result<WireLine> read();
  // Reads until `word` (the final "ok" of a part, say); anything else is a protocol error.
  Result<WireFields> expect(const std::string& word);
  const std::string& who() const { return who_; }
  int fd() const { return fd_; }

 private:
  int fd_;
  std::string who_;
  std::chrono::milliseconds idle_;
  std::string buffer_;
};

// A part's side: each meeting point sends this host's line and waits for the coordinator's.
class PartLink final : public JobLink {
 public:
  explicit PartLink(JobWire& wire) : wire_(wire) {}
  Result<std::vector<TcpConnection>> carried(const std::vector<TcpConnection>& outward) override;
  Result<std::uint64_t> cut_target(std::uint64_t admitted) override;
  Status quiesced() override;
  Status dumped() override;
  Status restored() override;
  // The part is stored (manifest `id`, unnamed): the job's name to commit it under, or nullopt to
  // abort.
  Result<std::optional<std::string>> prepared(const std::string& id);
  // A meeting point beyond the checkpoint's (Note [A rank moved while its job runs] in
  // job_move.h): sends `word`, waits for `expected`.
  Status meet(const std::string& word, const std::string& expected);

 private:
  Result<WireLine> answer(const std::string& sent, const std::string& expected,
                          const WireFields& fields = {});
  JobWire& wire_;
};

// A part on another host, as the coordinator holds it.
struct RemotePart {
  std::string address;    // HOST:PORT of its gcrd
  std::vector<int> pids;  // its roots there
  UniqueFd conn;          // the request's connection
  std::unique_ptr<JobWire> wire;
  std::string id;    // its manifest, once prepared
  WireFields reply;  // its final reply
};

// The coordinator's side: each meeting point gathers every remote part's line, decides with this
// host's own, and answers every part.
class CoordinatorLink final : public JobLink {
 public:
  explicit CoordinatorLink(std::vector<RemotePart>& parts) : parts_(parts) {}
  Result<std::vector<TcpConnection>> carried(const std::vector<TcpConnection>& outward) override;
  Result<std::uint64_t> cut_target(std::uint64_t admitted) override;
  Status quiesced() override;
  Status dumped() override;
  Status restored() override;
  // Every part stored: their ids (RemotePart::id).
  Status prepared();
  // After the commit point: tells every part to commit and reads its final reply. The parts that
  // failed are named (each still has its unnamed manifest: a restore finds it by id).
  Status commit_all(const std::string& name);
  // Tells every part to abort and waits (briefly) for each to say it did.
  void abort_all();
  // A meeting point beyond the checkpoint's (Note [A rank moved while its job runs] in
  // job_move.h): gathers `word` from every part, answers `answer`.
  Status meet(const std::string& word, const std::string& answer);

 private:
  Result<std::vector<WireFields>> gather(const std::string& word);
  Status answer_all(const std::string& word, const WireFields& fields = {});
  std::vector<RemotePart>& parts_;
};

// "L R;L R" <-> connections (each "IP:PORT IP:PORT").
std::string encode_connections(const std::vector<TcpConnection>& c);
Result<std::vector<TcpConnection>> decode_connections(const std::string& text);

}  // namespace gcr::gcrd
