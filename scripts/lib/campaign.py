#!/usr/bin/env python3
"""One randomized fault campaign against the order service (run by scripts/campaign).

A store (Redis, a six-node Redis Cluster or Postgres) serves three order-service processes, each reaching it
through a fault proxy of its own (Redis and Postgres), and an order-notifier. Client processes (order-client:
idem's retrying client) place and pay orders, each attempt going to the next process, each intent keeping its
keys; they write what they were answered to a history. Meanwhile a seeded scheduler injects faults. Then
everything heals, every intent ends, and the whole history is checked:

- every key ran at most once: the provider's ledger (the services run with --provider-dedup off, so a second
  run of a payment charges again) has at most one charge per order;
- every acknowledged answer (a 201) equals what a retry with its key gets now, and is marked replayed;
- no acknowledged order or charge is missing: each acknowledged order is found, each acknowledged payment has
  its charge;
- notifications_sent == orders_created once the notifier caught up.

Standard library only. Prints one summary line; on a violation, the seed, the fault schedule and the keys.
"""
import argparse
import asyncio
import collections
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# The routes' lease (`lock_ttl`, 30 s) and the grace a claim gives a lapsed one (half of it).
LEASE = 30.0
GRACE = 15.0
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def quiet(argv, **kwargs):
    return subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)


