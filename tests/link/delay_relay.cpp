// delay_relay: a TCP relay that holds every byte for a fixed time in each direction, the latency
// half of a shaped link where the kernel has no sch_netem (these VMs): tc tbf shapes the rate,
// this adds the delay. Each connection accepted on LISTEN gets one to TARGET; each direction is a
// reader that stamps what it reads and a writer that sends it once the stamp is DELAY old, at most
// kWindow bytes in flight (the reader waits beyond it, so TCP's flow control still reaches the
// sender). An end of stream is passed on as a half close; an error or a refused TARGET closes both.
//
//   delay_relay LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_US     (prints "listening" when ready)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kRead = 256 << 10;
constexpr std::size_t kWindow = 32 << 20;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

sockaddr_in parse_address(const std::string& text) {
  auto colon = text.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (colon == std::string::npos ||
      ::inet_pton(AF_INET, text.substr(0, colon).c_str(), &a.sin_addr) != 1) {
    std::fprintf(stderr, "delay_relay: '%s' is not IPv4:PORT\n", text.c_str());
    std::exit(2);
  }
  a.sin_port = htons(static_cast<std::uint16_t>(std::atoi(text.c_str() + colon + 1)));
  return a;
}

struct Chunk {
  Clock::time_point due;
  std::vector<char> bytes;  // empty: the end of the stream
};

// One direction of one connection.
class Direction {
 public:
  Direction(int from, int to, Clock::duration delay) : from_(from), to_(to), delay_(delay) {}

  void read_loop() {
    for (;;) {
      std::vector<char> buf(kRead);
      ssize_t n = ::read(from_, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      std::unique_lock lock(mu_);
      if (n <= 0 || broken_) {
        if (n < 0) broken_ = true;
        queue_.push_back({Clock::now() + delay_, {}});
        cv_.notify_all();
        return;
      }
      buf.resize(static_cast<std::size_t>(n));
      cv_.wait(lock, [&] { return in_flight_ < kWindow || broken_; });
      in_flight_ += buf.size();
      queue_.push_back({Clock::now() + delay_, std::move(buf)});
      cv_.notify_all();
    }
  }

  // Returns false when the connection broke (the caller closes both sides).
  bool write_loop() {
    for (;;) {
      Chunk c;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        c = std::move(queue_.front());
        queue_.pop_front();
      }
      std::this_thread::sleep_until(c.due);
      if (c.bytes.empty()) {
        ::shutdown(to_, SHUT_WR);
        return !broken_;
      }
      for (std::size_t done = 0; done < c.bytes.size();) {
        ssize_t n = ::send(to_, c.bytes.data() + done, c.bytes.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          std::lock_guard lock(mu_);
          broken_ = true;
          cv_.notify_all();
          return false;
        }
        done += static_cast<std::size_t>(n);
      }
      std::lock_guard lock(mu_);
      in_flight_ -= c.bytes.size();
      cv_.notify_all();
    }
  }

 private:
  int from_, to_;
  Clock::duration delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  std::size_t in_flight_ = 0;
  bool broken_ = false;
};

void serve(int client_fd, sockaddr_in target, Clock::duration delay) {
  auto client = std::make_shared<Fd>(client_fd);
  auto upstream = std::make_shared<Fd>(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(upstream->get(), reinterpret_cast<sockaddr*>(&target), sizeof target) != 0) return;
  int one = 1;
  ::setsockopt(client->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(upstream->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto there = std::make_shared<Direction>(client->get(), upstream->get(), delay);
  auto back = std::make_shared<Direction>(upstream->get(), client->get(), delay);
  auto close_both = [client, upstream] {
    ::shutdown(client->get(), SHUT_RDWR);
    ::shutdown(upstream->get(), SHUT_RDWR);
  };
  for (auto d : {there, back}) {
    std::thread([d, client, upstream] { d->read_loop(); }).detach();
    std::thread([d, close_both] {
      if (!d->write_loop()) close_both();
    }).detach();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: delay_relay LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_US\n");
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);
  ::prctl(PR_SET_TIMERSLACK, 1UL);  // the delay is the point: no 50 us of slack on each sleep
  sockaddr_in listen_at = parse_address(argv[1]), target = parse_address(argv[2]);
  auto delay = std::chrono::microseconds(std::atoll(argv[3]));
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&listen_at), sizeof listen_at) != 0 ||
      ::listen(listener.get(), 128) != 0) {
    std::fprintf(stderr, "delay_relay: cannot listen on %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  std::printf("listening\n");
  std::fflush(stdout);
  for (;;) {
    int c = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    std::thread(serve, c, target, delay).detach();
  }
}
