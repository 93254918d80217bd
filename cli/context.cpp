#include "context.h"

#include <cstdio>
#include <system_error>

#include "gcr/human_output.h"

namespace gcr::cli {

std::string Context::store_text() const {
  if (!store_option.empty()) return store_option;
  if (env_store && !env_store->empty()) return *env_store;
  return store::Store::default_root().string();
}

Result<store::StoreLocation> Context::store_location() const {
  std::error_code ec;
  auto cwd = std::filesystem::current_path(ec);
  auto loc = store::parse_store_location(store_text(), ec ? std::filesystem::path() : cwd);
  if (!loc) {
    return std::move(loc).context(store_option.empty() ? "GCR_STORE" : "--store");
  }
  return loc;
}

std::filesystem::path Context::store_root() const {
  auto loc = store_location();
  if (loc && !loc->is_s3()) return loc->directory;
  return store_text();
}

Result<std::shared_ptr<store::Store>> Context::open_store() {
  GCR_TRY_ASSIGN(store::StoreLocation loc, store_location());
  if (loc.is_s3()) {
    hint = "gcr image pull " + loc.text() + "/NAME copies a checkpoint into a local store";
    return make_error(Errc::unsupported,
                      "this command works on a local store, and " + loc.text() + " is a bucket");
  }
  std::filesystem::path root = loc.directory;
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory)
      return make_error(errc_from_errno(ec.value()),
                        "image store '" + root.string() + "': " + ec.message());
    hint = store_option.empty()
               ? "checkpoints create the store; use --store DIR or GCR_STORE for another one"
               : "check the --store path; checkpoints create a store when they first write";
    return make_error(Errc::not_found, "no image store at '" + root.string() + "'");
  }
  store::StoreOptions options;
  options.root = root;
  auto s = store::Store::open(options, /*create=*/false);
  if (!s) return std::move(s).context("opening image store '" + root.string() + "'");
  return s;
}

void on_run(CLI::App* app, Context& ctx, std::function<Status()> action) {
  app->callback([&ctx, action = std::move(action)] { ctx.action = action; });
}

void print(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace gcr::cli
