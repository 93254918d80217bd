#!/usr/bin/env bash
# The Debian package (issue 18): built with cpack, installed with dpkg -i, used (gcr
# run/checkpoint/restore from /usr/bin/gcr; plain `criu dump/restore` with the plugin where a
# system CRIU looks for it), its systemd units verified, removed with dpkg -r: nothing of it
# remains but the store.
#
#   deb_test.sh BUILD_DIR      (needs root and dpkg; exits 77 to skip)
set -euo pipefail
TEST_NAME=deb
source "$(dirname "$0")/lib.sh"
command -v dpkg > /dev/null && command -v cpack > /dev/null || { echo "SKIP: dpkg or cpack missing"; exit 77; }
if dpkg-query -W -f='${Status}' gcr 2>/dev/null | grep_quiet installed || [[ -e /usr/bin/gcr ]]; then
  echo "SKIP: a gcr is installed on this machine already; not replacing it"
  exit 77
fi
installed=0
extra_cleanup() {
  if [[ $installed == 1 ]]; then dpkg -r gcr > /dev/null 2>&1 || true; fi
  # What dpkg -r leaves by design (a masked unit, debhelper's way) goes too: this is a test.
  if command -v deb-systemd-helper > /dev/null; then
    deb-systemd-helper purge gcrd.socket > /dev/null 2>&1 || true
    deb-systemd-helper unmask gcrd.socket > /dev/null 2>&1 || true
  fi
}

