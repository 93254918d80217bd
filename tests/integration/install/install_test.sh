#!/usr/bin/env bash
# `cmake --install` into a fresh prefix (DESTDIR), then the demo's checkpoint/restore with the
# installed files only: the build tree and the set-up's CRIU are hidden under empty mounts in a
# mount namespace of the test's own (issue 18).
#
#   install_test.sh BUILD_DIR      (needs root; exits 77 to skip)
set -euo pipefail
TEST_NAME=install
source "$(dirname "$0")/lib.sh"
command -v unshare > /dev/null || { echo "SKIP: unshare(1) missing"; exit 77; }

PREFIX=/opt/gcr-install-test
DESTDIR=$T/root cmake --install "$BUILD" --prefix "$PREFIX" > "$T/install.log" || fail "cmake --install"
I=$T/root$PREFIX
for f in bin/gcr libexec/gcr/gcrd libexec/gcr/gcr-keeper lib/gcr/libcuda.so.1 \
         lib/gcr/simgpu/libcuda.so.1 lib/gcr/criu-plugin/gcr_criu_plugin.so lib/gcr/criu/criu \
         lib/criu/gcr_criu_plugin.so lib/systemd/system/gcrd.service lib/systemd/system/gcrd.socket \
         share/man/man1/gcr.1.gz; do
  [[ -e $I/$f ]] || fail "not installed: $f"
done
[[ ! -e $BUILD/lib/gcr/slurm/gcr_spank.so || -e $I/lib/gcr/slurm/gcr_spank.so ]] ||
  fail "not installed: lib/gcr/slurm/gcr_spank.so (gcr's SPANK plugin)"
[[ $(readlink "$I/lib/criu/gcr_criu_plugin.so") == ../gcr/criu-plugin/gcr_criu_plugin.so ]] ||
  fail "lib/criu/gcr_criu_plugin.so is not a relative link into lib/gcr"
# The dynamic linker must never find the interposer by itself: not in lib/, not on a RUNPATH.
[[ ! -e $I/lib/libcuda.so.1 ]] || fail "the interposer is installed where ld.so looks"
for f in "$I"/bin/* "$I"/libexec/gcr/* "$I"/lib/gcr/*.so* "$I"/lib/gcr/*/*.so*; do
  if readelf -d "$f" 2>/dev/null | grep_quiet -iE 'rpath|runpath'; then
    fail "$f carries an RPATH/RUNPATH: $(readelf -d "$f" | grep -iE 'rpath|runpath')"
  fi
done
echo "ok: installed layout ($(find "$I" -type f | wc -l) files)"

# Copy the installed tree to its prefix inside a private mount namespace, hide the build tree and
# the set-up's CRIU, and run there.
unshare -m --propagation private bash -s "$T" "$PREFIX" "$BUILD" "$SRC" "$REF" "${MLP[@]}" <<'INNER' ||
set -euo pipefail
T=$1 PREFIX=$2 BUILD=$3 SRC=$4 REF=$5
shift 5
MLP=("$@")
pids=()
HERE=$SRC/tests/integration/install
source "$HERE/helpers.sh"  # read before the source tree's pieces are hidden
cd "$T"  # not in the build tree (ctest's working directory) about to be hidden
mkdir -p "$PREFIX"
mount --bind "$T/root$PREFIX" "$PREFIX"
mount -t tmpfs none "$BUILD"
if [[ -d $SRC/.deps ]]; then mount -t tmpfs none "$SRC/.deps"; fi
[[ ! -e $BUILD/bin/gcr ]] || fail "the build tree is still visible"
round_trip "$PREFIX/bin/gcr"
# The preload route, without gcr run: the interposer finds simgpu beside itself.
log=$T/preload.log
LD_PRELOAD=$("$PREFIX/bin/gcr" preload-path) "${MLP[@]}" > "$log" 2>&1 &
p=$!
pids+=("$p")
wait_steps "$log" 5
"$PREFIX/bin/gcr" checkpoint "$p" -R --json > "$T/pre.json" || fail "checkpoint of a preloaded process"
[[ $(json_field kind < "$T/pre.json") == gcr ]] || fail "a preloaded process was not under gcr"
wait "$p" || fail "the preloaded run failed"
[[ $(checksum_of "$log") == "$REF" ]] || fail "the preloaded run ended with $(checksum_of "$log")"
echo "ok: LD_PRELOAD=\$(gcr preload-path) puts a program under gcr"
INNER
  fail "the installed gcr failed (above)"
echo "PASS"
