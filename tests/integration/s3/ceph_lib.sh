# A single-node Ceph with the RADOS Gateway, for tests that need a real S3 endpoint: one monitor,
# one OSD on memstore (RAM), radosgw (beast) on 127.0.0.1; every file under one directory; the
# daemons run in the foreground of background jobs and are stopped by their pids. Facts behind the
# settings: ../shared/research/research-s3-ceph.md (auth none needs ms_mon_client_mode crc; one
# OSD needs pool size 1 and few PGs; paxos_propose_interval 0.1 takes RGW's first start from ~14 s
# to ~3 s).
#
#   . ceph_lib.sh
#   ceph_start DIR          (CEPH_RGW_ADDR: the gateway's address, default 127.0.0.1;
#                           CEPH_MEMSTORE_BYTES: the OSD's RAM, default 2 GiB) exports AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
#                           AWS_REGION, CEPH_RGW_PID; returns 77 when Ceph is not installed
#   ceph_rgw_stop / ceph_rgw_start   the gateway alone (an endpoint going down and coming back)
#   ceph_stop               every daemon it started
#   s3_curl METHOD PATH [curl args]  a signed request with curl itself (bucket creation, listing)

CEPH_PIDS=()

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

s3_curl() {
    local method=$1 path=$2
    shift 2
    curl -sS --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X "$method" "$@" "$AWS_ENDPOINT_URL/$path"
}

ceph_rgw_start() {
    radosgw -c "$CEPH_DIR/ceph.conf" -n client.rgw -f >>"$CEPH_DIR/log/rgw.out" 2>&1 &
    CEPH_RGW_PID=$!
    CEPH_PIDS+=("$CEPH_RGW_PID")
    local i
    for i in $(seq 1 300); do
        if curl -s -o /dev/null "$AWS_ENDPOINT_URL/" 2>/dev/null; then return 0; fi
        kill -0 "$CEPH_RGW_PID" 2>/dev/null || { echo "radosgw exited; see $CEPH_DIR/log" >&2; return 1; }
        sleep 0.1
    done
    echo "radosgw did not answer on $AWS_ENDPOINT_URL within 30 s" >&2
    return 1
}

ceph_rgw_stop() {
    [[ -n ${CEPH_RGW_PID:-} ]] || return 0
    kill -9 "$CEPH_RGW_PID" 2>/dev/null || true
    wait "$CEPH_RGW_PID" 2>/dev/null || true
    CEPH_RGW_PID=
}

# SIGTERM, then SIGKILL after 2 s: a Ceph daemon may take minutes to shut down cleanly, and all
# its state is in memory or in the test's directory anyway.
ceph_stop() {
    local p i
    for p in "${CEPH_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for i in $(seq 1 20); do
        local alive=0
        for p in "${CEPH_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [[ $alive == 1 ]] || break
        sleep 0.1
    done
    for p in "${CEPH_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${CEPH_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    CEPH_PIDS=()
}

ceph_start() {
    CEPH_DIR=$1
    local tool
    for tool in ceph-mon ceph-osd radosgw radosgw-admin ceph-authtool monmaptool ceph curl python3; do
        command -v "$tool" >/dev/null 2>&1 || { echo "skip: $tool not installed (scripts/setup.sh installs Ceph)"; return 77; }
    done
    mkdir -p "$CEPH_DIR"/{mon,osd,rgw,run,log}
    local fsid mon_port rgw_port
    fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
    mon_port=$(free_port)
    rgw_port=$(free_port)
    cat >"$CEPH_DIR/ceph.conf" <<CONF
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$mon_port
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_mon_client_mode = crc
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_crush_chooseleaf_type = 0
paxos_propose_interval = 0.1
run_dir = $CEPH_DIR/run
admin_socket = $CEPH_DIR/run/\$name.asok
log_file = $CEPH_DIR/log/\$name.log
keyring = $CEPH_DIR/keyring
[mon]
mon_data = $CEPH_DIR/mon
[osd]
osd_data = $CEPH_DIR/osd
osd_objectstore = memstore
memstore_device_bytes = ${CEPH_MEMSTORE_BYTES:-2147483648}
[client.rgw]
# tcp_nodelay: beast writes a response's headers and body apart, and with Nagle on its socket the
# body waits for the client's delayed ACK: 40 ms on every small request (measured: a pull of 7
# packs spent 0.4 s of 0.9 s so). Production RGWs set it; S3 itself does not delay so.
rgw_frontends = beast endpoint=${CEPH_RGW_ADDR:-127.0.0.1}:$rgw_port tcp_nodelay=1
rgw_data = $CEPH_DIR/rgw
rgw_gc_obj_min_wait = 5
rgw_gc_processor_period = 5
CONF
    local conf=(-c "$CEPH_DIR/ceph.conf")
    ceph-authtool --create-keyring "$CEPH_DIR/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null || return 1
    monmaptool --create --addv a "[v2:127.0.0.1:$mon_port]" --fsid "$fsid" "$CEPH_DIR/monmap" >/dev/null || return 1
    ceph-mon "${conf[@]}" --mkfs -i a --monmap "$CEPH_DIR/monmap" --keyring "$CEPH_DIR/keyring" || return 1
    ceph-mon "${conf[@]}" -i a -f >>"$CEPH_DIR/log/mon.out" 2>&1 &
    CEPH_PIDS+=($!)
    local osd_uuid
    osd_uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
    timeout 30 ceph "${conf[@]}" osd new "$osd_uuid" >/dev/null || { echo "ceph osd new failed" >&2; return 1; }
    ceph-osd "${conf[@]}" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$CEPH_DIR/log/osd.out" 2>&1 || return 1
    ceph-osd "${conf[@]}" -i 0 -f >>"$CEPH_DIR/log/osd.out" 2>&1 &
    CEPH_PIDS+=($!)
    export AWS_ENDPOINT_URL="http://${CEPH_RGW_ADDR:-127.0.0.1}:$rgw_port" AWS_REGION=us-east-1
    export AWS_ACCESS_KEY_ID=gcrtestkey AWS_SECRET_ACCESS_KEY=gcrtestsecret0123456789
    unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3
    ceph_rgw_start || return 1
    radosgw-admin "${conf[@]}" user create --uid=gcr-test --display-name=gcr-test \
        --access-key="$AWS_ACCESS_KEY_ID" --secret-key="$AWS_SECRET_ACCESS_KEY" >/dev/null || return 1
}
