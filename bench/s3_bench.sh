#!/usr/bin/env bash
# bench/s3_bench.sh: the store on S3 (a single-node Ceph RGW on this machine, started and stopped
# here, tests/integration/s3/ceph_lib.sh) against plain curl moving the same bytes to the same
# endpoint: `gcr image push` of a checkpoint into an empty bucket prefix against one `curl PUT` of
# its pack bytes, and `gcr image pull` into an empty store against one `curl GET`; and both
# against `rclone copy` of the same store directory (issue 38's goal: >= 1.0x). Prints MB/s and
# the ratios. Then (root: CRIU) restores: an mlp_train of RESTORE_MIB of device
# memory, checkpointed and pushed, restored from the local store, from the bucket with a cold
# chunk cache (streamed: the process runs while its memory arrives), again with the cache warm,
# and with a cold cache pulled whole first (GCR_STREAM_RESTORE=0): time to resume and to all
# memory, from the command's start, and the restored process's first step (mlp_train reads all
# its memory every step). Writes bench/results/s3-<time>.json. Asserts nothing.
#
#   bench/s3_bench.sh [BUILD_DIR] [SIZE_MIB] [RUNS] [RESTORE_MIB]
#                                              (default build, 128, 3, 256; the median run; 0: no
#                                               restores)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
SIZE_MIB=${2:-128}
REPS=${3:-3}
RESTORE_MIB=${4:-256}
GCR=$BUILD/bin/gcr
WRITER=$BUILD/tests/integration/store/store_writer
T=$(mktemp -d /var/tmp/gcr-s3-bench.XXXXXX)
. "$ROOT/tests/integration/s3/ceph_lib.sh"
cleanup() {
  [[ -n ${APP:-} ]] && kill -9 "$APP" 2> /dev/null
  [[ -n ${RESTORED:-} ]] && kill -9 "$RESTORED" 2> /dev/null
  pkill -f "gcrd --socket $T/" 2> /dev/null || true
  ceph_stop
  rm -rf "$T"
}
trap cleanup EXIT
export GCR_CACHE_DIR=$T/cache GCR_QUIET=1

