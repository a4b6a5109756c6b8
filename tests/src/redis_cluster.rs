//! A private Redis Cluster for tests that kill its nodes.
//!
//! The cluster has three primaries with one replica each, on loopback: every
//! node gets a free port, a free cluster-bus port, a throwaway directory, no
//! persistence, `maxmemory-policy noeviction` and `cluster-node-timeout`
//! 1000 ms, so a replica takes over within a few seconds of its primary's
//! death. It is created with `redis-cli --cluster create`. The binaries are
//! `$IDEM_REDIS_SERVER` and `$IDEM_REDIS_CLI` (set by `scripts/test`), else
//! `redis-server` and `redis-cli` from `PATH`.
//!
//! Everything here blocks, sleeping while it waits: call it from a plain
//! `#[test]`, or from a multi-threaded `#[tokio::test]` where other tasks
//! keep running on the other workers meanwhile.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::{Cmd, FromRedisValue, RedisResult};

use crate::backend;
use crate::port::reserved_ports;
use crate::redis_node::{info_field, query, served_slots};

/// Nodes of a cluster: three primaries, three replicas.
const NODES: usize = 6;
/// Primaries of a healthy cluster.
const PRIMARIES: usize = 3;
/// How long a starting node may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a new cluster may take to be healthy (see [`RedisCluster::wait_until_healthy`]).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the waits look again.
const POLL: Duration = Duration::from_millis(50);

/// The settings of every node besides its ports, directory and log file.
const SETTINGS: [&str; 16] = [
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "1000",
    // Redis 7 delays a replica's first sync by 5 s, waiting for others.
    "--repl-diskless-sync-delay",
    "0",
    "--save",
    "",
    "--appendonly",
    "no",
    "--maxmemory-policy",
    "noeviction",
    "--bind",
    "127.0.0.1",
];

/// A Redis Cluster owned by one test: six redis-server processes, killed
/// and their directories removed when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    server: PathBuf,
    dir: PathBuf,
    nodes: Vec<Node>,
}

#[derive(Debug)]
struct Node {
    port: u16,
    bus_port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// The slots the node served as a primary when it was killed.
    slots_when_killed: Vec<RangeInclusive<u16>>,
}

impl RedisCluster {
    /// Starts a private cluster for `test` and waits until it is healthy, or
    /// returns `None` after printing a skip line when redis-server or
    /// redis-cli is missing (a failure under `scripts/test`).
    pub fn start(test: &str) -> Option<Self> {
        let remedy = "scripts/test sets IDEM_REDIS_SERVER and IDEM_REDIS_CLI";
        let Some(server) = backend::binary("IDEM_REDIS_SERVER", "redis-server") else {
            backend::skip(test, "no redis-server binary (IDEM_REDIS_SERVER unset and none on PATH)", remedy);
            return None;
        };
        let Some(cli) = backend::binary("IDEM_REDIS_CLI", "redis-cli") else {
            backend::skip(test, "no redis-cli binary (IDEM_REDIS_CLI unset and none on PATH)", remedy);
            return None;
        };
        // Built before the first node starts, so that a panic below drops it
        // and stops the nodes already running.
        let mut cluster = Self { server, dir: backend::scratch_dir("idem-redis-cluster"), nodes: Vec::new() };
        for _ in 0..NODES {
            cluster.start_node(test);
        }
        let output = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(cluster.nodes.iter().map(|node| address(node.port)))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{test}: running {}: {e}", cli.display()));
        assert!(
            output.status.success(),
            "{test}: redis-cli --cluster create failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        cluster.wait_until_healthy(READY_TIMEOUT);
        Some(cluster)
    }

    /// `redis-cluster://127.0.0.1:p1,...,127.0.0.1:p6`: every node as a
    /// seed, killed ones included.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(|node| address(node.port)).collect();
        format!("redis-cluster://{}", seeds.join(","))
    }

