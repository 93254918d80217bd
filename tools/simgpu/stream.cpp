// Streams: one worker thread each, running operations in submission order, each after the
// dependencies it was queued with (events, the legacy stream's barriers).
#include <pthread.h>

#include <algorithm>
#include <map>

#include "simgpu.h"

namespace gcr::simgpu {
namespace {
std::atomic<std::uint64_t> g_next_stream_id{1};
thread_local std::map<CUctx_st*, Stream*> t_per_thread;  // per-thread default streams
}  // namespace

Stream::Stream(CUctx_st* ctx, Kind kind, unsigned flags, int priority)
    : ctx_(ctx), kind_(kind), flags_(flags), priority_(priority), id_(g_next_stream_id++) {
  worker_ = std::thread([this] { run(); });
  pthread_setname_np(worker_.native_handle(), "simgpu-stream");
  std::lock_guard lock(ctx->mu);
  ctx->streams.push_back(this);
}

Stream::~Stream() {
  drain();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  std::lock_guard lock(ctx_->mu);
  std::erase(ctx_->streams, this);
}

void Stream::retire() {
  {
    std::lock_guard lock(ctx_->mu);
    retired_ = true;
  }
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.detach();
}

std::uint64_t Stream::submit(std::function<void()> op, std::vector<Dep> deps) {
  std::uint64_t seq;
  {
    std::lock_guard lock(mu_);
    seq = ++next_seq_;
    queue_.push_back(Op{seq, std::move(op), std::move(deps)});
  }
  cv_.notify_one();
  return seq;
}

std::uint64_t Stream::submitted() const {
  std::lock_guard lock(mu_);
  return next_seq_;
}

void Stream::wait(std::uint64_t seq) {
  if (reached(seq)) return;
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return completed_.load() >= seq; });
}

bool Stream::wait_until(std::uint64_t seq, std::chrono::steady_clock::time_point deadline) {
  if (reached(seq)) return true;
  std::unique_lock lock(mu_);
  return done_cv_.wait_until(lock, deadline, [&] { return completed_.load() >= seq; });
}

void Stream::run() {
  for (;;) {
    Op op;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) break;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    for (const Dep& d : op.deps)
      if (d.stream != this) d.stream->wait(d.seq);
    if (op.fn) op.fn();
    {
      std::lock_guard lock(mu_);
      completed_.store(op.seq);
    }
    done_cv_.notify_all();
  }
  // A retired stream leaves its context only now, so that synchronizing the context waited for
  // what it had queued.
  std::lock_guard lock(ctx_->mu);
  if (retired_) std::erase(ctx_->streams, this);
}

CUresult resolve_stream(CUstream h, bool per_thread_default, Stream** out) {
  auto raw = reinterpret_cast<std::uintptr_t>(h);
  bool per_thread = raw == reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD) ||
                    (raw == 0 && per_thread_default);
  if (raw == 0 || raw == reinterpret_cast<std::uintptr_t>(CU_STREAM_LEGACY) || per_thread) {
    CUctx_st* ctx;
    if (CUresult r = require_context(&ctx)) return r;
    if (!per_thread) {
      *out = ctx->legacy;
      return CUDA_SUCCESS;
    }
    Stream*& s = t_per_thread[ctx];
    if (!s) s = new Stream(ctx, Stream::Kind::per_thread, 0, 0);
    *out = s;
    return CUDA_SUCCESS;
  }
  auto* s = reinterpret_cast<Stream*>(h);
  if (s->magic != 0x53545231 || !valid_context(s->ctx())) return CUDA_ERROR_INVALID_HANDLE;
  *out = s;
  return CUDA_SUCCESS;
}

std::uint64_t enqueue(Stream* s, std::function<void()> op, std::vector<Stream::Dep> deps) {
  CUctx_st* ctx = s->ctx();
  if (s->kind() == Stream::Kind::legacy) {
    std::lock_guard lock(ctx->mu);
    for (Stream* other : ctx->streams)
      if (other != s && other->blocking()) deps.push_back({other, other->submitted()});
  } else if (s->blocking()) {
    deps.push_back({ctx->legacy, ctx->legacy->submitted()});
  }
  std::erase_if(deps, [](const Stream::Dep& d) { return d.seq == 0 || d.stream->reached(d.seq); });
  return s->submit(std::move(op), std::move(deps));
}

void drain_context(CUctx_st* ctx) {
  std::vector<std::pair<Stream*, std::uint64_t>> targets;
  {
    std::lock_guard lock(ctx->mu);
    for (Stream* s : ctx->streams) targets.emplace_back(s, s->submitted());
  }
  for (auto [s, seq] : targets) s->wait(seq);
}

void drain_all_streams() {
  for (CUctx_st* ctx : all_contexts()) drain_context(ctx);
}

bool drain_all_streams_until(std::chrono::steady_clock::time_point deadline) {
  for (CUctx_st* ctx : all_contexts()) {
    std::vector<std::pair<Stream*, std::uint64_t>> targets;
    {
      std::lock_guard lock(ctx->mu);
      for (Stream* s : ctx->streams) targets.emplace_back(s, s->submitted());
    }
    for (auto [s, seq] : targets)
      if (!s->wait_until(seq, deadline)) return false;
  }
  return true;
}

void destroy_context_streams(CUctx_st* ctx) {
  std::vector<Stream*> streams;
  {
    std::lock_guard lock(ctx->mu);
    for (Stream* s : ctx->streams)
      if (!s->retired()) streams.push_back(s);  // a retired stream's worker removes it
  }
  // Per-thread streams of other threads stay referenced by their thread_local maps; they are
  // stopped here too, and such a thread's map then points at a dead stream only if the program
  // keeps using a destroyed context, which the API already refuses (valid_context).
  t_per_thread.erase(ctx);
  for (Stream* s : streams) delete s;
  ctx->legacy = nullptr;
}

}  // namespace gcr::simgpu
