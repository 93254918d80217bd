#!/usr/bin/env bash
# bench/s3_bench.sh: the store on S3 (a single-node Ceph RGW on this machine, started and stopped
# here, tests/integration/s3/ceph_lib.sh) against plain curl moving the same bytes to the same
# endpoint: `gcr image push` of a checkpoint into an empty bucket prefix against one `curl PUT` of
# its pack bytes, and `gcr image pull` into an empty store against one `curl GET`. Prints MB/s
# and the ratio (goal >= 0.8), and writes them to bench/results/s3-<time>.json. Asserts nothing.
#
#   bench/s3_bench.sh [BUILD_DIR] [SIZE_MIB] [RUNS]      (default build, 128, 3; the median run)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
SIZE_MIB=${2:-128}
REPS=${3:-3}
GCR=$BUILD/bin/gcr
WRITER=$BUILD/tests/integration/store/store_writer
T=$(mktemp -d /var/tmp/gcr-s3-bench.XXXXXX)
. "$ROOT/tests/integration/s3/ceph_lib.sh"
trap 'ceph_stop; rm -rf "$T"' EXIT
export GCR_CACHE_DIR=$T/cache GCR_QUIET=1

ceph_start "$T/ceph" || { echo "Ceph did not start (scripts/setup.sh installs it)"; exit 1; }
s3_curl PUT bench -o /dev/null
mkdir -p "$T/scratch"
"$WRITER" write "$T/local" 1 $((SIZE_MIB * 1024)) "$T/scratch" - big >/dev/null
BYTES=$(cat "$T"/local/packs/*.pack | wc -c)
cat "$T"/local/packs/*.pack > "$T/plain"

now() { date +%s.%N; }
rate() { python3 -c "print(f'{$1 / ($3 - $2) / 1e6:.0f}')"; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Alternating runs, the median of each: the machine's other load and the OSD's memory growth
# (memstore) then weigh on both sides alike. Each run writes fresh keys and a fresh local store.
PUTS=() GETS=() GETS_SYNC=() PUSHES=() PULLS=()
for rep in $(seq 1 "$REPS"); do
  t0=$(now); s3_curl PUT "bench/plain/o$rep" -T "$T/plain" -o /dev/null; t1=$(now)
  PUTS+=("$(rate "$BYTES" "$t0" "$t1")")
  t0=$(now); "$GCR" --store "$T/local" image push big "s3://bench/gcr$rep" >/dev/null; t1=$(now)
  PUSHES+=("$(rate "$BYTES" "$t0" "$t1")")
  rm -f "$T/plain.back"
  t0=$(now); s3_curl GET "bench/plain/o$rep" -o "$T/plain.back"; t1=$(now)
  GETS+=("$(rate "$BYTES" "$t0" "$t1")")
  # What gcr pays and a plain GET does not: making the bytes durable (a store's packs are fsynced
  # before their index and manifest, so that a crash never leaves a manifest naming lost chunks).
  rm -f "$T/plain.back"
  t0=$(now); s3_curl GET "bench/plain/o$rep" -o "$T/plain.back" && sync "$T/plain.back"; t1=$(now)
  GETS_SYNC+=("$(rate "$BYTES" "$t0" "$t1")")
  cmp -s "$T/plain" "$T/plain.back" || { echo "curl GET returned other bytes"; exit 1; }
  t0=$(now); "$GCR" --store "$T/node$rep" image pull "s3://bench/gcr$rep/big" >/dev/null; t1=$(now)
  PULLS+=("$(rate "$BYTES" "$t0" "$t1")")
  rm -rf "$T/node$rep" "$T/cache"
done
echo "runs (MB/s): curl PUT ${PUTS[*]}; push ${PUSHES[*]}; curl GET ${GETS[*]}; curl GET+fsync ${GETS_SYNC[*]}; pull ${PULLS[*]}"
put=$(median "${PUTS[@]}"); push=$(median "${PUSHES[@]}")
get=$(median "${GETS[@]}"); get_sync=$(median "${GETS_SYNC[@]}"); pull=$(median "${PULLS[@]}")
printf 'S3 (Ceph RGW on 127.0.0.1), %s MiB checkpoint, %d bytes of packs\n' "$SIZE_MIB" "$BYTES"
printf '  upload:   gcr image push %5s MB/s   curl PUT %5s MB/s   ratio %s\n' "$push" "$put" \
  "$(python3 -c "print(f'{$push / $put:.2f}')")"
printf '  download: gcr image pull %5s MB/s   curl GET %5s MB/s   ratio %s\n' "$pull" "$get" \
  "$(python3 -c "print(f'{$pull / $get:.2f}')")"
printf '            gcr image pull %5s MB/s   curl GET + fsync %5s MB/s   ratio %s\n' "$pull" \
  "$get_sync" "$(python3 -c "print(f'{$pull / $get_sync:.2f}')")"
# The numbers, to cite: bench/results/s3-<time>.json.
mkdir -p "$ROOT/bench/results"
OUT_JSON="$ROOT/bench/results/s3-$(date -u +%Y-%m-%dT%H%M%S).json"
python3 - "$OUT_JSON" "$SIZE_MIB" "$BYTES" "$push" "$put" "$pull" "$get" "$get_sync" \
  "${PUTS[*]}" "${PUSHES[*]}" "${GETS[*]}" "${GETS_SYNC[*]}" "${PULLS[*]}" <<'PY'
import json, sys
out, size_mib, nbytes, push, put, pull, get, get_sync = sys.argv[1:9]
runs = dict(zip(["curl_put", "push", "curl_get", "curl_get_fsync", "pull"],
                [[float(x) for x in s.split()] for s in sys.argv[9:14]]))
f = float
json.dump({"bench": "s3", "endpoint": "Ceph RGW on 127.0.0.1", "checkpoint_mib": int(size_mib),
           "pack_bytes": int(nbytes), "unit": "MB/s (medians)",
           "push": f(push), "curl_put": f(put), "push_ratio": round(f(push) / f(put), 3),
           "pull": f(pull), "curl_get": f(get), "pull_ratio": round(f(pull) / f(get), 3),
           "curl_get_fsync": f(get_sync), "pull_ratio_vs_fsync": round(f(pull) / f(get_sync), 3),
           "runs": runs}, open(out, "w"), indent=2)
print("wrote", out)
PY
