// infer_server: a model server in miniature, for the serving tests and benchmarks
// (docs/serving.md). It loads weights from a file into device memory, warms up (builds a table from
// the weights, loads its module, passes over every weight a few times: real time, deterministic),
// allocates a cache region that stays mostly unwritten (as a KV cache does), then answers on TCP:
//   infer N   ->  answer N HEX   (HEX: a digest of N and every weight, the same in every copy)
//   quit      ->  the connection is closed
// It prints "ready HOST:PORT" once it answers. Exit codes: 0 never (it serves until killed),
// 2 a CUDA, file or usage error.
#include <cuda.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infer_kernels_fatbin.h"
#include "mp_train/tcp_socket.h"
#include "workload_util.h"

namespace {

constexpr int kTableEntries = 4096;
constexpr int kParts = 1024;  // digest threads; each folds a stripe of the weights
constexpr std::uint64_t kWeightsSeed = 0x5eedf00dull;
constexpr std::size_t kChunk = 8u << 20;

const char kUsage[] =
    "usage: infer_server --weights FILE [--make-weights SIZE] --listen HOST:PORT\n"
    "                    [--cache SIZE] [--warmup-passes N]\n"
    "  --weights FILE       the weights, read whole into device memory (a multiple of 8 bytes)\n"
    "  --make-weights SIZE  first writes FILE, SIZE bytes of deterministic weights, if it is "
    "missing\n"
    "  --listen HOST:PORT   where to answer 'infer N' lines (port 0: any; the ready line says)\n"
    "  --cache SIZE         the cache region (default 64M), written a line per request\n"
    "  --warmup-passes N    passes over every weight before serving (default 28: about 5 s at\n"
    "                       256 MiB on simgpu with 2 cores)";

struct Options {
  std::string weights;
  std::uint64_t make_weights = 0;
  std::string listen;
  std::uint64_t cache = 64u << 20;
  int warmup_passes = 28;
};

Options parse(int argc, char** argv) {
  wl::Flags flags(argc, argv, kUsage);
  Options o;
  o.weights = flags.text("--weights", "");
  o.make_weights = flags.bytes("--make-weights", 0);
  o.listen = flags.text("--listen", "");
  o.cache = flags.bytes("--cache", o.cache);
  o.warmup_passes = static_cast<int>(flags.integer("--warmup-passes", o.warmup_passes, 0, 100000));
  flags.finish();
  if (o.weights.empty()) flags.error("--weights FILE is required");
  if (o.listen.empty()) flags.error("--listen HOST:PORT is required");
  if (o.make_weights % 8 != 0) flags.error("--make-weights wants a multiple of 8 bytes");
  if (o.cache < 64) flags.error("--cache wants at least 64 bytes");
  return o;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "infer_server: %s\n", what.c_str());
  std::exit(2);
}

// SIZE bytes of splitmix64 words, written beside FILE and renamed onto it: a reader never sees a
// part of it.
void make_weights(const std::string& path, std::uint64_t size) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot write " + tmp + ": " + std::strerror(errno));
  std::uint64_t state = kWeightsSeed;
  std::vector<std::uint64_t> buf(kChunk / 8);
  for (std::uint64_t done = 0; done < size;) {
    const std::uint64_t n = std::min<std::uint64_t>(kChunk, size - done);
    for (std::uint64_t i = 0; i < n / 8; ++i) buf[i] = wl::splitmix64(state);
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(n));
    done += n;
  }
  out.close();
  if (!out) fail("cannot write " + tmp + " (disk full?)");
  std::filesystem::rename(tmp, path);
}

class Model {
 public:
  explicit Model(const Options& o) : module_(wl::load_module(embedded::infer_kernels::fatbin)) {
    table_fn_ = wl::get_function(module_, embedded::infer_kernels::kernel::infer_table);
    digest_fn_ = wl::get_function(module_, embedded::infer_kernels::kernel::infer_digest);
    load(o.weights);
    CU_CHECK(cuMemAlloc(&table_, kTableEntries * sizeof(std::uint64_t)));
    CU_CHECK(cuMemAlloc(&partials_, kParts * sizeof(std::uint64_t)));
    cache_bytes_ = o.cache;
    CU_CHECK(cuMemAlloc(&cache_, cache_bytes_));
    CU_CHECK(cuCtxGetCurrent(&context_));
  }

  std::uint64_t weight_bytes() const { return words_ * 8; }

  void warm_up(int passes) {
    CU_CHECK(wl::launch(table_fn_, wl::cover(kTableEntries), nullptr, weights_,
                        static_cast<unsigned long long>(words_), table_, kTableEntries));
    for (int p = 0; p < passes; ++p) (void)digest(~static_cast<std::uint64_t>(p));
  }

