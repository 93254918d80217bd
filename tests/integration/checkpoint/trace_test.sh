#!/usr/bin/env bash
# gcr checkpoint --trace FILE (Note [Kernel timeline] in trace/timeline.h): a live checkpoint of
# mlp_train traced with eBPF. The trace must load as Chrome trace JSON with gcrd's phases; the
# process's threads must be seen traced by CRIU only inside gcrd's dump phase, held at gcr's gate,
# and running before and after the stall; the kernel-measured stall must lie within the stall gcr
# reports (give or take the thread's wake-up after the gate opens) and cover CRIU's freeze; and
# the traced run must still end bit-identical. Then a restore traced from gcrd (gcr restore
# --trace): gcrd, CRIU and the restored process in one file, the restored process held by CRIU
# and then running on its own, bit-identical. Skips (77) where the kernel refuses eBPF.
#
#   trace_test.sh BUILD_DIR      (needs root for CRIU and eBPF; exits 77 to skip)
set -euo pipefail
TEST_NAME=trace
source "$(dirname "$0")/lib.sh"
# A step delay of 1 ms keeps the main thread in CUDA calls nearly all the time: whenever the
# gate is closed, it waits there (the stall is short now that CRIU starts before the cut).
MLP=("$BUILD/tests/workloads/mlp_train" --steps 600 --step-delay-ms 1 --footprint 16M --streams 2)
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")

rc=0
"$GCR" checkpoint 1 2 --trace "$T/x.json" > /dev/null 2> "$T/two.err" || rc=$?
[[ $rc != 0 ]] && grep -q "one pid" "$T/two.err" || fail "--trace with two pids: exit $rc, $(cat "$T/two.err")"

"$GCR" run -- "${MLP[@]}" > "$T/a.log" 2>&1 &
P=$!
pids+=("$P")
wait_steps "$T/a.log" 30
"$GCR" checkpoint "$P" -R --trace "$T/trace.json" --json > "$T/ck.json" 2> "$T/ck.err" ||
  fail "traced checkpoint: $(cat "$T/ck.err")"
[[ -s $T/trace.json ]] || fail "no trace written"
if [[ $(json_field trace.kernel < "$T/ck.json") != 1 ]]; then
  note=$(json_field trace.note.0 < "$T/ck.json")
  [[ -n $note ]] || fail "no kernel timeline and no note saying why"
  python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$T/trace.json" || fail "the fallback trace is not JSON"
  wait_exit "$P" "$T/a.log"
  echo "SKIP: no kernel timeline here ($note)"
  exit 77
fi
wait_exit "$P" "$T/a.log"
[[ $(checksum_of "$T/a.log") == "$REF" ]] || fail "the traced run ended with $(checksum_of "$T/a.log"), not $REF"
echo "ok: the traced run is bit-identical"

python3 - "$T/trace.json" "$T/ck.json" "$P" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
report = json.load(open(sys.argv[2]))[0]
pid = int(sys.argv[3])
ms = 1e3  # trace timestamps are microseconds from the trace's start
def fail(msg):
    print("FAIL:", msg); sys.exit(1)
g = trace["gcr"]
begin = g["begin_ns"]
def rel_us(ns): return (ns - begin) / 1e3
events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
if not events: fail("no slices in the trace")
for e in events:
    if not (isinstance(e["ts"], (int, float)) and e["dur"] >= 0): fail(f"bad slice {e}")
phases = {e["name"]: e for e in events if e.get("cat") == "gcrd"}
for name in ("quiesce", "park", "dump", "unpark", "stall"):
    if name not in phases: fail(f"gcrd phase {name} missing: {sorted(phases)}")
mine = [e for e in events if e["pid"] == pid and e.get("cat") == "sched"]
dump = phases["dump"]
slack = 2 * ms
traced = [e for e in mine if e["name"] == "traced (CRIU)"]
if not any(e["tid"] == pid for e in traced): fail("the main thread was never seen traced by CRIU")
for e in traced:
    if e["ts"] < dump["ts"] - slack or e["ts"] + e["dur"] > dump["ts"] + dump["dur"] + slack:
        fail(f"thread {e['tid']} traced at {e['ts']:.0f}+{e['dur']:.0f} us, outside the dump phase "
             f"{dump['ts']:.0f}+{dump['dur']:.0f} us")
gates = [e for e in mine if e["name"] == "waiting at gcr's gate"]
if not gates: fail("no thread was seen waiting at gcr's gate")
stall_ns, stall_start = report["trace.stall_ns"], report["trace.stall_start_ns"]
if stall_ns <= 0: fail("no kernel-measured stall")
if report["trace.frozen_ns"] > stall_ns: fail("CRIU's freeze is longer than the stall that holds it")
s0, s1 = rel_us(stall_start), rel_us(stall_start + stall_ns)
running = [e for e in mine if e["name"] == "running"]
if not any(e["ts"] + e["dur"] <= s0 for e in running): fail("no thread seen running before the stall")
if not any(e["ts"] >= s1 for e in running): fail("no thread seen running after the stall")
gcr0 = report["start.stall_ns"]
gcr1 = gcr0 + report["time.stall_ns"]
wake = 50e6  # the held thread runs again once scheduled after the gate opens (a busy machine)
if stall_start < gcr0 - 1e6 or stall_start + stall_ns > gcr1 + wake:
    fail(f"kernel stall [{stall_start}, {stall_start + stall_ns}] outside gcr's [{gcr0}, {gcr1}]")
