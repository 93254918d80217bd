// `gcr image ls|inspect|verify|rm|gc|du`: the image store seen from the command line. Each command
// has a human form (tables, sizes like "1.5 GiB") and a --json form whose field names are stable.
// All the work is the store's (gcr/store.h); this file parses names, prints, and turns findings
// such as verify's problems into an Error with the right code.
//
// Names given by the user are checked here before the store sees them (a tag, or an id or id
// prefix: both match valid_tag()), so that "../etc" is refused as a usage error whatever the store
// would make of it.

#include "cmd_image.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gcr/bucket_gc.h"
#include "gcr/bucket_usage.h"
#include "gcr/bucket_verify.h"
#include "gcr/human_output.h"
#include "gcr/json.h"
#include "gcr/manifest.h"
#include "gcr/process_tree.h"
#include "gcr/store.h"
#include "gcr/store_backend_list.h"
#include "gcr/store_transfer.h"
#include "remote.h"

namespace gcr::cli {
namespace {

using store::CheckpointId;
using store::CheckpointInfo;
using store::DedupClass;
using store::Manifest;
using store::ObjectEntry;
using store::ObjectKind;

constexpr std::size_t kShortIdDigits = 12;
constexpr const char* kSeeNamesHint = "run 'gcr image ls' to see names";

Error with_context(Error e, const std::string& what) {
  e.message = what + ": " + e.message;
  return e;
}

std::string short_id(const CheckpointId& id) {
  return id.hex().substr(0, kShortIdDigits);
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string plural(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::int64_t now_unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<std::int64_t> meta_int(const std::map<std::string, std::string>& meta,
                                     const std::string& key) {
  auto it = meta.find(key);
  if (it == meta.end() || it->second.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return static_cast<std::int64_t>(v);
}

std::optional<std::uint64_t> stat(const std::map<std::string, std::uint64_t>& stats,
                                  const std::string& key) {
  auto it = stats.find(key);
  if (it == stats.end()) return std::nullopt;
  return it->second;
}

std::string meta_str(const std::map<std::string, std::string>& meta, const std::string& key) {
  auto it = meta.find(key);
  return it == meta.end() ? std::string() : it->second;
}

// The cmdline meta value: arguments separated by NUL.
std::vector<std::string> split_cmdline(const std::string& value) {
  std::vector<std::string> args;
  std::string cur;
  for (char c : value) {
    if (c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) args.push_back(cur);
  return args;
}

std::string cmdline_display(const std::string& value) {
  std::vector<std::string> args;
  for (const auto& a : split_cmdline(value)) {
    std::string s = display_safe(a);
    if (s.empty() || s.find_first_of(" '\"") != std::string::npos) s = "'" + s + "'";
    args.push_back(s);
  }
  return join(args, " ");
}

std::string hex_address(std::uint64_t address) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, address);
  return buf;
}

std::string octal_mode(std::uint32_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

const char* kind_name(ObjectKind kind) {
  switch (kind) {
    case ObjectKind::device_region:
      return "region";
    case ObjectKind::file:
      return "file";
    case ObjectKind::blob:
      return "blob";
  }
  return "unknown";
}

const char* dedup_name(DedupClass d) {
  switch (d) {
    case DedupClass::fresh:
      return "new";
    case DedupClass::zero:
      return "zero";
    case DedupClass::self:
      return "within_checkpoint";
    case DedupClass::lineage:
      return "lineage";
    case DedupClass::other:
      return "other_checkpoint";
  }
  return "unknown";
}

// Bytes of an object's (or a checkpoint's) chunks by where they came from.
struct DedupBytes {
  std::uint64_t fresh = 0, zero = 0, self = 0, lineage = 0, other = 0;
  void add(const store::ChunkRef& c) {
    switch (c.dedup) {
      case DedupClass::fresh:
        fresh += c.raw_bytes;
        break;
      case DedupClass::zero:
        zero += c.raw_bytes;
        break;
      case DedupClass::self:
        self += c.raw_bytes;
        break;
      case DedupClass::lineage:
        lineage += c.raw_bytes;
        break;
      case DedupClass::other:
        other += c.raw_bytes;
        break;
    }
  }
};

DedupBytes object_dedup(const Manifest& m, const ObjectEntry& o) {
  DedupBytes d;
  // decode_manifest checked the range; stay inside it regardless.
  std::uint64_t end = std::min<std::uint64_t>(o.first_chunk + o.chunk_count, m.chunks.size());
  for (std::uint64_t i = std::min<std::uint64_t>(o.first_chunk, end); i < end; ++i)
    d.add(m.chunks[i]);
  return d;
}

// Tags by checkpoint, from list().
using TagIndex = std::map<CheckpointId, std::vector<std::string>>;

TagIndex index_tags(const std::vector<CheckpointInfo>& infos) {
  TagIndex index;
  for (const auto& info : infos) index[info.id] = info.tags;
  return index;
}

// "3f2a9c1e7b20 (job-1, latest)" or just the short id.
std::string id_with_tags(const CheckpointId& id, const TagIndex& tags, bool full_id = false) {
  std::string s = full_id ? id.hex() : short_id(id);
  auto it = tags.find(id);
  if (it != tags.end() && !it->second.empty()) {
    std::vector<std::string> safe;
    for (const auto& t : it->second) safe.push_back(display_safe(t));
    s += " (" + join(safe, ", ") + ")";
  }
  return s;
}

// A name from the command line -> a checkpoint id. A name must look like a tag or an id (prefix)
// before the store is asked, so that nothing else can reach a path.
Status check_name(Context& ctx, const std::string& name) {
  if (store::valid_tag(name)) return ok();
  ctx.hint =
      "a name is a tag (letters, digits, '.', '_', '-'; up to 128 characters) or a checkpoint id";
  return make_error(Errc::invalid_argument, "invalid checkpoint name '" + name + "'");
}

// Commands call check_name() on every name before opening the store, so that a hostile name is a
// usage error whatever the state of the store; resolve_name() checks again.
Result<CheckpointId> resolve_name(Context& ctx, const store::Store& s, const std::string& name) {
  GCR_TRY(check_name(ctx, name));
  auto id = s.resolve(name);
  if (!id) {
    // The store's message says what is missing (no such name, a tag whose checkpoint is gone,
    // an ambiguous prefix); the store's path helps when --store or GCR_STORE is not the store
    // the user meant.
    Error e = std::move(id).error();
    if (e.code == Errc::not_found || e.code == Errc::invalid_argument) {
      ctx.hint = kSeeNamesHint;
      e.message += " (store '" + ctx.store_root().string() + "')";
    }
    return e;
  }
  return id;
}

void sort_by_creation(std::vector<CheckpointInfo>& infos) {
  std::stable_sort(infos.begin(), infos.end(),
                   [](const CheckpointInfo& a, const CheckpointInfo& b) {
                     auto ta = meta_int(a.meta, "created_unix_ns").value_or(0);
                     auto tb = meta_int(b.meta, "created_unix_ns").value_or(0);
                     if (ta != tb) return ta < tb;
                     return a.id < b.id;
                   });
}

void json_string_array(JsonWriter& j, const std::vector<std::string>& items) {
  j.begin_array();
  for (const auto& s : items) j.value(s);
  j.end_array();
}

void json_meta_and_stats(JsonWriter& j, const std::map<std::string, std::string>& meta,
                         const std::map<std::string, std::uint64_t>& stats) {
  j.key("meta").begin_object();
  for (const auto& [k, v] : meta) j.field(k, v);
  j.end_object();
  j.key("stats").begin_object();
  for (const auto& [k, v] : stats) j.field(k, v);
  j.end_object();
}

// The fields ls and inspect share.
void json_checkpoint_summary(JsonWriter& j, const CheckpointId& id,
                             const std::vector<std::string>& tags,
                             const std::map<std::string, std::string>& meta) {
  j.field("id", id.hex());
  j.key("tags");
  json_string_array(j, tags);
  j.field("name", meta_str(meta, "name"));
  std::string parent = meta_str(meta, "parent");
  j.key("parent");
  if (parent.empty())
    j.null();
  else
    j.value(parent);
  j.field("kind", meta_str(meta, "kind"));
  if (auto t = meta_int(meta, "created_unix_ns")) {
    j.field("created_unix_ns", *t);
    j.field("created", format_utc_time(*t));
  } else {
    j.key("created_unix_ns").null();
    j.key("created").null();
  }
  j.key("pid");
  if (auto pid = meta_int(meta, "pid"))
    j.value(*pid);
  else
    j.null();
  j.key("cmdline");
  json_string_array(j, split_cmdline(meta_str(meta, "cmdline")));
}

std::string size_cell(const std::map<std::string, std::uint64_t>& stats, const char* key) {
  auto v = stat(stats, key);
  return v ? format_bytes(*v) : "-";
}

// ---------------------------------------------------------------------------------------------
// gcr image ls

Status image_ls(Context& ctx, bool json, bool all) {
  GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
  std::vector<store::CheckpointInfo> infos;
  if (location.is_s3()) {
    GCR_TRY_ASSIGN(auto remote, open_location(location, /*create=*/false));
    GCR_TRY_ASSIGN(infos, store::list_backend_checkpoints(*remote));
  } else {
    GCR_TRY_ASSIGN(auto store, ctx.open_store());
    GCR_TRY_ASSIGN(infos, store->list());
  }
  sort_by_creation(infos);
  // Anyone but root sees only their own checkpoints (META owner_uid; docs/security.md) in a store
  // they share; one written before owners were recorded is shown.
  if (geteuid() != 0) {
    const std::string me = std::to_string(geteuid());
    std::erase_if(infos, [&](const auto& info) {
      std::string owner = meta_str(info.meta, "owner_uid");
      return !owner.empty() && owner != me;
    });
  }
  // Note [A job across hosts] (daemon/job_link.h): this host's part of a job is named once the job
  // committed; one without a name is a job that aborted or is still in doubt.
  if (!all)
    std::erase_if(infos, [](const auto& info) {
      return meta_str(info.meta, "job_part") == "1" && info.tags.empty();
    });
  TagIndex tags = index_tags(infos);

  if (json) {
    JsonWriter j;
    j.begin_object().field("store", ctx.store_root().string()).key("checkpoints").begin_array();
    for (const auto& info : infos) {
      j.begin_object();
      json_checkpoint_summary(j, info.id, info.tags, info.meta);
      json_meta_and_stats(j, info.meta, info.stats);
      j.end_object();
    }
    j.end_array().end_object();
    print(j.take());
    return ok();
  }

  if (infos.empty()) {
    print("no checkpoints in store '" + display_safe(ctx.store_root().string()) + "'\n");
    return ok();
  }
  using A = Table::Align;
  Table t({{"ID"},
           {"TAGS"},
           {"CREATED"},
           {"KIND"},
           {"PID", A::right},
           {"PARENT"},
           {"SIZE", A::right},
           {"WRITTEN", A::right}});
  std::int64_t now = now_unix_ns();
  for (const auto& info : infos) {
    std::vector<std::string> safe_tags;
    for (const auto& tag : info.tags) safe_tags.push_back(display_safe(tag));
    auto created = meta_int(info.meta, "created_unix_ns");
    auto parent = CheckpointId::from_hex(meta_str(info.meta, "parent"));
    std::string kind = meta_str(info.meta, "kind");
    std::string pid = meta_str(info.meta, "pid");
    t.add_row({short_id(info.id), safe_tags.empty() ? "-" : join(safe_tags, ","),
               created ? format_age(*created, now) : "-", kind.empty() ? "-" : display_safe(kind),
               pid.empty() ? "-" : display_safe(pid), parent ? short_id(*parent) : "-",
               size_cell(info.stats, "logical_bytes"), size_cell(info.stats, "stored_bytes")});
  }
  print(t.render());
  return ok();
}

// ---------------------------------------------------------------------------------------------
// gcr image inspect NAME

struct InspectOptions {
  std::string name;
  bool json = false;
  bool chunks = false;
};

// One "  label        value" line of inspect's human form.
void append_row(std::string& out, const std::string& label, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "  %-12s ", label.c_str());
  out += buf + value + "\n";
}

// Tags, name, parent, creation time, kind and process.
void append_origin_rows(std::string& out, const Manifest& m, const TagIndex& tags) {
  auto tag_it = tags.find(m.id);
  if (tag_it != tags.end() && !tag_it->second.empty()) {
    std::vector<std::string> safe;
    for (const auto& t : tag_it->second) safe.push_back(display_safe(t));
    append_row(out, "tags", join(safe, ", "));
  }
  if (auto name = m.meta_or("name"); !name.empty()) append_row(out, "name", display_safe(name));
  if (auto parent = m.meta_or("parent"); !parent.empty()) {
    auto pid = CheckpointId::from_hex(parent);
    append_row(
        out, "parent",
        pid ? id_with_tags(*pid, tags, /*full_id=*/true) + (tags.count(*pid) ? "" : " (removed)")
            : display_safe(parent));
  }
  if (auto t = meta_int(m.meta, "created_unix_ns"))
    append_row(out, "created", format_local_time(*t) + " (" + format_age(*t, now_unix_ns()) + ")");
  if (auto kind = m.meta_or("kind"); !kind.empty()) append_row(out, "kind", display_safe(kind));
  if (auto pid = m.meta_or("pid"); !pid.empty()) {
    std::string cmd = cmdline_display(m.meta_or("cmdline"));
    append_row(out, "process", "pid " + display_safe(pid) + (cmd.empty() ? "" : ": " + cmd));
  }
}

// How the process was connected: what a restore reconnects (docs/processes.md).
void append_connection_rows(std::string& out, const Manifest& m) {
  auto files = criu::decode_files(m.meta_or("files"));
  if (!files || m.meta_or("pid").empty()) return;
  const pid_t root = static_cast<pid_t>(std::atoll(m.meta_or("pid").c_str()));
  std::size_t others = 0;
  for (const auto& f : *files) {
    if (f.pid != root || f.fd > 2) {
      ++others;
      continue;
    }
    std::string how = criu::file_kind_name(f.kind);
    if (f.kind == criu::FileKind::regular)
      how = (f.flags & O_ACCMODE) == O_RDONLY ? "file" : "log";
    else if (f.kind == criu::FileKind::pipe || f.kind == criu::FileKind::terminal)
      how += f.external ? ", outside the process tree" : "";
    append_row(out,
               f.fd == 0   ? "stdin"
               : f.fd == 1 ? "stdout"
                           : "stderr",
               display_safe(f.path) + " (" + how + ")");
  }
  if (others)
    append_row(out, "other files", std::to_string(others) + " (files, pipes and terminals)");
  if (m.meta_or("shell_job") == "1")
    append_row(out, "session", "a shell job (not a session leader)");
}

// Host, GPUs and driver.
void append_machine_rows(std::string& out, const Manifest& m) {
  if (auto host = m.meta_or("host"); !host.empty()) append_row(out, "host", display_safe(host));
  for (int i = 0;; ++i) {
    std::string prefix = "gpu." + std::to_string(i) + ".";
    auto name = m.meta.find(prefix + "name");
    auto uuid = m.meta.find(prefix + "uuid");
    if (name == m.meta.end() && uuid == m.meta.end()) break;
    std::string text = name != m.meta.end() ? display_safe(name->second) : "?";
    if (uuid != m.meta.end()) text += " (" + display_safe(uuid->second) + ")";
    append_row(out, "gpu " + std::to_string(i), text);
  }
  if (auto drv = m.meta_or("driver_version"); !drv.empty())
    append_row(out, "driver", display_safe(drv));
}

void append_size_rows(std::string& out, const Manifest& m) {
  // Sizes: from the manifest's STATS where present, else computed from its chunks.
  DedupBytes d;
  std::uint64_t logical = 0;
  for (const auto& c : m.chunks) {
    d.add(c);
    logical += c.raw_bytes;
  }
  logical = stat(m.stats, "logical_bytes").value_or(logical);
  std::string size = format_bytes(logical) + " logical";
  if (auto stored = stat(m.stats, "stored_bytes"))
    size += ", " + format_bytes(*stored) + " written (" + format_percent(*stored, logical) + ")";
  append_row(out, "size", size);
  append_row(out, "dedup",
             "new " + format_bytes(d.fresh) + ", zero " + format_bytes(d.zero) +
                 ", within checkpoint " + format_bytes(d.self) + ", lineage " +
                 format_bytes(d.lineage) + ", other checkpoints " + format_bytes(d.other));
  append_row(out, "chunks", std::to_string(m.chunks.size()));
}

void append_timing_row(std::string& out, const Manifest& m) {
  std::vector<std::string> timings;
  for (const auto& [k, v] : m.meta) {
    if (k.rfind("timing.", 0) == 0 && k.size() > 10 && k.ends_with("_ns")) {
      char* end = nullptr;
      long long ns = std::strtoll(v.c_str(), &end, 10);
      if (end && *end == '\0')
        timings.push_back(display_safe(k.substr(7, k.size() - 10)) + " " +
                          format_duration(std::chrono::nanoseconds(ns)));
    }
  }
  if (auto w = stat(m.stats, "write_ns"))
    timings.push_back("write " + format_duration(std::chrono::nanoseconds(*w)));
  if (!timings.empty()) append_row(out, "timing", join(timings, ", "));
}

// Meta keys not shown above, so that nothing in the manifest is hidden.
void append_other_meta_rows(std::string& out, const Manifest& m) {
  static const std::set<std::string> kShown = {
      "name", "parent", "created_unix_ns", "kind", "pid", "cmdline", "host", "driver_version"};
  for (const auto& [k, v] : m.meta) {
    if (kShown.count(k) || k.rfind("gpu.", 0) == 0 || k.rfind("timing.", 0) == 0) continue;
    append_row(out, display_safe(k), display_safe(v));
  }
}

void append_region_table(std::string& out, const Manifest& m,
                         const std::vector<const ObjectEntry*>& regions) {
  if (regions.empty()) return;
  using A = Table::Align;
  Table t({{"ADDRESS"},
           {"DEVICE", A::right},
           {"SIZE", A::right},
           {"CHUNKS", A::right},
           {"DIRTY"},
           {"NEW", A::right},
           {"ZERO", A::right},
           {"DEDUP", A::right}});
  for (const auto* o : regions) {
    DedupBytes od = object_dedup(m, *o);
    t.add_row({hex_address(o->address), std::to_string(o->device), format_bytes(o->size),
               std::to_string(o->chunk_count), o->dirty ? "yes" : "no", format_bytes(od.fresh),
               format_bytes(od.zero), format_bytes(od.self + od.lineage + od.other)});
  }
  out += "\ndevice regions (" + std::to_string(regions.size()) + ")\n" + t.render("  ");
}

void append_file_table(std::string& out, const Manifest& m,
                       const std::vector<const ObjectEntry*>& files) {
  if (files.empty()) return;
  using A = Table::Align;
  Table t({{"MODE"}, {"SIZE", A::right}, {"CHUNKS", A::right}, {"NEW", A::right}, {"NAME"}});
  for (const auto* o : files) {
    DedupBytes od = object_dedup(m, *o);
    t.add_row({octal_mode(o->mode), format_bytes(o->size), std::to_string(o->chunk_count),
               format_bytes(od.fresh), display_safe(o->name)});
  }
  out += "\nfiles (" + std::to_string(files.size()) + ")\n" + t.render("  ");
}

void append_blob_table(std::string& out, const Manifest& m,
                       const std::vector<const ObjectEntry*>& blobs) {
  if (blobs.empty()) return;
  using A = Table::Align;
  Table t({{"SIZE", A::right}, {"CHUNKS", A::right}, {"NEW", A::right}, {"NAME"}});
  for (const auto* o : blobs) {
    DedupBytes od = object_dedup(m, *o);
    t.add_row({format_bytes(o->size), std::to_string(o->chunk_count), format_bytes(od.fresh),
               display_safe(o->name)});
  }
  out += "\nblobs (" + std::to_string(blobs.size()) + ")\n" + t.render("  ");
}

// The device regions, files and blobs, a table for each kind present.
void append_object_tables(std::string& out, const Manifest& m) {
  std::vector<const ObjectEntry*> regions, files, blobs;
  for (const auto& o : m.objects) {
    if (o.kind == ObjectKind::device_region)
      regions.push_back(&o);
    else if (o.kind == ObjectKind::file)
      files.push_back(&o);
    else
      blobs.push_back(&o);
  }
  append_region_table(out, m, regions);
  append_file_table(out, m, files);
  append_blob_table(out, m, blobs);
}

void append_chunk_table(std::string& out, const Manifest& m) {
  using A = Table::Align;
  Table t({{"#", A::right}, {"CHUNK"}, {"SIZE", A::right}, {"SOURCE"}});
  for (std::size_t i = 0; i < m.chunks.size(); ++i) {
    const auto& c = m.chunks[i];
    t.add_row({std::to_string(i), c.id.hex(), format_bytes(c.raw_bytes), dedup_name(c.dedup)});
  }
  out += "\nchunks (" + std::to_string(m.chunks.size()) + ")\n" + t.render("  ");
}

void print_inspect_human(const Manifest& m, const TagIndex& tags, bool with_chunks) {
  std::string out;
  out += "checkpoint " + m.id.hex() + "\n";
  append_origin_rows(out, m, tags);
  append_connection_rows(out, m);
  append_machine_rows(out, m);
  append_size_rows(out, m);
  append_timing_row(out, m);
  append_other_meta_rows(out, m);
  append_object_tables(out, m);
  if (with_chunks) append_chunk_table(out, m);
  print(out);
}

void print_inspect_json(const Manifest& m, const TagIndex& tags, bool with_chunks) {
  JsonWriter j;
  j.begin_object();
  auto tag_it = tags.find(m.id);
  json_checkpoint_summary(
      j, m.id, tag_it == tags.end() ? std::vector<std::string>{} : tag_it->second, m.meta);
  json_meta_and_stats(j, m.meta, m.stats);
  j.key("objects").begin_array();
  for (const auto& o : m.objects) {
    DedupBytes od = object_dedup(m, o);
    j.begin_object().field("kind", kind_name(o.kind)).field("name", o.name);
    if (o.kind == ObjectKind::device_region) {
      j.field("address", hex_address(o.address)).field("device", o.device).field("dirty", o.dirty);
    }
    if (o.kind == ObjectKind::file) j.field("mode", octal_mode(o.mode));
    j.field("size", o.size).field("first_chunk", o.first_chunk).field("chunk_count", o.chunk_count);
    j.field("new_bytes", od.fresh)
        .field("zero_bytes", od.zero)
        .field("dup_self_bytes", od.self)
        .field("dup_lineage_bytes", od.lineage)
        .field("dup_other_bytes", od.other);
    j.end_object();
  }
  j.end_array();
  if (with_chunks) {
    j.key("chunks").begin_array();
    for (const auto& c : m.chunks) {
      j.begin_object()
          .field("id", c.id.hex())
          .field("raw_bytes", c.raw_bytes)
          .field("zero", c.zero)
          .field("dedup", dedup_name(c.dedup))
          .end_object();
    }
    j.end_array();
  }
  j.end_object();
  print(j.take());
}

Status image_inspect(Context& ctx, const InspectOptions& o) {
  GCR_TRY(check_name(ctx, o.name));
  GCR_TRY_ASSIGN(auto store, ctx.open_store());
  GCR_TRY_ASSIGN(CheckpointId id, resolve_name(ctx, *store, o.name));
  GCR_TRY_ASSIGN(Manifest m, store->read_manifest(id));
  GCR_TRY_ASSIGN(auto infos, store->list());
  TagIndex tags = index_tags(infos);
  if (o.json)
    print_inspect_json(m, tags, o.chunks);
  else
    print_inspect_human(m, tags, o.chunks);
  return ok();
}

// ---------------------------------------------------------------------------------------------
// gcr image verify [NAME]

struct VerifyOptions {
  std::optional<std::string> name;
  bool json = false;
};

// A name in a bucket store -> its checkpoint id.
Result<CheckpointId> resolve_remote_name(Context& ctx, store::Backend& remote,
                                         const std::string& name) {
  GCR_TRY(check_name(ctx, name));
  auto id = store::resolve_checkpoint(remote, name);
  if (!id && (id.error().code == Errc::not_found || id.error().code == Errc::invalid_argument)) {
    ctx.hint = kSeeNamesHint;
  }
  return id;
}

// Verifies the named checkpoint (or all) in the store at `location`, with a progress line on
// stderr that is cleared before this returns.
Result<store::VerifyReport> verify_with_progress(Context& ctx, const VerifyOptions& o,
                                                 const store::StoreLocation& location) {
  ProgressLine progress(ctx.stderr_tty, "verifying");
  auto on_progress = [&progress](std::uint64_t done, std::uint64_t total) {
    progress.update(done, total);
  };
  Result<store::VerifyReport> r = store::VerifyReport{};
  if (location.is_s3()) {
    GCR_TRY_ASSIGN(auto remote, open_location(location, /*create=*/false));
    std::optional<CheckpointId> id;
    if (o.name) {
      GCR_TRY_ASSIGN(id, resolve_remote_name(ctx, *remote, *o.name));
    }
    r = store::verify_backend(*remote, id, on_progress);
  } else {
    GCR_TRY_ASSIGN(auto store, ctx.open_store());
    std::optional<CheckpointId> id;
    if (o.name) {
      GCR_TRY_ASSIGN(id, resolve_name(ctx, *store, *o.name));
    }
    r = store->verify(id, on_progress);
  }
  progress.clear();
  if (!r) return with_context(std::move(r).error(), "verify");
  return r;
}

void print_verify_json(const store::VerifyReport& report,
                       std::chrono::steady_clock::duration elapsed) {
  JsonWriter j;
  j.begin_object()
      .field("ok", report.problems.empty())
      .field("checkpoints", report.checkpoints)
      .field("chunks", report.chunks)
      .field("bytes", report.bytes)
      .field("elapsed_ns",
             static_cast<std::int64_t>(
                 std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()));
  j.key("problems").begin_array();
  for (const auto& p : report.problems) {
    j.begin_object()
        .field("checkpoint", p.checkpoint)
        .field("object", p.object)
        .field("chunk", p.chunk)
        .field("what", p.what)
        .end_object();
  }
  j.end_array().end_object();
  print(j.take());
}

// The problems, grouped by checkpoint, in the order the store found them.
std::string verify_problems_text(const store::VerifyReport& report) {
  std::string out;
  std::vector<std::string> order;
  std::map<std::string, std::vector<const store::VerifyProblem*>> by_checkpoint;
  for (const auto& p : report.problems) {
    if (!by_checkpoint.count(p.checkpoint)) order.push_back(p.checkpoint);
    by_checkpoint[p.checkpoint].push_back(&p);
  }
  for (const auto& c : order) {
    const auto& problems = by_checkpoint[c];
    out += "checkpoint " + (c.empty() ? std::string("(store)") : display_safe(c)) + ": " +
           plural(problems.size(), "problem", "problems") + "\n";
    for (const auto* p : problems) {
      std::string where;
      if (!p->object.empty()) where += display_safe(p->object);
      if (!p->chunk.empty())
        where += std::string(where.empty() ? "" : ", ") + "chunk " + display_safe(p->chunk);
      out += "  " + (where.empty() ? "" : where + ": ") + display_safe(p->what) + "\n";
    }
  }
  return out;
}

void print_verify_human(const store::VerifyReport& report,
                        std::chrono::steady_clock::duration elapsed) {
  std::string out = verify_problems_text(report);
  out += "verified " + plural(report.checkpoints, "checkpoint", "checkpoints") + ", " +
         plural(report.chunks, "chunk", "chunks") + ", " + format_bytes(report.bytes) + " in " +
         format_duration(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed)) + " (" +
         format_rate(report.bytes, std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed)) +
         "): " +
         (report.problems.empty() ? "no problems"
                                  : plural(report.problems.size(), "problem", "problems")) +
         "\n";
  print(out);
}

Status image_verify(Context& ctx, const VerifyOptions& o) {
  if (o.name) GCR_TRY(check_name(ctx, *o.name));
  GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
  auto start = std::chrono::steady_clock::now();
  GCR_TRY_ASSIGN(store::VerifyReport report, verify_with_progress(ctx, o, location));
  auto elapsed = std::chrono::steady_clock::now() - start;

  std::set<std::string> bad_checkpoints;
  for (const auto& p : report.problems) bad_checkpoints.insert(p.checkpoint);

  if (o.json)
    print_verify_json(report, elapsed);
  else
    print_verify_human(report, elapsed);

  if (!report.problems.empty()) {
    ctx.hint = "restoring an affected checkpoint would fail; 'gcr image rm NAME' removes one";
    return make_error(Errc::corrupt_image,
                      "verify found " + plural(report.problems.size(), "problem", "problems") +
                          " in " + plural(bad_checkpoints.size(), "checkpoint", "checkpoints"));
  }
  return ok();
}

// ---------------------------------------------------------------------------------------------
// gcr image rm NAME...

struct RmOptions {
  std::vector<std::string> names;
  bool json = false;
};

// Removes the checkpoints in turn, saying what went (with the tags removed), up to the first
// failure. `remove` removes one and returns the tags that named it.
Status remove_checkpoints(
    const RmOptions& o, const std::vector<CheckpointId>& ids,
    const std::function<Result<std::vector<std::string>>(const CheckpointId&)>& remove,
    std::string_view gc_hint) {
  JsonWriter j;
  if (o.json) j.begin_object().key("removed").begin_array();
  Status result;
  for (const auto& id : ids) {
    auto r = remove(id);
    if (!r) {
      result = std::move(r).error();
      break;
    }
    if (o.json) {
      j.begin_object().field("id", id.hex()).key("tags");
      json_string_array(j, *r);
      j.end_object();
    } else {
      print("removed " + id_with_tags(id, TagIndex{{id, *r}}, /*full_id=*/true) + "\n");
    }
  }
  if (o.json) {
    j.end_array().end_object();
    print(j.take());
  } else if (result) {
    print(std::string(gc_hint));
  }
  return result;
}

// Every name resolved before anything is removed, so that a typo removes nothing.
Result<std::vector<CheckpointId>> resolve_all(
    const std::vector<std::string>& names,
    const std::function<Result<CheckpointId>(const std::string&)>& resolve) {
  std::vector<CheckpointId> ids;
  for (const auto& name : names) {
    GCR_TRY_ASSIGN(CheckpointId id, resolve(name));
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

Status image_rm(Context& ctx, const RmOptions& o) {
  for (const auto& name : o.names) GCR_TRY(check_name(ctx, name));
  GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
  if (location.is_s3()) {
    GCR_TRY_ASSIGN(auto remote, open_location(location, /*create=*/false));
    GCR_TRY_ASSIGN(auto ids, resolve_all(o.names, [&](const std::string& name) {
                     return resolve_remote_name(ctx, *remote, name);
                   }));
    return remove_checkpoints(
        o, ids,
        [&](const CheckpointId& id) -> Result<std::vector<std::string>> {
          auto r = store::remove_backend_checkpoint(*remote, id);
          if (!r) {
            return with_context(std::move(r).error(),
                                "removing checkpoint " + id.hex() + " from " + location.text());
          }
          return r;
        },
        "run 'gcr image gc' to free the space no other checkpoint uses (after its grace "
        "period)\n");
  }
  GCR_TRY_ASSIGN(auto store, ctx.open_store());
  GCR_TRY_ASSIGN(auto ids, resolve_all(o.names, [&](const std::string& name) {
                   return resolve_name(ctx, *store, name);
                 }));
  GCR_TRY_ASSIGN(auto infos, store->list());
  TagIndex tags = index_tags(infos);
  return remove_checkpoints(
      o, ids,
      [&](const CheckpointId& id) -> Result<std::vector<std::string>> {
        GCR_TRY(store->remove(id).context("removing checkpoint " + id.hex()));
        return tags[id];
      },
      "run 'gcr image gc' to free the space no other checkpoint uses\n");
}

// ---------------------------------------------------------------------------------------------
// gcr image gc

struct GcOptions {
  bool json = false;
  std::optional<std::string> grace;
  bool dry_run = false;
};

// "1h", "30m", "90s", "2d", "0" -> seconds.
std::optional<std::int64_t> parse_duration_seconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || v < 0) return std::nullopt;
  std::string unit(end);
  std::int64_t scale = unit.empty() || unit == "s"    ? 1
                       : unit == "m" || unit == "min" ? 60
                       : unit == "h"                  ? 3600
                       : unit == "d"                  ? 86400
                                                      : 0;
  if (scale == 0 || v > (1ll << 40)) return std::nullopt;
  return static_cast<std::int64_t>(v) * scale;
}

Status image_gc_remote(Context& ctx, const GcOptions& o, const store::StoreLocation& location) {
  store::BucketGcOptions options;
  options.dry_run = o.dry_run;
  if (o.grace) {
    auto seconds = parse_duration_seconds(*o.grace);
    if (!seconds) {
      ctx.hint = "for example --grace 1h, --grace 30m, --grace 0";
      return make_error(Errc::invalid_argument, "--grace '" + *o.grace + "' is not a duration");
    }
    options.grace_seconds = *seconds;
  }
  GCR_TRY_ASSIGN(auto remote, open_location(location, /*create=*/false));
  auto start = std::chrono::steady_clock::now();
  auto r = store::collect_bucket_garbage(*remote, options);
  if (!r) return with_context(std::move(r).error(), "gc of " + location.text());
  const store::BucketGcReport& g = *r;
  auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start);
  if (o.json) {
    JsonWriter j;
    j.begin_object()
        .field("store", location.text())
        .field("dry_run", o.dry_run)
        .field("grace_seconds", options.grace_seconds)
        .field("packs", g.packs)
        .field("packs_marked", g.packs_marked)
        .field("packs_unmarked", g.packs_unmarked)
        .field("packs_deleted", g.packs_deleted)
        .field("packs_waiting", g.packs_waiting)
        .field("bytes_freed", g.bytes_freed)
        .field("bytes_waiting", g.bytes_waiting)
        .field("elapsed_ns", static_cast<std::int64_t>(elapsed.count()))
        .end_object();
    print(j.take());
  } else {
    std::string would = o.dry_run ? "would free " : "freed ";
    print(would + format_bytes(g.bytes_freed) + " in " + format_duration(elapsed) + ": " +
          plural(g.packs_deleted, "pack", "packs") + " deleted, " + std::to_string(g.packs_marked) +
          " newly marked unused, " + std::to_string(g.packs_unmarked) + " in use again, of " +
          plural(g.packs, "pack", "packs") + "\n");
    if (g.bytes_waiting > 0) {
      print(format_bytes(g.bytes_waiting) +
            " in marked packs goes when its mark is older than the grace period (" +
            std::to_string(options.grace_seconds) + " s) and no checkpoint uses it again\n");
    }
  }
  return ok();
}

Status image_gc(Context& ctx, const GcOptions& o) {
  GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
  if (location.is_s3()) return image_gc_remote(ctx, o, location);
  if (o.grace || o.dry_run) {
    ctx.hint = "a local store's gc locks out writers and needs no grace period";
    return make_error(Errc::invalid_argument, "--grace and --dry-run are for a bucket store");
  }
  bool json = o.json;
  GCR_TRY_ASSIGN(auto store, ctx.open_store());
  auto start = std::chrono::steady_clock::now();
  auto r = store->gc();
  if (!r) {
    if (r.error().code == Errc::busy)
      ctx.hint = "a checkpoint is being written; try again when it is done";
    return with_context(std::move(r).error(), "gc");
  }
  const store::GcReport& g = *r;
  auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start);
  if (json) {
    JsonWriter j;
    j.begin_object()
        .field("packs_deleted", g.packs_deleted)
        .field("packs_rewritten", g.packs_rewritten)
        .field("tmp_files_deleted", g.tmp_files_deleted)
        .field("bytes_freed", g.bytes_freed)
        .field("elapsed_ns", static_cast<std::int64_t>(elapsed.count()))
        .end_object();
    print(j.take());
  } else {
    print("freed " + format_bytes(g.bytes_freed) + " in " + format_duration(elapsed) + ": " +
          plural(g.packs_deleted, "pack", "packs") + " deleted, " +
          std::to_string(g.packs_rewritten) + " rewritten, " +
          plural(g.tmp_files_deleted, "temporary file", "temporary files") + " removed\n");
  }
  return ok();
}

