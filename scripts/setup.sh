#!/usr/bin/env bash
# One-command, idempotent set-up for gcr (Debian 12 / bookworm). See docs/setup.md.
#
#   scripts/setup.sh              Debian packages + CRIU (>= 4.2) + configure and build gcr into build/
#   scripts/setup.sh --deps-only  Debian packages + CRIU only
#   scripts/setup.sh --demo       ... and build only what scripts/demo.sh runs (target gcr_demo)
#   ... --aarch64                 also the arm64 cross toolchain, qemu-user and arm64 libraries
#                                 (docs/arm64.md; or GCR_AARCH64=1)
#   ... --bench                   also what only the benchmarks compare against (rclone: bench/s3_bench.sh)
#
# Environment: GCR_REBUILD_CRIU=1 (force the CRIU build), GCR_CRIU_SERIES (default 4.2),
# GCR_ALLOW_CRIU_CHECK_FAIL=1 (do not fail when `criu check` fails), GCR_BUILD_DIR (default build).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DEPS_ONLY=0
BENCH=0
TARGET=()
for arg in "$@"; do
    case "$arg" in
        --deps-only) DEPS_ONLY=1 ;;
        --demo) TARGET=(--target gcr_demo) ;;
        --aarch64) GCR_AARCH64=1 ;;
        --bench) BENCH=1 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup.sh: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

SERIES="${GCR_CRIU_SERIES:-4.2}"
PREFIX="$ROOT/.deps/criu"
BUILD_DIR="${GCR_BUILD_DIR:-build}"
T_START=$SECONDS