print(f"ok: kernel-measured stall {stall_ns/1e6:.1f} ms (gcr reports {report['time.stall_ns']/1e6:.1f} ms;"
      f" ends {(stall_start + stall_ns - gcr1)/1e6:+.1f} ms after it), CRIU froze the process "
      f"{report['trace.frozen_ns']/1e6:.1f} ms, {report['trace.threads']} threads,"
      f" {report['trace.events']} events")
PY
echo "== gcr trace PID: watching a process while someone else checkpoints it"
"$GCR" run -- "${MLP[@]}" > "$T/w.log" 2>&1 &
P=$!
pids+=("$P")
wait_steps "$T/w.log" 20
"$GCR" trace "$P" --duration 30 -o "$T/watch.json" --json > "$T/watch.out" 2> "$T/watch.err" &
W=$!
sleep 1
"$GCR" checkpoint "$P" -R > /dev/null || fail "checkpoint while traced"
sleep 0.5
kill -INT "$W"
wait "$W" || fail "gcr trace: $(cat "$T/watch.err")"
python3 - "$T/watch.json" "$T/watch.out" "$P" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
out = json.load(open(sys.argv[2]))
pid = int(sys.argv[3])
def fail(msg):
    print("FAIL:", msg); sys.exit(1)
if out["pid"] != pid: fail(f"gcr trace --json names pid {out['pid']}")
if out["trace.events"] <= 0: fail("no events")
if out["trace.stall_ns"] <= 0 or out["trace.frozen_ns"] <= 0:
    fail(f"the checkpoint taken meanwhile is not in the trace: {out}")
span_s = (trace["gcr"]["end_ns"] - trace["gcr"]["begin_ns"]) / 1e9
if span_s > 20: fail(f"Ctrl-C did not end the recording ({span_s:.1f} s)")
print(f"ok: gcr trace saw the checkpoint another command took: held {out['trace.stall_ns']/1e6:.1f} ms,"
      f" frozen {out['trace.frozen_ns']/1e6:.1f} ms, {span_s:.1f} s recorded until Ctrl-C")
PY
wait_exit "$P" "$T/w.log"
[[ $(checksum_of "$T/w.log") == "$REF" ]] || fail "the watched run ended with $(checksum_of "$T/w.log")"

echo "== gcr restore --trace: gcrd, CRIU and the restored process"
: > "$T/b.log"
"$GCR" run -- "${MLP[@]}" >> "$T/b.log" 2>&1 &
P=$!
pids+=("$P")
wait_steps "$T/b.log" 30
"$GCR" checkpoint "$P" --name stopped > /dev/null || fail "stopping checkpoint"
for _ in $(seq 1 250); do kill -0 "$P" 2>/dev/null || break; sleep 0.02; done
len=$(stat -c %s "$T/b.log")
"$GCR" restore stopped --trace "$T/restore.json" --json > "$T/r.json" 2> "$T/r.err" ||
  fail "traced restore: $(cat "$T/r.err")"
R=$(json_field pid < "$T/r.json")
pids+=("$R")
for _ in $(seq 1 3000); do kill -0 "$R" 2>/dev/null || break; sleep 0.02; done
[[ $(checksum_after "$T/b.log" "$len") == "$REF" ]] || fail "the traced restore ended with $(checksum_after "$T/b.log" "$len"), not $REF"
echo "ok: the traced restore is bit-identical"
python3 - "$T/restore.json" "$T/r.json" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
report = json.load(open(sys.argv[2]))
def fail(msg):
    print("FAIL:", msg); sys.exit(1)
restored = report["pid"]
events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
phases = {e["name"] for e in events if e.get("cat") == "gcrd"}
for name in ("criu", "unpark", "resume"):
    if name not in phases: fail(f"gcrd phase {name} missing: {sorted(phases)}")
names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"}
if not any("gcrd" in n for n in names.values()): fail(f"gcrd is not in the trace: {names}")
mine = [e for e in events if e["pid"] == restored and e.get("cat") == "sched"]
if not any(e["name"] == "running" for e in mine): fail("the restored process was never seen running")
others = {e["pid"] for e in events if e.get("cat") == "sched"} - {restored}
if len(others) < 2: fail(f"only {others} besides the restored process: CRIU and gcrd should be there")
resumed = report.get("trace.resumed_ns")
if not resumed: fail("no trace.resumed_ns: CRIU was never seen holding the restored process")
total = report["time.total_ns"]
if resumed > total + 200e6: fail(f"resumed at {resumed} ns, after the restore's {total} ns")
# CRIU writes the restored process's pages back: its tasks fault, and the trace counts it.
if report.get("trace.page_faults", 0) <= 0: fail("no page faults counted in a restore")
counters = [e for e in trace["traceEvents"] if e.get("ph") == "C" and e["name"] == "page faults per 10 ms"]
if not counters: fail("no page-fault counter in the trace")
if trace["gcr"]["page_faults"] != report["trace.page_faults"]: fail("the file and the report disagree on page faults")
print(f"ok: CRIU and the gate let go of the restored process after {resumed/1e6:.1f} ms (gcr says running"
      f" after {report['time.resume_ns']/1e6:.1f} ms); {len(others)} other processes traced")
PY
echo "PASS"
