#!/usr/bin/env bash
# Build gcr (configure into build/ if needed) and run the test suite with ctest.
# Extra arguments go to ctest, e.g. scripts/test.sh -R image_store
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${GCR_BUILD_DIR:-build}"

# Packages and CRIU first: idempotent, a fraction of a second once done, so that this one
# command works on a fresh machine (GCR_SKIP_SETUP=1 skips it).
if [[ "${GCR_SKIP_SETUP:-0}" != 1 ]]; then
    bash scripts/setup.sh --deps-only
fi
# shellcheck source=/dev/null
. .deps/env.sh

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    echo "[test] cmake -S . -B $BUILD_DIR -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo"
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
echo "[test] cmake --build $BUILD_DIR -j2"
cmake --build "$BUILD_DIR" -j2
# The interposer aborts on a lock taken against its order (Note [Lock order], interpose/locks.h):
# in tests a violation fails the test that found it instead of one line on stderr.
export GCR_LOCK_ORDER="${GCR_LOCK_ORDER:-abort}"
echo "[test] ctest --test-dir $BUILD_DIR --output-on-failure -j2 $*"
exec ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --no-tests=error "$@"
