# Cross-compiling gcr for arm64 (aarch64) on a Debian amd64 host (docs/arm64.md):
#
#   cmake -S . -B build-aarch64 -G Ninja --toolchain cmake/toolchain-aarch64-linux-gnu.cmake
#
# Needs Debian's cross toolchain (g++-aarch64-linux-gnu) and the arm64 -dev packages of gcr's
# libraries installed beside the amd64 ones (multiarch: dpkg --add-architecture arm64; the
# libraries land in /usr/lib/aarch64-linux-gnu, the headers are shared in /usr/include);
# scripts/setup.sh --aarch64 installs both. Tests run under qemu-user (ctest prefixes every test
# program with CMAKE_CROSSCOMPILING_EMULATOR).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)

# The cross toolchain's own sysroot, then the multiarch directories of the host (/usr/lib/
# aarch64-linux-gnu, found through CMAKE_LIBRARY_ARCHITECTURE): libraries and headers from either,
# programs (python3, nvcc, bpftool) from the host only.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config answers for arm64: its .pc files only (the amd64 ones name amd64 libraries).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# qemu-user runs the test programs. The static build, so that an LD_PRELOAD or LD_LIBRARY_PATH
# meant for the arm64 program does not reach qemu's own loader; and no -L prefix: the runtime is
# Debian's multiarch arm64 libc (libc6:arm64, with /lib/ld-linux-aarch64.so.1), whose ld.so must
# not be mixed with the cross toolchain's slightly older libc in /usr/aarch64-linux-gnu (threads
# then hang in pthread_create).
find_program(GCR_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(GCR_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${GCR_QEMU_AARCH64}")
endif()