    /// The ports of all six nodes, killed ones included, in seed order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|node| node.port).collect()
    }

    /// The ports of the nodes not killed.
    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes.iter().filter(|node| node.child.is_some()).map(|node| node.port).collect()
    }

    /// Runs one command on the node at `port` (see [`crate::redis_node::query`]).
    pub fn query<T: FromRedisValue>(&self, port: u16, command: &Cmd) -> RedisResult<T> {
        query(&address(port), command)
    }

    /// The port of the live primary that serves `key`'s slot (by its own
    /// account); `key` may hold a `{hash tag}`. Panics when no live node
    /// serves the slot, as between a primary's death and its replica's
    /// promotion.
    pub fn primary_of(&self, key: &str) -> u16 {
        let live = self.live_ports();
        let slot: u16 = live
            .iter()
            .find_map(|&port| self.query(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).ok())
            .unwrap_or_else(|| panic!("no live node answered CLUSTER KEYSLOT {key}\n{}", self.describe()));
        live.into_iter()
            .find(|&port| {
                served_slots(&address(port)).is_some_and(|slots| slots.iter().any(|range| range.contains(&slot)))
            })
            .unwrap_or_else(|| panic!("no live primary serves slot {slot} of {key}\n{}", self.describe()))
    }

    /// The ports of the live replicas that follow the primary at `port`, by
    /// their own account (`INFO replication`).
    pub fn replicas_of(&self, port: u16) -> Vec<u16> {
        let follows = |replica: u16| {
            let info: String = self.query(replica, redis::cmd("INFO").arg("replication")).unwrap_or_default();
            info_field(&info, "role") == Some("slave")
                && info_field(&info, "master_port") == Some(port.to_string().as_str())
        };
        self.live_ports().into_iter().filter(|&replica| follows(replica)).collect()
    }

    /// Kills the node at `port` at once (SIGKILL, like a crash) and waits
    /// for it, first noting the slots it served, for
    /// [`RedisCluster::wait_for_new_primary`].
    pub fn kill(&mut self, port: u16) {
        let slots = served_slots(&address(port)).unwrap_or_default();
        let node = self.node_mut(port);
        let mut child = node.child.take().unwrap_or_else(|| panic!("node {port} is not running"));
        node.slots_when_killed = slots;
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Suspends the node at `port` (SIGSTOP): it answers nothing, and a
    /// replica receives nothing of its primary's writes, like a replica
    /// that lags. [`RedisCluster::thaw`] resumes it.
    pub fn freeze(&self, port: u16) {
        self.signal(port, "-STOP");
    }

    /// Resumes a [`RedisCluster::freeze`]d node (SIGCONT).
    pub fn thaw(&self, port: u16) {
        self.signal(port, "-CONT");
    }

    fn signal(&self, port: u16, signal: &str) {
        let child = self.node(port).child.as_ref().unwrap_or_else(|| panic!("node {port} is not running"));
        let status = Command::new("kill").args([signal, &child.id().to_string()]).status().expect("running kill");
        assert!(status.success(), "kill {signal} {} (node {port}) failed: {status}", child.id());
    }

    /// Starts the killed node at `port` again, on the same ports and
    /// directory: it keeps its identity (`nodes.conf`) but not its data, and
    /// a former primary whose slots were taken over comes back as a replica.
    /// Returns once it answers; [`RedisCluster::wait_until_healthy`] waits
    /// for it to rejoin.
    pub fn restart(&mut self, port: u16) {
        let server = self.server.clone();
        let node = self.node_mut(port);
        assert!(node.child.is_none(), "node {port} is still running");
        let deadline = Instant::now() + START_TIMEOUT;
        while let Err(error) = node.spawn(&server) {
            assert!(Instant::now() < deadline, "node {port} did not restart: {error}");
            std::thread::sleep(POLL);
        }
    }

    /// Waits until the slots that the killed primary at `old` served are
    /// served by a live primary and every live node reports
    /// `cluster_state:ok`; returns the new primary's port. Panics after
    /// `timeout`, describing every live node's view of the cluster.
    pub fn wait_for_new_primary(&self, old: u16, timeout: Duration) -> u16 {
        let node = self.node(old);
        assert!(node.child.is_none(), "node {old} was not killed");
        let slots = &node.slots_when_killed;
        assert!(!slots.is_empty(), "node {old} served no slots when it was killed (a replica?)");
        let deadline = Instant::now() + timeout;
        loop {
            let live = self.live_ports();
            let successor = live.iter().copied().find(|&port| {
                served_slots(&address(port))
                    .is_some_and(|own| slots.iter().all(|range| own.iter().any(|o| covers(o, range))))
            });
            if let Some(successor) = successor
                && live.iter().all(|&port| self.cluster_state(port).as_deref() == Some("ok"))
            {
                return successor;
            }
            assert!(
                Instant::now() < deadline,
                "no node took over slots {slots:?} of node {old} within {timeout:?}\n{}",
                self.describe()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Waits until every live node reports `cluster_state:ok`, three of them
    /// are primaries and every live replica's link to its primary is up.
    /// Panics after `timeout`, describing every live node's view.
    pub fn wait_until_healthy(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.healthy() {
            assert!(
                Instant::now() < deadline,
                "the Redis Cluster was not healthy within {timeout:?} (cluster_state:ok everywhere, \
                 {PRIMARIES} primaries, every replica linked)\n{}",
                self.describe()
            );
            std::thread::sleep(POLL);
        }
    }

    fn healthy(&self) -> bool {
        let mut primaries = 0;
        for port in self.live_ports() {
            let Ok(info) = self.query::<String>(port, redis::cmd("INFO").arg("replication")) else { return false };
            match info_field(&info, "role") {
                Some("master") => primaries += 1,
                _ if info_field(&info, "master_link_status") != Some("up") => return false,
                _ => {}
            }
            if self.cluster_state(port).as_deref() != Some("ok") {
                return false;
            }
        }
        primaries == PRIMARIES
    }

    fn cluster_state(&self, port: u16) -> Option<String> {
        let info: String = self.query(port, redis::cmd("CLUSTER").arg("INFO")).ok()?;
        info_field(&info, "cluster_state").map(str::to_owned)
    }

    /// Every node's view of the cluster and where its log is, for failures.
    fn describe(&self) -> String {
        let mut text = String::new();
        for node in &self.nodes {
            let log = node.dir.join("redis.log");
            if node.child.is_none() {
                text += &format!("--- node {} (killed), log {}\n", node.port, log.display());
                continue;
            }
            let view = self.query::<String>(node.port, redis::cmd("CLUSTER").arg("NODES"));
            let view = view.unwrap_or_else(|e| format!("CLUSTER NODES failed: {e}\n"));
            text += &format!("--- node {}, log {}, CLUSTER NODES:\n{view}", node.port, log.display());
        }
        text
    }

    /// Starts one more node on free ports of the reserved range, which no
    /// other server of the tests is given, so that a killed node's port is
    /// not taken by one (see [`reserved_ports`]). Another process may take a
    /// port between the probe and the bind: tries a few.
    fn start_node(&mut self, test: &str) {
        let mut failures = Vec::new();
        for _ in 0..5 {
            let ports = reserved_ports(2);
            let (port, bus_port) = (ports[0], ports[1]);
            let dir = self.dir.join(port.to_string());
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
            let mut node = Node { port, bus_port, dir, child: None, slots_when_killed: Vec::new() };
            match node.spawn(&self.server) {
                Ok(()) => return self.nodes.push(node),
                Err(error) => failures.push(format!("port {port}: {error}")),
            }
        }
        panic!("{test}: a Redis Cluster node did not start (logs in {}):\n{}", self.dir.display(), failures.join("\n"));
    }

    fn node(&self, port: u16) -> &Node {
        self.nodes.iter().find(|node| node.port == port).unwrap_or_else(|| panic!("no node on port {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut Node {
        self.nodes.iter_mut().find(|node| node.port == port).unwrap_or_else(|| panic!("no node on port {port}"))
    }
}

impl Node {
    /// Starts the process and waits until it answers on its port.
    fn spawn(&mut self, server: &Path) -> Result<(), String> {
        let child = Command::new(server)
            .args(["--port", &self.port.to_string(), "--cluster-port", &self.bus_port.to_string()])
            .args(SETTINGS)
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("running {}: {e}", server.display()))?;
        self.child = Some(crate::redis_server::answering(child, self.port)?);
        Ok(())
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().filter_map(|node| node.child.as_mut()) {
            let _ = child.kill();
        }
        for mut child in self.nodes.iter_mut().filter_map(|node| node.child.take()) {
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn address(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// Whether `outer` holds every slot of `inner`.
fn covers(outer: &RangeInclusive<u16>, inner: &RangeInclusive<u16>) -> bool {
    outer.start() <= inner.start() && inner.end() <= outer.end()
}
