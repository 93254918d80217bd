# Two "hosts" on one machine, for the migration tests (sourced after lib.sh): a network namespace
# $NS reached over a veth pair ($NET.1 here <-> $NET.2 there; NET defaults to 10.77.0, and each
# test that may run beside another takes its own), a token in $T/token, and
# dest_gcrd, a gcrd of the destination in the namespace with its own store and work directory.
# cut_link/mend_link drop everything between the two, silently; the namespace and the veth go at
# the end (cleanup_extra). shape_link PORT shapes it like a fast network (tc tbf 10 Gbit/s on both
# ends) and relays $NET.1:PORT to $DEST 0.5 ms late each way (tests/link/delay_relay). ends_once
# LOG: exactly one copy of a migrated workload ended the run, with the checksum $REF (a run held
# by ${SLOW:-$T/slow} goes on first).
command -v ip > /dev/null || skip "ip (iproute2) is missing"
NET=${NET:-10.77.0}
NS=gcr-mig-$$
VA=gm$$a
VB=gm$$b
DEST=$NET.2:7070
remove_link() {
  ip netns pids "$NS" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
  ip netns del "$NS" 2> /dev/null || true
  ip link del "$VA" 2> /dev/null || true
}
cut_link() {  # silent, both ways: nothing arrives, nothing is refused
  iptables -I INPUT -s "$NET.2" -j DROP
  ip netns exec "$NS" iptables -I INPUT -j DROP
}
mend_link() {
  iptables -D INPUT -s "$NET.2" -j DROP 2> /dev/null || true
  ip netns exec "$NS" iptables -D INPUT -j DROP 2> /dev/null || true
}
link_cuttable() {  # whether iptables may add a rule here (cut_link's way)
  { iptables -I INPUT -s "$NET.9" -j DROP && iptables -D INPUT -s "$NET.9" -j DROP; } 2> /dev/null
}
cleanup_extra() {
  mend_link
  remove_link
}
ip netns add "$NS" || skip "cannot make a network namespace"
ip link add "$VA" type veth peer name "$VB" || skip "cannot make a veth pair"
ip link set "$VB" netns "$NS"
ip addr add "$NET.1/24" dev "$VA"
ip link set "$VA" up
ip netns exec "$NS" ip addr add "$NET.2/24" dev "$VB"
ip netns exec "$NS" ip link set "$VB" up
ip netns exec "$NS" ip link set lo up
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$T/token"
chmod 600 "$T/token"

# dest_gcrd NAME [VAR=VALUE...]: a fresh destination gcrd in the namespace, store $T/NAME/store,
# restoring processes of the uids in DEST_ALLOW_UIDS (default 0: the tests' processes are root's;
# "none": no --allow-uids), with the keys of DEST_TOKEN_FILE (default $T/token),
# with the arguments in DEST_GCRD_ARGS besides; its log is $DEST_LOG.
DEST_GCRD_ARGS=()
no_dest_gcrd() { ! pgrep -f "gcrd --socket $T/dest" > /dev/null; }
# start_dest_gcrd NAME [VAR=VALUE...]: one try, its error kept in $T/NAME/start.err.
start_dest_gcrd() {
  local name=$1 allow=(--allow-uids "${DEST_ALLOW_UIDS:-0}")
  shift
  [[ ${DEST_ALLOW_UIDS:-0} == none ]] && allow=()
  nsenter --net="/run/netns/$NS" env LD_LIBRARY_PATH="$BUILD/simgpu" GCR_WORK_DIR="$T/$name/work" \
    SIMGPU_DEVICES=1 SIMGPU_MEMORY=1G "$@" \
    "$BUILD/bin/gcrd" --socket "$T/dest-$name/gcrd.sock" --detach --listen "$DEST" \
    --token-file "${DEST_TOKEN_FILE:-$T/token}" --store "$T/$name/store" "${allow[@]}" \
    "${DEST_GCRD_ARGS[@]}" > /dev/null 2> "$T/$name/start.err" < /dev/null
}
# A port the kernel still holds for a socket that is going is worth another try; nothing else is.
port_still_held() { grep -q "in use" "$T/$1/start.err"; }
dest_gcrd() {
  local name=$1
  shift
  ip netns exec "$NS" pkill -9 -f "gcrd --socket $T/dest" 2> /dev/null || true
  # Until the old one is gone: while it exits it still holds the port (the next bind would fail).
  wait_until 60 no_dest_gcrd || fail "the destination gcrd before '$name' did not go"
  mkdir -p "$T/$name"
  # nsenter --net, not ip netns exec: that one also remounts /sys, and a runtime the destination
  # gcrd runs (--containers) would find no cgroup file system.
  local i
  for ((i = 0; ; i++)); do
    start_dest_gcrd "$name" "$@" && break
    port_still_held "$name" && ((i < 3000)) || fail "the destination gcrd did not start: $(cat "$T/$name/start.err")"
    sleep 0.02
  done
  DEST_LOG=$T/dest-$name/gcrd.log
}

shape_link() {  # PORT
  local tbf=(root tbf rate 10gbit burst 4mb latency 20ms)
  tc qdisc add dev "$VA" "${tbf[@]}" && ip netns exec "$NS" tc qdisc add dev "$VB" "${tbf[@]}" ||
    echo "(no tc tbf here: the rate is the veth's own)"
  "$BUILD/tests/link/delay_relay" "$NET.1:$1" "$DEST" 500 > "$T/relay.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q listening "$T/relay.out" && break; sleep 0.05; done
  grep -q listening "$T/relay.out" || fail "delay_relay did not start: $(cat "$T/relay.out")"
}

# PID runs here, on the source: the destination's copy of a migrated process runs in $NS, with
# the same pid where CRIU could give it that (both "hosts" share one pid namespace).
source_runs() { [[ $(readlink "/proc/$1/ns/net" 2> /dev/null) == "$(readlink /proc/self/ns/net)" ]]; }
source_gone() { ! source_runs "$1"; }
ends_once() {  # LOG
  rm -f "${SLOW:-$T/slow}"  # a run that steps slowly and holds while it exists goes on
  wait_checksum "$1"
  sleep 0.5
  [[ $(grep -c "^checksum" "$1") == 1 ]] || fail "$(grep -c "^checksum" "$1") copies ended the run in $1"
  [[ $(checksum_of "$1") == "$REF" ]] || fail "the run ended with $(checksum_of "$1"), an uninterrupted one with $REF"
}
