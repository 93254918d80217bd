// Where gcr's pieces are, relative to the gcr binary (a build tree: build/bin/gcr beside
// build/interpose, build/simgpu, build/criu-plugin; an install: <prefix>/bin/gcr beside
// <prefix>/lib/gcr and <prefix>/libexec/gcr, cmake/install.cmake), and which CUDA driver a
// program under gcr should reach.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "gcr/result.h"

namespace gcr::cli {

std::filesystem::path self_dir();  // the directory of the running gcr binary

// gcr's interposer (GCR_INTERPOSER, else next to the binary).
Result<std::filesystem::path> interposer_path();
// The real driver for processes under gcr and for gcrd: GCR_REAL_LIBCUDA; else the NVIDIA
// driver when installed; else simgpu's libcuda.so.1 (`simulated` is set then).
Result<std::filesystem::path> real_driver_path(bool* simulated = nullptr);
// gcrd's binary and the environment it runs in (the driver on its library path, no preload).
Result<std::filesystem::path> gcrd_path();
std::map<std::string, std::string> gcrd_environment(const std::filesystem::path& driver);

}  // namespace gcr::cli
