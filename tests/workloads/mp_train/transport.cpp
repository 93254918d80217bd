#include "transport.h"

namespace mp {

bool parse_transport_choice(const std::string& text, TransportChoice* out) {
  if (text == "rotate")
    *out = TransportChoice::kRotate;
  else if (text == "scm")
    *out = TransportChoice::kScm;
  else if (text == "pidfd")
    *out = TransportChoice::kPidfd;
  else if (text == "proxy")
    *out = TransportChoice::kProxy;
  else if (text == "ipc")
    *out = TransportChoice::kIpc;
  else if (text == "tcp")
    *out = TransportChoice::kTcp;
  else
    return false;
  return true;
}

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::kScm:
      return "scm";
    case Transport::kPidfd:
      return "pidfd";
    case Transport::kProxy:
      return "proxy";
    case Transport::kIpc:
      return "ipc";
  }
  return "?";
}

Transport transport_for(TransportChoice choice, int link, int part) {
  switch (choice) {
    case TransportChoice::kScm:
      return Transport::kScm;
    case TransportChoice::kPidfd:
      return Transport::kPidfd;
    case TransportChoice::kProxy:
      return Transport::kProxy;
    case TransportChoice::kIpc:
      return Transport::kIpc;
    case TransportChoice::kRotate:
    case TransportChoice::kTcp:  // has no mailboxes: never asked
      break;
  }
  return static_cast<Transport>((part + link) % kTransports);
}

}  // namespace mp
