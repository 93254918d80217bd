// gcr: the command-line tool. This file owns parsing (CLI11), dispatch to the selected command,
// and the one place where an Error becomes stderr text and an exit code (exit_codes.h). CLI11's
// exceptions never leave this file; command code returns Status.
//
// Each command family registers itself from its own cmd_*.cpp; adding one is a line in main().

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <CLI/CLI.hpp>

#include "cmd_checkpoint.h"
#include "cmd_doctor.h"
#include "cmd_image.h"
#include "cmd_process.h"
#include "cmd_slurm.h"
#include "cmd_trace.h"
#include "context.h"
#include "exit_codes.h"
#include "gcr/human_output.h"
#include "gcr/manifest.h"
#include "gcr/settings.h"
#include "gcr/store.h"

#ifndef GCR_VERSION
#define GCR_VERSION "0.0.0-unknown"
#endif

namespace gcr::cli {

namespace {

std::string version_text() {
  return std::string("gcr ") + GCR_VERSION + " (image format " +
         std::to_string(store::kManifestMajor) + "." + std::to_string(store::kManifestMinor) + ")";
}

// The subcommand the user was in when parsing stopped ("gcr image ls"), and its App.
const CLI::App* deepest_command(const CLI::App& app, std::string& path) {
  path = "gcr";
  const CLI::App* at = &app;
  for (;;) {
    auto subs = at->get_subcommands();
    if (subs.empty()) return at;
    at = subs.front();
    path += " " + at->get_name();
  }
}

// The one place an Error becomes text. Messages may carry names from the command line or from
// untrusted manifests, so they are made safe for a terminal here, once.
int report_error(const Error& error, const std::string& hint) {
  // Line by line: a message may quote several lines of a log (CRIU's), whose newlines are meant;
  // every other control character is still escaped.
  std::string text = "gcr: ";
  std::size_t start = 0;
  for (;;) {
    std::size_t nl = error.message.find('\n', start);
    text += display_safe(error.message.substr(start, nl == std::string::npos ? nl : nl - start));
    text += "\n";
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  if (!hint.empty()) text += "hint: " + hint + "\n";
  std::fputs(text.c_str(), stderr);
  return exit_code_for(error.code);
}

// The global options, help text and commands of `app`, whose options fill `ctx`.
void describe_app(CLI::App& app, Context& ctx) {
  app.get_formatter()->column_width(26);
  app.set_version_flag("--version", version_text(),
                       "Print gcr's version and image format, and exit");
  app.add_option("--store", ctx.store_option,
                 "The image store (default: $GCR_STORE, else the user's default store)")
      ->type_name("DIR");
  app.require_subcommand(1);
  app.footer(
      "Run 'gcr COMMAND --help' for a command's options.\n\n"
      "Environment:\n"
      "  GCR_STORE   the image store when --store is not given; without either, gcr uses\n"
      "              $XDG_DATA_HOME/gcr/store (~/.local/share/gcr/store), as root\n"
      "              /var/lib/gcr/store\n\n" +
      std::string(kExitCodesHelp));

  register_process_commands(app, ctx);
  register_checkpoint_commands(app, ctx);
  register_migrate_command(app, ctx);
  register_image_commands(app, ctx);
  register_doctor_command(app, ctx);
  register_trace_command(app, ctx);
  register_slurm_commands(app, ctx);
}

// A command line CLI11 could not parse: says why on stderr; returns the exit code.
int report_parse_error(const CLI::App& app, const CLI::ParseError& e) {
  std::string path;
  const CLI::App* at = deepest_command(app, path);
  if (dynamic_cast<const CLI::RequiredError*>(&e) &&
      std::strcmp(e.what(), "A subcommand is required") == 0) {
    std::vector<std::string> extra = app.remaining(/*recurse=*/true);  // fallthrough sends them up
    if (!extra.empty()) {
      std::string text = "gcr: unknown command '" + display_safe(extra.front()) + "' for '" + path +
                         "'\nhint: run '" + path + " --help' to see the commands\n";
      std::fputs(text.c_str(), stderr);
      return kExitUsage;
    }
    // `gcr` or `gcr image` alone: show what there is to choose from.
    std::string parent = path.substr(0, path.rfind(' ') == std::string::npos ? 0 : path.rfind(' '));
    std::fputs(at->help(parent).c_str(), stderr);
    return kExitUsage;
  }
  std::string text =
      "gcr: " + display_safe(e.what()) + "\nhint: run '" + path + " --help' for usage\n";
  std::fputs(text.c_str(), stderr);
  return kExitUsage;
}

// Runs the selected command (which may set ctx.hint); returns the exit code.
int run_command(Context& ctx) {
  if (!ctx.action) {
    std::fputs("gcr: internal error: no command selected\n", stderr);
    return kExitFailure;
  }
  gcr::Status status = ctx.action();
  // Output first, then the error, so that the error is the last thing on a shared terminal.
  bool output_failed = std::fflush(stdout) != 0 || std::ferror(stdout);
  int output_errno = errno;
  if (!status) return report_error(status.error(), ctx.hint);
  if (output_failed)
    return report_error(gcr::errno_error("writing to standard output", output_errno), "");
  return kExitOk;
}

}  // namespace
}  // namespace gcr::cli

int main(int argc, char** argv) {
  using namespace gcr::cli;
  Context ctx;
  ctx.env_store = gcr::settings().store;  // parses the environment: its warnings come first
  ctx.stdout_tty = ::isatty(STDOUT_FILENO) == 1;
  ctx.stderr_tty = ::isatty(STDERR_FILENO) == 1;

  CLI::App app{
      "gcr: checkpoint running CUDA processes and restore them later, on the same GPU, another "
      "GPU\n"
      "or another host, without changing the program. Checkpoints live in an image store:\n"
      "content-addressed, deduplicated and compressed.",
      "gcr"};
  describe_app(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, e);
  }
  return run_command(ctx);
}
