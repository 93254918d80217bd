// The rendezvous store of --transport tcp, shaped like PyTorch's TCPStore: rank 0 serves a
// key-value map at --store HOST:PORT, and every rank (rank 0 too, through an ordinary connection to
// its own server) keeps one connection to it for the whole run.
//
// Wire format (integers are 32-bit little-endian): a request is an op byte, the key's length and
// bytes, the value's length and bytes; the reply is a status byte (0) and a value. The ops:
//   'S' set(key, value)   stores the value; replies at once
//   'G' get(key)          replies with the value once the key is set (the reply waits till then)
//   'A' add(key, delta)   value and delta are decimal text (a missing key counts as 0); replies
//                         with the sum, which it stores
//   'W' wait(key)         replies (empty) once the key is set
// A client whose request is malformed is dropped.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "tcp_socket.h"
#include "unique_fd.h"

namespace mp {

class StoreServer {
 public:
  // Listens on `at` (exits 2, naming it, if it cannot) and serves from a thread of its own.
  explicit StoreServer(const HostPort& at);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Serves on until every client has hung up, or timeout_ms has passed (then says so on stderr),
  // and ends the thread.
  void finish(int timeout_ms);

 private:
  void serve();

  UniqueFd listener_;
  UniqueFd wake_;  // an eventfd: finish() was called
  std::atomic<int> finish_timeout_ms_{0};
  std::thread thread_;
};

class StoreClient {
 public:
  // Connects to the store at `at`, retrying until timeout_ms has passed; exits 2 saying the store
  // is unreachable. `rank` names this process in messages.
  // `from`: the IP to connect from (--listen), or empty.
  StoreClient(const HostPort& at, int rank, int timeout_ms, const std::string& from = {});

  void set(const std::string& key, const std::string& value);
  // The value of `key` once some rank has set it; exits 2 after timeout_ms (negative: no limit),
  // `waiting_for` saying what the value was to come from.
  std::string get(const std::string& key, int timeout_ms, const std::string& waiting_for);
  std::int64_t add(const std::string& key, std::int64_t delta);
  void wait(const std::string& key);
  // add(key, 1); the rank that brings it to `ranks` sets key + "/done", which every rank waits
  // for: the main thread blocks in a receive from the store until the last rank arrives.
  void barrier(const std::string& key, int ranks);

  // This end of the connection (the address other hosts reach this one by, on the store's route).
  HostPort local_address() const { return tcp_local_address(fd_); }

 private:
  std::string call(char op, const std::string& key, const std::string& value, int timeout_ms,
                   const std::string& waiting_for);

  HostPort at_;
  int rank_;
  UniqueFd fd_;
};

}  // namespace mp
