#!/usr/bin/env bash
# Build CRIU from Debian's source package into a project-local prefix (.deps/criu/).
#
#   scripts/build-criu.sh                 resolve, download (cached), build and install
#   scripts/build-criu.sh --header-only   only install include/criu/criu-plugin.h (for a system criu)
#   scripts/build-criu.sh --stock         the same CRIU without gcr's patches, into .deps/criu-stock
#                                         (what a distribution ships: docs/criu-patches.md)
#
# Source: the .orig.tar.xz of Debian unstable's (sid's) criu 4.2.x, falling back to trixie's 4.1.x.
# apt runs with a private configuration and state under .deps/src/apt/ (deb-src lines only), so the
# machine's own apt sources and lists are never touched and nothing can be installed from sid.
# The tarball is fetched by apt's own downloader and checked against the SHA256 in the Sources index.
#
# Environment:
#   GCR_CRIU_SERIES           wanted upstream series (default 4.2)
#   GCR_CRIU_FALLBACK_SERIES  series used when the wanted one is not to be had (default 4.1)
#   GCR_CRIU_PREFIX           install prefix (default <repo>/.deps/criu)
#   GCR_DEBIAN_MIRROR         Debian mirror URL (default: taken from the machine's apt sources)
#   GCR_REBUILD_CRIU=1        rebuild even if the installed build is current
#   GCR_CRIU_UPSTREAM         an upstream version whose tarball is cached: built without asking apt
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SERIES="${GCR_CRIU_SERIES:-4.2}"
FALLBACK="${GCR_CRIU_FALLBACK_SERIES:-4.1}"
HEADER_ONLY=0
STOCK=0
case "${1:-}" in
    --header-only) HEADER_ONLY=1 ;;
    --stock) STOCK=1 ;;
esac
PREFIX="${GCR_CRIU_PREFIX:-$ROOT/.deps/criu$([[ $STOCK == 1 ]] && echo -stock)}"
SRC="$ROOT/.deps/src"
APTDIR="$SRC/apt"
STAMP="$PREFIX/.gcr-criu-version"
PATCHDIR="$ROOT/scripts/criu-patches"
# gcr's patches to CRIU (scripts/criu-patches/*.patch, applied in order); a change rebuilds CRIU.
PATCHES_SHA="$(cat "$PATCHDIR"/*.patch 2>/dev/null | sha256sum | cut -c1-16)"
[[ $STOCK == 1 ]] && PATCHES_SHA=none

log() { printf '[build-criu] %s\n' "$*"; }
die() { printf '[build-criu] ERROR: %s\n' "$*" >&2; exit 1; }

# --- Debian mirror: copy the form this machine uses -------------------------------------------------
mirror() {
    if [[ -n "${GCR_DEBIAN_MIRROR:-}" ]]; then echo "$GCR_DEBIAN_MIRROR"; return; fi
    local m=""
    # deb822 files: first URIs: ending in /debian (not debian-security)
    m="$(grep -hsE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null |
        awk '{for (i = 2; i <= NF; i++) print $i}' | grep -E '/debian/?$' | head -n1 || true)"
    if [[ -z "$m" ]]; then
        m="$(grep -hsE '^\s*deb\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            sed -E 's/\[[^]]*\]//' | awk '{print $2}' | grep -E '/debian/?$' | head -n1 || true)"
    fi
    echo "${m:-http://deb.debian.org/debian}" | sed -E 's#/$##'
}

APT_OPTS=()
apt_private_init() {
    mkdir -p "$APTDIR/etc" "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial"
    local mir; mir="$(mirror)"
    printf 'deb-src %s sid main\ndeb-src %s trixie main\n' "$mir" "$mir" >"$APTDIR/etc/sources.list"
    APT_OPTS=(-o "Dir::Etc::sourcelist=$APTDIR/etc/sources.list" -o "Dir::Etc::sourceparts=-"
              -o "Dir::State::Lists=$APTDIR/lists" -o "Dir::Cache=$APTDIR/cache"
              -o "APT::Sandbox::User=root" -q)
    log "apt (private, deb-src only): $(tr '\n' ';' <"$APTDIR/etc/sources.list")"
}

upstream_of() { local v="${1#*:}"; echo "${v%-*}"; }   # 1:4.2.1-3 -> 4.2.1

