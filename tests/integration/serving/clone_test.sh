#!/usr/bin/env bash
# Clones of a warm server (issue 39, Note [A clone's network] in daemon/clone_network.h):
# infer_server started from a shell under `gcr run`, writing a log, warmed up and answering on
# 0.0.0.0:PORT; checkpointed while it serves (-R: it keeps serving); three clones restored at
# once (`gcr restore --clone --address A/24 --bridge BR`), each in PID and network namespaces of
# its own with its own address on a bridge this test makes (one named with --hostname in a UTS
# namespace of its own). Each answers what the original
# answers; a clone killed leaves the original and the others serving, and the original killed
# leaves the clones serving; a clone into a namespace the caller made (--netns) answers there;
# scripts/serve_on_demand.py restores a clone on the first request, ends it when idle, and
# restores another on the next; a clone onto a missing bridge is refused, and leaves no namespace
# or link behind.
#   clone_test.sh BUILD_DIR     (root: CRIU, namespaces; exits 77 to skip)
set -euo pipefail
TEST_NAME=serve-clones
source "$(dirname "$0")/../programs/lib.sh"
command -v ip > /dev/null || { echo "SKIP: ip (iproute2) is missing"; exit 77; }
command -v nsenter > /dev/null || { echo "SKIP: nsenter (util-linux) is missing"; exit 77; }
ASK=(python3 "$(dirname "$0")/../../workloads/infer_server/infer_ask.py")
SERVER=$BUILD/tests/workloads/infer_server
NET=10.$((100 + $$ % 100)).$(($$ % 250))
BR=gsv$$
NS=gcr-serve$$
clone_pids=()
cleanup_net() {
  local p
  for p in "${clone_pids[@]}"; do kill -9 "$p" 2> /dev/null || true; done
  ip netns del "$NS" 2> /dev/null || true
  ip netns del "gcr-clone-4194305-0badc0de" 2> /dev/null || true
  ip netns del "gcr-clone-$$-0badc0de" 2> /dev/null || true
  ip link del "$BR" 2> /dev/null || true
}
trap 'rc=$?; cleanup_net; (exit $rc); cleanup' EXIT
ip link add "$BR" type bridge || { echo "SKIP: cannot make a bridge"; exit 77; }
ip addr add "$NET.1/24" dev "$BR"
ip link set "$BR" up
PORT=$(free_port)

answers_of() { "${ASK[@]}" "$1" 1 2 77 --wait "${2:-0}"; }  # ADDRESS [WAIT_S]

step "the server, started from a shell, warms up and answers"
launch "$T/server.log" "$SERVER" --weights "$T/weights.bin" --make-weights 16M \
  --listen "0.0.0.0:$PORT" --warmup-passes 3 --cache 8M
server=$P
wait_until 120 log_shows "$T/server.log" "^ready" || fail "the server is not ready: $(tail -n 5 "$T/server.log")"
want=$(answers_of "127.0.0.1:$PORT") || fail "the server did not answer"
echo "ok: it answers: $(echo "$want" | head -n 1)"

step "checkpointed while it serves; it serves on"
checkpoint_json "$T/warm.json" "$server" -R --name warm
[[ $(answers_of "127.0.0.1:$PORT") == "$want" ]] || fail "the server answers differently after its checkpoint"

step "three clones restored at once"
restorers=()
for i in 1 2 3; do
  named=()
  ((i != 2)) || named=(--hostname "clone2-$$")
  "$GCR" restore warm --clone --address "$NET.$((10 + i))/24" --bridge "$BR" --detach "${named[@]}" \
    --log "$T/clone$i.log" --json > "$T/clone$i.json" 2> "$T/clone$i.err" &
  restorers+=($!)
done
for i in 1 2 3; do
  wait "${restorers[i - 1]}" || fail "clone $i: $(cat "$T/clone$i.err" "$T/clone$i.json" | head -n 20)"
  c=$(json_field pid < "$T/clone$i.json")
  [[ -n $c && $(json_field clone < "$T/clone$i.json") == 1 ]] || fail "clone $i: $(cat "$T/clone$i.json")"
  clone_pids+=("$c")
done
read_bytes=0
for i in 1 2 3; do
  c=${clone_pids[i - 1]}
  [[ $(readlink /proc/"$c"/ns/net) != "$(readlink /proc/self/ns/net)" ]] || fail "clone $i shares this host's network namespace"
  [[ $(readlink /proc/"$c"/ns/pid) != "$(readlink /proc/self/ns/pid)" ]] || fail "clone $i shares this host's PID namespace"
  [[ $(answers_of "$NET.$((10 + i)):$PORT" 30) == "$want" ]] || fail "clone $i answers otherwise than the original"
  read_bytes=$((read_bytes + $(json_field store_read_bytes < "$T/clone$i.json")))
done
[[ $(readlink /proc/"${clone_pids[0]}"/ns/net) != "$(readlink /proc/"${clone_pids[1]}"/ns/net)" ]] ||
  fail "clones 1 and 2 share a network namespace"
[[ $(nsenter -t "${clone_pids[1]}" -u uname -n) == "clone2-$$" && $(nsenter -t "${clone_pids[0]}" -u uname -n) == "$(uname -n)" ]] ||
  fail "clone 2 is not named clone2-$$ (--hostname), or clone 1 not as this host"
