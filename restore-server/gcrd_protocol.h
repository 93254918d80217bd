// The gcrd socket protocol (docs/protocol.md §gcrd): a client connects to gcrd's unix socket,
// sends one request line, and reads reply lines until the last:
//
//   request:  "gcrd/1 <verb> key=value key=value ...\n"   (values percent-encoded)
//   reply:    "progress <text>\n" ... then "ok key=value ...\n" or "error <errc> <message>\n"
//
// Verbs: ping, checkpoint (pid, tag, leave_running, stop_copy, store), restore (name, device,
// store). gcrd checks the client's credentials (root or gcrd's own user) before reading.
#pragma once

#include <map>
#include <string>

namespace gcr::gcrd {

inline constexpr char kProtocol[] = "gcrd/1";

std::string encode_value(const std::string& v);
std::string decode_value(const std::string& v);
// "k=v k2=v2" <-> map (values encoded).
std::string encode_fields(const std::map<std::string, std::string>& fields);
std::map<std::string, std::string> decode_fields(const std::string& text);

}  // namespace gcr::gcrd
