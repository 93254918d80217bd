// gcr image push / pull: copy a checkpoint between two stores, moving only the chunks the
// destination lacks (store/transfer.h). Either side may be a local directory or a bucket.
#include <CLI/CLI.hpp>

#include <memory>

#include "cmd_image.h"
#include "json.h"
#include "output.h"
#include "remote.h"

namespace gcr::cli {
namespace {

struct TransferCliOptions {
  std::string name;   // push: NAME; pull: s3://BUCKET/PREFIX/NAME
  std::string where;  // push: the destination
  std::string tag;    // --name
  bool json = false;
};

Status report(const store::TransferReport& r, bool json, std::string_view verb,
              const std::string& where) {
  if (!json) {
    print(store::describe_transfer(r, verb, where));
    return ok();
  }
  JsonWriter j;
  j.begin_object()
      .field("id", r.id.hex())
      .field("already_there", r.already_there)
      .field("chunks", r.chunks)
      .field("chunks_present", r.chunks_present)
      .field("chunks_copied", r.chunks_copied)
      .field("logical_bytes", r.logical_bytes)
      .field("present_bytes", r.present_bytes)
      .field("copied_bytes", r.copied_bytes)
      .field("packs", r.packs_written)
      .field("elapsed_ns", r.elapsed_ns)
      .end_object();
  print(j.take() + "\n");
  return ok();
}

Status copy(Context& ctx, const store::StoreLocation& from_loc, const std::string& name,
            const store::StoreLocation& to_loc, const TransferCliOptions& o, std::string_view verb,
            const std::string& where) {
  GCR_TRY_ASSIGN(auto from, open_location(from_loc, /*create=*/false));
  GCR_TRY_ASSIGN(auto to, open_location(to_loc, /*create=*/true));
  bool by_tag = false;
  auto id = store::resolve_checkpoint(*from, name, &by_tag);
  if (!id) {
    ctx.hint = "gcr --store " + from_loc.text() + " image ls shows the names there";
    return std::move(id).error();
  }
  store::TransferOptions t;
  if (!o.tag.empty())
    t.tag = o.tag;
  else if (by_tag)
    t.tag = name;
  ProgressLine line(!o.json && ctx.stderr_tty,
                    std::string(verb == "pushed" ? "pushing " : "pulling ") + where);
  t.progress = [&line](std::uint64_t done, std::uint64_t total) { line.update(done, total); };
  auto r = store::copy_checkpoint(*from, *to, *id, t);
  line.clear();
  if (!r) return std::move(r).error();
  return report(*r, o.json, verb, where);
}

Status image_push(Context& ctx, const TransferCliOptions& o) {
  GCR_TRY_ASSIGN(store::StoreLocation from, ctx.store_location());
  std::error_code ec;
  auto cwd = std::filesystem::current_path(ec);
  GCR_TRY_ASSIGN(store::StoreLocation to, store::parse_store_location(o.where, cwd));
  return copy(ctx, from, o.name, to, o, "pushed", "to " + to.text());
}

Status image_pull(Context& ctx, const TransferCliOptions& o) {
  auto located = store::split_store_url_and_name(o.name);
  if (!located)
    return Error{Errc::invalid_argument,
                 "pull takes s3://BUCKET/PREFIX/NAME (the checkpoint NAME in the store at "
                 "s3://BUCKET/PREFIX), not '" +
                     o.name + "'"};
  GCR_TRY_ASSIGN(store::StoreLocation to, ctx.store_location());
  return copy(ctx, located->store, located->name, to, o, "pulled", "into " + to.text());
}

}  // namespace

void register_image_transfer_commands(CLI::App* image, Context& ctx) {
  {
    auto o = std::make_shared<TransferCliOptions>();
    CLI::App* push = image->add_subcommand(
        "push", "Copy a checkpoint to another store (s3://BUCKET/PREFIX or a directory)");
    push->add_option("NAME", o->name, "Tag or id of the checkpoint")->required();
    push->add_option("DEST", o->where, "The store to copy it to")->required();
    push->add_option("--name", o->tag, "Tag it so there (default: NAME, when NAME is a tag)")
        ->type_name("TAG");
    push->add_flag("--json", o->json, "Print JSON: {id, copied_bytes, present_bytes, ...}");
    push->footer(
        "Only chunks DEST does not hold yet are sent; the checkpoint appears there at once, when\n"
        "its manifest is written last. An interrupted push leaves nothing visible: run it again.\n"
        "S3: endpoint, region and credentials come from AWS_ENDPOINT_URL, AWS_REGION,\n"
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or ~/.aws/config and credentials (AWS_PROFILE).");
    push->fallthrough();
    on_run(push, ctx, [&ctx, o] { return image_push(ctx, *o); });
  }
  {
    auto o = std::make_shared<TransferCliOptions>();
    CLI::App* pull =
        image->add_subcommand("pull", "Copy a checkpoint from a bucket into this store");
    pull->add_option("URL", o->name, "s3://BUCKET/PREFIX/NAME")->required();
    pull->add_option("--name", o->tag, "Tag it so here (default: NAME, when NAME is a tag)")
        ->type_name("TAG");
    pull->add_flag("--json", o->json, "Print JSON: {id, copied_bytes, present_bytes, ...}");
    pull->fallthrough();
    on_run(pull, ctx, [&ctx, o] { return image_pull(ctx, *o); });
  }
}

}  // namespace gcr::cli
