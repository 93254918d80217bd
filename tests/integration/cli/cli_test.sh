#!/usr/bin/env bash
# Description: the gcr command's image commands against a real store built through the public
# store API (cli_make_test_store): ls/inspect/du/verify output and --json, rm + gc freeing space,
# verify naming a corrupted chunk with exit code 7, unknown names (3) and hostile names (2).
#
# usage: cli_test.sh GCR_BINARY MAKE_STORE_BINARY
set -euo pipefail

GCR_BIN=$1
MAKE_STORE=$2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gcr-cli-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
STORE=$WORK/store
OUT=$WORK/out
ERR=$WORK/err
unset GCR_STORE

fail() {
  echo "--- stdout"; cat "$OUT" 2>/dev/null || true
  echo "--- stderr"; cat "$ERR" 2>/dev/null || true
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }

# expect EXIT CMD...: runs CMD with stdout in $OUT and stderr in $ERR, and checks its exit status.
expect() {
  local want=$1 got=0
  shift
  "$@" >"$OUT" 2>"$ERR" || got=$?
  [[ $got == "$want" ]] || fail "'$*' exited $got, want $want"
}
gcr() { "$GCR_BIN" --store "$STORE" "$@"; }
contains() { grep -qF -- "$1" "$2" || fail "$2 lacks '$1'"; }
lacks() { ! grep -qF -- "$1" "$2" || fail "$2 has '$1'"; }
# py 'EXPR': runs Python with d = the JSON document in $OUT; EXPR must print or assert.
py() { python3 -c "import json,sys; d=json.load(open('$OUT')); $1" || fail "python check failed: $1"; }

step "version and help"
expect 0 "$GCR_BIN" --version
contains "gcr " "$OUT"
contains "image format 1." "$OUT"
expect 0 "$GCR_BIN" --help
contains "image" "$OUT"
contains "--store" "$OUT"
contains "Exit status" "$OUT"
expect 0 "$GCR_BIN" image --help
for sub in ls inspect verify rm gc du; do contains "$sub" "$OUT"; done
expect 0 "$GCR_BIN" image du --help
contains "--json" "$OUT"

step "usage errors exit 2"
expect 2 "$GCR_BIN"
expect 2 "$GCR_BIN" image
expect 2 "$GCR_BIN" image frobnicate
expect 2 gcr image inspect
expect 2 gcr image ls --bogus
contains "gcr: " "$ERR"

step "a missing store is not_found (3)"
expect 3 "$GCR_BIN" --store "$WORK/no-such-store" image ls
contains "gcr: no image store at" "$ERR"
contains "hint: " "$ERR"

step "GCR_START_GCRD=0: no gcrd answers, none is started, and the error says what to do"
expect 3 env GCR_GCRD_SOCKET="$WORK/no-gcrd/gcrd.sock" GCR_START_GCRD=0 "$GCR_BIN" checkpoint $$
contains "GCR_START_GCRD=0" "$ERR"
contains "start this host's gcrd" "$ERR"
[[ ! -e $WORK/no-gcrd ]] || fail "gcr made $WORK/no-gcrd: $(ls -la "$WORK/no-gcrd")"