# The OSD keeps every object in memory (memstore) and stops answering once full: room for every
# run's three copies (curl, gcr, rclone) and the restores' image, at least ceph_lib's 2 GiB.
need=$(( (3 * SIZE_MIB * REPS + 2 * RESTORE_MIB + 1024) << 20 ))
(( need > ${CEPH_MEMSTORE_BYTES:-0} && need > 2 << 30 )) && export CEPH_MEMSTORE_BYTES=$need
ceph_start "$T/ceph" || { echo "Ceph did not start (scripts/setup.sh installs it)"; exit 1; }
s3_curl PUT bench -o /dev/null
mkdir -p "$T/scratch"
"$WRITER" write "$T/local" 1 $((SIZE_MIB * 1024)) "$T/scratch" - big >/dev/null
BYTES=$(cat "$T"/local/packs/*.pack | wc -c)
cat "$T"/local/packs/*.pack > "$T/plain"

now() { date +%s.%N; }
rate() { python3 -c "print(f'{$1 / ($3 - $2) / 1e6:.0f}')"; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# rclone (Debian's; scripts/setup.sh --bench installs it) with its default parallelism, copying
# the same store directory to and from the same endpoint: the best general client, issue 38's
# baseline. Configured from the environment alone, no file of the user's read.
HAVE_RCLONE=0
if command -v rclone > /dev/null; then
  HAVE_RCLONE=1
  : > "$T/rclone.conf"
  export RCLONE_CONFIG=$T/rclone.conf RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Ceph \
    RCLONE_CONFIG_BENCH_ENDPOINT=$AWS_ENDPOINT_URL RCLONE_CONFIG_BENCH_REGION=$AWS_REGION \
    RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID \
    RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY
fi
# The AWS SDK in rclone fails on AWS_CA_BUNDLE with rclone's own HTTP transport; the endpoint is
# plain HTTP here.
rclone_copy() { env -u AWS_CA_BUNDLE rclone copy "$@" 2> "$T/rclone.err" || { cat "$T/rclone.err"; exit 1; }; }
if ((!HAVE_RCLONE)); then
  echo "rclone is not installed (scripts/setup.sh --bench, or apt-get install rclone): no rclone rows"
fi

# Alternating runs, the median of each: the machine's other load and the OSD's memory growth
# (memstore) then weigh on both sides alike. Each run writes fresh keys and a fresh local store.
PUTS=() GETS=() GETS_SYNC=() PUSHES=() PULLS=() RC_PUTS=() RC_GETS=() RC_GETS_SYNC=()
for rep in $(seq 1 "$REPS"); do
  if ((HAVE_RCLONE)); then
    t0=$(now); rclone_copy "$T/local" "bench:bench/rclone$rep"; t1=$(now)
    RC_PUTS+=("$(rate "$BYTES" "$t0" "$t1")")
    t0=$(now); rclone_copy "bench:bench/rclone$rep" "$T/rclone-back"; t1=$(now)
    RC_GETS+=("$(rate "$BYTES" "$t0" "$t1")")
    rm -rf "$T/rclone-back"
    t0=$(now); rclone_copy "bench:bench/rclone$rep" "$T/rclone-back" && sync -f "$T/rclone-back"; t1=$(now)
    RC_GETS_SYNC+=("$(rate "$BYTES" "$t0" "$t1")")
    # rclone keeps no empty directory (the store's tmp/): the packs must be the same
    diff -r -q "$T/local/packs" "$T/rclone-back/packs" > /dev/null || { echo "rclone returned other packs"; exit 1; }
    rm -rf "$T/rclone-back"
  fi
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
((HAVE_RCLONE)) && echo "runs (MB/s): rclone up ${RC_PUTS[*]}; rclone down ${RC_GETS[*]}; rclone down+sync ${RC_GETS_SYNC[*]}"
put=$(median "${PUTS[@]}"); push=$(median "${PUSHES[@]}")
get=$(median "${GETS[@]}"); get_sync=$(median "${GETS_SYNC[@]}"); pull=$(median "${PULLS[@]}")
rc_put=0 rc_get=0 rc_get_sync=0
if ((HAVE_RCLONE)); then
  rc_put=$(median "${RC_PUTS[@]}"); rc_get=$(median "${RC_GETS[@]}"); rc_get_sync=$(median "${RC_GETS_SYNC[@]}")
fi
printf 'S3 (Ceph RGW on 127.0.0.1), %s MiB checkpoint, %d bytes of packs\n' "$SIZE_MIB" "$BYTES"
printf '  upload:   gcr image push %5s MB/s   curl PUT %5s MB/s   ratio %s\n' "$push" "$put" \
  "$(python3 -c "print(f'{$push / $put:.2f}')")"
printf '  download: gcr image pull %5s MB/s   curl GET %5s MB/s   ratio %s\n' "$pull" "$get" \
  "$(python3 -c "print(f'{$pull / $get:.2f}')")"
printf '            gcr image pull %5s MB/s   curl GET + fsync %5s MB/s   ratio %s\n' "$pull" \
  "$get_sync" "$(python3 -c "print(f'{$pull / $get_sync:.2f}')")"
if ((HAVE_RCLONE)); then  # issue 38's goal: >= 1.0x of rclone both ways
  printf '  against rclone copy (goal >= 1.00):\n'
  printf '    upload:   gcr image push %5s MB/s   rclone %5s MB/s   ratio %s\n' "$push" "$rc_put" \
    "$(python3 -c "print(f'{$push / $rc_put:.2f}')")"
  printf '    download: gcr image pull %5s MB/s   rclone %5s MB/s   ratio %s\n' "$pull" "$rc_get" \
    "$(python3 -c "print(f'{$pull / $rc_get:.2f}')")"
  printf '              gcr image pull %5s MB/s   rclone + sync %5s MB/s   ratio %s\n' "$pull" \
    "$rc_get_sync" "$(python3 -c "print(f'{$pull / $rc_get_sync:.2f}')")"
fi
# Restores: the local store against the bucket.
RESTORES="[]"
if (( RESTORE_MIB > 0 )) && [[ $EUID == 0 ]]; then
  R=$T/restore
  mkdir -p "$R"
  export SIMGPU_DEVICES=1 SIMGPU_MEMORY=$((2 * RESTORE_MIB + 1024))M GCR_GCRD_SOCKET=$R/gcrd.sock \
    GCR_WORK_DIR=$R/work
  MLP=$BUILD/tests/workloads/mlp_train
  steps() { grep -c '^step' "$R/app.log" 2> /dev/null || true; }
  setsid "$GCR" run -- "$MLP" --footprint "${RESTORE_MIB}M" --step-delay-ms 10 --steps 1000000 \
    > "$R/app.log" 2>&1 < /dev/null &
  APP=$!
  for _ in $(seq 1 3000); do (( $(steps) >= 20 )) && break; sleep 0.02; done
  "$GCR" --store "$R/store" checkpoint "$APP" --name img --json > "$R/ckpt.json"
  for _ in $(seq 1 500); do kill -0 "$APP" 2> /dev/null || break; sleep 0.02; done
  APP=
  "$GCR" --store "$R/store" image push img s3://bench/restore > /dev/null
  # restore_one LABEL CACHE_DIR [ENV=V ...] -- ARGS: one restore; its figures on stdout as JSON.
  restore_one() {
    local label=$1 cache=$2 before t0 first
    shift 2
    before=$(steps)
    t0=$(date +%s%N)
    env GCR_CACHE_DIR="$cache" "$@" --json > "$R/r.json"
    RESTORED=$(python3 -c "import json; print(json.load(open('$R/r.json'))['pid'])")
    for _ in $(seq 1 6000); do (( $(steps) > before )) && break; sleep 0.005; done
    first=$(( ($(date +%s%N) - t0) / 1000000 ))
    kill -9 "$RESTORED"
    for _ in $(seq 1 1000); do [[ -e /proc/$RESTORED ]] || break; sleep 0.01; done
    RESTORED=
    python3 - "$R/r.json" "$label" "$first" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ms = lambda k: round(d.get(k, 0) / 1e6, 1)
print(json.dumps({"variant": sys.argv[2], "resume_ms": ms("time.command_resume_ns"),
                  "full_ms": ms("time.command_full_ns"), "first_step_ms": int(sys.argv[3]),
                  "gcrd_resume_ms": ms("time.resume_ns"), "fetched_bytes": d.get("fetch.copied_bytes", 0),
                  "streamed": d.get("fetch.streamed", 0)}))
PY
  }
  rows=()
  for rep in $(seq 1 "$REPS"); do
    rows+=("$(restore_one local "$T/none" "$GCR" --store "$R/store" restore img)")
    rm -rf "$T/rcache"
    rows+=("$(restore_one s3-cold "$T/rcache" "$GCR" restore s3://bench/restore/img)")
    rows+=("$(restore_one s3-warm "$T/rcache" "$GCR" restore s3://bench/restore/img)")
    rm -rf "$T/rcache"
    rows+=("$(restore_one s3-cold-whole "$T/rcache" env GCR_STREAM_RESTORE=0 "$GCR" restore s3://bench/restore/img)")
  done
  RESTORES=$(printf '%s\n' "${rows[@]}" | python3 -c "
import json, sys, statistics
rows = [json.loads(l) for l in sys.stdin if l.strip()]
out = []
for v in ['local', 's3-cold', 's3-warm', 's3-cold-whole']:
    rs = [r for r in rows if r['variant'] == v]
    m = lambda k: statistics.median(r[k] for r in rs)
    out.append({'variant': v, 'resume_ms': m('resume_ms'), 'full_ms': m('full_ms'),
                'first_step_ms': m('first_step_ms'), 'runs': rs})
print(json.dumps(out))")
  printf 'restore of %s MiB of device memory (medians of %s; from the command start):\n' \
    "$RESTORE_MIB" "$REPS"
  python3 -c "
import json, sys
rows = json.loads(sys.argv[1])
local = rows[0]
for r in rows:
    print(f\"  {r['variant']:14} resume {r['resume_ms']:8.1f} ms   all memory {r['full_ms']:8.1f} ms\"
          f\"   first step {r['first_step_ms']:6d} ms   (resume {r['resume_ms'] / max(local['resume_ms'], 0.1):.1f}x local)\")
" "$RESTORES"
elif (( RESTORE_MIB > 0 )); then
  echo "restores skipped: they need root (CRIU)"
fi

# The numbers, to cite: bench/results/s3-<time>.json.
mkdir -p "$ROOT/bench/results"
OUT_JSON="$ROOT/bench/results/s3-$(date -u +%Y-%m-%dT%H%M%S).json"
python3 - "$OUT_JSON" "$SIZE_MIB" "$BYTES" "$push" "$put" "$pull" "$get" "$get_sync" \
  "${PUTS[*]}" "${PUSHES[*]}" "${GETS[*]}" "${GETS_SYNC[*]}" "${PULLS[*]}" "$RESTORES" \
  "$RESTORE_MIB" "$rc_put" "$rc_get" "$rc_get_sync" "${RC_PUTS[*]}" "${RC_GETS[*]}" \
  "${RC_GETS_SYNC[*]}" <<'PY'
import json, sys
out, size_mib, nbytes, push, put, pull, get, get_sync = sys.argv[1:9]
restores, restore_mib = json.loads(sys.argv[14]), int(sys.argv[15])
rc_put, rc_get, rc_get_sync = (float(x) for x in sys.argv[16:19])
runs = dict(zip(["curl_put", "push", "curl_get", "curl_get_fsync", "pull", "rclone_up",
                 "rclone_down", "rclone_down_sync"],
                [[float(x) for x in s.split()] for s in sys.argv[9:14] + sys.argv[19:22]]))
f = float
ratio = lambda a, b: round(f(a) / f(b), 3) if f(b) > 0 else None
doc = {"bench": "s3", "endpoint": "Ceph RGW on 127.0.0.1", "checkpoint_mib": int(size_mib),
       "pack_bytes": int(nbytes), "unit": "MB/s (medians)",
       "push": f(push), "curl_put": f(put), "push_ratio": ratio(push, put),
       "pull": f(pull), "curl_get": f(get), "pull_ratio": ratio(pull, get),
       "curl_get_fsync": f(get_sync), "pull_ratio_vs_fsync": ratio(pull, get_sync)}
if rc_put > 0:
    doc.update({"rclone_up": rc_put, "push_vs_rclone": ratio(push, rc_put),
                "rclone_down": rc_get, "pull_vs_rclone": ratio(pull, rc_get),
                "rclone_down_sync": rc_get_sync, "pull_vs_rclone_sync": ratio(pull, rc_get_sync)})
doc.update({"runs": runs, "restore_mib": restore_mib, "restores": restores})
json.dump(doc, open(out, "w"), indent=2)
print("wrote", out)
PY