(cd "$T" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$T/pkg" > "$T/cpack.log" 2>&1) ||
  fail "cpack: $(tail -n 20 "$T/cpack.log")"
DEB=$(ls "$T"/pkg/gcr_*.deb)
echo "built $(basename "$DEB") ($(du -h "$DEB" | cut -f1))"
dpkg-deb -f "$DEB" Depends | grep_quiet liburing || fail "Depends lacks liburing: $(dpkg-deb -f "$DEB" Depends)"
if command -v lintian > /dev/null; then  # where installed (set-up does not install it)
  lintian "$DEB" > "$T/lintian.log" 2>&1 || true
  ! grep -q '^E:' "$T/lintian.log" || fail "lintian: $(grep '^E:' "$T/lintian.log")"
  echo "lintian: $(grep -c '^W:' "$T/lintian.log" || true) warnings"
fi

dpkg -i "$DEB" > "$T/dpkg-i.log" 2>&1 || fail "dpkg -i: $(cat "$T/dpkg-i.log")"
installed=1
dpkg -L gcr > "$T/files"
echo "ok: dpkg -i ($(wc -l < "$T/files") paths)"
dpkg -i "$DEB" > "$T/dpkg-i2.log" 2>&1 || fail "dpkg -i over an installed gcr (upgrade): $(cat "$T/dpkg-i2.log")"
echo "ok: dpkg -i again (the upgrade path: prerm upgrade, postinst configure)"
[[ $(/usr/bin/gcr preload-path) == /usr/lib/gcr/libcuda.so.1 ]] || fail "gcr preload-path says $(/usr/bin/gcr preload-path)"
[[ -e /usr/share/man/man1/gcr.1.gz ]] || fail "no man page"

if command -v systemd-analyze > /dev/null; then
  systemd-analyze verify /usr/lib/systemd/system/gcrd.socket /usr/lib/systemd/system/gcrd.service \
    > "$T/verify.log" 2>&1 || fail "systemd-analyze verify: $(cat "$T/verify.log")"
  echo "ok: systemd-analyze verify gcrd.socket gcrd.service"
fi

round_trip /usr/bin/gcr

if command -v systemd-socket-activate > /dev/null; then
  echo "== gcrd started on first use with the socket systemd passes it (as gcrd.socket does)"
  pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
  export GCR_GCRD_SOCKET=$T/activated.sock
  # What gcrd.service runs: gcr daemon, which becomes gcrd.
  systemd-socket-activate -l "$GCR_GCRD_SOCKET" -E GCR_GCRD_SOCKET -E GCR_QUIET /usr/bin/gcr daemon \
    > "$T/activate.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 250); do [[ -S $GCR_GCRD_SOCKET ]] && break; sleep 0.02; done
  pgrep -f "gcrd --socket $GCR_GCRD_SOCKET" > /dev/null && fail "gcrd ran before the first connection"
  round_trip /usr/bin/gcr
  grep -q "listening on the socket systemd passed" "$T/activate.log" || fail "gcrd did not take the passed socket: $(cat "$T/activate.log")"
  echo "ok: socket activation"
fi

echo "== plain criu dump/restore with the installed plugin, of a CUDA process not under gcr"
log=$T/plain.log
LD_LIBRARY_PATH=/usr/lib/gcr/simgpu setsid "${MLP[@]}" > "$log" 2>&1 < /dev/null &
p=$!
pids+=("$p")
wait_steps "$log" $((RANDOM % 30 + 5))
mkdir -p "$T/img"
GCR_REAL_LIBCUDA=/usr/lib/gcr/simgpu/libcuda.so.1 /usr/lib/gcr/criu/criu dump -t "$p" -D "$T/img" \
  -L /usr/lib/criu -o dump.log > /dev/null 2>&1 || fail "criu dump: $(grep -i error "$T/img/dump.log" | tail -3)"
wait "$p" 2>/dev/null || true
GCR_REAL_LIBCUDA=/usr/lib/gcr/simgpu/libcuda.so.1 /usr/lib/gcr/criu/criu restore -D "$T/img" \
  -L /usr/lib/criu -d -o restore.log > /dev/null 2>&1 || fail "criu restore: $(grep -i error "$T/img/restore.log" | tail -3)"
wait_gone "$p"
[[ $(checksum_of "$log") == "$REF" ]] || fail "plain criu round trip ended with $(checksum_of "$log")"
echo "ok: criu dump/restore -L /usr/lib/criu"

echo "== dpkg -r stops the package's gcrd, and no process that only calls itself so"
real=$(pgrep -f "gcrd --socket $GCR_GCRD_SOCKET" | head -n 1) || true
if [[ -z $real ]]; then
  GCR_QUIET=1 /usr/bin/gcr ps > /dev/null 2>&1 || true  # starts one
  real=$(pgrep -f "gcrd --socket $GCR_GCRD_SOCKET" | head -n 1) || fail "no gcrd of the package runs"
fi
[[ $(readlink "/proc/$real/exe") == /usr/libexec/gcr/gcrd ]] || fail "gcrd $real runs $(readlink "/proc/$real/exe")"
decoy=() decoy_owner=root
if id nobody > /dev/null 2>&1 && command -v setpriv > /dev/null; then
  decoy=(setpriv --reuid=nobody --regid=nogroup --clear-groups --) decoy_owner=nobody
fi
"${decoy[@]}" bash -c 'exec -a "/usr/libexec/gcr/gcrd --socket /tmp/not-gcrd" sleep 600' < /dev/null > /dev/null 2>&1 &
DECOY=$!
pids+=("$DECOY")
wait_until 10 pgrep -f "^/usr/libexec/gcr/gcrd --socket /tmp/not-gcrd" > /dev/null || fail "the decoy did not start"
dpkg -r gcr > "$T/dpkg-r.log" 2>&1 || fail "dpkg -r: $(cat "$T/dpkg-r.log")"
installed=0
wait_gone "$real" 30 || fail "dpkg -r left the package's gcrd ($real) running"
alive "$DECOY" || fail "dpkg -r killed a process that merely calls itself /usr/libexec/gcr/gcrd"
kill "$DECOY" 2> /dev/null || true
echo "ok: the package's gcrd stopped; a process of $decoy_owner's named like it runs on"
left=()
while read -r f; do
  [[ -f $f || -L $f ]] && left+=("$f")
done < "$T/files"
[[ ${#left[@]} == 0 ]] || fail "dpkg -r left: ${left[*]}"
for d in /usr/lib/gcr /usr/libexec/gcr /usr/share/doc/gcr; do [[ ! -e $d ]] || fail "dpkg -r left $d"; done
[[ -d $GCR_STORE ]] || fail "the store went with the package"
echo "ok: dpkg -r removed every file of the package; the store stays"
echo "PASS"
