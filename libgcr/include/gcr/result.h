// Result<T>: a value or an Error, and never silently dropped.
//
// g++ 12 has no std::expected, so this is a small stand-in whose names match it (has_value,
// value, error, operator bool), so that switching later is a type alias. Errors gain context by
// wrapping (`.context("parking region 0x...")`), not by logging at every level; only main() in
// cli/ and gcrd turns an Error into text and an exit code.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

namespace gcr {

// Stable: exit codes and --json expose these. Append only.
enum class Errc : int {
  ok = 0,
  invalid_argument = 1,
  not_found = 2,
  permission_denied = 3,
  io_error = 4,
  no_space = 5,
  corrupt_image = 6,
  unsupported = 7,
  busy = 8,
  timeout = 9,
  protocol = 10,
  driver = 11,
  out_of_memory = 12,
  internal = 13,
  already_exists = 14,
  unreachable = 15,  // a remote endpoint (S3) cannot be reached: down, refused, no route
  clock_skew = 16,   // a remote endpoint refused the request's time (signatures need a good clock)
};

const char* errc_name(Errc code) noexcept;

struct Error {
  Errc code = Errc::internal;
  std::string message;
};

// An Error built from errno, naming what failed: "open '/x': Permission denied".
Error errno_error(const std::string& what, int err = errno);

// Maps an errno to the closest Errc (ENOSPC -> no_space, EACCES -> permission_denied, ...).
Errc errc_from_errno(int err) noexcept;

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design, like std::expected
  Result(Error error) : v_(std::move(error)) {}  // NOLINT

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

  // Prefixes the error message with what was being done; a value passes through untouched.
  Result&& context(const std::string& what) && {
    if (!has_value()) {
      auto& e = std::get<1>(v_);
      e.message = what + ": " + e.message;
    }
    return std::move(*this);
  }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT

  bool has_value() const noexcept { return !failed_; }
  explicit operator bool() const noexcept { return !failed_; }
  void value() const {
    if (failed_) {
      std::fprintf(stderr, "gcr: value() of a failed Result: %s\n", error_.message.c_str());
      std::abort();
    }
  }

  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

  Result&& context(const std::string& what) && {
    if (failed_) error_.message = what + ": " + error_.message;
    return std::move(*this);
  }

 private:
  Error error_;
  bool failed_ = false;
};

using Status = Result<void>;

inline Status ok() {
  return {};
}

inline Error make_error(Errc code, std::string message) {
  return Error{code, std::move(message)};
}

}  // namespace gcr

// Forwards a failed Result from the enclosing function; otherwise yields nothing.
#define GCR_TRY(expr)                                                \
  do {                                                               \
    auto gcr_try_result_ = (expr);                                   \
    if (!gcr_try_result_) return std::move(gcr_try_result_).error(); \
  } while (0)

// Evaluates expr (a Result<T>), forwards its error, else assigns its value to lhs.
#define GCR_TRY_ASSIGN(lhs, expr)                                                                  \
  auto GCR_CONCAT_(gcr_try_, __LINE__) = (expr);                                                   \
  if (!GCR_CONCAT_(gcr_try_, __LINE__)) return std::move(GCR_CONCAT_(gcr_try_, __LINE__)).error(); \
  lhs = std::move(GCR_CONCAT_(gcr_try_, __LINE__)).value()

#define GCR_CONCAT_INNER_(a, b) a##b
#define GCR_CONCAT_(a, b) GCR_CONCAT_INNER_(a, b)

// Returns an Error of the given code when cond is false.
#define GCR_CHECK(cond, errc, msg)                        \
  do {                                                    \
    if (!(cond)) return ::gcr::make_error((errc), (msg)); \
  } while (0)