# Highest Debian source version of criu whose upstream version is in series $1.
pick_version() {
    local series="$1" best="" v
    while read -r v; do
        [[ "$(upstream_of "$v")" == "$series".* ]] || continue
        if [[ -z "$best" ]] || dpkg --compare-versions "$v" gt "$best"; then best="$v"; fi
    done < <(apt-cache "${APT_OPTS[@]}" showsrc criu 2>/dev/null | sed -n 's/^Version: //p')
    echo "$best"
}

# Newest cached tarball in a series (offline fallback). Prints the upstream version.
pick_cached() {
    local series="$1" best="" f u
    for f in "$SRC"/criu_"$series".*.orig.tar.xz; do
        [[ -f "$f" && -f "$f.sha256" ]] || continue
        (cd "$SRC" && sha256sum -c --status "$(basename "$f").sha256") || continue
        u="$(basename "$f")"; u="${u#criu_}"; u="${u%.orig.tar.xz}"
        if [[ -z "$best" ]] || dpkg --compare-versions "$u" gt "$best"; then best="$u"; fi
    done
    echo "$best"
}

mkdir -p "$SRC"
apt_private_init

DEBVER="" ; UPVER=""
if [[ -n "${GCR_CRIU_UPSTREAM:-}" && -f "$SRC/criu_$GCR_CRIU_UPSTREAM.orig.tar.xz" ]]; then
    # The version asked for (the stock build: the patched build's own), from the cache: no apt.
    UPVER="$GCR_CRIU_UPSTREAM"
    log "using cached tarball for criu $UPVER (GCR_CRIU_UPSTREAM)"
elif log "apt-get update (criu source indexes for sid and trixie)" &&
     apt-get "${APT_OPTS[@]}" update >"$SRC/apt-update.log" 2>&1; then
    DEBVER="$(pick_version "$SERIES")"
    if [[ -z "$DEBVER" ]]; then
        log "WARNING: no criu $SERIES.x source package found; falling back to $FALLBACK.x"
        DEBVER="$(pick_version "$FALLBACK")"
    fi
else
    log "WARNING: apt-get update failed (see $SRC/apt-update.log); trying the local tarball cache"
fi

if [[ -n "$UPVER" ]]; then
    DEBVER="$UPVER (cached tarball)"
elif [[ -n "$DEBVER" ]]; then
    UPVER="$(upstream_of "$DEBVER")"
    log "selected criu source package version $DEBVER (upstream $UPVER)"
else
    UPVER="$(pick_cached "$SERIES")"
    [[ -n "$UPVER" ]] || UPVER="$(pick_cached "$FALLBACK")"
    [[ -n "$UPVER" ]] || die "no criu $SERIES.x or $FALLBACK.x source available (apt or $SRC)"
    DEBVER="$UPVER (cached tarball)"
    log "using cached tarball for criu $UPVER"
fi

# --- Up to date already? ------------------------------------------------------------------------------
if [[ $HEADER_ONLY == 0 && "${GCR_REBUILD_CRIU:-0}" != 1 && -x "$PREFIX/criu" && -f "$STAMP" ]] &&
   [[ "$(sed -n 's/^upstream=//p' "$STAMP")" == "$UPVER" ]] &&
   [[ "$(sed -n 's/^patches=//p' "$STAMP")" == "$PATCHES_SHA" ]] &&
   "$PREFIX/criu" --version >/dev/null 2>&1; then
    log "criu $UPVER already installed in $PREFIX; nothing to do (GCR_REBUILD_CRIU=1 forces a rebuild)"
    rm -rf "$APTDIR/lists"
    exit 0
fi

# --- Download the upstream tarball (cached, hash-checked) --------------------------------------------
TARBALL="criu_$UPVER.orig.tar.xz"
if [[ -f "$SRC/$TARBALL" && -f "$SRC/$TARBALL.sha256" ]] &&
   (cd "$SRC" && sha256sum -c --status "$TARBALL.sha256"); then
    log "tarball cached: $SRC/$TARBALL"
