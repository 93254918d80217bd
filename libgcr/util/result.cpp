#include "gcr/result.h"

namespace gcr {

const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok:
      return "ok";
    case Errc::invalid_argument:
      return "invalid_argument";
    case Errc::not_found:
      return "not_found";
    case Errc::permission_denied:
      return "permission_denied";
    case Errc::io_error:
      return "io_error";
    case Errc::no_space:
      return "no_space";
    case Errc::corrupt_image:
      return "corrupt_image";
    case Errc::unsupported:
      return "unsupported";
    case Errc::busy:
      return "busy";
    case Errc::timeout:
      return "timeout";
    case Errc::protocol:
      return "protocol";
    case Errc::driver:
      return "driver";
    case Errc::out_of_memory:
      return "out_of_memory";
    case Errc::internal:
      return "internal";
    case Errc::already_exists:
      return "already_exists";
    case Errc::unreachable:
      return "unreachable";
    case Errc::clock_skew:
      return "clock_skew";
  }
  return "unknown";
}

Errc errc_from_errno(int err) noexcept {
  switch (err) {
    case ENOENT:
    case ESRCH:
      return Errc::not_found;
    case EACCES:
    case EPERM:
      return Errc::permission_denied;
    case ENOSPC:
    case EDQUOT:
      return Errc::no_space;
    case EEXIST:
      return Errc::already_exists;
    case EINVAL:
      return Errc::invalid_argument;
    case ENOMEM:
      return Errc::out_of_memory;
    case EBUSY:
    case EAGAIN:
      return Errc::busy;
    case ETIMEDOUT:
      return Errc::timeout;
    case ENOTSUP:
      return Errc::unsupported;
    default:
      return Errc::io_error;
  }
}

Error errno_error(const std::string& what, int err) {
  return Error{errc_from_errno(err), what + ": " + std::strerror(err)};
}

}  // namespace gcr