echo "ok: 3 clones (pids ${clone_pids[*]}) answer as the original, each at its address; the three read $read_bytes bytes of device memory from the store for $(json_field region_bytes < "$T/clone1.json") each"

step "a clone killed: the original and the other clones serve on"
kill -9 "${clone_pids[0]}"
wait_gone "${clone_pids[0]}" 30 || fail "clone 1 did not end"
[[ $(answers_of "127.0.0.1:$PORT") == "$want" ]] || fail "the original stopped serving with clone 1"
[[ $(answers_of "$NET.12:$PORT") == "$want" ]] || fail "clone 2 stopped serving with clone 1"
echo "ok: after clone 1 ended, the original and clone 2 answer"

step "the original killed: the clones serve on"
kill -9 "$server"
wait_gone "$server" 30 || fail "the original did not end"
for i in 2 3; do
  [[ $(answers_of "$NET.$((10 + i)):$PORT") == "$want" ]] || fail "clone $i stopped serving with the original"
done
echo "ok: after the original ended, clones 2 and 3 answer"

step "a clone into a namespace made by the caller (--netns)"
ip netns add "$NS"
ip -n "$NS" link set lo up
"$GCR" restore warm --clone --netns "/run/netns/$NS" --detach --log "$T/clone4.log" --json \
  > "$T/clone4.json" 2> "$T/clone4.err" || fail "clone 4: $(cat "$T/clone4.err" "$T/clone4.json" | head -n 20)"
clone_pids+=("$(json_field pid < "$T/clone4.json")")
[[ $(readlink /proc/"${clone_pids[3]}"/ns/net) == "$(ip netns exec "$NS" readlink /proc/self/ns/net)" ]] ||
  fail "clone 4 is not in $NS"
[[ $(nsenter --net="/run/netns/$NS" "${ASK[@]}" "127.0.0.1:$PORT" 1 2 77 --wait 30) == "$want" ]] ||
  fail "clone 4 answers otherwise in $NS"
echo "ok: clone 4 answers inside $NS"

step "scale to zero and back (scripts/serve_on_demand.py)"
FRONT=$(free_port)
python3 "$(dirname "$0")/../../../scripts/serve_on_demand.py" warm --listen "127.0.0.1:$FRONT" \
  --address "$NET.30/24" --bridge "$BR" --port "$PORT" --idle 1 --gcr "$GCR" > "$T/front.log" 2>&1 &
front=$!
pids+=("$front")
[[ $(answers_of "127.0.0.1:$FRONT" 30) == "$want" ]] || fail "the front's first answer differs: $(cat "$T/front.log")"
wait_until 30 log_shows "$T/front.log" "^ended idle clone" || fail "the idle clone was not ended: $(cat "$T/front.log")"
[[ $(answers_of "127.0.0.1:$FRONT" 30) == "$want" ]] || fail "the front's answer after scaling to zero differs"
wait_until 30 eval "(( \$(grep -c \"^restored clone\" $T/front.log) == 2 ))" || fail "the front restored $(grep -c "^restored clone" "$T/front.log") clones, expected 2: $(cat "$T/front.log")"
kill "$front"
wait "$front" 2> /dev/null || true
echo "ok: the front restored a clone on the first request, ended it when idle, and again: $(grep "^restored" "$T/front.log" | tr '\n' ';')"

step "refused before anything is made; a crashed gcrd's namespace name removed by the next"
# Names as gcrd gives them while it restores (gcr-clone-GCRDPID-X): one of a pid that cannot be
# alive (above the kernel's limit), one of a live process's; a gcrd starting removes the first.
ip netns add "gcr-clone-4194305-0badc0de"
ip netns add "gcr-clone-$$-0badc0de"
stop_gcrd
link_names() { ip -o link | awk -F': ' '{print $2}' | sed 's/@.*//' | sort; }
links=$(link_names)
clone_namespaces=$(ip netns list | grep -c gcr-clone- || true)
if "$GCR" restore warm --clone --address "$NET.20/24" --bridge "nobr$$" > "$T/refused.out" 2>&1; then
  fail "a clone onto a missing bridge was restored: $(cat "$T/refused.out")"
fi
grep -q "no bridge nobr$$" "$T/refused.out" || fail "a missing bridge said: $(cat "$T/refused.out")"
if "$GCR" restore warm --address "$NET.21/24" --bridge "$BR" > "$T/refused2.out" 2>&1; then
  fail "--address without --clone was taken"
fi
# (links of clones that ended may still be going: only new ones count)
new_links=$(comm -13 <(echo "$links") <(link_names))
[[ -z $new_links && $(ip netns list | grep -c gcr-clone- || true) == $((clone_namespaces - 1)) ]] ||
  fail "a refused clone left links or namespaces behind: $new_links $(ip netns list)"
! ip netns list | grep_quiet "gcr-clone-4194305-" || fail "gcrd did not remove a gone gcrd's namespace name"
ip netns list | grep_quiet "gcr-clone-$$-" || fail "gcrd removed the namespace name of a live process"
ip netns del "gcr-clone-$$-0badc0de"
echo "ok: refused: $(head -n 1 "$T/refused.out")"
finish
