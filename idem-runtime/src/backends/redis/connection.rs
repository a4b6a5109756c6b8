//! One connection type for a single Redis server and for a Redis Cluster.
//!
//! A single server is reached through a [`ConnectionManager`] (one
//! multiplexed, auto-reconnecting connection); a cluster through the redis
//! crate's async cluster client (a connection per node, the slot map,
//! `MOVED` and `ASK` followed, the map refreshed after a failover). Both are
//! behind [`RedisConnection`], which is itself a
//! [`ConnectionLike`](redis::aio::ConnectionLike): scripts, pipelines and
//! commands are sent the same way to either. On a cluster, a command goes to
//! the primary of its first key's slot, and so does a pipeline: every
//! command of a pipeline must then touch that slot only, or name no key
//! (such as `WAIT`, which then waits for that primary's replicas).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::healing::Healing;

/// The URL schemes of a Redis Cluster, and the node scheme each stands for.
const CLUSTER_SCHEMES: [(&str, &str); 4] = [
    ("redis-cluster", "redis"),
    ("rediss-cluster", "rediss"),
    ("valkey-cluster", "redis"),
    ("valkeys-cluster", "rediss"),
];

/// A connection to one Redis (or Valkey) server or to a Redis Cluster.
///
/// Cloning is cheap and shares the underlying connections. Open one with
/// [`RedisConnection::open`] to share it between the store and your own
/// commands, or let [`RedisStore::connect`](super::RedisStore::connect) open
/// its own.
#[derive(Clone)]
pub struct RedisConnection {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Server(ConnectionManager),
    Cluster(Arc<Healing>),
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_cluster() { "cluster" } else { "server" };
        f.debug_struct("RedisConnection").field("kind", &kind).finish_non_exhaustive()
    }
}

/// What a URL names: one server, or the seed nodes of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// One server, its URL as the redis crate reads it.
    Server(String),
    /// A cluster, each seed node as a `redis://` (or `rediss://`) URL.
    Cluster(Vec<String>),
}

impl Target {
    /// Reads `url`: `redis-cluster://[user:password@]h1:p1,h2:p2[/][?query]`
    /// (or `rediss-cluster://`, `valkey-cluster://`, `valkeys-cluster://`)
    /// names a cluster's seed nodes, which share the credentials and the
    /// query; any other URL is one server.
    pub(super) fn parse(url: &str) -> Result<Self, String> {
        let Some((scheme, rest)) = url.split_once("://") else { return Ok(Self::Server(url.to_owned())) };
        let Some(&(_, node_scheme)) = CLUSTER_SCHEMES.iter().find(|(name, _)| scheme.eq_ignore_ascii_case(name)) else {
            return Ok(Self::Server(url.to_owned()));
        };
        let (authority, tail) = rest.find(['/', '?']).map_or((rest, ""), |at| rest.split_at(at));
        let (credentials, hosts) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let path = tail.split_once('?').map_or(tail, |(path, _)| path);
        if !matches!(path, "" | "/" | "/0") {
            // The path is not echoed: a password with a raw `/` would leak into it.
            return Err("a Redis Cluster has database 0 only; the URL names another database (passwords must be \
                        percent-encoded)"
                .to_owned());
        }
        let query = tail.split_once('?').map(|(_, query)| format!("?{query}")).unwrap_or_default();
        let nodes: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(|host| format!("{node_scheme}://{credentials}{host}/{query}"))
            .collect();
        if nodes.is_empty() {
            return Err("a redis-cluster:// URL needs at least one seed node, as host:port[,host:port...]".into());
        }
        Ok(Self::Cluster(nodes))
    }
}

/// What a store opens its connections from.
pub(super) enum Source {
    /// One server.
    Server(redis::Client, ConnectionManagerConfig),
    /// A cluster.
    Cluster(Box<ClusterClient>, ConnectionManagerConfig),
}

impl Source {
    /// Reads `url` (one server or a cluster's seed nodes); opens nothing yet.
    pub(super) fn open(url: &str, config: &ConnectionManagerConfig) -> RedisResult<Self> {
        Ok(match Target::parse(url).map_err(|e| invalid_url(&e))? {
            Target::Server(url) => Self::Server(redis::Client::open(url)?, config.clone()),
            Target::Cluster(nodes) => Self::Cluster(Box::new(cluster_client(nodes, config)?), config.clone()),
        })
    }

    /// A new connection.
    pub(super) async fn connect(&self) -> RedisResult<RedisConnection> {
        match self {
            Self::Server(client, config) => RedisConnection::open_server(client.clone(), config).await,
            Self::Cluster(client, config) => RedisConnection::open_cluster(client, config).await,
        }
    }
}

