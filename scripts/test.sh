#!/usr/bin/env bash
# Build gcr (configure into build/ if needed) and run the test suite with ctest.
# Extra arguments go to ctest, e.g. scripts/test.sh -R image_store
#
# Without arguments it then runs the tests labelled `stock` again against the stock CRIU that
# set-up builds beside gcr's (.deps/criu-stock: the same CRIU without gcr's patches; tests that
# need a patch skip naming the capability). GCR_STOCK_CRIU=1 runs everything asked for against
# the stock CRIU instead (GCR_STOCK_CRIU=1 scripts/test.sh: the whole suite);
# GCR_CRIU=/usr/sbin/criu GCR_KEEP_CRIU=1 scripts/test.sh, against a CRIU of your own.
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
CALLER_CRIU=${GCR_CRIU:-}
. .deps/env.sh
[[ "${GCR_KEEP_CRIU:-0}" == 1 && -n "$CALLER_CRIU" ]] && export GCR_CRIU=$CALLER_CRIU
STOCK_CRIU=$ROOT/.deps/criu-stock/criu
if [[ "${GCR_STOCK_CRIU:-0}" == 1 ]]; then
    [[ -x $STOCK_CRIU ]] || bash scripts/build-criu.sh --stock
    export GCR_CRIU=$STOCK_CRIU
fi
echo "[test] CRIU: $GCR_CRIU"

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
if [[ $# -gt 0 || "${GCR_STOCK_CRIU:-0}" == 1 || ! -x $STOCK_CRIU ]]; then
    exec ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --no-tests=error "$@"
fi
rc=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --no-tests=error || rc=$?
echo "[test] the tests labelled stock, against $STOCK_CRIU (a CRIU without gcr's patches)"
GCR_CRIU=$STOCK_CRIU ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --no-tests=error \
    -L '^stock$' || rc=$?
exit $rc