// ---------------------------------------------------------------------------------------------
// gcr image du [NAME]

struct DuOptions {
  std::optional<std::string> name;
  bool json = false;
};

// What du found: the checkpoint asked about (none: the whole store) and its usage.
struct DuFindings {
  std::optional<CheckpointId> id;
  store::Usage u;
  std::optional<std::uint64_t> marked_bytes;  // a bucket's
  TagIndex tags;
};

Result<DuFindings> collect_usage(Context& ctx, const DuOptions& o,
                                 const store::StoreLocation& location) {
  DuFindings f;
  if (location.is_s3()) {
    GCR_TRY_ASSIGN(auto remote, open_location(location, /*create=*/false));
    if (o.name) {
      GCR_TRY_ASSIGN(f.id, resolve_remote_name(ctx, *remote, *o.name));
      GCR_TRY_ASSIGN(f.tags, store::read_backend_tags(*remote));
    }
    GCR_TRY_ASSIGN(store::BackendUsage bu, store::backend_usage(*remote, f.id));
    f.u = bu.usage;
    f.marked_bytes = bu.marked_bytes;
  } else {
    GCR_TRY_ASSIGN(auto store, ctx.open_store());
    if (o.name) {
      GCR_TRY_ASSIGN(f.id, resolve_name(ctx, *store, *o.name));
      GCR_TRY_ASSIGN(auto infos, store->list());
      f.tags = index_tags(infos);
    }
    GCR_TRY_ASSIGN(f.u, store->usage(f.id));
  }
  return f;
}

