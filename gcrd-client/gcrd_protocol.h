// The gcrd socket protocol (docs/protocol.md §gcrd): a client connects to gcrd's unix socket,
// sends one request line, and reads reply lines until the last:
//
//   request:  "gcrd/1 <verb> key=value key=value ...\n"   (values percent-encoded)
//   reply:    "progress <text>\n" ... then "ok key=value ...\n" or "error <errc> <message>\n"
//
// Verbs: ping, checkpoint (pid, tag, leave_running, stop_copy, store), restore (name, device,
// store). gcrd checks the client's credentials (root or gcrd's own user) before reading.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "gcr/result.h"

namespace gcr::gcrd {

inline constexpr char kProtocol[] = "gcrd/1";

// What gcr's CRIU plugin leaves in a container runtime's images directory (docs/containers.md):
// the reference to the checkpoint of the device memory, and, self-contained, the store holding it.
inline constexpr char kImagesReferenceName[] = "gcr-checkpoint";
inline constexpr char kImagesStoreName[] = "gcr-store";

// The reference's lines:
//   format=1
//   id=<the checkpoint's 32 hex digits>
//   store=<gcrd's store, absolute path; empty: gcrd's default; "images": self-contained>
struct ImagesReference {
  std::string id;
  std::string store;  // as above
};
std::string encode_reference(const ImagesReference& r);
Result<ImagesReference> decode_reference(const std::string& text);

// Sends `line` and a newline on socket fd (no SIGPIPE); false if the peer is gone.
bool send_line(int fd, const std::string& line);

std::string encode_value(const std::string& v);
std::string decode_value(const std::string& v);
// "k=v k2=v2" <-> map (values encoded).
std::string encode_fields(const std::map<std::string, std::string>& fields);
std::map<std::string, std::string> decode_fields(const std::string& text);

// A progress text that says how far long work has come, "bytes storing 1048576 4194304": the
// client draws a progress bar from it on a terminal (and ignores it elsewhere); any other
// progress text is a line for people.
struct BytesProgress {
  std::string what;  // "storing", "loading"
  std::uint64_t done = 0, total = 0;
};
std::string bytes_progress(const std::string& what, std::uint64_t done, std::uint64_t total);
std::optional<BytesProgress> parse_bytes_progress(const std::string& text);

}  // namespace gcr::gcrd