step "build the store"
"$MAKE_STORE" "$STORE" >"$WORK/ids"
JOB1=$(awk '$1 == "job-1" {print $2}' "$WORK/ids")
JOB2=$(awk '$1 == "job-2" {print $2}' "$WORK/ids")
OTHER=$(awk '$1 == "other" {print $2}' "$WORK/ids")
[[ ${#JOB1} == 32 && ${#JOB2} == 32 && ${#OTHER} == 32 ]] || fail "ids: $(cat "$WORK/ids")"

step "image ls"
expect 0 gcr image ls --json
py "c = d['checkpoints']; assert len(c) == 3, c
by = {x['tags'][0]: x for x in c}
assert set(by) == {'job-1', 'job-2', 'other'}, by.keys()
assert by['job-1']['id'] == '$JOB1' and by['job-2']['parent'] == '$JOB1', by
assert by['job-1']['parent'] is None and by['job-1']['pid'] == 1234
assert by['job-1']['cmdline'] == ['python3', 'train.py', '--epochs', '3'], by['job-1']['cmdline']
assert [x['tags'][0] for x in c] == ['job-1', 'job-2', 'other'], 'oldest first'"
expect 0 gcr image ls
contains "job-1" "$OUT"
contains "${JOB2:0:12}" "$OUT"
contains "${JOB1:0:12}" "$OUT"   # job-2's parent column
# --store after the subcommand, and GCR_STORE
expect 0 "$GCR_BIN" image ls --store "$STORE"
contains "other" "$OUT"
expect 0 env GCR_STORE="$STORE" "$GCR_BIN" image ls
contains "other" "$OUT"

step "image inspect"
expect 0 gcr image inspect job-1
contains "$JOB1" "$OUT"
contains "0x7f0000000000" "$OUT"
contains "0x7f0000800000" "$OUT"
contains "pages-1.img" "$OUT"
contains "core-1234.img" "$OUT"
contains "gpu-control" "$OUT"
contains "python3 train.py --epochs 3" "$OUT"
expect 0 gcr image inspect "${JOB2:0:10}" --json --chunks
py "assert d['id'] == '$JOB2' and d['parent'] == '$JOB1'
objs = d['objects']
regions = [o for o in objs if o['kind'] == 'region']
files = sorted(o['name'] for o in objs if o['kind'] == 'file')
assert len(regions) == 3 and files == ['core-1234.img', 'pages-1.img'], objs
assert sum(o['chunk_count'] for o in objs) == len(d['chunks'])
for o in objs:
    parts = o['new_bytes'] + o['zero_bytes'] + o['dup_self_bytes'] + o['dup_lineage_bytes'] + o['dup_other_bytes']
    assert parts == o['size'], o
big = [o for o in regions if o['address'] == '0x7f0000000000'][0]
assert big['size'] == 4 << 20 and big['dup_lineage_bytes'] >= 3 << 20, big"

step "image du"
expect 0 gcr image du --json
py "u = d
assert u['scope'] == 'store' and u['checkpoints'] == 3, u
parts = u['zero_bytes'] + u['dup_self_bytes'] + u['dup_lineage_bytes'] + u['dup_other_bytes'] + u['new_bytes']
assert parts == u['logical_bytes'], (parts, u)
assert 0 < u['stored_bytes'] < u['logical_bytes'], u
assert u['pack_file_bytes'] >= u['stored_bytes'], u"
for name in job-1 job-2 other; do
  expect 0 gcr image du "$name" --json
  py "u = d
assert u['scope'] == 'checkpoint' and u['checkpoints'] == 1, u
parts = u['zero_bytes'] + u['dup_self_bytes'] + u['dup_lineage_bytes'] + u['dup_other_bytes'] + u['new_bytes']
assert parts == u['logical_bytes'], (parts, u)"
done
expect 0 gcr image du job-1 --json
py "assert d['zero_bytes'] == 2 << 20 and d['dup_self_bytes'] >= 1 << 20, d"
expect 0 gcr image du job-2 --json
py "assert d['dup_lineage_bytes'] >= 3 << 20 and d['new_bytes'] <= 2 << 20, d"
expect 0 gcr image du
contains "logical" "$OUT"
contains "garbage" "$OUT"

step "image verify passes"
expect 0 gcr image verify
contains "no problems" "$OUT"
expect 0 gcr image verify job-2 --json
py "assert d['ok'] is True and d['problems'] == [] and d['checkpoints'] == 1, d"
# Progress goes to stderr only when it is a terminal.
expect 0 gcr image verify
[[ ! -s "$ERR" ]] || fail "progress or messages on a non-terminal stderr"
if command -v script >/dev/null; then
  script -qec "'$GCR_BIN' --store '$STORE' image verify >/dev/null" /dev/null >"$OUT" 2>&1 || fail "verify under a pty"
  contains "verifying: " "$OUT"
fi

step "image push to another store: progress with rate and size on a terminal only"
expect 0 gcr image push job-2 "$WORK/copy"
[[ ! -s "$ERR" ]] || fail "push printed to a non-terminal stderr: $(cat "$ERR")"
contains "pushed" "$OUT"
expect 0 env GCR_STORE="$WORK/copy" "$GCR_BIN" image verify job-2
if command -v script >/dev/null; then
  script -qec "'$GCR_BIN' --store '$STORE' image push job-1 '$WORK/copy2' >/dev/null" /dev/null >"$OUT" 2>&1 ||
    fail "push under a pty"
  contains "pushing to $WORK/copy2: " "$OUT"
  contains " of " "$OUT"
  contains "/s" "$OUT"
fi

step "unknown names are not_found (3), nothing removed"
expect 3 gcr image inspect no-such-job
contains "gcr: no checkpoint named 'no-such-job'" "$ERR"
contains "hint: run 'gcr image ls'" "$ERR"
expect 3 gcr image verify no-such-job
expect 3 gcr image du no-such-job
expect 3 gcr image rm job-1 no-such-job
expect 3 gcr image inspect 0123456789abcdef0123456789abcdef
expect 0 gcr image inspect job-1

step "hostile names are refused (2)"
for bad in ../etc ../../etc/passwd /etc/passwd job-1/../job-2 . .. "" "-rf" $'job\n1' "$(printf 'x%.0s' {1..200})"; do
  expect 2 gcr image inspect -- "$bad"
  expect 2 gcr image rm -- "$bad"
done
expect 2 gcr image inspect -- ../etc
contains "invalid checkpoint name" "$ERR"
[[ -e /etc/passwd ]] || fail "/etc/passwd vanished"
expect 0 gcr image ls --json
py "assert len(d['checkpoints']) == 3"

step "rm + gc frees space"
expect 0 gcr image du --json
PACK_BEFORE=$(python3 -c "import json; print(json.load(open('$OUT'))['pack_file_bytes'])")
expect 0 gcr image rm other --json
py "assert [r['id'] for r in d['removed']] == ['$OTHER'] and d['removed'][0]['tags'] == ['other'], d"
expect 3 gcr image inspect other
expect 0 gcr image du --json
py "assert d['garbage_bytes'] > 0 and d['checkpoints'] == 2, d"
expect 0 gcr image gc --json
py "assert d['bytes_freed'] > 0, d"
expect 0 gcr image du --json
py "assert d['pack_file_bytes'] < $PACK_BEFORE and d['garbage_bytes'] == 0, (d, $PACK_BEFORE)"
expect 0 gcr image gc
contains "freed" "$OUT"
expect 0 gcr image verify
contains "no problems" "$OUT"

step "verify finds a flipped byte, names the chunk, exits 7"
expect 0 gcr image inspect job-1 --json --chunks
cp "$OUT" "$WORK/job1.json"
# Flip one payload byte of the first record, in any pack, that holds a chunk job-1 names.
CHUNK=$(python3 - "$STORE" "$WORK/job1.json" <<'PY'
import glob, json, struct, sys
store, inspect = sys.argv[1], sys.argv[2]
live = {c['id'] for c in json.load(open(inspect))['chunks'] if not c['zero']}
for path in sorted(glob.glob(store + '/packs/*.pack')):
    data = bytearray(open(path, 'rb').read())
    off = 32
    while off + 32 <= len(data):
        magic, codec, raw, stored = data[off:off + 4], data[off + 4], *struct.unpack_from('<II', data, off + 8)
        assert magic == b'CHNK', (path, off, magic)
        cid = data[off + 16:off + 32].hex()
        if cid in live and stored > 0:
            data[off + 32 + stored // 2] ^= 0x40
            open(path, 'r+b').write(data)
            print(cid)
            sys.exit(0)
        off += 32 + (stored + 7) // 8 * 8
sys.exit('no live chunk found in any pack')
PY
)
[[ ${#CHUNK} == 32 ]] || fail "no chunk to corrupt"
expect 7 gcr image verify
contains "$CHUNK" "$OUT"
contains "gcr: verify found" "$ERR"
expect 7 gcr image verify job-1 --json
py "assert d['ok'] is False and any(p['chunk'] == '$CHUNK' for p in d['problems']), d
assert all(p['checkpoint'] and p['what'] for p in d['problems']), d"

echo "PASS"
