// gcr image push / pull: copy a checkpoint between two stores, moving only the chunks the
// destination lacks (gcr/store_transfer.h). Either side may be a local directory, a bucket, or the
// store another host's gcrd serves (gcr://HOST:PORT, `gcr daemon --listen`).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <optional>

#include "cmd_image.h"
#include "gcr/human_output.h"
#include "gcr/json.h"
#include "gcrd_client.h"
#include "job_parts.h"
#include "net_store.h"
#include "remote.h"

namespace gcr::cli {
namespace {

struct TransferCliOptions {
  std::string name;        // push: NAME; pull: s3://BUCKET/PREFIX/NAME
  std::string where;       // push: the destination
  std::string tag;         // --name
  std::string token_file;  // --token-file: for gcr://
  bool stage = false;      // --stage: gcr:// only
  bool json = false;
};

// Note [A job across hosts] (daemon/job_link.h): a job's manifest names its other hosts' parts
// (META job_parts, one line each: HOST:PORT ID PIDS). Each part the source holds (the coordinator's
// store after --copy-parts, a bucket they were pushed to) goes along, so that the job can be
// restored from the destination (gcr restore --place) without its old hosts.
struct PartsCopied {
  std::size_t named = 0, copied = 0;
  std::uint64_t copied_bytes = 0;
  std::vector<std::string> missing;  // HOST:PORT of each part the source lacks
};

Result<PartsCopied> copy_job_parts(store::Backend& from, store::Backend& to,
                                   const store::CheckpointId& id, const std::string& source) {
  GCR_TRY_ASSIGN(store::Manifest m, store::read_checkpoint_manifest(from, id));
  GCR_TRY_ASSIGN(std::vector<gcrd::JobPart> named, gcrd::decode_job_parts(m.meta_or("job_parts")));
  PartsCopied out;
  out.named = named.size();
  for (const gcrd::JobPart& p : named) {
    const auto part_id = *store::CheckpointId::from_hex(p.id);  // checked by decode_job_parts
    GCR_TRY_ASSIGN(bool there, store::has_checkpoint(from, part_id));
    if (!there) {
      out.missing.push_back(p.address);
      continue;
    }
    auto r = store::copy_checkpoint(from, to, part_id, {});
    if (!r)
      return std::move(r).context("the job's part of host " + p.address + " in " + source).error();
    ++out.copied;
    out.copied_bytes += r->copied_bytes;
  }
  return out;
}

Status report(const store::TransferReport& r, const PartsCopied& parts, bool json,
              std::string_view verb, const std::string& where,
              std::optional<std::uint64_t> staged) {
  if (!json) {
    print(store::describe_transfer(r, verb, where));
    if (parts.named)
      print("with " + std::to_string(parts.copied) + " of the job's " +
            std::to_string(parts.named) + " other parts (" + format_bytes(parts.copied_bytes) +
            " copied)\n");
    for (const std::string& h : parts.missing)
      std::fprintf(stderr,
                   "gcr: warning: the part of host %s is not in the source: a restore reads it "
                   "from that host (checkpoint the job with --copy-parts to keep every part in "
                   "the coordinator's store)\n",
                   h.c_str());
    if (staged) print("staged on the destination's GPU: " + format_bytes(*staged) + " loaded\n");
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
      .field("elapsed_ns", r.elapsed_ns);
  if (staged) j.field("staged_loaded_bytes", *staged);
  if (parts.named) {
    j.field("job_parts", parts.named)
        .field("job_parts_copied", parts.copied)
        .field("job_parts_copied_bytes", parts.copied_bytes);
    j.key("job_parts_missing").begin_array();
    for (const std::string& h : parts.missing) j.value(h);
    j.end_array();
  }
  j.end_object();
  print(j.take() + "\n");
  return ok();
}

// Either end: a directory or a bucket (StoreLocation), or the store a gcrd serves over the network
// (gcr://HOST:PORT, gcrd --listen; net_store.h), reached with the token in --token-file.
struct End {
  std::unique_ptr<store::Backend> backend;
  std::string text;     // as the user would write it
  std::string address;  // gcr://: HOST:PORT, and its token
  gcrd::NetKey token;
};

constexpr std::string_view kGcrScheme = "gcr://";

Result<End> open_gcrd_end(const std::string& address, const TransferCliOptions& o) {
  if (o.token_file.empty())
    return Error{Errc::invalid_argument,
                 "gcr://" + address +
                     " is a gcrd's store over the network: give its token with --token-file FILE "
                     "(the file its gcr daemon --listen reads)"};
  GCR_TRY_ASSIGN(gcrd::NetKey token, gcrd::read_client_key(o.token_file));
  auto backend = gcrd::open_net_backend(address, token);
  if (!backend) return std::move(backend).context("opening image store gcr://" + address).error();
  return End{std::move(backend).value(), "gcr://" + address, address, token};
}

Result<End> open_end(const store::StoreLocation& location, bool create) {
  GCR_TRY_ASSIGN(auto backend, open_location(location, create));
  return End{std::move(backend), location.text(), {}, {}};
}

Status copy(Context& ctx, End from, const std::string& name, End to, const TransferCliOptions& o,
            std::string_view verb, const std::string& where) {
  bool by_tag = false;
  auto id = store::resolve_checkpoint(*from.backend, name, &by_tag);
  if (!id) {
    if (!from.text.starts_with(kGcrScheme))
      ctx.hint = "gcr --store " + from.text + " image ls shows the names there";
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
  auto r = store::copy_checkpoint(*from.backend, *to.backend, *id, t);
  line.clear();
  if (!r) return std::move(r).error();
  GCR_TRY_ASSIGN(PartsCopied parts, copy_job_parts(*from.backend, *to.backend, *id, from.text));
  std::optional<std::uint64_t> staged;
  if (o.stage) {
    // Note [Staged restore] (daemon/staged.h): the gcrd there loads it onto its GPU now,
    // keeping the regions an earlier stage loaded that did not change, so that a restore of it
    // there (gcr migrate's, or a runtime's through the CRIU plugin) takes them as they are.
    auto loaded = gcrd::net_stage(to.address, to.token, id->hex());
    if (!loaded)
      return std::move(loaded)
          .context("the checkpoint is there; staging it on " + to.text + "'s GPU")
          .error();
    staged = *loaded;
  }
  return report(*r, parts, o.json, verb, where, staged);
}

Status image_push(Context& ctx, const TransferCliOptions& o) {
  GCR_TRY_ASSIGN(store::StoreLocation from_loc, ctx.store_location());
  GCR_TRY_ASSIGN(End from, open_end(from_loc, /*create=*/false));
  End to;
  if (o.where.starts_with(kGcrScheme)) {
    GCR_TRY_ASSIGN(to, open_gcrd_end(o.where.substr(kGcrScheme.size()), o));
  } else {
    std::error_code ec;
    auto cwd = std::filesystem::current_path(ec);
    GCR_TRY_ASSIGN(store::StoreLocation to_loc, store::parse_store_location(o.where, cwd));
    GCR_TRY_ASSIGN(to, open_end(to_loc, /*create=*/true));
  }
  if (o.stage && to.address.empty())
    return Error{Errc::invalid_argument,
                 "--stage asks the gcrd of a gcr://HOST:PORT destination to load the checkpoint "
                 "onto its GPU; " +
                     to.text + " is a store, not a gcrd"};
  std::string where = "to " + to.text;
  return copy(ctx, std::move(from), o.name, std::move(to), o, "pushed", where);
}

Status image_pull(Context& ctx, const TransferCliOptions& o) {
  End from;
  std::string name;
  if (o.name.starts_with(kGcrScheme)) {  // gcr://HOST:PORT/NAME
    std::string rest = o.name.substr(kGcrScheme.size());
    auto slash = rest.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == rest.size())
      return Error{Errc::invalid_argument,
                   "pull takes gcr://HOST:PORT/NAME (the checkpoint NAME in the store of the gcrd "
                   "at HOST:PORT), not '" +
                       o.name + "'"};
    name = rest.substr(slash + 1);
    GCR_TRY_ASSIGN(from, open_gcrd_end(rest.substr(0, slash), o));
  } else {
    auto located = store::split_store_url_and_name(o.name);
    if (!located)
      return Error{Errc::invalid_argument,
                   "pull takes s3://BUCKET/PREFIX/NAME (the checkpoint NAME in the store at "
                   "s3://BUCKET/PREFIX) or gcr://HOST:PORT/NAME, not '" +
                       o.name + "'"};
    name = located->name;
    GCR_TRY_ASSIGN(from, open_end(located->store, /*create=*/false));
  }
  GCR_TRY_ASSIGN(store::StoreLocation to_loc, ctx.store_location());
  GCR_TRY_ASSIGN(End to, open_end(to_loc, /*create=*/true));
  std::string where = "into " + to.text;
  return copy(ctx, std::move(from), name, std::move(to), o, "pulled", where);
}

}  // namespace

void register_image_transfer_commands(CLI::App* image, Context& ctx) {
  {
    auto o = std::make_shared<TransferCliOptions>();
    CLI::App* push = image->add_subcommand(
        "push",
        "Copy a checkpoint to another store (a directory, s3://BUCKET/PREFIX, or gcr://HOST:PORT: "
        "the store of another host's gcr daemon --listen)");
    push->add_option("NAME", o->name, "Tag or id of the checkpoint")->required();
    push->add_option("DEST", o->where, "The store to copy it to")->required();
    push->add_option("--token-file", o->token_file,
                     "For gcr://: the destination's token (the file its gcr daemon --listen reads)")
        ->type_name("FILE");
    push->add_option("--name", o->tag, "Tag it so there (default: NAME, when NAME is a tag)")
        ->type_name("TAG");
    push->add_flag("--stage", o->stage,
                   "gcr:// only: then have that gcrd load it onto its GPU, so that a restore "
                   "there (gcr migrate's, or a container runtime's) finds the unchanged memory "
                   "in place");
    push->add_flag("--json", o->json, "Print JSON: {id, copied_bytes, present_bytes, ...}");
    push->footer(
        "Only chunks DEST does not hold yet are sent; the checkpoint appears there at once, when\n"
        "its manifest is written last. An interrupted push leaves nothing visible: run it again.\n"
        "S3: endpoint, region and credentials come from AWS_ENDPOINT_URL, AWS_REGION,\n"
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or ~/.aws/config and credentials (AWS_PROFILE).\n"
        "gcr://HOST:PORT: the gcrd there writes into its own store (--store of its daemon).");
    push->fallthrough();
    on_run(push, ctx, [&ctx, o] { return image_push(ctx, *o); });
  }
  {
    auto o = std::make_shared<TransferCliOptions>();
    CLI::App* pull = image->add_subcommand(
        "pull", "Copy a checkpoint from a bucket or another host's gcrd into this store");
    pull->add_option("URL", o->name, "s3://BUCKET/PREFIX/NAME or gcr://HOST:PORT/NAME")->required();
    pull->add_option("--token-file", o->token_file,
                     "For gcr://: the source's token (the file its gcr daemon --listen reads)")
        ->type_name("FILE");
    pull->add_option("--name", o->tag, "Tag it so here (default: NAME, when NAME is a tag)")
        ->type_name("TAG");
    pull->add_flag("--json", o->json, "Print JSON: {id, copied_bytes, present_bytes, ...}");
    pull->fallthrough();
    on_run(pull, ctx, [&ctx, o] { return image_pull(ctx, *o); });
  }
}

}  // namespace gcr::cli