// The store's name as du shows it.
std::string du_store_text(Context& ctx, const store::StoreLocation& location) {
  return location.is_s3() ? location.text() : ctx.store_root().string();
}

void print_du_json(Context& ctx, const store::StoreLocation& location, const DuFindings& f) {
  const store::Usage& u = f.u;
  JsonWriter j;
  j.begin_object();
  j.field("scope", f.id ? "checkpoint" : "store");
  if (f.id)
    j.field("checkpoint", f.id->hex());
  else
    j.field("store", du_store_text(ctx, location));
  j.field("checkpoints", u.checkpoints)
      .field("chunks", u.chunks)
      .field("logical_bytes", u.logical_bytes)
      .field("stored_bytes", u.stored_bytes)
      .field("zero_bytes", u.zero_bytes)
      .field("dup_self_bytes", u.self_bytes)
      .field("dup_lineage_bytes", u.lineage_bytes)
      .field("dup_other_bytes", u.other_bytes)
      .field("new_bytes", u.fresh_bytes);
  if (!f.id) j.field("pack_file_bytes", u.pack_file_bytes).field("garbage_bytes", u.garbage_bytes);
  if (!f.id && f.marked_bytes) j.field("marked_bytes", *f.marked_bytes);
  j.end_object();
  print(j.take());
}

