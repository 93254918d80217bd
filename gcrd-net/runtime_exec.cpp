// runtime_exec.h: running a container runtime for gcr.
#include "runtime_exec.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "gcr/criu.h"

namespace gcr::gcrd {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The last lines of a runtime's output (or of CRIU's log, lines with "Error"), for a message.
std::string tail_of(const fs::path& p, std::size_t lines, bool errors_only = false) {
  std::istringstream in(read_all(p));
  std::vector<std::string> kept;
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && (!errors_only || l.find("Error") != std::string::npos)) kept.push_back(l);
  std::string out;
  for (std::size_t i = kept.size() > lines ? kept.size() - lines : 0; i < kept.size(); ++i)
    out += (out.empty() ? "" : " | ") + kept[i];
  return out;
}

}  // namespace

std::map<std::string, std::string> plugin_env(const ContainerRuntime& rt) {
  std::map<std::string, std::string> env;
  if (!rt.plugin_dir.empty()) env["CRIU_LIBS_DIR"] = rt.plugin_dir.string();
  if (!rt.gcrd_socket.empty()) env["GCR_GCRD_SOCKET"] = rt.gcrd_socket.string();
  if (!rt.store.empty()) env["GCR_STORE"] = rt.store.string();
  if (!rt.driver.empty()) env["GCR_REAL_LIBCUDA"] = rt.driver.string();
  env["GCR_CRIU_IMAGES"] = "reference";  // the device memory travels by gcr's own push
  return env;
}

Status run_runtime_command(const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& env, const fs::path& log,
                           const fs::path& criu_log, const std::string& what) {
  GCR_TRY_ASSIGN(int rc, criu::run(argv, env, log));
  if (rc == 0) return ok();
  std::string why = tail_of(log, 2);
  std::string criu_errors = criu_log.empty() ? "" : tail_of(criu_log, 3, true);
  return Error{Errc::io_error, what + " failed (" + fs::path(argv.at(0)).filename().string() +
                                   " exit " + std::to_string(rc) + (why.empty() ? "" : ": " + why) +
                                   ")" + (criu_errors.empty() ? "" : "; CRIU: " + criu_errors) +
                                   (criu_log.empty() ? "" : "; CRIU's log: " + criu_log.string())};
}

Result<CommandOutput> run_for_output(const std::vector<std::string>& argv) {
  char tmpl[] = "/tmp/gcr-runtime-output.XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) return errno_error("a temporary file for the runtime's answer");
  ::close(fd);
  const fs::path out = tmpl;
  auto rc = criu::run(argv, {}, out);
  CommandOutput o;
  o.text = read_all(out);
  std::error_code ec;
  fs::remove(out, ec);
  if (!rc) return std::move(rc).error();
  o.status = *rc;
  return o;
}

}  // namespace gcr::gcrd
