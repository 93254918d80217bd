// daemon/podman_import.h, written as the attacks: a peer's podman archive that would give its
// container more than the destination's operator allowed is refused before podman sees it.
#include "podman_import.h"

#include <fcntl.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "gcr/json_read.h"
#include "gcr/unique_fd.h"
#include "tar_members.h"

namespace fs = std::filesystem;
using namespace gcr::gcrd;

namespace {

const char* kConfig =
    R"({"name":"job","rootfsImageName":"localhost/base:latest","privileged":false})";

std::string spec(const std::string& extra_mount = "", const std::string& hooks = "",
                 const std::string& caps = "\"CAP_CHOWN\"") {
  return R"({"process":{"capabilities":{"bounding":[)" + caps + R"(]}},)" + hooks +
         R"("mounts":[{"destination":"/proc","type":"proc","source":"proc"},
           {"destination":"/usr","type":"bind","source":"/usr","options":["rbind","ro"]},
           {"destination":"/etc/hosts","type":"bind",
            "source":"/var/run/containers/storage/vfs-containers/abc/userdata/hosts"})" +
         extra_mount + R"(],
         "linux":{"namespaces":[{"type":"pid"},{"type":"network"},{"type":"ipc"},{"type":"uts"},
                                {"type":"mount"}]}})";
}

struct Archive {
  fs::path dir;
  Archive() {
    char tmpl[] = "/tmp/gcr-podman-import-test.XXXXXX";
    dir = ::mkdtemp(tmpl);
    fs::create_directories(dir / "src/checkpoint");
    fs::create_directories(dir / "core");
  }
  ~Archive() { fs::remove_all(dir); }
  static void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  fs::path make(const std::string& config, const std::string& spec_text) {
    write(dir / "src/config.dump", config);
    write(dir / "src/spec.dump", spec_text);
    write(dir / "src/checkpoint/gcr-checkpoint", "format=1\nid=source\n");
    write(dir / "src/checkpoint/core-1.img", "core");
    const std::string cmd = "tar --format=ustar -C " + (dir / "src").string() + " -cf " +
                            (dir / "a.tar").string() + " config.dump spec.dump checkpoint";
    REQUIRE(std::system(cmd.c_str()) == 0);
    return dir / "a.tar";
  }
  gcr::Status prepare(const fs::path& archive, const PodmanAllowance& allowed) {
    fs::remove_all(dir / "core");
    fs::create_directories(dir / "core");
    fs::remove(dir / "out.tar");
    return prepare_podman_archive(archive, "job", allowed, "format=1\nid=here\n", dir / "core",
                                  dir / "out.tar");
  }
};

PodmanAllowance allowed() {
  PodmanAllowance a;
  a.images = {"localhost/base:latest"};
  a.mounts = {"/usr"};
  return a;
}

}  // namespace

TEST_CASE("an allowed archive gets this host's reference, its core images copied out") {
  Archive a;
  auto archive = a.make(kConfig, spec());
  REQUIRE(a.prepare(archive, allowed()));
  CHECK(fs::exists(a.dir / "core/core-1.img"));
  gcr::UniqueFd fd(::open((a.dir / "out.tar").c_str(), O_RDONLY));
  auto members = list_tar_members(fd.get());
  REQUIRE(members);
  bool found = false;
  for (const TarMember& m : *members)
    if (m.name == "checkpoint/gcr-checkpoint") {
      found = true;
      CHECK(*read_tar_member(fd.get(), m, 100) == "format=1\nid=here\n");
    }
  CHECK(found);
  // And GNU tar reads the rewritten archive too.
  CHECK(std::system(("tar -tf " + (a.dir / "out.tar").string() + " > /dev/null").c_str()) == 0);
}

TEST_CASE("an archive that reaches beyond what the operator allowed is refused") {
  Archive a;
  auto refused = [&](const std::string& config, const std::string& spec_text,
                     const std::string& why) {
    auto s = a.prepare(a.make(config, spec_text), allowed());
    REQUIRE_FALSE(s);
    CHECK(s.error().message.find(why) != std::string::npos);
  };
  refused(R"({"name":"other","rootfsImageName":"localhost/base:latest"})", spec(),
          "container 'other'");
  refused(R"({"name":"job","rootfsImageName":"evil:latest"})", spec(), "image 'evil:latest'");
  refused(R"({"name":"job","rootfsImageName":"localhost/base:latest","privileged":true})", spec(),
          "privileged");
  refused(R"({"name":"job","rootfsImageName":"localhost/base:latest",
              "namedVolumes":[{"Name":"db","Dest":"/data"}]})",
          spec(), "podman volumes (namedVolumes)");
  refused(kConfig, spec(R"(,{"destination":"/host","type":"bind","source":"/"})"),
          "bind-mounts the host's /");
  refused(kConfig,
          spec(R"(,{"destination":"/x","type":"none","source":"/etc","options":["rbind"]})"),
          "bind-mounts the host's /etc");
  refused(kConfig, spec(R"(,{"destination":"/etc/hosts","type":"bind","source":"/etc/shadow"})"),
          "/etc/shadow");
  refused(kConfig, spec("", R"("hooks":{"prestart":[{"path":"/bin/sh"}]},)"), "OCI hooks");
  refused(kConfig, spec("", "", R"("CAP_SYS_ADMIN")"), "CAP_SYS_ADMIN");
  std::string host_pid = spec();
  host_pid.replace(host_pid.find(R"({"type":"pid"},)"), 15, "");
  refused(kConfig, host_pid, "no pid namespace");
}

TEST_CASE("a member that is a link is refused, so that gcr reads what podman would") {
  Archive a;
  a.make(kConfig, spec());
  fs::create_symlink("/etc/passwd", a.dir / "src/checkpoint/core-2.img");
  const std::string cmd = "tar --format=ustar -C " + (a.dir / "src").string() + " -cf " +
                          (a.dir / "l.tar").string() + " config.dump spec.dump checkpoint";
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto s = a.prepare(a.dir / "l.tar", allowed());
  REQUIRE_FALSE(s);
  CHECK(s.error().message.find("links") != std::string::npos);
}
