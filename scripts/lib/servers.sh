# Shared by scripts/test and scripts/bench: a throwaway work directory,
# and a real Redis, a real Redis Cluster and a real Postgres started on
# loopback (free ports, throwaway data directories), installed from Debian
# packages when missing (needs root, as in CI), all stopped and removed at
# exit.
#
# Sourced after `cd` to the repository root; the caller names itself in
# SCRIPT (for error messages). start_postgres passes PG_EXTRA_OPTS to the
# server (e.g. `-c shared_preload_libraries=pg_stat_statements`).
# Extra processes to stop at exit go in EXTRA_PIDS.

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf '%s: %s\n' "${SCRIPT:-scripts}" "$*" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idem-test.XXXXXX")
chmod 755 "$WORK"
REDIS_PID=""
REDIS_CLUSTER_PIDS=()
PG_DATA=""
EXTRA_PIDS=()

cleanup() {
    local status=$?
    local pid
    for pid in "${EXTRA_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [[ -n "$REDIS_PID" ]] && kill -0 "$REDIS_PID" 2>/dev/null; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    if ((${#REDIS_CLUSTER_PIDS[@]})); then
        kill "${REDIS_CLUSTER_PIDS[@]}" 2>/dev/null || true
        wait "${REDIS_CLUSTER_PIDS[@]}" 2>/dev/null || true
    fi
    if [[ -n "$PG_DATA" && -f "$PG_DATA/postmaster.pid" ]]; then
        as_pg "$IDEM_PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Prints a loopback port that was free a moment ago; `free_port N` prints
# N distinct ones, separated by spaces.
free_port() {
    python3 - "${1:-1}" <<'EOF'
import socket, sys
sockets = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in sockets))
EOF
}

apt_install() {
    [[ $(id -u) -eq 0 ]] || die "$* missing and not root: install it (Debian: apt-get install $*)"
    log "installing $* from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || die "apt-get update failed"
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null || die "apt-get install $* failed"
}

find_pg_bin() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
            echo "$dir"
            return 0
        fi
    done
    if command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then
        dirname "$(command -v pg_ctl)"
        return 0
    fi
    return 1
}

# Runs a PostgreSQL command as the unprivileged user when we are root
# (PostgreSQL refuses to run as root).
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u "$IDEM_PG_USER" -- "$@"
    else
        "$@"
    fi
}

start_redis() {
    command -v redis-server >/dev/null || apt_install redis-server
    IDEM_REDIS_SERVER=$(command -v redis-server)
    export IDEM_REDIS_SERVER
    local port dir
    port=$(free_port)
    dir="$WORK/redis"
    mkdir -p "$dir"
    "$IDEM_REDIS_SERVER" --bind 127.0.0.1 --port "$port" --dir "$dir" \
        --save '' --appendonly no --maxmemory-policy noeviction \
        --logfile "$dir/redis.log" --daemonize no &
    REDIS_PID=$!
    for _ in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            export IDEM_REDIS_URL="redis://127.0.0.1:$port/"
            log "redis-server $("$IDEM_REDIS_SERVER" --version | awk '{print $3}') on $IDEM_REDIS_URL"
            return 0
        fi
        kill -0 "$REDIS_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$dir/redis.log" >&2 || true
    die "redis-server did not start"
}

# The settings of every Redis Cluster node: a short node timeout, so that a
# replica takes over within a few seconds of its primary's death, and no
# delay before a replica's first sync (Redis 7 waits 5 s by default).
REDIS_CLUSTER_OPTS=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 1000
    --repl-diskless-sync-delay 0 --save '' --appendonly no --maxmemory-policy noeviction)

