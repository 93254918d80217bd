#!/usr/bin/env bash
# bench/gpu/make_bundle.sh [BUILD_DIR] [--out DIR] [--dry-run] [--no-build]
#
# Packs what the real-GPU kit (bench/gpu/run_kit.sh) needs from this machine into one folder,
# gpu-bundle/ at the repository root (ignored by git; it travels with the working tree to the
# device machine, which has no Debian packages and no CRIU):
#
#   bin/gcr bin/gcrd                  gcr and its daemon (debug info stripped)
#   bin/criu                          a wrapper: runs libexec/criu with lib/criu on its library path
#   libexec/criu                      CRIU, built by scripts/setup.sh into .deps/criu
#   interpose/libcuda.so.1            the interposer (found by gcr as ../interpose/ from bin/)
#   criu-plugin/gcr_criu_plugin.so    gcr's CRIU plugin (found as ../criu-plugin/)
#   workloads/smoke workloads/mlp_train workloads/interpose_bench_probe
#   lib/        shared libraries gcr's binaries need beyond glibc (libzstd, liburing, ...)
#   lib/cxx/    libstdc++ and libgcc_s: run_kit.sh adds them only if the host's own are too old
#   lib/criu/   CRIU's libraries (kept apart so that they never reach a PyTorch process)
#   MANIFEST    what was copied from where
#
# libcuda.so.1 (the real driver's) and glibc's core (libc, libm, libpthread, libdl, librt,
# ld-linux) are never copied. BUILD_DIR defaults to build; it is built first (ninja -j2) unless
# --no-build. --dry-run lists what would be copied, checks that every source exists, copies nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=build OUT="" DRY=0 DO_BUILD=1
while (($#)); do
  case $1 in
    --out) OUT=$2; shift ;;
    --dry-run) DRY=1 ;;
    --no-build) DO_BUILD=0 ;;
    -h|--help) sed -n 2,22p "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "make_bundle.sh: unknown option $1" >&2; exit 2 ;;
    *) BUILD=$1 ;;
  esac
  shift
done
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
OUT=${OUT:-$ROOT/gpu-bundle}
MAX_MIB=${GCR_BUNDLE_MAX_MIB:-60}

if ((DO_BUILD && !DRY)); then
  [[ -f $BUILD/build.ninja ]] || { echo "make_bundle.sh: $BUILD is not a configured build (run scripts/setup.sh)" >&2; exit 1; }
  ninja -C "$BUILD" -j2 gcr_cli gcrd gcr_interpose gcr_criu_plugin mlp_train smoke interpose_bench_probe >/dev/null \
    || ninja -C "$BUILD" -j2 >/dev/null
fi

CRIU_SRC=$(readlink -f "$ROOT/.deps/criu/criu" 2>/dev/null || true)
# dest<TAB>source: the files of the bundle
FILES=(
  "bin/gcr	$BUILD/bin/gcr"
  "bin/gcrd	$BUILD/bin/gcrd"
  "interpose/libcuda.so.1	$BUILD/interpose/libcuda.so.1"
  "criu-plugin/gcr_criu_plugin.so	$BUILD/criu-plugin/gcr_criu_plugin.so"
  "workloads/smoke	$BUILD/tests/workloads/smoke"
  "workloads/mlp_train	$BUILD/tests/workloads/mlp_train"
  "workloads/interpose_bench_probe	$BUILD/tests/interpose/interpose_bench_probe"
  "libexec/criu	${CRIU_SRC:-$ROOT/.deps/criu/criu}"
)

missing=0
for f in "${FILES[@]}"; do
  src=${f#*$'\t'}
  [[ -f $src ]] || { echo "make_bundle.sh: missing $src" >&2; missing=1; }
done
((missing == 0)) || exit 1

# Libraries a file needs, by ldd, less the driver and glibc's core. Prints "name<TAB>path".
is_core() {
  case $1 in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|linux-vdso*|libcuda.so.*|libutil.so.*|libresolv.so.*) return 0 ;;
  esac
  return 1
}
deps_of() {
  ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1 "\t" $3}' | while IFS=$'\t' read -r name path; do
    is_core "$name" || printf '%s\t%s\n' "$name" "$path"
  done
}
lib_dir_for() {  # NAME OWNER(criu|gcr)
  case $1 in
    libstdc++.so.*|libgcc_s.so.*) echo lib/cxx ;;
    *) [[ $2 == criu ]] && echo lib/criu || echo lib ;;
  esac
}

LIBS=()
for f in "${FILES[@]}"; do
  dest=${f%%$'\t'*} src=${f#*$'\t'}
  owner=gcr; [[ $dest == libexec/criu ]] && owner=criu
  while IFS=$'\t' read -r name path; do
    [[ -n $name ]] || continue
    LIBS+=("$(lib_dir_for "$name" "$owner")/$name	$path")
  done < <(deps_of "$src")
done
mapfile -t LIBS < <(printf '%s\n' "${LIBS[@]}" | sort -u)

if ((DRY)); then
  for f in "${FILES[@]}" "${LIBS[@]}"; do
    dest=${f%%$'\t'*} src=${f#*$'\t'}
    [[ -e $src ]] || { echo "make_bundle.sh: missing $src" >&2; exit 1; }
    printf '%s <- %s\n' "$dest" "$src"
  done
  echo "bin/criu <- (wrapper script)"
  exit 0
fi

rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
{
  echo "# gcr GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) from $BUILD"
  echo "# gcr $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo +dirty)"
  echo "# glibc $(ldd --version | head -1 | awk '{print $NF}')"
} > "$OUT.tmp/MANIFEST"
for f in "${FILES[@]}" "${LIBS[@]}"; do
  dest=${f%%$'\t'*} src=${f#*$'\t'}
  mkdir -p "$OUT.tmp/$(dirname "$dest")"
  cp -L "$src" "$OUT.tmp/$dest"
  case $dest in
    lib/*) ;;
    *) strip --strip-debug "$OUT.tmp/$dest" 2>/dev/null || true ;;
  esac
  printf '%s\t%s\n' "$dest" "$src" >> "$OUT.tmp/MANIFEST"
done
cat > "$OUT.tmp/bin/criu" <<'WRAP'
#!/bin/sh
# CRIU from gcr's GPU bundle, with its own libraries (lib/criu) ahead of the host's.
B=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH="$B/lib/criu:$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$B/libexec/criu" "$@"
WRAP
chmod +x "$OUT.tmp/bin/criu"

size_kib=$(du -sk "$OUT.tmp" | cut -f1)
if ((size_kib > MAX_MIB * 1024)); then
  echo "make_bundle.sh: the bundle is $((size_kib / 1024)) MiB, over ${MAX_MIB} MiB" >&2
  rm -rf "$OUT.tmp"
  exit 1
fi
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "make_bundle.sh: $OUT ($((size_kib / 1024)) MiB, $(grep -vc '^#' "$OUT/MANIFEST") files)"
