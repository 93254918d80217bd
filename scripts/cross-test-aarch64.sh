#!/usr/bin/env bash
# Cross-build gcr for arm64 (aarch64) and run its qemu-user test subset (docs/arm64.md).
#
#   scripts/cross-test-aarch64.sh         CI's part: build what its tests need, run them under qemu
#   GCR_AARCH64_FULL=1 scripts/...        build every target (all of gcr), then every qemu test
#
# The build goes to build-aarch64/ (GCR_AARCH64_BUILD_DIR), with -O1 and no debug info
# (GCR_AARCH64_FLAGS). The tests: the unit tests that need neither CRIU nor gcrd, the interposer's
# tests and simgpu's tests; a test that needs what qemu-user does not emulate skips with the reason
# (tests/emulator.h). CI leaves out, to stay within a few minutes on 2 cores, the store's unit tests
# (29 more objects to build) and the three slowest tests under qemu (simgpu.checkpoint, simgpu.ipc,
# interpose.mlp, a minute or more each); GCR_AARCH64_FULL=1 runs them. Exits 77 (ctest's skip)
# naming what is missing when the cross toolchain, qemu-user or the arm64 libraries are not
# installed: scripts/setup.sh --aarch64. Extra arguments go to ctest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${GCR_AARCH64_BUILD_DIR:-build-aarch64}"
FLAGS="${GCR_AARCH64_FLAGS:--O1 -DNDEBUG}"
T0=$SECONDS

# The unit tests of libgcr, the driver API list, simgpu's module parser and the interposer's
# control channel; the interposer's and simgpu's process-level tests.
TARGETS=(driver_api_proc_table_test simgpu_module_image_test output_unit_test io_unit_test
         private_dir_test trusted_path_test settings_test lock_order_test criu_unit_test
         control_test control_interpose_test gcr_interpose simgpu mlp_train interpose_test
         simgpu_fidelity)
TESTS='^(driver_api\.|simgpu_module_image$|output\.unit$|io\.|settings\.unit$|lock_order\.unit$'
TESTS+='|pagemap\.unit$|control\.|interpose\.|simgpu\.'
EXCLUDE=(-E '^(simgpu\.checkpoint|simgpu\.ipc|interpose\.mlp)$')
if [[ "${GCR_AARCH64_FULL:-0}" == 1 ]]; then
    TESTS+='|store\.unit'
    EXCLUDE=()
fi
TESTS+=')'

missing=()
command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64-static >/dev/null || command -v qemu-aarch64 >/dev/null ||
    missing+=(qemu-user-static)
[[ -e /lib/ld-linux-aarch64.so.1 ]] || missing+=(libc6:arm64)
[[ -e /usr/lib/aarch64-linux-gnu/libstdc++.so.6 ]] || missing+=(libstdc++6:arm64)
for pc in libzstd:libzstd-dev liblz4:liblz4-dev liburing:liburing-dev libxxhash:libxxhash-dev \
          libcurl:libcurl4-openssl-dev openssl:libssl-dev; do
    PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig pkg-config --exists "${pc%%:*}" 2>/dev/null ||
        missing+=("${pc#*:}:arm64")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "SKIP: no arm64 cross build here: missing ${missing[*]} (scripts/setup.sh --aarch64 installs them)"
    exit 77
fi

launcher=()
if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
mkdir -p "$BUILD_DIR"
echo "[aarch64] cmake -S . -B $BUILD_DIR --toolchain cmake/toolchain-aarch64-linux-gnu.cmake ($FLAGS)"
cmake -S . -B "$BUILD_DIR" -G Ninja --toolchain cmake/toolchain-aarch64-linux-gnu.cmake \
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_C_FLAGS_RELEASE=$FLAGS" "-DCMAKE_CXX_FLAGS_RELEASE=$FLAGS" \
    "${launcher[@]}" >"$BUILD_DIR/gcr-configure.log" 2>&1 ||
    { cat "$BUILD_DIR/gcr-configure.log"; exit 1; }

if [[ "${GCR_AARCH64_FULL:-0}" == 1 ]]; then
    echo "[aarch64] cmake --build $BUILD_DIR -j2 (every target)"
    cmake --build "$BUILD_DIR" -j2
else
    echo "[aarch64] cmake --build $BUILD_DIR -j2 --target ${TARGETS[*]}"
    cmake --build "$BUILD_DIR" -j2 --target "${TARGETS[@]}"
fi
T1=$SECONDS
echo "[aarch64] built in $((T1 - T0)) s; ctest -R '$TESTS' under $(grep -o 'qemu-aarch64[a-z-]*' \
    "$BUILD_DIR/CMakeCache.txt" | head -n1)"
rc=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --no-tests=error -R "$TESTS" "${EXCLUDE[@]}" \
    "$@" || rc=$?
echo "[aarch64] tests ran in $((SECONDS - T1)) s (build and tests: $((SECONDS - T0)) s)"
exit $rc