class Redis:
    """One Redis server with an append-only file synced on every write: a restart keeps every record."""

    kinds = ["store-kill", "store-pause"]

    def __init__(self, work):
        self.dir = os.path.join(work, "redis")
        os.makedirs(self.dir)
        self.port = free_port()
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [os.environ.get("IDEM_REDIS_SERVER", "redis-server"), "--bind", "127.0.0.1", "--port", str(self.port),
             "--dir", self.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--maxmemory-policy", "noeviction", "--logfile", os.path.join(self.dir, "log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_port(self.port):
            raise RuntimeError("redis-server did not start")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def url(self, port=None):
        return f"redis://127.0.0.1:{port or self.port}/"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


class Postgres:
    """One PostgreSQL server; a crash is an immediate stop (committed work survives)."""

    kinds = ["store-kill", "store-pause"]

    def __init__(self, work):
        self.bin = os.environ["IDEM_PG_BIN"]
        self.user = os.environ.get("IDEM_PG_USER")
        self.dir = os.path.join(work, "pg")
        os.makedirs(self.dir)
        if os.getuid() == 0:
            shutil.chown(self.dir, self.user)
        self.port = free_port()
        self.pg(["initdb", "-D", self.data, "-U", "idem", "--auth=trust", "--no-sync", "-E", "UTF8"])
        self.start()

    @property
    def data(self):
        return os.path.join(self.dir, "data")

    def pg(self, argv):
        prefix = ["runuser", "-u", self.user, "--"] if os.getuid() == 0 else []
        quiet(prefix + [os.path.join(self.bin, argv[0])] + argv[1:])

    def start(self):
        self.pg(["pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "-t", "60", "-o",
                 f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c max_connections=300", "start"])

    def postmaster(self):
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            return int(f.readline())

    def kill(self):
        self.pg(["pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"])

    def pause(self):
        # The postmaster first (no new backend forks), then every backend: a frozen server.
        os.kill(self.postmaster(), signal.SIGSTOP)
        subprocess.run(["pkill", "-STOP", "-P", str(self.postmaster())])

    def resume(self):
        os.kill(self.postmaster(), signal.SIGCONT)
        subprocess.run(["pkill", "-CONT", "-P", str(self.postmaster())])

    def url(self, port=None):
        return f"postgres://idem@127.0.0.1:{port or self.port}/postgres"

    def stop(self):
        try:
            self.resume()
        except OSError:
            pass
        try:
            self.kill()
        except (subprocess.CalledProcessError, OSError):
            pass


class Cluster:
    """Six Redis nodes, three primaries with a replica each; a primary killed fails over to its replica."""

    kinds = ["primary-kill"]

    def __init__(self, work):
        self.dir = os.path.join(work, "cluster")
        self.nodes, self.procs = {}, {}
        for _ in range(6):
            port = free_port()
            self.nodes[port] = free_port()
            self.start_node(port)
        quiet([os.environ.get("IDEM_REDIS_CLI", "redis-cli"), "--cluster", "create"]
              + [f"127.0.0.1:{p}" for p in self.nodes] + ["--cluster-replicas", "1", "--cluster-yes"])
        deadline = time.monotonic() + 60
        while not self.healthy():
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not become healthy")
            time.sleep(0.2)

    def start_node(self, port):
        d = os.path.join(self.dir, str(port))
        os.makedirs(d, exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [os.environ.get("IDEM_REDIS_SERVER", "redis-server"), "--bind", "127.0.0.1", "--port", str(port),
             "--cluster-port", str(self.nodes[port]), "--dir", d, "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000", "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0",
             "--maxmemory-policy", "noeviction", "--logfile", os.path.join(d, "log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_port(port):
            raise RuntimeError("a cluster node did not start")

    def cli(self, port, *args):
        return subprocess.run([os.environ.get("IDEM_REDIS_CLI", "redis-cli"), "-p", str(port)] + list(args),
                              capture_output=True, text=True, timeout=5).stdout

    def healthy(self):
        try:
            return all("cluster_state:ok" in self.cli(p, "CLUSTER", "INFO") for p in self.nodes)
        except (subprocess.SubprocessError, OSError):
            return False

    def primaries(self):
        alive = next(p for p, proc in self.procs.items() if proc.poll() is None)
        ports = []
        for line in self.cli(alive, "CLUSTER", "NODES").splitlines():
            parts = line.split()
            if len(parts) > 2 and "master" in parts[2] and "fail" not in parts[2]:
                ports.append(int(parts[1].split(":")[1].split("@")[0]))
        return sorted(ports)

    def url(self, port=None):
        return "redis-cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.nodes)

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class Proxy:
    """A TCP proxy between one service and the store: passes, cuts (resets every connection and refuses new
    ones), stalls (holds every byte) or delays (each chunk)."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.port = free_port()
        self.mode = "ok"
        self.delay = 0.0
        self.pairs = set()
        self.flowing = asyncio.Event()
        self.flowing.set()

    async def start(self):
        self.server = await asyncio.start_server(self.accept, "127.0.0.1", self.port)

    async def accept(self, reader, writer):
        if self.mode == "cut":
            self.reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            self.reset(writer)
            return
        pair = (writer, up_writer)
        self.pairs.add(pair)
        await asyncio.gather(self.pipe(reader, up_writer), self.pipe(up_reader, writer), return_exceptions=True)
        self.pairs.discard(pair)
        for w in pair:
            w.close()

    async def pipe(self, reader, writer):
        while True:
            data = await reader.read(65536)
            if not data:
                break
            await self.flowing.wait()
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.mode == "cut":
                break
            writer.write(data)
            await writer.drain()
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            pass

    @staticmethod
    def reset(writer):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            except OSError:
                pass
        writer.close()

    def cut(self):
        self.mode = "cut"
        self.flowing.set()
        for pair in list(self.pairs):
            for w in pair:
                self.reset(w)

    def stall(self):
        self.mode = "stall"
        self.flowing.clear()

    def slow(self, delay):
        self.delay = delay

    def heal(self):
        self.mode = "ok"
        self.delay = 0.0
        self.flowing.set()


class Service:
    """One order-service process, started again like a supervisor would after it died."""

    def __init__(self, args, store_url, work, index):
        self.args, self.store_url, self.index = args, store_url, index
        self.port = free_port()
        self.log = open(os.path.join(work, f"service-{index}.log"), "ab")
        self.clock = os.path.join(work, f"clock-{index}")
        self.proc = None
        self.frozen = False
        self.starting = False
        # Exits the campaign did not cause (a crash under faults), and starts refused at first.
        self.crashes = []

    def start(self):
        self.starting = True
        try:
            self.spawn()
        finally:
            self.starting = False

    def spawn(self):
        env = dict(os.environ, RUST_LOG="warn")
        if self.args.faketime:
            # A wall clock this campaign can step (libfaketime reads the file at every call); the
            # monotonic clock stays real, as on a host whose NTP steps the time.
            with open(self.clock, "w") as f:
                f.write("+0\n")
            env.update(LD_PRELOAD=FAKETIME_LIB, FAKETIME_TIMESTAMP_FILE=self.clock, FAKETIME_NO_CACHE="1",
                       DONT_FAKE_MONOTONIC="1")
        deadline = time.monotonic() + 120
        while True:
            self.proc = subprocess.Popen(
                [os.path.join(self.args.bin_dir, "order-service"), "--addr", f"127.0.0.1:{self.port}",
                 "--store", self.store_url, "--charge-delay-ms", "2000", "--post-charge-delay-ms", "200", "--provider-dedup", "off",
                 "--on-lapse", "hold"] + (["--replica-acks", "1"] if self.args.store == "cluster" else []),
                env=env, stdout=self.log, stderr=self.log)
            while self.proc.poll() is None and not wait_port(self.port, 1):
                pass
            if self.proc.poll() is None:
                return
            # It could not reach its store at start (the store is down): a supervisor starts it again.
            self.crashes.append(("exited at start", self.proc.returncode))
            if time.monotonic() > deadline:
                raise RuntimeError(f"service {self.index} did not start")
            time.sleep(1)

    def step_clock(self, seconds):
        with open(self.clock, "w") as f:
            f.write(f"{seconds:+d}\n")

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def freeze(self):
        self.proc.send_signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self):
        if self.frozen:
            self.proc.send_signal(signal.SIGCONT)
            self.frozen = False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def healthy(self):
        """Serving, and free for a fault: not frozen, not being started."""
        return self.alive() and not self.frozen and not self.starting

    def note_crash(self):
        """Records an exit nobody asked for (a dead process the heal finds)."""
        if self.proc is not None and self.proc.poll() is not None:
            self.crashes.append(("died", self.proc.returncode))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.thaw()
            self.proc.kill()
            self.proc.wait()
            self.proc.wait()


def request(port, method, path, user, key=None, body=None, timeout=10):
    """(status, headers, text) of one HTTP request, or (0, {}, why) without an answer."""
    headers = {"x-user-id": user, "content-type": "application/json"}
    if key:
        headers["idempotency-key"] = key
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = conn.getresponse()
        text = response.read().decode()
        conn.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, text
    except OSError as error:
        return 0, {}, type(error).__name__


class Campaign:
    def __init__(self, args):
        self.args = args
        # The faults draw from a generator of their own, the clients from another: the schedule a seed
        # gives does not depend on how the workload went.
        self.rng = random.Random(args.seed)
        self.client_rng = random.Random(args.seed ^ 0x5EED)
        self.client_failures = []
        self.work = tempfile.mkdtemp(prefix=f"campaign-{args.store}-")
        os.chmod(self.work, 0o755)
        self.schedule = []
        self.services, self.proxies, self.clients = [], [], []
        self.history = os.path.join(self.work, "history.jsonl")

    def note(self, kind, target, **detail):
        self.schedule.append({"t": round(time.monotonic() - self.started, 1), "fault": kind, "target": target,
                              **detail})

    async def setup(self):
        self.store = {"redis": Redis, "postgres": Postgres, "cluster": Cluster}[self.args.store](self.work)
        for i in range(3):
            if self.args.store == "cluster":
                url = self.store.url()
            else:
                proxy = Proxy(self.store.port)
                await proxy.start()
                self.proxies.append(proxy)
                url = self.store.url(proxy.port)
            self.services.append(Service(self.args, url, self.work, i))
        for s in self.services:
            await asyncio.to_thread(s.start)
        self.notifier_log = open(os.path.join(self.work, "notifier.log"), "ab")
        self.notifier = subprocess.Popen(
            [os.path.join(self.args.bin_dir, "order-notifier"), "--store", self.store.url(), "--visibility", "2s",
             "--lease", "5s"], env=dict(os.environ, RUST_LOG="warn"), stdout=self.notifier_log,
            stderr=self.notifier_log)

    def teardown(self):
        for proc in self.clients:
            if proc.returncode is None:
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
        for s in self.services:
            s.stop()
        if self.notifier.poll() is None:
            self.notifier.kill()
        self.store.stop()

    async def client_loop(self, worker):
        """One workload process after another, until new intents stop."""
        run = 0
        while not self.stop_new:
            run += 1
            argv = [os.path.join(self.args.bin_dir, "order-client"), "--user", f"user-{worker}-{run}",
                    "--orders", "8", "--concurrency", "2", "--timeout", "5s", "--attempts", "1000",
                    "--deadline", f"{int(LEASE + GRACE + 120)}s", "--history", self.history]
            for s in self.client_rng.sample(self.services, len(self.services)):
                argv += ["--base-url", f"http://127.0.0.1:{s.port}"]
            proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.DEVNULL,
                                                        stderr=asyncio.subprocess.DEVNULL)
            self.clients.append(proc)
            code = await proc.wait()
            # 0: every intent ended in its 201; 1: some did not (held, gave up): both are answers the checker
            # reads. Anything else (a panic, a signal, a flag refused) loses intents: a violation.
            if code not in (0, 1):
                self.client_failures.append({"worker": worker, "run": run, "exit": code})

    async def restart(self, service, after):
        await asyncio.sleep(after)
        await asyncio.to_thread(service.start)

    async def faults(self):
        kinds = ["kill", "pause"] + self.store.kinds
        if self.proxies:
            kinds += ["cut", "stall", "stall-long", "latency"]
        if self.args.faketime:
            kinds.append("clock")
        # The first fault is a pause past the lease and its grace: the fault a short campaign must not miss.
        bag = ["pause"]
        background = []
        rng = self.rng
        while time.monotonic() < self.faults_until:
            # A quiet moment first: the first fault finds executions in flight.
            await asyncio.sleep(rng.uniform(2, 6))
            if not bag:
                bag = rng.sample(kinds, len(kinds))
            kind = bag.pop(0)
            # Every fault draws the same numbers whatever it finds, so that a seed gives one schedule: which
            # process or link or node, and two numbers for its lengths and sizes.
            target, x, y = rng.randrange(3), rng.random(), rng.random()
            if kind in ("kill", "pause", "clock"):
                s = self.services[target]
                serving = [other for other in self.services if other.healthy()]
                if not s.healthy() or len(serving) < 2:
                    # Keep one process serving; a process being started or frozen is left as it is.
                    self.note(kind, f"service-{s.index}", skipped=True)
                    continue
            if kind == "kill":
                s.kill9()
                down = 0.5 + 2.5 * x
                self.note(kind, f"service-{s.index}", down=round(down, 1))
                background.append(asyncio.create_task(self.restart(s, down)))
            elif kind == "pause":
                s.freeze()
                length = LEASE + GRACE + 12 + 8 * x
                self.note(kind, f"service-{s.index}", seconds=round(length, 1))
                asyncio.get_running_loop().call_later(length, s.thaw)
            elif kind == "clock":
                step = (1 if y < 0.5 else -1) * int(60 + 3540 * x)
                s.step_clock(step)
                self.note(kind, f"service-{s.index}", step=step)
            elif kind in ("store-kill", "store-pause"):
                down = 1 + 4 * x
                self.note(kind, self.args.store, down=round(down, 1))
                if kind == "store-kill":
                    await asyncio.to_thread(self.store.kill)
                    await asyncio.sleep(down)
                    await asyncio.to_thread(self.store.start)
                else:
                    self.store.pause()
                    await asyncio.sleep(down)
                    self.store.resume()
            elif kind == "primary-kill":
                primaries = self.store.primaries()
                victim = primaries[target % len(primaries)]
                self.store.procs[victim].kill()
                down = 5 + 4 * x
                self.note(kind, f"node-{victim}", down=round(down, 1))
                await asyncio.sleep(down)
                await asyncio.to_thread(self.store.start_node, victim)
            else:
                p = self.proxies[target]
                if kind == "cut":
                    length = 1 + 7 * x
                    p.cut()
                elif kind == "stall":
                    length = 1 + 4 * x
                    p.stall()
                elif kind == "stall-long":
                    # An outage of one process's store link longer than the lease.
                    length = LEASE + 1 + 9 * x
                    p.stall()
                else:
                    length = 5 + 10 * x
                    p.slow(0.02 + 0.28 * y)
                self.note(kind, f"link-{target}", seconds=round(length, 1))
                await asyncio.sleep(length)
                p.heal()
        await asyncio.gather(*background)

    async def heal(self):
        for p in self.proxies:
            p.heal()
        if hasattr(self.store, "resume"):
            self.store.resume()
        for s in self.services:
            s.thaw()
            if self.args.faketime:
                s.step_clock(0)
            if not s.alive():
                s.note_crash()
                await asyncio.to_thread(s.start)
        if isinstance(self.store, Cluster):
            deadline = time.monotonic() + 60
            while not await asyncio.to_thread(self.store.healthy) and time.monotonic() < deadline:
                await asyncio.sleep(0.5)

    async def run(self):
        # The proxies' pipes still open at the end are cancelled: not an error.
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: None if isinstance(context.get("exception"), asyncio.CancelledError)
            else loop.default_exception_handler(context))
        await self.setup()
        self.started = time.monotonic()
        self.faults_until = self.started + self.args.minutes * 60
        self.stop_new = False
        workers = [asyncio.create_task(self.client_loop(w)) for w in range(self.args.clients)]
        await self.faults()
        # Every pause ends; then heal the rest, stop new intents and let every intent end.
        while any(s.frozen for s in self.services):
            await asyncio.sleep(0.5)
        await self.heal()
        self.stop_new = True
        await asyncio.gather(*workers)
        return await asyncio.to_thread(self.check)

    def check(self):
        intents = []
        with open(self.history) as f:
            for line in f:
                intents.append(json.loads(line))
        port = self.services[0].port
        violations = []
        answers = collections.Counter()

        def violation(kind, intent, detail):
            violations.append({"kind": kind, "user": intent["user"],
                               "order_key": (intent.get("order") or {}).get("key"),
                               "payment_key": (intent.get("payment") or {}).get("key"), "detail": detail})

        def final(path, user, answer):
            """Sends a request again until it has a final answer: not in flight, not refused for a store that
            is not back yet; within a lease and its grace, the longest an execution can still be running."""
            deadline = time.monotonic() + LEASE + GRACE + 15
            while True:
                status, headers, text = request(port, "POST", path, user, answer["key"], answer["request"])
                if status not in (0, 409, 503) or "execution-held" in text or time.monotonic() > deadline:
                    return status, headers, text
                time.sleep(min(float(headers.get("retry-after", "1")), 5.0))

        def settle(intent, which, path):
            """The answer an intent's request ends with. One the client got no answer for (it gave up, or the
            execution was held for an operator) is sent again now that everything healed: a held execution
            whose holder was only paused has completed since; one whose process was killed is still held."""
            answer = intent.get(which)
            if answer is None:
                return None
            if answer["status"] is None:
                held = "held for an operator" in (answer["error"] or "")
                status, headers, text = final(path, intent["user"], answer)
                answer.update(status=status, text=text, settled_late=True)
                answers[f"{which} {'held' if held else 'unanswered'}, then {status}"] += 1
            else:
                answers[f"{which} {answer['status']}"] += 1
            # The answers a request may end with under these faults: its 201; 409 execution-held (its
            # process died mid-way: left to an operator); 502 provider-outcome-unknown (the provider's
            # ledger failed during the charge: kept, never charged again). Anything else is a bug.
            text = answer["text"] or ""
            if not (answer["status"] == 201 or (answer["status"] == 409 and "execution-held" in text)
                    or (answer["status"] == 502 and "provider-outcome-unknown" in text)):
                violation(f"{which} ended in an unexpected answer", intent, [answer["status"], text[:200]])
            return answer

        for intent in intents:
            order = settle(intent, "order", "/orders")
            if not order or order["status"] != 201:
                continue
            order_id = json.loads(order["text"])["id"]
            intent["order_id"] = order_id
            payment = settle(intent, "payment", f"/orders/{order_id}/payments")
            if payment is None and not order.get("settled_late"):
                violation("order acknowledged, payment never tried", intent, order)

        # Acknowledged answers are what the key answers now; acknowledged orders exist.
        for intent in intents:
            order = intent.get("order")
            if not order or order["status"] != 201:
                continue
            status, headers, text = request(port, "POST", "/orders", intent["user"], order["key"], order["request"])
            if status != 201 or text != order["text"] or headers.get("idempotent-replayed") != "true":
                violation("order replay differs from its acknowledgement", intent, [status, text[:200]])
            status, _, text = request(port, "GET", f"/orders/{intent['order_id']}", intent["user"])
            if status != 200 or json.loads(text) != json.loads(order["text"]):
                violation("acknowledged order missing", intent, [status, text[:200]])
            payment = intent.get("payment")
            if payment and payment["status"] == 201:
                path = f"/orders/{intent['order_id']}/payments"
                status, headers, text = request(port, "POST", path, intent["user"], payment["key"],
                                                payment["request"])
                if status != 201 or text != payment["text"] or headers.get("idempotent-replayed") != "true":
                    violation("payment replay differs from its acknowledgement", intent, [status, text[:200]])

        # At most one charge per order (each order has one payment key), read once nothing can still be
        # charging: every request above has its final answer, and a holder thawed before the heal has had a
        # provider call's time to finish. Acknowledged payments have their charge.
        time.sleep(5)
        status, _, text = request(port, "GET", "/provider/charges", "campaign")
        charges = collections.Counter(c["order_id"] for c in json.loads(text)) if status == 200 else None
        if charges is None:
            violations.append({"kind": "no ledger", "detail": [status, text[:200]]})
            charges = collections.Counter()
        known = set()
        for intent in intents:
            order_id = intent.get("order_id")
            if not order_id:
                continue
            known.add(order_id)
            count = charges.get(order_id, 0)
            if count > 1:
                violation("payment ran twice", intent, {"order_id": order_id, "charges": count})
            payment = intent.get("payment")
            if payment and payment["status"] == 201 and count == 0:
                violation("acknowledged charge missing", intent, {"order_id": order_id})
        for order_id, count in charges.items():
            if order_id not in known:
                violations.append({"kind": "a charge of an order no intent names", "detail": [order_id, count]})

        # Every order created is notified, once the notifier caught up.
        stats = None
        for _ in range(60):
            status, _, text = request(port, "GET", "/stats", "campaign")
            if status == 200:
                stats = json.loads(text)
                if stats["notifications_sent"] == stats["orders_created"]:
                    break
            time.sleep(1)
        if not stats or stats["notifications_sent"] != stats["orders_created"]:
            violations.append({"kind": "notifications_sent != orders_created", "detail": stats})

        # The campaign itself: enough intents to mean something, no workload process lost, no service
        # that died by itself or panicked.
        if len(intents) < self.args.min_intents:
            violations.append({"kind": "too few intents to check", "detail": len(intents)})
        for failure in self.client_failures:
            violations.append({"kind": "a workload process failed", "detail": failure})
        for service in self.services:
            service.note_crash()
            for crash in service.crashes:
                if crash[0] != "exited at start":
                    violations.append({"kind": "a service died by itself", "detail": [service.index, crash]})
            with open(os.path.join(self.work, f"service-{service.index}.log"), errors="replace") as f:
                if "panicked" in f.read():
                    violations.append({"kind": "a service panicked", "detail": f"service-{service.index}.log"})

        executions = collections.Counter(charges.values())
        return {"intents": len(intents), "answers": dict(sorted(answers.items())), "stats": stats,
                "charges_per_order": {str(k): v for k, v in sorted(executions.items())},
                "violations": violations}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, choices=["redis", "cluster", "postgres"])
    parser.add_argument("--minutes", type=float, default=2.0, help="how long faults are injected")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--bin-dir", required=True, help="where order-service, order-notifier, order-client are")
    parser.add_argument("--clients", type=int, default=6, help="workload processes at a time")
    parser.add_argument("--label", default="main", help="what was built (main, or the mutant's name)")
    parser.add_argument("--min-intents", type=int, default=10, help="fewer intents is a failed campaign")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, history) even when all held")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 32)
    args.faketime = os.path.exists(FAKETIME_LIB)
    # Stopped by scripts/test or scripts/campaign (SIGTERM): tear down what this campaign started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    campaign = Campaign(args)
    try:
        result = asyncio.run(campaign.run())
    finally:
        campaign.teardown()
    faults = dict(sorted(collections.Counter(f["fault"] for f in campaign.schedule if not f.get("skipped")).items()))
    skipped = sum(1 for f in campaign.schedule if f.get("skipped"))
    violations = result["violations"]
    print(f"campaign store={args.store} build={args.label} seed={args.seed} minutes={args.minutes} "
          f"intents={result['intents']} faults={json.dumps(faults)} skipped={skipped} "
          f"charges_per_order={json.dumps(result['charges_per_order'])} answers={json.dumps(result['answers'])} "
          f"stats={json.dumps(result['stats'])} violations={len(violations)}", flush=True)
    if violations:
        print(f"  replay: scripts/campaign --store {args.store} --minutes {args.minutes} --seed {args.seed}"
              f" --clients {args.clients}" + ("" if args.label == "main" else f" --mutant {args.label}"))
        print("  schedule: " + json.dumps(campaign.schedule))
        kinds = collections.Counter(v["kind"] for v in violations)
        print("  violations by kind: " + json.dumps(kinds))
        for v in violations[:20]:
            print("  violation: " + json.dumps(v))
        print(f"  logs and history kept in {campaign.work}")
        return 1
    if args.keep:
        print(f"  logs and history kept in {campaign.work}")
    else:
        shutil.rmtree(campaign.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
