// The client side of gcrd's socket (gcrd_protocol.h), for the gcr command: finds or starts gcrd,
// sends one request, relays progress, and returns the final fields or the error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::gcrd {

// GCR_GCRD_SOCKET (Settings::gcrd_socket, gcr/settings.h), else /run/gcr/gcrd.sock for root,
// else $XDG_RUNTIME_DIR/gcr/gcrd.sock, else /tmp/gcr-<uid>/gcrd.sock.
std::filesystem::path default_socket_path();
// The same with `configured` for GCR_GCRD_SOCKET: for a program that reads its own configuration
// (the CRIU plugin), without parsing gcr's.
std::filesystem::path default_socket_path(const std::optional<std::filesystem::path>& configured);

// Connects to gcrd at `socket`, starting `gcrd_binary` (detached, with `env`) when nothing
// listens there yet, and waits up to 10 s for it.
Result<int> connect_or_start(const std::filesystem::path& socket,
                             const std::filesystem::path& gcrd_binary,
                             const std::map<std::string, std::string>& env);

// Connects to a gcrd already listening at `socket`; starts nothing (gcr's CRIU plugin).
Result<int> connect_running(const std::filesystem::path& socket);

// Sends one request (with `files` attached as SCM_RIGHTS, at most 64) and relays its progress.
// `answered` (optional) tells an error gcrd sent (true) from a failed connection (false).
Result<std::map<std::string, std::string>> call(
    int fd, const std::string& verb, const std::map<std::string, std::string>& fields,
    const std::function<void(const std::string&)>& progress, const std::vector<int>& files = {},
    bool* answered = nullptr);

// Reads reply lines on fd (after call() returned an intermediate "ok", say) until the last,
// relaying progress.
Result<std::map<std::string, std::string>> read_reply(
    int fd, const std::function<void(const std::string&)>& progress, bool* answered = nullptr);

// A numeric field of a reply; 0 when it has none.
std::uint64_t field_u64(const std::map<std::string, std::string>& reply, const std::string& key);

}  // namespace gcr::gcrd
