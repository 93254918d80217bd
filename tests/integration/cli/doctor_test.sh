#!/usr/bin/env bash
# gcr doctor on this machine, and with parts hidden: every check is reported with a state, the
# exit code says whether gcr can work here (0) or not (8), and each missing part comes with its
# fix. Hidden: CRIU (GCR_CRIU pointing nowhere), the rights to load BPF (capsh dropping CAP_BPF,
# CAP_PERFMON and CAP_SYS_ADMIN), a store nobody may write, an NVIDIA-less driver without the
# checkpoint API (GCR_REAL_LIBCUDA pointing at a library without it), and CRIU's kernel probe
# cache directory taken by another user.
#
#   doctor_test.sh GCR      (some cases need root; they are skipped otherwise)
set -euo pipefail
GCR=$1
T=$(mktemp -d /tmp/gcr-doctor.XXXXXX)
trap 'rm -rf "$T"' EXIT
export GCR_STORE=$T/store GCR_GCRD_SOCKET=$T/gcrd.sock
fail() { echo "FAIL: $*"; exit 1; }
check() {  # JSON NAME -> "state|required|fix"
  python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
c=[c for c in d['checks'] if c['name']==sys.argv[2]]
print('%s|%s|%s' % (c[0]['state'], c[0]['required'], c[0].get('fix','')) if c else 'absent')" "$1" "$2"
}

rc=0
"$GCR" doctor --json > "$T/all.json" || rc=$?
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['checks'] and all(c['state'] in ('ok','warn','missing') for c in d['checks'])" "$T/all.json" ||
  fail "gcr doctor --json is not the expected JSON: $(head -c 300 "$T/all.json")"
ready=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ready'])" "$T/all.json")
missing=$(python3 -c "import json,sys; print(sum(1 for c in json.load(open(sys.argv[1]))['checks'] if c['required'] and c['state']!='ok'))" "$T/all.json")
if [[ $missing == 0 ]]; then
  [[ $rc == 0 && $ready == True ]] || fail "nothing required is missing, yet exit $rc, ready $ready"
else
  [[ $rc == 8 && $ready == False ]] || fail "$missing required parts missing, yet exit $rc, ready $ready"
fi
for name in kernel CRIU "CRIU kernel probe" unshare "GPU driver" "image store" gcrd io_uring userfaultfd "write protection" soft-dirty "eBPF tracing"; do
  [[ $(check "$T/all.json" "$name") != absent ]] || fail "no '$name' check"
done
"$GCR" doctor > "$T/all.txt" || true
grep -q "^ok  *image store" "$T/all.txt" || fail "the text output lacks the store line: $(cat "$T/all.txt")"
echo "ok: this machine ($missing required parts missing):"
sed 's/^/    /' "$T/all.txt"

echo "== CRIU hidden"
rc=0
GCR_CRIU=$T/no-criu "$GCR" doctor --json > "$T/nocriu.json" || rc=$?
[[ $rc == 8 ]] || fail "without CRIU: exit $rc, expected 8"
IFS='|' read -r state required fix <<< "$(check "$T/nocriu.json" CRIU)"
[[ $state == missing && $required == True && $fix == *setup.sh* ]] ||
  fail "without CRIU the check reads '$state|$required|$fix'"
echo "ok: exit 8, fix: $fix"

echo "== a driver without the checkpoint API (zlib standing in for it)"
# awk reads all of ldconfig's output: exiting at the first match would let ldconfig die of
# SIGPIPE now and then, and pipefail end this script there.
LIBZ=$(ldconfig -p | awk '/libz\.so\.1 / && !found {print $NF; found = 1}')
[[ -n $LIBZ ]] || fail "ldconfig finds no libz.so.1 to stand in for a driver"
rc=0
GCR_REAL_LIBCUDA=$LIBZ "$GCR" doctor --json > "$T/nodrv.json" || rc=$?
IFS='|' read -r state required fix <<< "$(check "$T/nodrv.json" "GPU driver")"
[[ $rc == 8 && $state == missing && $fix == *570* ]] || fail "a driver without cuCheckpoint*: exit $rc, '$state|$fix'"
echo "ok: exit 8, fix: $fix"
[[ $(check "$T/nodrv.json" "simgpu device pages") == absent ]] ||
  fail "a driver that is not simgpu gets simgpu's device-pages check"

echo "== simgpu's device pages (the host's transparent huge pages for shared memory)"
if grep -q '"simgpu' "$T/all.json"; then
  thp=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null || true)
  IFS='|' read -r state required fix <<< "$(check "$T/all.json" "simgpu device pages")"
  case $thp in
    within_size | always | force) [[ $state == ok && $required == False ]] || fail "shmem THP $thp: '$state|$required'" ;;
    *) [[ $state == warn && $required == False && $fix == *within_size* ]] || fail "shmem THP '$thp': '$state|$required|$fix'" ;;
  esac
  echo "ok: shmem THP '$thp': $state${fix:+, fix: $fix}"
else
  echo "note: not on simgpu: no device-pages check expected"
fi

if [[ $(id -u) != 0 ]]; then
  echo "SKIP (the rest needs root)"
  exit 0
fi

echo "== no rights to load BPF (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN dropped)"
if command -v capsh > /dev/null; then
  capsh --drop=cap_bpf,cap_perfmon,cap_sys_admin -- -c "\"$GCR\" doctor --json > \"$T/nobpf.json\"" || true
  IFS='|' read -r state required fix <<< "$(check "$T/nobpf.json" "eBPF tracing")"
  [[ $state == warn && $required == False && $fix == *root* ]] || fail "without BPF rights: '$state|$required|$fix'"
  echo "ok: warn, fix: $fix"
else
  echo "note: no capsh (libcap2-bin): not tested"
fi

echo "== a store nobody but root may write, as another user"
mkdir -p "$T/locked" && chmod 755 "$T" && chmod 700 "$T/locked"
rc=0
setpriv --reuid=65534 --regid=65534 --clear-groups env GCR_STORE="$T/locked/store" HOME=/nonexistent \
  "$GCR" doctor --json > "$T/locked.json" 2> /dev/null || rc=$?
IFS='|' read -r state required fix <<< "$(check "$T/locked.json" "image store")"
[[ $rc == 8 && $state == missing && $fix == *"--store"* ]] || fail "an unwritable store: exit $rc, '$state|$fix'"
echo "ok: exit 8, fix: $fix"

echo "== CRIU's kernel probe cache directory made first by another user (root), as uid 65534"
KDAT=/dev/shm/gcr-criu-65534
if [[ -d /dev/shm ]]; then
  saved=""
  if [[ -e $KDAT ]]; then saved=$T/kdat-saved; mv "$KDAT" "$saved"; fi
  mkdir "$KDAT"
  setpriv --reuid=65534 --regid=65534 --clear-groups env GCR_STORE="$T/locked/store" HOME=/nonexistent \
    "$GCR" doctor --json > "$T/kdat.json" 2> /dev/null || true
  rmdir "$KDAT"
  if [[ -n $saved ]]; then mv "$saved" "$KDAT"; fi
  IFS='|' read -r state required fix <<< "$(check "$T/kdat.json" "CRIU kernel probe")"
  [[ $state == warn && $required == False && $fix == *"another user"* ]] || fail "a kernel probe cache of another user's: '$state|$required|$fix'"
  echo "ok: warn, fix: $fix"
else
  echo "note: no /dev/shm: not tested"
fi
echo "PASS"
