# Hosts on one machine, for the tests of jobs across hosts (sourced after ../programs/lib.sh):
# HOSTS network namespaces (default 3) h0 h1 ..., each with its own gcrd (--listen $NET.(i+1):7070,
# the token in $T/token, a store, a work directory and a simulated GPU of its own), joined by a
# bridge in this namespace. Each test that may run beside another takes its own NET.
#   on_host I CMD...      runs CMD on host I (its network namespace, its gcrd, store and work dir)
#   launch_on I LOG CMD...  starts `gcr run -- CMD` on host I in the background of this shell,
#                         output to LOG; sets P to its pid (the process itself, not a subshell)
#   host_addr I           host I's address; host_gcrd I: its gcrd's HOST:PORT
#   start_host_gcrd I [VAR=VALUE...]   (again) host I's gcrd, with VARs in its environment;
#                         host_log I: its log. With HOST_PEER_MEMORY=SIZE (set before sourcing),
#                         each gcrd keeps SIZE of peers' checkpoints in memory (--peer-memory), in
#                         host_memory I (on /dev/shm; gone with the host); HOST_PEER_COPY_RATE=N
#                         paces each copy to N MiB/s
#   cut_host I / mend_host I   every packet to and from host I dropped, silently (or no longer)
#   remove_host I         host I gone: every process in it killed, its namespace deleted
#   make_host I; start_host_gcrd I   a new host I (after the first HOSTS)
#   give_rank_address I R  host I gets rank R's own address, rank_addr R (a /32 that may move)
#   has_address I A       host I has address A
command -v ip > /dev/null || { echo "SKIP: ip (iproute2) is missing"; exit 77; }
command -v iptables > /dev/null || { echo "SKIP: iptables is missing"; exit 77; }
HOSTS=${HOSTS:-3}
NET=${NET:-10.78.0}
BR=gjb$$
host_ns() { echo "gcr-job$$-h$1"; }
host_addr() { echo "$NET.$(($1 + 1))"; }
host_gcrd() { echo "$(host_addr "$1"):7070"; }
host_log() { echo "$T/h$1/gcrd.log"; }
host_memory() { echo "/dev/shm/gcr-job$$-h$1"; }
on_host() {
  local i=$1
  shift
  nsenter --net="/run/netns/$(host_ns "$i")" env GCR_GCRD_SOCKET="$T/h$i/gcrd.sock" \
    GCR_STORE="$T/h$i/store" GCR_WORK_DIR="$T/h$i/work" LD_LIBRARY_PATH="$BUILD/simgpu" "$@"
}
launch_on() {
  local i=$1 log=$2
  shift 2
  (exec nsenter --net="/run/netns/$(host_ns "$i")" env GCR_GCRD_SOCKET="$T/h$i/gcrd.sock" \
    GCR_STORE="$T/h$i/store" GCR_WORK_DIR="$T/h$i/work" LD_LIBRARY_PATH="$BUILD/simgpu" \
    "$GCR" run -- "$@" > "$log" 2>&1) &
  P=$!
  pids+=("$P")
}
host_gcrd_running() { pgrep -f "gcrd --socket $T/h$1/gcrd.sock" > /dev/null; }
start_host_gcrd() {
  local i=$1 n
  shift
  pkill -9 -f "gcrd --socket $T/h$i/gcrd.sock" 2> /dev/null || true
  wait_until 30 eval "! host_gcrd_running $i" || fail "host $i's old gcrd did not go"
  mkdir -p "$T/h$i"
  local memory=()
  [[ -z ${HOST_PEER_MEMORY:-} ]] || memory=(--peer-memory "$HOST_PEER_MEMORY" --peer-memory-dir "$(host_memory "$i")")
  [[ -z ${HOST_PEER_COPY_RATE:-} ]] || memory+=(--peer-copy-mib-per-s "$HOST_PEER_COPY_RATE")
  for ((n = 0; ; n++)); do
    on_host "$i" env "$@" "$BUILD/bin/gcrd" --socket "$T/h$i/gcrd.sock" --detach --listen "$(host_gcrd "$i")" \
      --token-file "$T/token" --store "$T/h$i/store" --allow-uids 0 "${memory[@]}" > /dev/null 2> "$T/h$i/start.err" < /dev/null && break
    grep -q "in use" "$T/h$i/start.err" && ((n < 3000)) || fail "host $i's gcrd did not start: $(cat "$T/h$i/start.err")"
    sleep 0.02
  done
}
rank_addr() { echo "$NET.$(($1 + 101))"; }
give_rank_address() { ip netns exec "$(host_ns "$1")" ip addr add "$(rank_addr "$2")/32" dev "gj$$h$1"; }
has_address() { ip netns exec "$(host_ns "$1")" ip -4 -o addr show | grep_quiet " $2/"; }
cut_host() {
  ip netns exec "$(host_ns "$1")" iptables -I INPUT -j DROP
  ip netns exec "$(host_ns "$1")" iptables -I OUTPUT -j DROP
}
mend_host() {
  ip netns exec "$(host_ns "$1")" iptables -D INPUT -j DROP 2> /dev/null || true
  ip netns exec "$(host_ns "$1")" iptables -D OUTPUT -j DROP 2> /dev/null || true
}
remove_host() {
  ip netns pids "$(host_ns "$1")" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
  ip netns del "$(host_ns "$1")" 2> /dev/null || true
  rm -rf "$(host_memory "$1")"
}
cleanup_hosts() {
  local i
  for ((i = 0; i < HOSTS; i++)); do remove_host "$i"; done
  ip link del "$BR" 2> /dev/null || true
}
# make_host I: host I's namespace on the bridge (no gcrd yet); HOSTS grows to cover it.
make_host() {
  local i=$1 ns
  ns=$(host_ns "$i")
  ((i < HOSTS)) || HOSTS=$((i + 1))
  ip netns add "$ns" || { echo "SKIP: cannot make a network namespace"; exit 77; }
  ip link add "gj$$h$i" type veth peer name "gj$$p$i"
  ip link set "gj$$p$i" master "$BR" up
  ip link set "gj$$h$i" netns "$ns"
  ip netns exec "$ns" ip addr add "$(host_addr "$i")/24" dev "gj$$h$i"
  ip netns exec "$ns" ip link set "gj$$h$i" up
  ip netns exec "$ns" ip link set lo up
  # A restored connection binds its old address while the killed one may linger in TIME-WAIT.
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_tw_reuse=1
}
ip link add "$BR" type bridge || { echo "SKIP: cannot make a bridge"; exit 77; }
ip link set "$BR" up
for ((i = 0; i < HOSTS; i++)); do make_host "$i"; done
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$T/token"
chmod 600 "$T/token"
for ((i = 0; i < HOSTS; i++)); do start_host_gcrd "$i"; done
