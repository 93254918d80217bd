# A Slurm cluster on one machine, for the tests of gcr under Slurm (sourced after
# ../programs/lib.sh; facts behind the settings: ../shared/research/research-slurm.md): Debian's
# slurmctld and one slurmd per node, each node a network namespace on a bridge of this namespace
# with a UTS and a mount namespace of its own (hostname nI, /etc/hosts naming every node, and
# /run/gcr and /var/lib/gcr bind-mounted from $SL/nI: a gcrd, a store and a work directory of its
# own, started in the node's namespaces). One munged for all (a path-name socket reaches every
# namespace). Each test takes its own NET and names, so that two may run side by side.
#   slurm_start            the cluster, every node idle (SKIP 77 when Slurm or munge is missing)
#   on_node I CMD...       CMD in node I's namespaces (its gcrd, store and /etc/hosts)
#   node_addr I            node I's address; node_gcrd I: its gcrd's HOST:PORT
#   node_pids I            every process of node I (its network namespace)
#   kill_node I / start_node I   node I lost (everything in it killed, its namespace and link
#                          gone) / back again, as after a reboot
#   start_gcrd I [VAR=VALUE...]  (again) node I's gcrd, with VARs in its environment
#   slurm_stop             everything it started, no process, namespace, link or mount left
#   sq JOB FIELD           a field of `scontrol show job JOB` (JobState, Restarts, NodeList...)
#   SLURM_CONF is exported: sbatch, srun, scontrol and sinfo of this shell talk to the cluster.
for tool in slurmctld slurmd munged sbatch scontrol nsenter unshare ip; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is missing (scripts/setup.sh installs Slurm and munge)"; exit 77; }
done
NODES=${NODES:-3}
SNET=${SNET:-10.$((150 + $$ % 50)).$(($$ % 250))}
SL=$T/slurm
SBR=gsb$$
SMUNGE=/run/gcr-slurm$$-munge  # munged wants every directory above its socket open to all
export SLURM_CONF=$SL/etc/slurm.conf
# The nodes' gcr commands find their node's gcrd, store and work directory at the defaults.
export -n GCR_GCRD_SOCKET GCR_STORE GCR_WORK_DIR
node_ns() { echo "gcr-slurm$$-n$1"; }
ctl_ns() { echo "gcr-slurm$$-ctl"; }
node_addr() { echo "$SNET.$1"; }
node_gcrd() { echo "$(node_addr "$1"):7070"; }
login_addr() { echo "$SNET.100"; }
slurmd_pid() { cat "$SL/run/slurmd-n$1.pid" 2> /dev/null; }
on_node() {
  local i=$1
  shift
  nsenter -t "$(slurmd_pid "$i")" -n -u -m env LD_LIBRARY_PATH="$BUILD/simgpu" "$@"
}
node_pids() { ip netns pids "$(node_ns "$1")" 2> /dev/null || true; }
sq() { scontrol show job "$1" 2> /dev/null | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {print substr($0, length(k) + 2); exit}'; }

slurm_net() {  # NS ADDR HOSTNAME: a namespace on the bridge
  local ns=$1 addr=$2 veth=gs$$v${3}
  ip netns add "$ns" || { echo "SKIP: cannot make a network namespace"; exit 77; }
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$SBR" up
  ip netns exec "$ns" ip addr add "$addr/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_tw_reuse=1
}

# In its own UTS and mount namespaces: HOSTNAME, /etc/hosts, then CMD (a daemon that forks).
in_node_namespaces() {  # NS HOSTNAME MOUNTS CMD...
  local ns=$1 name=$2 mounts=$3
  shift 3
  nsenter --net="/run/netns/$ns" -- unshare --uts --mount --propagation private -- sh -c \
    "hostname $name && mount --bind '$SL/etc/hosts' /etc/hosts $mounts && exec \"\$@\"" sh "$@"
}

slurm_conf() {
  local i nodes=""
  for ((i = 1; i <= NODES; i++)); do nodes+="NodeName=n$i NodeAddr=$(node_addr "$i") CPUs=2 RealMemory=1000 Gres=gpu:1"$'\n'; done
  cat > "$SL/etc/slurm.conf" << CONF
ClusterName=gcrtest
SlurmctldHost=slurmctl($(node_addr 254))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SMUNGE/munge.sock,cred_expire=5
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$SL/state/ctld
SlurmdSpoolDir=$SL/state/%n/spool
SlurmctldPidFile=$SL/run/slurmctld.pid
SlurmdPidFile=$SL/run/slurmd-%n.pid
SlurmctldLogFile=$SL/log/slurmctld.log
SlurmdLogFile=$SL/log/slurmd-%n.log
PlugStackConfig=$SL/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval=1,bf_interval=1
SlurmdTimeout=5
MessageTimeout=2
ReturnToService=2
KillWait=5
MinJobAge=600
JobRequeue=1
MailProg=/bin/true
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
$nodes
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF
PartitionName=low Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=${SLURM_GRACE:-30}
PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
CONF
  # A simulated GPU per node: the gres names a device file that exists (simgpu is not a driver).
  : > "$SL/etc/gres.conf"
  for ((i = 1; i <= NODES; i++)); do echo "NodeName=n$i Name=gpu File=$SL/dev/gpu-n$i" >> "$SL/etc/gres.conf"; done
}

start_munge() {
  mkdir -p "$SMUNGE"
  chmod 755 "$SMUNGE"
  dd if=/dev/urandom of="$SMUNGE/key" bs=1024 count=1 status=none
  chmod 400 "$SMUNGE/key"
  munged --socket="$SMUNGE/munge.sock" --key-file="$SMUNGE/key" --pid-file="$SL/run/munged.pid" \
    --seed-file="$SMUNGE/seed" --log-file="$SL/log/munged.log" ||
    fail "munged did not start: $(tail -n 5 "$SL/log/munged.log" 2> /dev/null)"
}

# start_node I: node I's slurmd in its namespaces, then its gcrd there.
start_node() {
  local i=$1 mounts
  mkdir -p "$SL/n$i/run-gcr" "$SL/n$i/var-lib-gcr" "$SL/state/n$i/spool"
  [[ -e /run/netns/$(node_ns "$i") ]] || slurm_net "$(node_ns "$i")" "$(node_addr "$i")" "n$i"
  mounts="&& mkdir -p /run/gcr /var/lib/gcr && mount --bind '$SL/n$i/run-gcr' /run/gcr && mount --bind '$SL/n$i/var-lib-gcr' /var/lib/gcr"
  rm -f "$SL/run/slurmd-n$i.pid"
  in_node_namespaces "$(node_ns "$i")" "n$i" "$mounts" slurmd -f "$SLURM_CONF" -N "n$i" ||
    fail "slurmd n$i did not start: $(tail -n 5 "$SL/log/slurmd-n$i.log" 2> /dev/null)"
  wait_until 30 eval "[[ -s $SL/run/slurmd-n$i.pid ]] && kill -0 \$(slurmd_pid $i) 2> /dev/null" ||
    fail "slurmd n$i wrote no pid file: $(tail -n 5 "$SL/log/slurmd-n$i.log" 2> /dev/null)"
  start_gcrd "$i"
}

start_gcrd() {
  local i=$1 p
  shift
  p=$(pgrep -f "gcrd --detach --listen $(node_gcrd "$i") " || true)
  [[ -z $p ]] || kill -9 $p
  wait_until 30 eval "! pgrep -f 'gcrd --detach --listen $(node_gcrd "$i") ' > /dev/null" ||
    fail "node n$i's old gcrd did not go"
  on_node "$i" env "$@" "$BUILD/bin/gcrd" --detach --listen "$(node_gcrd "$i")" --token-file "$SL/token" \
    --allow-uids 0 > /dev/null 2> "$SL/n$i/gcrd.err" < /dev/null ||
    fail "node n$i's gcrd did not start: $(cat "$SL/n$i/gcrd.err")"
}

nodes_idle() {
  local n
  n=$(sinfo -h -N -o '%N %t' 2> /dev/null | awk '$2 == "idle" {print $1}' | sort -u | wc -l)
  ((n == NODES))
}

slurm_start() {
  mkdir -p "$SL"/{etc,run,log,state/ctld,jobs,dev}
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$SL/token"
  chmod 600 "$SL/token"
  local i
  {
    echo "$(node_addr 254) slurmctl"
    for ((i = 1; i <= NODES; i++)); do echo "$(node_addr "$i") n$i"; done
    echo "127.0.0.1 localhost"
  } > "$SL/etc/hosts"
  for ((i = 1; i <= NODES; i++)); do : > "$SL/dev/gpu-n$i"; done
  : > "$SL/etc/plugstack.conf"
  slurm_conf
  ip link add "$SBR" type bridge || { echo "SKIP: cannot make a bridge"; exit 77; }
  ip addr add "$(login_addr)/24" dev "$SBR"
  ip link set "$SBR" up
  start_munge
  slurm_net "$(ctl_ns)" "$(node_addr 254)" ctl
  in_node_namespaces "$(ctl_ns)" slurmctl "" slurmctld -f "$SLURM_CONF" ||
    fail "slurmctld did not start: $(tail -n 5 "$SL/log/slurmctld.log" 2> /dev/null)"
  for ((i = 1; i <= NODES; i++)); do start_node "$i"; done
  wait_until 60 nodes_idle || fail "the nodes are not idle: $(sinfo -N 2>&1 | head -n 12)"
}

kill_node() {
  node_pids "$1" | xargs -r kill -9 2> /dev/null || true
  wait_until 30 eval "[[ -z \$(node_pids $1) ]]" || fail "node n$1 still has processes: $(node_pids "$1")"
  ip netns del "$(node_ns "$1")" 2> /dev/null || true  # its addresses with it, as a reboot
}

slurm_stop() {
  local i
  for ((i = 1; i <= NODES; i++)); do kill_node "$i" 2> /dev/null || true; done
  ip netns pids "$(ctl_ns)" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
  ip netns del "$(ctl_ns)" 2> /dev/null || true
  local p
  p=$(cat "$SL/run/munged.pid" 2> /dev/null || true)
  [[ -n $p && $(cat "/proc/$p/comm" 2> /dev/null) == munged ]] && kill "$p" 2> /dev/null || true
  ip link del "$SBR" 2> /dev/null || true
  rm -rf "$SMUNGE"
}