// Logical bytes by where they went, then stored bytes, and for a whole store its pack files.
std::string du_table_text(const DuFindings& f) {
  const store::Usage& u = f.u;
  using A = Table::Align;
  Table t({{""}, {"BYTES", A::right}, {"SHARE", A::right}});
  const std::uint64_t L = u.logical_bytes;
  t.add_row({"logical", format_bytes(L), format_percent(L, L)});
  t.add_row(
      {"  zero chunks (not stored)", format_bytes(u.zero_bytes), format_percent(u.zero_bytes, L)});
  t.add_row(
      {"  dedup within checkpoint", format_bytes(u.self_bytes), format_percent(u.self_bytes, L)});
  t.add_row({"  dedup same process lineage", format_bytes(u.lineage_bytes),
             format_percent(u.lineage_bytes, L)});
  t.add_row(
      {"  dedup other checkpoints", format_bytes(u.other_bytes), format_percent(u.other_bytes, L)});
  t.add_row({"  new", format_bytes(u.fresh_bytes), format_percent(u.fresh_bytes, L)});
  t.add_row({"stored (after dedup and compression)", format_bytes(u.stored_bytes),
             format_percent(u.stored_bytes, L)});
  if (!f.id) {
    t.add_row({"pack files", format_bytes(u.pack_file_bytes), ""});
    t.add_row({"garbage (freed by 'gcr image gc')", format_bytes(u.garbage_bytes),
               format_percent(u.garbage_bytes, u.pack_file_bytes)});
    if (f.marked_bytes) {
      t.add_row({"  of it marked, going at a later gc", format_bytes(*f.marked_bytes),
                 format_percent(*f.marked_bytes, u.pack_file_bytes)});
    }
  }
  return t.render("  ");
}