# Starts one Redis Cluster node on a free port, with its cluster bus on
# another, and sets CLUSTER_NODE_PORT. Another process may take a port
# between the probe and the bind: tries a few.
start_redis_cluster_node() {
    local port bus dir pid
    for _ in 1 2 3 4 5; do
        read -r port bus < <(free_port 2)
        dir="$WORK/redis-cluster/$port"
        mkdir -p "$dir"
        "$IDEM_REDIS_SERVER" --bind 127.0.0.1 --port "$port" --cluster-port "$bus" --dir "$dir" \
            "${REDIS_CLUSTER_OPTS[@]}" --logfile "$dir/redis.log" --daemonize no &
        pid=$!
        REDIS_CLUSTER_PIDS+=("$pid")
        for _ in $(seq 1 100); do
            # Another process may answer on this port: it must be ours.
            if [[ $("$IDEM_REDIS_CLI" -p "$port" INFO server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p') == "$pid" ]]; then
                CLUSTER_NODE_PORT=$port
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        unset 'REDIS_CLUSTER_PIDS[-1]'
    done
    cat "$dir/redis.log" >&2 || true
    die "a Redis Cluster node did not start"
}

# Whether every node of the cluster on ports "$@" reports cluster_state:ok
# and three of them are replicas whose link to their primary is up.
redis_cluster_ready() {
    local port info linked=0
    for port in "$@"; do
        "$IDEM_REDIS_CLI" -p "$port" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' || return 1
        info=$("$IDEM_REDIS_CLI" -p "$port" INFO replication 2>/dev/null | tr -d '\r')
        if grep -q '^role:slave' <<<"$info"; then
            grep -q '^master_link_status:up' <<<"$info" || return 1
            linked=$((linked + 1))
        fi
    done
    ((linked == 3))
}

# Starts a Redis Cluster of three primaries with one replica each, and
# exports IDEM_REDIS_CLUSTER_URL (every node as a seed) and IDEM_REDIS_CLI.
start_redis_cluster() {
    command -v redis-server >/dev/null || apt_install redis-server
    command -v redis-cli >/dev/null || apt_install redis-tools
    IDEM_REDIS_SERVER=$(command -v redis-server)
    IDEM_REDIS_CLI=$(command -v redis-cli)
    export IDEM_REDIS_SERVER IDEM_REDIS_CLI
    local ports=() port
    for _ in 1 2 3 4 5 6; do
        start_redis_cluster_node
        ports+=("$CLUSTER_NODE_PORT")
    done
    "$IDEM_REDIS_CLI" --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 1 --cluster-yes \
        >"$WORK/redis-cluster/create.log" 2>&1 \
        || { cat "$WORK/redis-cluster/create.log" >&2; die "redis-cli --cluster create failed"; }
    local deadline=$((SECONDS + 30))
    until redis_cluster_ready "${ports[@]}"; do
        if ((SECONDS >= deadline)); then
            for port in "${ports[@]}"; do
                printf -- '--- node %s: CLUSTER NODES, then the end of its log\n' "$port" >&2
                "$IDEM_REDIS_CLI" -p "$port" CLUSTER NODES >&2 || true
                tail -n 20 "$WORK/redis-cluster/$port/redis.log" >&2 || true
            done
            die "Redis Cluster not ready after 30 s (want cluster_state:ok on every node and 3 linked replicas)"
        fi
        sleep 0.1
    done
    local seeds="${ports[*]/#/127.0.0.1:}"
    export IDEM_REDIS_CLUSTER_URL="redis-cluster://${seeds// /,}"
    log "Redis Cluster (3 primaries, 3 replicas) on $IDEM_REDIS_CLUSTER_URL"
}

start_postgres() {
    IDEM_PG_BIN=$(find_pg_bin) || { apt_install postgresql; IDEM_PG_BIN=$(find_pg_bin) || die "PostgreSQL binaries not found after install"; }
    export IDEM_PG_BIN
    if [[ $(id -u) -eq 0 ]]; then
        IDEM_PG_USER=postgres
        id -u "$IDEM_PG_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$IDEM_PG_USER"
    else
        IDEM_PG_USER=$(id -un)
    fi
    export IDEM_PG_USER
    local port
    port=$(free_port)
    PG_DATA="$WORK/pg"
    mkdir -p "$PG_DATA"
    [[ $(id -u) -eq 0 ]] && chown "$IDEM_PG_USER" "$PG_DATA"
    as_pg "$IDEM_PG_BIN/initdb" -D "$PG_DATA" -U idem --auth=trust --no-sync -E UTF8 >"$WORK/initdb.log" 2>&1 \
        || { cat "$WORK/initdb.log" >&2; die "initdb failed"; }
    as_pg "$IDEM_PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $PG_DATA -c fsync=off -c max_connections=300 ${PG_EXTRA_OPTS:-}" start >/dev/null \
        || { cat "$PG_DATA/server.log" >&2; die "PostgreSQL did not start"; }
    export IDEM_POSTGRES_URL="postgres://idem@127.0.0.1:$port/postgres"
    log "PostgreSQL $("$IDEM_PG_BIN/postgres" --version | awk '{print $3}') on $IDEM_POSTGRES_URL"
}