else
    line="$(cd "$SRC" || exit 1; apt-get "${APT_OPTS[@]}" source --print-uris "criu=$DEBVER" 2>/dev/null |
            grep -F " $TARBALL " | head -n1 || true)"
    [[ -n "$line" ]] || die "apt-get source --print-uris criu=$DEBVER lists no $TARBALL"
    uri="$(awk '{print $1}' <<<"$line" | tr -d "'")"
    hash="$(awk '{print $4}' <<<"$line")"            # SHA256:<hex>
    [[ "$hash" == SHA256:* ]] || die "no SHA256 for $TARBALL in the Sources index ($line)"
    log "downloading $uri"
    rm -f "$SRC/$TARBALL.part"
    /usr/lib/apt/apt-helper "${APT_OPTS[@]}" download-file "$uri" "$SRC/$TARBALL.part" "$hash" \
        >"$SRC/download.log" 2>&1 || { cat "$SRC/download.log" >&2; die "download of $uri failed"; }
    mv "$SRC/$TARBALL.part" "$SRC/$TARBALL"
    printf '%s  %s\n' "${hash#SHA256:}" "$TARBALL" >"$SRC/$TARBALL.sha256"
    (cd "$SRC" && sha256sum -c --status "$TARBALL.sha256") || die "SHA256 mismatch for $TARBALL"
    log "sha256 ok: ${hash#SHA256:}"
fi
rm -rf "$APTDIR/lists"   # ~25 MB of source indexes; fetched again only when a rebuild is needed

# --- Header only (a usable criu exists on the system) ------------------------------------------------
if [[ $HEADER_ONLY == 1 ]]; then
    mkdir -p "$PREFIX/include/criu"
    tar -xJf "$SRC/$TARBALL" -O "criu-$UPVER/criu/include/criu-plugin.h" >"$PREFIX/include/criu/criu-plugin.h"
    log "installed $PREFIX/include/criu/criu-plugin.h (from criu $UPVER)"
    exit 0
fi

# --- Build -----------------------------------------------------------------------------------------------
# A directory of this run's own, so that two builds (patched and --stock) may run at once.
BUILDROOT="$SRC/build.$$"
BUILDDIR="$BUILDROOT/criu-$UPVER"
rm -rf "$BUILDROOT"
mkdir -p "$BUILDROOT"
tar -xJf "$SRC/$TARBALL" -C "$BUILDROOT"
[[ -f "$BUILDDIR/Makefile" ]] || die "unexpected tarball layout (no criu-$UPVER/Makefile)"
PATCHES=("$PATCHDIR"/*.patch)
[[ $STOCK == 1 ]] && PATCHES=() && log "stock CRIU: none of gcr's patches applied"
for p in "${PATCHES[@]}"; do
    [[ -f "$p" ]] || continue
    log "applying $(basename "$p")"
    patch -d "$BUILDDIR" -p1 --forward --quiet <"$p" || die "patch $(basename "$p") does not apply to criu $UPVER"
done
JOBS="$(nproc 2>/dev/null || echo 2)"
BUILDLOG="$SRC/criu-build$([[ $STOCK == 1 ]] && echo -stock).log"
log "make -j$JOBS criu (log: $BUILDLOG)"
t0=$SECONDS
if ! make -C "$BUILDDIR" -j"$JOBS" criu >"$BUILDLOG" 2>&1; then
    tail -n 40 "$BUILDLOG" >&2
    die "CRIU build failed (full log: $BUILDLOG)"
fi
grep -E '^(Note|Warn):' "$BUILDLOG" | sed 's/^/[build-criu]   make: /' || true
log "built in $((SECONDS - t0)) s"

# --- Install (staged, then swapped in) ---------------------------------------------------------------
STAGE="$PREFIX.new.$$"
rm -rf "$STAGE"
mkdir -p "$STAGE/sbin" "$STAGE/include/criu"
install -m 755 "$BUILDDIR/criu/criu" "$STAGE/sbin/criu"
install -m 644 "$BUILDDIR/criu/include/criu-plugin.h" "$STAGE/include/criu/criu-plugin.h"
ln -s sbin/criu "$STAGE/criu"
printf 'debian=%s\nupstream=%s\npatches=%s\nbuilt=%s\n' "$DEBVER" "$UPVER" "$PATCHES_SHA" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$STAGE/.gcr-criu-version"
rm -rf "$PREFIX.old"
[[ -e "$PREFIX" ]] && mv "$PREFIX" "$PREFIX.old"
mv "$STAGE" "$PREFIX"
rm -rf "$PREFIX.old" "$BUILDROOT"
log "installed $PREFIX/sbin/criu (symlink $PREFIX/criu) and $PREFIX/include/criu/criu-plugin.h"
"$PREFIX/criu" --version | sed 's/^/[build-criu]   /'
