#include "context.h"

#include <cstdio>
#include <system_error>

#include "output.h"

namespace gcr::cli {

std::filesystem::path Context::store_root() const {
  if (!store_option.empty()) return store_option;
  if (env_store && !env_store->empty()) return *env_store;
  return store::Store::default_root();
}

Result<std::shared_ptr<store::Store>> Context::open_store() {
  std::filesystem::path root = store_root();
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