impl RedisConnection {
    /// Opens a connection to `url` with the timeouts and reconnection
    /// settings of `config`:
    ///
    /// - `redis://`, `rediss://`, `redis+unix://` (auth in the URL): one
    ///   server, through a [`ConnectionManager`];
    /// - `redis-cluster://[user:password@]host:port,host:port,...` (or
    ///   `rediss-cluster://`): a Redis Cluster reached through the given seed
    ///   nodes (any reachable one is enough; the client learns the others).
    ///   `config`'s connection and response timeouts bound each node's
    ///   connection and reply, and its number of retries (at least 6)
    ///   bounds how often a command is retried after a failure or a
    ///   redirection, all within twice the response timeout, so that a
    ///   failed primary costs a bounded wait, never a hang.
    ///
    /// Errors are the redis crate's, and may quote the URL: mask it before
    /// showing them (the store does).
    pub async fn open(url: &str, config: &ConnectionManagerConfig) -> RedisResult<Self> {
        Source::open(url, config)?.connect().await
    }

    async fn open_server(client: redis::Client, config: &ConnectionManagerConfig) -> RedisResult<Self> {
        let manager = ConnectionManager::new_with_config(client, config.clone()).await?;
        Ok(Self::from(manager))
    }

    async fn open_cluster(client: &ClusterClient, config: &ConnectionManagerConfig) -> RedisResult<Self> {
        let connection = client.get_async_connection().await?;
        let healing =
            Healing::new(connection, Some(client.clone()), config.response_timeout(), config.connection_timeout());
        Ok(Self { inner: Inner::Cluster(healing) })
    }

    /// Runs `commands` on this connection and, if it turns out to have been
    /// dropped (the server restarted, the link broke), once more on the
    /// connection that replaces it. A connection learns that its server went
    /// away only when it is used: without this, the first command on each
    /// connection after a restart fails, however long ago the server came
    /// back.
    ///
    /// Only for commands that are safe to run twice: one sent just before the
    /// link broke may have run (`SET NX`, a fenced script, a read; not
    /// `INCR`). On a cluster, the cluster client retries by itself, and this
    /// adds one more try at most.
    pub async fn repeatable<T, F, Fut>(&self, mut commands: F) -> RedisResult<T>
    where
        F: FnMut(RedisConnection) -> Fut,
        Fut: std::future::Future<Output = RedisResult<T>>,
    {
        match commands(self.clone()).await {
            Err(error) if error.is_connection_dropped() => commands(self.clone()).await,
            result => result,
        }
    }

    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner, Inner::Cluster(_))
    }

    /// Sends `cmd` to every primary of a cluster (or to the one server) and
    /// returns each node's answer with its address (`None` for a single
    /// server, whose address the caller knows).
    pub(super) async fn on_every_primary(&mut self, cmd: Cmd) -> RedisResult<Vec<(Option<String>, Value)>> {
        match &mut self.inner {
            Inner::Server(manager) => Ok(vec![(None, cmd.query_async(manager).await?)]),
            Inner::Cluster(healing) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let mut cluster = healing.current();
                match healing.watch(cluster.route_command(cmd, routing)).await? {
                    Value::Map(answers) => Ok(answers
                        .into_iter()
                        .map(|(node, value)| {
                            let node = match node {
                                Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                                Value::SimpleString(text) => text,
                                other => format!("{other:?}"),
                            };
                            (Some(node), value)
                        })
                        .collect()),
                    other => Ok(vec![(None, other)]),
                }
            }
        }
    }

    /// Sends `cmd` to the node of a cluster at `address` (`host:port`, as
    /// [`RedisConnection::on_every_primary`] names it), or to the one server
    /// (`None`).
    pub(super) async fn on_node(&mut self, cmd: &Cmd, address: Option<&str>) -> RedisResult<Value> {
        let (Inner::Cluster(healing), Some(address)) = (&self.inner, address) else {
            return cmd.query_async(self).await;
        };
        let node = address.rsplit_once(':').and_then(|(host, port)| Some((host, port.parse().ok()?)));
        let Some((host, port)) = node else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "not a node address",
                address.to_owned(),
            )));
        };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
        healing.watch(healing.current().route_command(cmd.clone(), routing)).await
    }

    /// Sends `cmd` to the primary serving `slot` of a cluster (to the one
    /// server, if this is not a cluster).
    pub(super) async fn on_slot(&mut self, cmd: &Cmd, slot: u16) -> RedisResult<Value> {
        let Inner::Cluster(healing) = &self.inner else { return cmd.query_async(self).await };
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master)));
        healing.watch(healing.current().route_command(cmd.clone(), routing)).await
    }
}

