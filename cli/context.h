// What every gcr command shares: the global options, the environment read once at start, and the
// action the parsed command line selected. Each command family registers its subcommands from its
// own cmd_*.cpp (register_image_commands, ...); a subcommand's parse callback only records its
// action, and main() runs that action after parsing, so that command code returns Status and
// never sees a CLI11 exception.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "gcr/result.h"
#include "gcr/store.h"
#include "gcr/store_location.h"

namespace gcr::cli {

struct Context {
  // Read once, before parsing.
  std::optional<std::string> env_store;  // GCR_STORE
  bool stdout_tty = false;
  bool stderr_tty = false;

  // Global options.
  std::string store_option;  // --store DIR

  // Set by the selected subcommand's parse callback; run by main().
  std::function<Status()> action;
  // A command that fails may leave a next step for the user here; main() prints it after the
  // error ("hint: run 'gcr image ls' to see names").
  std::string hint;

  // --store, else GCR_STORE, else Store::default_root(), as given.
  std::string store_text() const;
  // store_text() parsed: a relative path made absolute against the working directory; an unknown
  // URL scheme is invalid_argument.
  Result<store::StoreLocation> store_location() const;
  // The local store's absolute directory (for messages: store_text() when it is not one).
  std::filesystem::path store_root() const;
  // Opens the existing store at store_root(). Fails with not_found (and a hint) when there is none.
  Result<std::shared_ptr<store::Store>> open_store();
};

// Makes `action` the command to run when `app` is the subcommand the user chose.
void on_run(CLI::App* app, Context& ctx, std::function<Status()> action);

// Writes text to stdout; main() flushes it at the end and reports a failed write.
void print(std::string_view text);

}  // namespace gcr::cli
