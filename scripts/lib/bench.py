"""The measuring half of scripts/bench: drives bench-server with wrk, mode
by mode, round by round, and prints the table, the ratios of §12 of the contract, the
store round trips per request and the server's CPU time per request.

Round trips are counted in a separate, sequential pass per mode and path
(so that counting does not slow the timed rounds): Redis through MONITOR
(commands a script runs are not round trips), Postgres through
pg_stat_statements.

A latency pass follows the throughput rounds: each mode and path at a
fixed rate well below saturation, driven by bench-server's open_loop binary
(open loop, as wrk2 does: a request's latency counts from when it was meant
to leave, so a stall is charged to every request it delays).
"""

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

ORDER = (
    '{"customer_id":"cus_8e03978e","amount_cents":1500,"currency":"EUR",'
    '"lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}]}'
)

# (mode, path prefix, store)
MODES = [
    ("bare", "/bare", None),
    ("least", "/least", None),
    ("floor", "/floor", None),
    ("memory", "/memory", None),
    ("redis", "/redis", "redis"),
    ("redis-acks", "/redis-acks", "redis-acks"),
    ("hand-redis", "/hand/redis", "redis"),
    ("hand-redis-per-worker", "/hand/redis-per-worker", "redis"),
    ("postgres", "/postgres", "postgres"),
    ("hand-postgres", "/hand/postgres", "postgres"),
    ("redis-cached", "/redis-cached", "redis"),
    ("postgres-cached", "/postgres-cached", "postgres"),
    ("memory-sealed", "/memory-sealed", None),
    ("redis-sealed", "/redis-sealed", "redis"),
]

# (mode, its anchor, the target ratio, the paths it applies to)
RATIOS = [
    ("memory", "bare", 0.95, ["replay"]),
    ("memory", "least", 0.90, ["first"]),
    ("redis", "hand-redis", 0.95, ["replay", "first"]),
    ("postgres", "hand-postgres", 0.95, ["replay", "first"]),
]

PATHS = ["replay", "first"]

LUA = """
wrk.method = "POST"
wrk.body = [[%s]]
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
function init(args)
  prefix = args[1] .. "-" .. tid .. "-"
  n = 0
end
function request()
  n = n + 1
  local key = prefix
  if args_mode ~= "replay" then key = key .. n end
  return wrk.format(nil, nil, {["Content-Type"] = "application/json", ["Idempotency-Key"] = key})
end
"""


def lua_script(work, path):
    """A wrk script: unique keys per request (first), or one key (replay)."""
    name = os.path.join(work, f"{path}.lua")
    text = LUA % ORDER
    if path == "replay":
        # One key for every request of the run, whatever the thread.
        text = text.replace('prefix = args[1] .. "-" .. tid .. "-"', 'prefix = args[1]')
        text = text.replace('args_mode ~= "replay"', "false")
    else:
        text = text.replace('args_mode ~= "replay"', "true")
    with open(name, "w") as f:
        f.write(text)
    return name


def post(url, key):
    """One request; its status."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("POST", parts.path, ORDER, {"Content-Type": "application/json", "Idempotency-Key": key})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def cpu_seconds(pid):
    """User + system CPU time of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(name):
    """User + system CPU time of every process whose command is `name`."""
    total = 0.0
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() == name:
                    total += cpu_seconds(int(entry))
        except (OSError, ValueError):
            continue  # not a process, or one that ended meanwhile
    return total