impl From<ConnectionManager> for RedisConnection {
    fn from(manager: ConnectionManager) -> Self {
        Self { inner: Inner::Server(manager) }
    }
}

/// A cluster connection of the caller's: never replaced (see `healing.rs`).
impl From<ClusterConnection> for RedisConnection {
    fn from(cluster: ClusterConnection) -> Self {
        Self { inner: Inner::Cluster(Healing::new(cluster, None, None, None)) }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.inner {
            Inner::Server(manager) => manager.req_packed_command(cmd),
            Inner::Cluster(healing) => Box::pin(async move {
                let mut cluster = healing.current();
                healing.watch(cluster.req_packed_command(cmd)).await
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.inner {
            Inner::Server(manager) => manager.req_packed_commands(cmd, offset, count),
            Inner::Cluster(healing) => Box::pin(async move {
                let mut cluster = healing.current();
                healing.watch(cluster.req_packed_commands(cmd, offset, count)).await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Inner::Server(manager) => manager.get_db(),
            Inner::Cluster(_) => 0,
        }
    }
}

fn invalid_url(message: &str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "invalid Redis Cluster URL", message.to_owned()))
}

/// A cluster client for `nodes` with `config`'s timeouts and retries: a
/// command to a dead primary fails within about `retries` attempts, each
/// bounded by the timeouts, then succeeds again once the cluster has
/// promoted a replica (the client refreshes its slot map on the failures).
fn cluster_client(nodes: Vec<String>, config: &ConnectionManagerConfig) -> RedisResult<ClusterClient> {
    // A command to a dead primary's slot meets a refused connection, a
    // fallback node's `MOVED` and a redirect before the slot map is rebuilt:
    // each costs a retry, and a few are needed to come through a failure or
    // a resharding at all. The overall timeout below bounds the time.
    let retries = u32::try_from(config.number_of_retries()).unwrap_or(u32::MAX).max(MIN_CLUSTER_RETRIES);
    let mut builder = ClusterClientBuilder::new(nodes)
        .retries(retries)
        .min_retry_wait(millis(config.min_delay()))
        .max_retry_wait(config.max_delay().map_or(1_000, millis));
    if let Some(timeout) = config.connection_timeout() {
        builder = builder.connection_timeout(timeout);
    }
    if let Some(timeout) = config.response_timeout() {
        // Each attempt waits the response timeout; all of them together,
        // retries and redirections included, twice that.
        builder = builder.response_timeout(timeout).overall_response_timeout(Some(timeout * 2));
    }
    builder.build()
}

/// Fewest retries of a cluster command (see [`cluster_client`]).
const MIN_CLUSTER_RETRIES: u32 = 6;

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(url: &str) -> Vec<String> {
        match Target::parse(url).unwrap() {
            Target::Cluster(nodes) => nodes,
            other => panic!("{url} read as {other:?}"),
        }
    }

    #[test]
    fn cluster_urls_name_every_seed_node_with_shared_credentials() {
        assert_eq!(
            cluster("redis-cluster://10.0.0.1:7000,10.0.0.2:7001"),
            ["redis://10.0.0.1:7000/", "redis://10.0.0.2:7001/"]
        );
        assert_eq!(
            cluster("rediss-cluster://app:pw@h1:1, h2:2/?protocol=resp3"),
            ["rediss://app:pw@h1:1/?protocol=resp3", "rediss://app:pw@h2:2/?protocol=resp3"]
        );
        assert_eq!(cluster("REDIS-CLUSTER://:p@w@h:1/0"), ["redis://:p@w@h:1/"]);
        assert_eq!(cluster("valkey-cluster://h:1"), ["redis://h:1/"]);
    }

    #[test]
    fn other_urls_are_one_server() {
        for url in ["redis://h:1/2", "rediss://h", "redis+unix:///tmp/r.sock", "not a url"] {
            assert_eq!(Target::parse(url), Ok(Target::Server(url.to_owned())));
        }
    }

    #[test]
    fn cluster_urls_without_nodes_or_with_a_database_are_refused() {
        assert!(Target::parse("redis-cluster://").unwrap_err().contains("seed node"));
        assert!(Target::parse("redis-cluster://a@").unwrap_err().contains("seed node"));
        assert!(Target::parse("redis-cluster://h:1/3").unwrap_err().contains("database 0"));
    }
}
