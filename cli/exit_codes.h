// Exit codes of the gcr command: a stable mapping from gcr::Errc, so that scripts can tell a
// missing checkpoint from a corrupt one without parsing messages. Like Errc itself, this table is
// append-only: a code, once given a meaning, keeps it.
//
//   code  meaning                                   Errc
//   0     success                                   ok
//   1     failure of no more specific kind          internal, and any code not listed here
//   2     usage: bad option, argument or name       invalid_argument (and CLI11 parse errors)
//   3     not found (checkpoint, store, process)    not_found
//   4     permission denied                         permission_denied
//   5     I/O error                                 io_error
//   6     no space left                             no_space
//   7     corrupt image (verify found problems)     corrupt_image
//   8     unsupported                               unsupported
//   9     busy (locked, in use; try again)          busy
//   10    timed out                                 timeout
//   11    protocol error (gcr/gcrd mismatch)        protocol
//   12    GPU driver error                          driver
//   13    out of memory                             out_of_memory
//   14    already exists                            already_exists
//   15    remote store unreachable (endpoint down)  unreachable
//   16    clock skew (a remote store refused time)  clock_skew
//
// Codes stay below 64 so that they never collide with sysexits(3) or the shell's 126-165.
#pragma once

#include "gcr/result.h"

namespace gcr::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

constexpr int exit_code_for(Errc code) noexcept {
  switch (code) {
    case Errc::ok:
      return kExitOk;
    case Errc::internal:
      return kExitFailure;
    case Errc::invalid_argument:
      return kExitUsage;
    case Errc::not_found:
      return 3;
    case Errc::permission_denied:
      return 4;
    case Errc::io_error:
      return 5;
    case Errc::no_space:
      return 6;
    case Errc::corrupt_image:
      return 7;
    case Errc::unsupported:
      return 8;
    case Errc::busy:
      return 9;
    case Errc::timeout:
      return 10;
    case Errc::protocol:
      return 11;
    case Errc::driver:
      return 12;
    case Errc::out_of_memory:
      return 13;
    case Errc::already_exists:
      return 14;
    case Errc::unreachable:
      return 15;
    case Errc::clock_skew:
      return 16;
  }
  return kExitFailure;
}

// The table above as `gcr --help` shows it.
inline constexpr const char* kExitCodesHelp =
    "Exit status:\n"
    "  0 success      1 failure          2 usage error      3 not found\n"
    "  4 permission   5 I/O error        6 no space         7 corrupt image\n"
    "  8 unsupported  9 busy            10 timed out       11 protocol error\n"
    " 12 GPU driver  13 out of memory   14 already exists  15 unreachable\n"
    " 16 clock skew";

}  // namespace gcr::cli