log()  { printf '[setup] %s\n' "$*"; }
warn() { printf '[setup] WARNING: %s\n' "$*" >&2; }
die()  { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [[ $EUID -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
        warn "not root and no sudo: package installs and 'criu check' will fail"; fi
fi

# --- 1. Debian packages ---------------------------------------------------------------------------
# gcr itself (C++20, CMake/Ninja, libraries, tests; clang for libFuzzer and, with libbpf-dev and
# bpftool, the eBPF programs of `gcr checkpoint --trace`)
GCR_PKGS=(build-essential cmake ninja-build pkg-config python3 git
          libzstd-dev liblz4-dev libxxhash-dev liburing-dev libbpf-dev bpftool libcli11-dev catch2 clang
# ... S3 stores: libcurl (it signs requests itself, CURLOPT_AWS_SIGV4), and for their tests a
# single-node Ceph with the RADOS Gateway (tests/integration/s3/ceph_lib.sh) and curl
          libcurl4-openssl-dev curl ceph-mon ceph-osd ceph-common radosgw
# ... containers: runc and podman for tests/integration/containers (installed without its Recommends: Debian's
# criu 3.17 fails on this kernel and would put an old criu-plugin.h in /usr/include)
          runc podman conmon
# ... containerd 1.6 (its runc shim, ctr) for tests/integration/containers/containerd_test.sh
          containerd
# ... Slurm: gcr's SPANK plugin builds against libslurm-dev's slurm/spank.h; tests/integration/slurm
# runs a cluster of Debian's slurmctld and slurmd with munge (without Recommends: ~35 plugins)
          slurmctld slurmd slurm-client munge libslurm-dev)
# CRIU's `make criu`: required (criu/Makefile.packages; python3-protobuf and python3-yaml also run
# CRIU's zdtm tests in tests/integration/criu/zdtm_test.sh) ...
CRIU_PKGS=(libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler python3-protobuf python3-yaml
           libnl-3-dev libcap-dev uuid-dev libnet1-dev
# ... optional features it detects (setproctitle, TLS page server, nftables network locking) ...
           libbsd-dev libgnutls28-dev libnftables-dev
# ... and the tools set-up and CRIU use at run time (tarball unpacking, gcr's CRIU patches, `ip` for
# network namespaces, iptables for CRIU's network lock of a process in its own network namespace,
# setcap for a user's --unprivileged CRIU)
           xz-utils iproute2 iptables patch libcap2-bin)
PKGS=("${GCR_PKGS[@]}" "${CRIU_PKGS[@]}")
# ... and with --bench, the baselines the benchmarks measure gcr against (not needed by the tests)
BENCH_PKGS=(rclone)
if ((BENCH)); then PKGS+=("${BENCH_PKGS[@]}"); fi

mapfile -t MISSING < <(
    dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PKGS[@]}" 2>/dev/null |
        awk '$2 == "installed" {print $1}' | sort -u | comm -23 <(printf '%s\n' "${PKGS[@]}" | sort -u) -)
if [[ ${#MISSING[@]} -eq 0 ]]; then
    log "packages: all ${#PKGS[@]} present"
else
    log "packages: installing ${MISSING[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -q
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${MISSING[@]}"
fi

# --- 1b. arm64 cross build (--aarch64 or GCR_AARCH64=1: scripts/cross-test-aarch64.sh) ----------------
# Debian's aarch64 cross compiler, qemu-user (static: an LD_PRELOAD for the arm64 program must not
# reach qemu's own loader) and, through multiarch, the arm64 runtime and -dev packages of what the
# qemu-user test subset links. A multiarch -dev package must have its amd64 twin's version: apt
# upgrades the amd64 one along where they differ. A failure here only warns: the cross test skips.
ARM64_PKGS=(g++-aarch64-linux-gnu qemu-user-static libc6:arm64 libstdc++6:arm64 libzstd-dev:arm64
            liblz4-dev:arm64 libxxhash-dev:arm64 liburing-dev:arm64 libcurl4-openssl-dev:arm64
            libssl-dev:arm64)
if [[ "${GCR_AARCH64:-0}" == 1 ]]; then
    ARM64_MISSING=()
    for p in "${ARM64_PKGS[@]}"; do
        [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" == installed ]] || ARM64_MISSING+=("$p")
    done
    if [[ ${#ARM64_MISSING[@]} -eq 0 ]]; then
        log "arm64 cross build: all ${#ARM64_PKGS[@]} packages present"
    else
        log "arm64 cross build: installing ${ARM64_MISSING[*]}"
        { dpkg --print-foreign-architectures | grep -x arm64 > /dev/null || "${SUDO[@]}" dpkg --add-architecture arm64; } &&
        "${SUDO[@]}" apt-get update -q &&
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${ARM64_MISSING[@]}" ||
            warn "arm64 cross build: could not install ${ARM64_MISSING[*]}; the cross test will skip"
    fi
fi

# --- 2. CRIU ------------------------------------------------------------------------------------------
criu_version() {   # prints e.g. 4.2.1, or nothing
    "$1" --version 2>/dev/null | sed -n 's/^Version: *\([0-9][0-9.]*\).*/\1/p' | head -n1
}
version_ok() {     # $1 >= $SERIES ?
    [[ -n "$1" ]] && dpkg --compare-versions "$1" ge "$SERIES"
}
CHECK_OUT=""
criu_check() {     # runs `criu check`; output in CHECK_OUT
    local rc=0
    if [[ $EUID -ne 0 && ${#SUDO[@]} -eq 0 ]]; then CHECK_OUT="(skipped: not root)"; return 2; fi
    CHECK_OUT="$("${SUDO[@]}" "$1" check 2>&1)" || rc=$?
    return $rc
}

GCR_CRIU=""; GCR_CRIU_PLUGIN_INCLUDE=""
# gcr's patches to CRIU (docs/processes.md); the project-local build records which it has.
PATCHES_SHA="$(cat "$ROOT"/scripts/criu-patches/*.patch 2>/dev/null | sha256sum | cut -c1-16)"
# 2a. a criu on PATH that is new enough and works, when asked for (it lacks gcr's patches: a
# restore of a process that had a terminal fails with it)
if [[ "${GCR_USE_SYSTEM_CRIU:-0}" == 1 && "${GCR_REBUILD_CRIU:-0}" != 1 ]] &&
   SYS_CRIU="$(command -v criu 2>/dev/null)"; then
    v="$(criu_version "$SYS_CRIU")"
    if version_ok "$v" && criu_check "$SYS_CRIU"; then
        log "criu: using $SYS_CRIU (version $v, 'criu check' passes)"
        GCR_CRIU="$SYS_CRIU"
        for d in "$(dirname "$(dirname "$(readlink -f "$SYS_CRIU")")")/include" /usr/include /usr/local/include; do
            if [[ -f "$d/criu/criu-plugin.h" ]]; then GCR_CRIU_PLUGIN_INCLUDE="$d/criu"; break; fi
        done
        if [[ -z "$GCR_CRIU_PLUGIN_INCLUDE" ]]; then
            [[ -f "$PREFIX/include/criu/criu-plugin.h" ]] || bash "$ROOT/scripts/build-criu.sh" --header-only
            GCR_CRIU_PLUGIN_INCLUDE="$PREFIX/include/criu"
        fi
    else
        log "criu: $SYS_CRIU is version ${v:-?}; need >= $SERIES with a passing 'criu check' -> project-local build"
    fi
fi

# 2b. the project-local build (cached)
if [[ -z "$GCR_CRIU" ]]; then
    cached_ok=0
    if [[ "${GCR_REBUILD_CRIU:-0}" != 1 && -x "$PREFIX/criu" && -f "$PREFIX/.gcr-criu-version" &&
          -f "$PREFIX/include/criu/criu-plugin.h" ]] &&
       [[ "$(sed -n 's/^patches=//p' "$PREFIX/.gcr-criu-version")" == "$PATCHES_SHA" ]]; then
        v="$(criu_version "$PREFIX/criu")"
        if version_ok "$v" && criu_check "$PREFIX/criu"; then
            cached_ok=1
            log "criu: cached build $PREFIX/criu (version $v) is current and 'criu check' passes; skipping build"
        else
            log "criu: cached build (version ${v:-unusable}) is not acceptable; rebuilding"
        fi
    fi
    if [[ $cached_ok == 0 ]]; then
        t0=$SECONDS
        log "criu: building from Debian's source package (scripts/build-criu.sh)"
        bash "$ROOT/scripts/build-criu.sh"
        log "criu: build step took $((SECONDS - t0)) s"
        v="$(criu_version "$PREFIX/criu")"
        [[ -n "$v" ]] || die "built criu does not run: $PREFIX/criu --version"
        if ! version_ok "$v"; then
            warn "=================================================================================="
            warn "criu $v is OLDER than $SERIES (fallback): no POST_FORKING plugin hook; the parallel"
            warn "device reload on restore is unavailable. Re-run when criu $SERIES.x can be fetched."
            warn "=================================================================================="
        fi
        if criu_check "$PREFIX/criu"; then :; else
            rc=$?
            if [[ $rc == 2 ]]; then warn "'criu check' skipped (not root)"
            elif [[ "${GCR_ALLOW_CRIU_CHECK_FAIL:-0}" == 1 ]]; then warn "'criu check' FAILED (allowed by GCR_ALLOW_CRIU_CHECK_FAIL=1)"
            else printf '%s\n' "$CHECK_OUT" >&2; die "'criu check' failed with the freshly built $PREFIX/criu"; fi
        fi
    fi
    GCR_CRIU="$PREFIX/criu"
    GCR_CRIU_PLUGIN_INCLUDE="$PREFIX/include/criu"
fi
# 2c. the same CRIU without gcr's patches, as a distribution ships it: checkpoint.stock_criu and
# `GCR_STOCK_CRIU=1 scripts/test.sh` run gcr against it (docs/criu-patches.md). GCR_NO_STOCK_CRIU=1
# skips it.
STOCK_PREFIX="$ROOT/.deps/criu-stock"
if [[ "${GCR_NO_STOCK_CRIU:-0}" != 1 && -f "$PREFIX/.gcr-criu-version" ]]; then
    upstream="$(sed -n 's/^upstream=//p' "$PREFIX/.gcr-criu-version")"
    if [[ -x "$STOCK_PREFIX/criu" && "$(sed -n 's/^upstream=//p' "$STOCK_PREFIX/.gcr-criu-version" 2>/dev/null)" == "$upstream" ]]; then
        log "criu (stock, without gcr's patches): $STOCK_PREFIX/criu is current"
    else
        t0=$SECONDS
        GCR_CRIU_UPSTREAM="$upstream" bash "$ROOT/scripts/build-criu.sh" --stock || warn "the stock CRIU did not build: checkpoint.stock_criu will skip"
        log "criu (stock): build step took $((SECONDS - t0)) s"
    fi
fi

log "criu --version: $("$GCR_CRIU" --version 2>&1 | tr '\n' ' ')"
log "criu check: ${CHECK_OUT//$'\n'/ | }"

# --- 3. .deps/env.sh ------------------------------------------------------------------------------------
mkdir -p "$ROOT/.deps"
cat >"$ROOT/.deps/env.sh" <<EOF
# Written by scripts/setup.sh; source it: . .deps/env.sh
export GCR_CRIU=$(printf '%q' "$GCR_CRIU")
export GCR_CRIU_PLUGIN_INCLUDE=$(printf '%q' "$GCR_CRIU_PLUGIN_INCLUDE")
EOF
log "wrote .deps/env.sh (GCR_CRIU=$GCR_CRIU, GCR_CRIU_PLUGIN_INCLUDE=$GCR_CRIU_PLUGIN_INCLUDE)"

# --- 4. Configure and build gcr ------------------------------------------------------------------------
if [[ $DEPS_ONLY == 1 ]]; then
    log "done (--deps-only) in $((SECONDS - T_START)) s"
    exit 0
fi
# shellcheck source=/dev/null
. "$ROOT/.deps/env.sh"
log "cmake -S . -B $BUILD_DIR -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
log "cmake --build $BUILD_DIR -j2 ${TARGET[*]}"
cmake --build "$BUILD_DIR" -j2 "${TARGET[@]}"
log "done in $((SECONDS - T_START)) s"