  // The answer to "infer n": every weight folded with n; the cache gets a line for it.
  std::uint64_t answer(std::uint64_t n) {
    std::lock_guard lock(mu_);
    CU_CHECK(cuCtxSetCurrent(context_));  // each connection has a thread of its own
    const std::uint64_t h = digest(n);
    const std::uint64_t line = n % (cache_bytes_ / 64) * 64;
    CU_CHECK(cuMemcpyHtoD(cache_ + line, &h, sizeof h));
    return h;
  }

 private:
  void load(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read the weights " + path + ": " + std::strerror(errno));
    const std::uint64_t size = std::filesystem::file_size(path);
    if (size == 0 || size % 8 != 0)
      fail(path + " is " + std::to_string(size) +
           " bytes: weights are a non-empty multiple of 8 bytes");
    words_ = size / 8;
    CU_CHECK(cuMemAlloc(&weights_, size));
    std::vector<char> buf(kChunk);
    for (std::uint64_t done = 0; done < size;) {
      const std::uint64_t n = std::min<std::uint64_t>(kChunk, size - done);
      if (!in.read(buf.data(), static_cast<std::streamsize>(n))) fail("short read of " + path);
      CU_CHECK(cuMemcpyHtoD(weights_ + done, buf.data(), n));
      done += n;
    }
  }

  std::uint64_t digest(std::uint64_t seed) {
    CU_CHECK(wl::launch(
        digest_fn_, wl::cover(kParts), nullptr, weights_, static_cast<unsigned long long>(words_),
        static_cast<unsigned long long>(seed), table_, kTableEntries, partials_, kParts));
    std::vector<std::uint64_t> parts(kParts);
    CU_CHECK(cuMemcpyDtoH(parts.data(), partials_, kParts * sizeof(std::uint64_t)));
    wl::Fnv1a h;
    h.add(parts.data(), parts.size() * sizeof(std::uint64_t));
    return h.value();
  }

  CUmodule module_;
  CUcontext context_ = nullptr;
  CUfunction table_fn_ = nullptr, digest_fn_ = nullptr;
  CUdeviceptr weights_ = 0, table_ = 0, partials_ = 0, cache_ = 0;
  std::uint64_t words_ = 0, cache_bytes_ = 0;
  std::mutex mu_;  // one request on the GPU at a time
};

// One line of a request; false once the connection is done.
bool handle_line(int fd, const std::string& line, Model& model) {
  std::string reply;
  unsigned long long n = 0;
  char tail = 0;
  if (line == "quit") return false;
  if (std::sscanf(line.c_str(), "infer %llu%c", &n, &tail) == 1) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016" PRIx64, model.answer(n));
    reply = "answer " + std::to_string(n) + " " + hex + "\n";
  } else {
    reply = "error: requests are 'infer N' (N a decimal number) or 'quit'\n";
  }
  return mp::send_all(fd, reply.data(), reply.size());
}

void serve_connection(mp::UniqueFd conn, Model& model) {
  std::string pending;
  char buf[512];
  for (;;) {
    ssize_t got = recv(conn.get(), buf, sizeof buf, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    pending.append(buf, static_cast<std::size_t>(got));
    for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!handle_line(conn.get(), line, model)) return;
    }
    if (pending.size() > 4096) return;  // no request is that long
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  wl::ms_since_start();
  if (o.make_weights && !std::filesystem::exists(o.weights))
    make_weights(o.weights, o.make_weights);
  mp::HostPort at;
  if (!mp::parse_host_port(o.listen, &at)) fail("--listen wants HOST:PORT, got '" + o.listen + "'");

  const wl::PrimaryContext primary;
  Model model(o);
  const double loaded = wl::ms_since_start();
  model.warm_up(o.warmup_passes);
  const double warm = wl::ms_since_start();
  std::string error;
  mp::UniqueFd listener = mp::tcp_listen(at, 64, &error);
  if (!listener) fail("cannot listen on " + o.listen + ": " + error);
  std::printf("infer_server: %" PRIu64
              " bytes of weights loaded in %.1f ms, warmed up in %.1f ms\n",
              model.weight_bytes(), loaded, warm - loaded);
  std::printf("ready %s\n", mp::tcp_local_address(listener).text().c_str());
  std::fflush(stdout);
  for (;;) {
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      fail(std::string("accept: ") + std::strerror(errno));
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::thread(serve_connection, mp::UniqueFd(fd), std::ref(model)).detach();
  }
}