void print_du_human(Context& ctx, const store::StoreLocation& location, const DuFindings& f) {
  const store::Usage& u = f.u;
  std::string out;
  if (f.id) {
    out += "checkpoint " + id_with_tags(*f.id, f.tags, /*full_id=*/true) + "\n";
  } else {
    out += "store " + display_safe(du_store_text(ctx, location)) + ": " +
           plural(u.checkpoints, "checkpoint", "checkpoints") + ", " +
           plural(u.chunks, "chunk", "chunks") + "\n";
  }
  out += du_table_text(f);
  if (u.stored_bytes > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %.1fx smaller than the logical size\n",
                  static_cast<double>(u.logical_bytes) / static_cast<double>(u.stored_bytes));
    out += buf;
  }
  print(out);
}

Status image_du(Context& ctx, const DuOptions& o) {
  if (o.name) GCR_TRY(check_name(ctx, *o.name));
  GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
  GCR_TRY_ASSIGN(DuFindings f, collect_usage(ctx, o, location));
  if (o.json)
    print_du_json(ctx, location, f);
  else
    print_du_human(ctx, location, f);
  return ok();
}

}  // namespace

// A declaration table (CLI11 options): exempt from the 80-line limit (issue 33).
void register_image_commands(CLI::App& app, Context& ctx) {
  CLI::App* image = app.add_subcommand(
      "image", "Manage checkpoints: list, inspect, verify, remove, gc, du, push, pull");
  image->require_subcommand(1);
  image->fallthrough();  // --store may follow the subcommand
  image->footer(
      "NAME is a tag (as given at checkpoint time), a checkpoint id, or a unique prefix of an id\n"
      "(at least 8 hex digits). Every command takes --json for output that scripts can parse.");

  {
    auto json = std::make_shared<bool>(false);
    CLI::App* ls = image->add_subcommand(
        "ls", "List checkpoints, oldest first (anyone but root: only their own)");
    ls->alias("list");
    ls->footer(
        "SIZE is a checkpoint's logical size (all the bytes it names); WRITTEN is what it added "
        "to\n"
        "the store, after dedup and compression. PARENT is the same process's previous "
        "checkpoint.");
    ls->add_flag(
        "--json", *json,
        "Print JSON: {store, checkpoints: [{id, tags, parent, created, meta, stats, ...}]}");
    static bool all = false;
    ls->add_flag("--all", all,
                 "Also this host's parts of jobs across hosts that have no name: not committed "
                 "(yet), or whose coordinator was lost before this host heard its decision");
    ls->fallthrough();
    on_run(ls, ctx, [&ctx, json] { return image_ls(ctx, *json, all); });
  }
  {
    auto o = std::make_shared<InspectOptions>();
    CLI::App* inspect = image->add_subcommand(
        "inspect", "Show a checkpoint: origin, sizes, dedup, regions and files");
    inspect->footer(
        "Shows where the checkpoint came from (process, host, GPUs, parent), its logical and "
        "written\n"
        "size, how its bytes were deduplicated, and each device region, CRIU image file and blob.");
    inspect->add_option("NAME", o->name, "The checkpoint: a tag or an id (prefix)")
        ->required()
        ->type_name("");
    inspect->add_flag("--chunks", o->chunks,
                      "Also list every chunk, with its size and where it was found");
    inspect->add_flag("--json", o->json,
                      "Print JSON: {id, tags, meta, stats, objects: [...], chunks?: [...]}");
    inspect->fallthrough();
    on_run(inspect, ctx, [&ctx, o] { return image_inspect(ctx, *o); });
  }
  {
    auto o = std::make_shared<VerifyOptions>();
    CLI::App* verify =
        image->add_subcommand("verify", "Read back and check every byte; exit 7 on corruption");
    verify->footer(
        "Reads every chunk of one checkpoint (or of all) from the packs and checks its hash. Each\n"
        "problem is listed with its checkpoint, object (region or file) and chunk, and gcr exits "
        "7.\n"
        "On a terminal, progress is shown on stderr.");
    verify->add_option("NAME", o->name, "The checkpoint to verify (default: all)")->type_name("");
    verify->add_flag("--json", o->json,
                     "Print JSON: {ok, checkpoints, chunks, bytes, problems: [...]}");
    verify->fallthrough();
    on_run(verify, ctx, [&ctx, o] { return image_verify(ctx, *o); });
  }
  {
    auto o = std::make_shared<RmOptions>();
    CLI::App* rm =
        image->add_subcommand("rm", "Remove checkpoints (then 'gcr image gc' frees space)");
    rm->footer(
        "Removes each checkpoint's manifest and the tags naming it. Chunks that other checkpoints\n"
        "share stay; 'gcr image gc' deletes the ones no checkpoint names any more.");
    rm->alias("remove");
    rm->add_option("NAME", o->names,
                   "Checkpoints to remove (all names are checked before any is removed)")
        ->required()
        ->type_name("");
    rm->add_flag("--json", o->json, "Print JSON: {removed: [{id, tags}]}");
    rm->fallthrough();
    on_run(rm, ctx, [&ctx, o] { return image_rm(ctx, *o); });
  }
  {
    auto o = std::make_shared<GcOptions>();
    CLI::App* gc = image->add_subcommand(
        "gc", "Delete data no checkpoint needs, and leftovers of failed writes");
    gc->footer(
        "A local store: waits for checkpoints being written to commit, then deletes packs no\n"
        "checkpoint uses, rewrites packs that are mostly garbage, and removes files interrupted\n"
        "writers left in tmp/.\n"
        "A bucket (s3://...): writers on other machines cannot be locked out, so gc marks the\n"
        "packs no checkpoint uses, and deletes a marked pack on a later run, once its mark is\n"
        "older than the grace period and still no checkpoint uses it (docs/image-format.md 8.3).");
    gc->add_flag("--json", o->json,
                 "Print JSON: {packs_deleted, packs_rewritten, tmp_files_deleted, bytes_freed}; "
                 "on a bucket {packs, packs_marked, packs_unmarked, packs_deleted, bytes_freed, "
                 "...}");
    gc->add_option("--grace", o->grace,
                   "Bucket only: how old a mark must be before its pack goes (default 1h; 0 "
                   "marks and deletes in one run, for a bucket no one else writes to)")
        ->type_name("DURATION");
    gc->add_flag("--dry-run", o->dry_run, "Bucket only: say what would change, change nothing");
    gc->fallthrough();
    on_run(gc, ctx, [&ctx, o] { return image_gc(ctx, *o); });
  }
  {
    auto o = std::make_shared<DuOptions>();
    CLI::App* du =
        image->add_subcommand("du", "Disk usage: logical vs stored bytes, dedup by level, garbage");
    du->footer(
        "Logical bytes are what the checkpoints name. They split into zero chunks (never stored),\n"
        "chunks found again within the same checkpoint, in the same process's earlier checkpoints\n"
        "(lineage), in other checkpoints, and new chunks; stored bytes are what the packs hold "
        "for\n"
        "them after compression. Garbage is pack space no checkpoint uses ('gcr image gc').");
    du->add_option("NAME", o->name, "One checkpoint (default: the whole store)")->type_name("");
    du->add_flag(
        "--json", o->json,
        "Print JSON: {logical_bytes, stored_bytes, zero_bytes, dup_*_bytes, new_bytes, ...}");
    du->fallthrough();
    on_run(du, ctx, [&ctx, o] { return image_du(ctx, *o); });
  }
  register_image_transfer_commands(image, ctx);
}

}  // namespace gcr::cli
