# Shared by scripts/test and scripts/bench: a throwaway work directory,
# and a real Redis and Postgres started on loopback (free ports, throwaway
# data directories), installed from Debian packages when missing (needs
# root, as in CI), all stopped and removed at exit.
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
    if [[ -n "$PG_DATA" && -f "$PG_DATA/postmaster.pid" ]]; then
        as_pg "$IDEM_PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
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