def store_cpu_seconds(store):
    """CPU time of the store's server processes (Redis, or Postgres and its backends)."""
    if store in ("redis", "redis-acks"):
        return process_cpu_seconds("redis-server")
    if store == "postgres":
        return process_cpu_seconds("postgres")
    return 0.0


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_wrk(text):
    """requests, req/s, p50 and p99 in ms, non-2xx count, socket errors."""
    def latency(pct):
        m = re.search(rf"^\s*{pct}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        return float(m.group(1)) * UNITS[m.group(2)] if m else float("nan")

    requests = int(re.search(r"(\d+) requests in", text).group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors = re.search(r"Socket errors: (.*)", text)
    return {
        "requests": requests,
        "rate": rate,
        "p50": latency(50),
        "p99": latency(99),
        "non2xx": int(bad.group(1)) if bad else 0,
        "errors": errors.group(1).strip() if errors else "",
    }


def wrk(args, url, script, key, seconds):
    command = ["wrk", "-t2", f"-c{args.connections}", f"-d{seconds}s", "--latency", "-s", script, url, "--", key]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return parse_wrk(out)


def prime(url, mode, path, key):
    """Makes the record a replay run replays (nothing for first executions)."""
    if path == "replay":
        status = post(url, key)
        if status != 201:
            sys.exit(f"scripts/bench: priming {mode} answered {status}")


def timed(args, mode, prefix, store, path, round_):
    url = f"{args.url}{prefix}/orders"
    key = f"{path}-{mode}-{round_}-{time.time_ns()}"
    prime(url, mode, path, key)
    before, store_before = cpu_seconds(args.server_pid), store_cpu_seconds(store)
    result = wrk(args, url, lua_script(args.work, path), key, args.seconds)
    result["cpu_us"] = (cpu_seconds(args.server_pid) - before) / max(result["requests"], 1) * 1e6
    result["store_cpu_us"] = (store_cpu_seconds(store) - store_before) / max(result["requests"], 1) * 1e6
    if result["non2xx"] or result["errors"]:
        print(f"  warning: {mode} {path}: {result['non2xx']} non-2xx, socket errors: {result['errors']}", file=sys.stderr)
    return result


def open_loop(args, mode, prefix, path, round_):
    """One latency run of mode and path at --latency-rate: open_loop's JSON report."""
    url = f"{args.url}{prefix}/orders"
    key = f"latency-{path}-{mode}-{round_}-{time.time_ns()}"
    prime(url, mode, path, key)
    command = [
        args.open_loop, "--url", url, "--rate", str(args.latency_rate), "--seconds", str(args.latency_seconds),
        "--connections", str(args.latency_connections), "--path", path, "--key", key, "--body", ORDER,
    ]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if result["errors"]:
        print(f"  warning: {mode} {path}: {result['errors']} of {result['requests']} requests not answered 201",
              file=sys.stderr)
    return result


class Monitor:
    """Counts the commands clients send to Redis (not those scripts run)."""

    def __init__(self, args, url):
        self.proc = subprocess.Popen(
            [args.redis_cli, "-u", url, "monitor"], stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.count = 0
        self.lock = threading.Lock()
        self.proc.stdout.readline()  # "OK"
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.proc.stdout:
            # Scripts' commands, and connections' set-up, are not round trips.
            if "lua]" not in line and not any(c in line for c in ('"PING"', '"HELLO"', '"CLIENT"')):
                with self.lock:
                    self.count += 1

    def take(self):
        time.sleep(0.3)
        with self.lock:
            count, self.count = self.count, 0
        return count

    def stop(self):
        self.proc.terminate()


def pg_calls(args):
    sql = "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat_statements%'"
    out = subprocess.run([args.psql, "-X", "-q", "-At", "-d", args.postgres_url, "-c", sql],
                         check=True, capture_output=True, text=True).stdout
    return int(out.strip() or 0)


def round_trips(args, monitor, mode, prefix, path, n=200):
    """Store round trips per request of mode and path, sequentially; `monitor` watches its Redis."""
    url = f"{args.url}{prefix}/orders"
    key = f"count-{path}-{mode}-{time.time_ns()}"
    if path == "replay":
        post(url, key)
    monitor.take()
    pg_before = pg_calls(args)
    for i in range(n):
        status = post(url, key if path == "replay" else f"{key}-{i}")
        if status != 201:
            sys.exit(f"scripts/bench: {mode} {path} answered {status} while counting")
    redis = monitor.take() / n
    pg = (pg_calls(args) - pg_before) / n
    return {"redis": redis, "postgres": max(pg, 0.0)}


def main():
    parser = argparse.ArgumentParser()
    for name in ["url", "work", "redis-cli", "redis-url", "redis-acks-url", "psql", "postgres-url"]:
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--modes", default="")
    parser.add_argument("--open-loop", help="bench-server's open_loop binary, for the latency pass")
    parser.add_argument("--latency-rate", type=int, default=500)
    parser.add_argument("--latency-seconds", type=int, default=8, help="0 skips the latency pass")
    parser.add_argument("--latency-rounds", type=int, default=1)
    parser.add_argument("--latency-connections", type=int, default=16)
    args = parser.parse_args()
    args.latency = args.latency_seconds > 0 and args.latency_rounds > 0
    if args.latency and not args.open_loop:
        sys.exit("scripts/bench: the latency pass needs --open-loop (or --latency-seconds 0)")
    if args.modes:
        wanted = args.modes.split(",")
        unknown = set(wanted) - {mode for mode, _, _ in MODES}
        if unknown:
            sys.exit(f"scripts/bench: unknown modes {sorted(unknown)}")
        MODES[:] = [m for m in MODES if m[0] in wanted]
        RATIOS[:] = [r for r in RATIOS if r[0] in wanted and r[1] in wanted]

    print(f"machine: {os.cpu_count()} CPUs, {platform_line()}")
    print(f"wrk -t2 -c{args.connections}, {args.seconds}s per mode and path, {args.rounds} rounds, alternating")
    if args.latency:
        print(f"latency: open loop at {args.latency_rate} req/s, {args.latency_connections} connections, "
              f"{args.latency_seconds}s per mode and path, {args.latency_rounds} rounds, alternating")
    for mode, prefix, _ in MODES:  # warm-up
        wrk(args, f"{args.url}{prefix}/orders", lua_script(args.work, "first"), f"warm-{mode}", 1)

    results = {(mode, path): [] for mode, _, _ in MODES for path in PATHS}
    for round_ in range(args.rounds):
        order = MODES if round_ % 2 == 0 else list(reversed(MODES))
        for path in PATHS:
            for mode, prefix, store in order:
                result = timed(args, mode, prefix, store, path, round_)
                results[(mode, path)].append(result)
                print(f"  round {round_ + 1} {path:6} {mode:14} {result['rate']:>10.0f} req/s", file=sys.stderr)

    latencies = {(mode, path): [] for mode, _, _ in MODES for path in PATHS}
    for round_ in range(args.latency_rounds if args.latency else 0):
        order = MODES if round_ % 2 == 0 else list(reversed(MODES))
        for path in PATHS:
            for mode, prefix, _ in order:
                result = open_loop(args, mode, prefix, path, round_)
                latencies[(mode, path)].append(result)
                print(f"  latency round {round_ + 1} {path:6} {mode:14} p99 {result['p99_ms']} ms", file=sys.stderr)

    monitors = {"redis": Monitor(args, args.redis_url), "redis-acks": Monitor(args, args.redis_acks_url)}
    trips = {}
    for mode, prefix, store in MODES:
        for path in PATHS:
            counted = round_trips(args, monitors.get(store, monitors["redis"]), mode, prefix, path)
            if store in monitors:
                trips[(mode, path)] = counted["redis"]
            elif store == "postgres":
                trips[(mode, path)] = counted["postgres"]
            else:
                trips[(mode, path)] = counted["redis"] + counted["postgres"]
    for monitor in monitors.values():
        monitor.stop()

    def median(mode, path, field):
        return statistics.median(r[field] for r in results[(mode, path)])

    print()
    print("| mode | path | req/s | p50 ms | p99 ms | store round trips | server CPU µs/req | store CPU µs/req |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for path in PATHS:
        for mode, _, _ in MODES:
            print(f"| {mode} | {path} | {median(mode, path, 'rate'):.0f} | {median(mode, path, 'p50'):.2f} | "
                  f"{median(mode, path, 'p99'):.2f} | {trips[(mode, path)]:.2f} | {median(mode, path, 'cpu_us'):.1f} | "
                  f"{median(mode, path, 'store_cpu_us'):.1f} |")
    print()
    print("req/s, p50 and p99 are wrk's, at saturation (closed loop).")
    print()
    if args.latency:
        print_latencies(args, latencies)
        print()
    def spread(mode, anchor, path):
        # Each round's own ratio (the two modes ran minutes apart at most):
        # how far single measurements on this machine move.
        rounds = [m["rate"] / a["rate"] for m, a in zip(results[(mode, path)], results[(anchor, path)])]
        return f"{min(rounds):.2f}–{max(rounds):.2f}"

    print("| ratio (§12 of the contract) | replays | first executions | target |")
    print("|---|---:|---:|---:|")
    met = True
    for mode, anchor, target, paths in RATIOS:
        cells = []
        for path in PATHS:
            if path not in paths:
                cells.append("–")
                continue
            ratio = median(mode, path, "rate") / median(anchor, path, "rate")
            met &= ratio >= target
            cpu = f"CPU {median(mode, path, 'cpu_us'):.1f} / {median(anchor, path, 'cpu_us'):.1f} µs"
            verdict = "met" if ratio >= target else "NOT met"
            cells.append(f"{ratio:.2f}× {verdict} (rounds {spread(mode, anchor, path)}; {cpu})")
        print(f"| {mode} / {anchor} | {cells[0]} | {cells[1]} | ≥ {target:.2f}× |")
    print()
    print("A ratio is of the medians over the rounds; in parentheses, the lowest and highest of the rounds' own ratios.")
    def informational(title, pairs):
        pairs = [(mode, anchor) for mode, anchor in pairs if (mode, "first") in results and (anchor, "first") in results]
        if not pairs:
            return
        print()
        print(f"| {title} | replays | first executions |")
        print("|---|---:|---:|")
        for mode, anchor in pairs:
            cells = [
                f"{median(mode, path, 'rate') / median(anchor, path, 'rate'):.2f}× ({spread(mode, anchor, path)})"
                for path in PATHS
            ]
            print(f"| {mode} / {anchor} | {cells[0]} | {cells[1]} |")

    informational("cost of replica acknowledgements (WAIT 1)", [("redis-acks", "redis")])
    informational(
        "in-process layers (not §12 of the contract)",
        [("least", "bare"), ("floor", "bare"), ("memory", "floor"), ("memory", "least")],
    )
    informational(
        "the anchor on a connection per worker (not §12 of the contract)",
        [("hand-redis-per-worker", "hand-redis"), ("redis", "hand-redis-per-worker")],
    )
    informational(
        "the replay cache (replays only: first executions pass through it)",
        [("redis-cached", "redis"), ("postgres-cached", "postgres"), ("redis-cached", "hand-redis")],
    )
    informational(
        "encrypted records (Idem::encrypt_records)", [("memory-sealed", "memory"), ("redis-sealed", "redis")]
    )
    print()
    print("every target met" if met else "some targets are not met")


def print_latencies(args, latencies):
    """The latency pass's table: the median of the rounds, the highest max, the errors of all rounds."""
    def cell(runs, field, pick=statistics.median):
        values = [run[field] for run in runs if run[field] is not None]
        return f"{pick(values):.2f}" if values else "–"

    print(f"Latency at a fixed rate of {args.latency_rate} req/s (open loop, {args.latency_connections} connections; "
          "rate: the rate achieved)")
    print()
    print("| mode | path | rate req/s | p50 ms | p99 ms | p99.9 ms | max ms | errors |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for path in PATHS:
        for mode, _, _ in MODES:
            runs = latencies[(mode, path)]
            achieved = statistics.median(run["achieved"] for run in runs)
            errors = sum(run["errors"] for run in runs)
            print(f"| {mode} | {path} | {achieved:.0f} | {cell(runs, 'p50_ms')} | {cell(runs, 'p99_ms')} | "
                  f"{cell(runs, 'p999_ms')} | {cell(runs, 'max_ms', max)} | {errors} |")


def platform_line():
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        model = "unknown CPU"
    return f"{model}, {time.strftime('%Y-%m-%d')}"


if __name__ == "__main__":
    main()
