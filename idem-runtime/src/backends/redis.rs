//! The Redis / Valkey store (feature `redis`), on one server or a Redis
//! Cluster.

mod connection;
mod durability;
mod error;
mod groups;
mod healing;
pub(crate) mod layout;
mod local;
mod operable;
mod operations;
mod primaries;
mod renewals;
mod reply;
mod scripts;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::{Cmd, ErrorKind, Script, ServerErrorKind, Value};

pub use self::connection::RedisConnection;
use self::connection::{Source, Target};
pub use self::durability::OnEviction;
use self::durability::ReplicaAcks;
pub use self::error::InvalidKeyPrefix;
use self::error::{Endpoint, check_prefix};
use self::local::LocalConnections;
use self::primaries::Primaries;
use self::renewals::RenewalConnection;
use self::scripts::Scripts;
#[cfg(doc)]
use crate::record::StoredResponse;
use crate::redact::Redacted;
use crate::scope::StorageKey;
use crate::store::StoreError;
#[cfg(doc)]
use crate::store::{Operable, Store};

/// A [`Store`] in Redis or Valkey, on one server or a Redis Cluster: a
/// claim is one `SET NX GET` (a claim that finds the key in flight, held or
/// released takes a second round trip, a Lua script), every other operation
/// one Lua script, and expiry by the server's clock.
///
/// It is [`Operable`]: an operator lists records and finds one by its id
/// with `SCAN` (O(keyspace) on the server, every primary of a cluster: for
/// occasional use), and settles an execution with one script.
///
/// Connect with [`RedisStore::connect`], or [`RedisStore::connect_with`]
/// for timeouts of your own: one server (`redis://`, `rediss://`,
/// `redis+unix://`, auth in the URL) or a cluster's seed nodes
/// (`redis-cluster://host:port,host:port,...`). Connecting loads the
/// scripts and refuses a server whose `maxmemory-policy` evicts keys
/// ([`RedisStore::check_server`]). [`RedisStore::with_key_prefix`] places
/// every record under a prefix, and [`RedisStore::with_replica_acks`] makes
/// each write wait for replicas. Requires Redis 7.0 or later (Valkey 7.2
/// or later).
///
/// Cloning is cheap and shares the connections. Never block a worker
/// thread on a store call (`block_on` in a handler): on a single server,
/// each actix worker's connection is driven on that worker's thread.
/// Errors and `Debug` output show the URL with its password masked.
///
/// ```no_run
/// use std::sync::Arc;
/// use idem_runtime::RedisStore;
/// use idem_runtime::store::Store;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // `rediss://` needs one of the `redis` crate's TLS features in your build.
/// let store = RedisStore::connect("redis://:password@127.0.0.1:6379/0").await?.with_key_prefix("shop:")?;
/// let store: Arc<dyn Store> = Arc::new(store);
/// # Ok(()) }
/// ```
///
/// Running it (the server settings it needs, its connections and round
/// trips, the key layout, sizes, outages, cluster failover and resharding)
/// is described in `docs/stores.md` in the repository.
#[derive(Clone)]
pub struct RedisStore {
    connection: RedisConnection,
    /// Each thread's own connection (a store on a single server that it
    /// opened itself; see `local.rs`).
    local: Option<Arc<LocalConnections>>,
    renewals: Arc<RenewalConnection>,
    scripts: Arc<Scripts>,
    prefix: String,
    endpoint: Endpoint,
    acks: Option<ReplicaAcks>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.endpoint.display().unwrap_or("<caller's connection>"))
            .field("cluster", &self.connection.is_cluster())
            .field("prefix", &self.prefix)
            .field("replica_acks", &self.acks.map(|acks| (acks.replicas, acks.timeout)))
            .field("separate_renewal_connection", &self.renewals.is_separate())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Largest record sent: Redis's default `proto-max-bulk-len` (512 MiB);
    /// larger values would be refused by the server and cost the shared
    /// connection.
    pub const MAX_RECORD_BYTES: usize = 512 << 20;
    /// Default time to establish one connection ([`RedisStore::default_config`]).
    pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
    /// Default time to wait for one reply ([`RedisStore::default_config`]).
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default number of reconnection attempts after the first, per operation
    /// that finds the connection down ([`RedisStore::default_config`]).
    pub const DEFAULT_RECONNECT_RETRIES: usize = 2;

    /// Connects to `url` with [`RedisStore::default_config`], loads the
    /// scripts and checks the servers' settings ([`RedisStore::check_server`]
    /// with [`OnEviction::Refuse`]).
    ///
    /// `url` is one server (`redis://`, `rediss://`, `redis+unix://`, auth in
    /// the URL) or a Redis Cluster's seed nodes
    /// (`redis-cluster://[user:password@]host:port,host:port,...`, or
    /// `rediss-cluster://` with TLS).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, Self::default_config()).await
    }

    /// Connects to `url` (see [`RedisStore::connect`]) with a connection
    /// configuration of your own: its timeouts bound every operation, and on
    /// a cluster its retries bound how often a command is tried again after a
    /// failed node or a redirection. Loads the scripts and checks the
    /// servers' settings like [`RedisStore::connect`]. Lease renewals get a
    /// connection of their own with the same configuration (on a cluster,
    /// one per primary), opened when the first batch is renewed.
    ///
    /// `?protocol=resp3` in the URL selects RESP3; the store reads both
    /// protocols' replies alike.
    pub async fn connect_with(url: &str, config: ConnectionManagerConfig) -> Result<Self, StoreError> {
        let endpoint = Endpoint::new(Some(Redacted::new(url)), config.response_timeout());
        let source = Source::open(url, &config).map_err(|e| endpoint.error("open", e))?;
        let connection = source.connect().await.map_err(|e| endpoint.error("connect", e))?;
        let local = match &source {
            Source::Server(client, config) => Some(LocalConnections::new(client.clone(), config.clone())),
            Source::Cluster(..) => None,
        };
        // On a cluster, renewals go straight to each primary (see
        // `primaries.rs`); on one server, on a connection of their own.
        let renewals = match Target::parse(url) {
            Ok(Target::Cluster(seeds)) => {
                RenewalConnection::Primaries(Primaries::new(seeds, config.clone(), endpoint.clone()))
            }
            _ => RenewalConnection::own(source),
        };
        let mut store = Self::build(connection, renewals, endpoint);
        store.local = local;
        store.load_scripts().await?;
        store.check_server(OnEviction::Refuse).await?;
        Ok(store)
    }

    /// A store on a connection you opened ([`RedisConnection::open`], or a
    /// [`ConnectionManager`](redis::aio::ConnectionManager) or cluster
    /// connection converted with `into()`). Scripts are loaded on first
    /// use, and nothing is checked: call [`RedisStore::load_scripts`] and
    /// [`RedisStore::check_server`] yourself (with [`OnEviction::Warn`] to
    /// accept an evicting server). Lease renewals share this connection (the
    /// store cannot open another one): prefer [`RedisStore::connect_with`],
    /// which gives them their own.
    pub fn from_connection(connection: impl Into<RedisConnection>) -> Self {
        Self::build(connection.into(), RenewalConnection::Shared, Endpoint::new(None, None))
    }

    /// A store on a single server's connection you built: the same as
    /// [`RedisStore::from_connection`].
    pub fn from_manager(connection: redis::aio::ConnectionManager) -> Self {
        Self::from_connection(connection)
    }

    fn build(connection: RedisConnection, renewals: RenewalConnection, endpoint: Endpoint) -> Self {
        Self {
            connection,
            local: None,
            renewals: Arc::new(renewals),
            scripts: Arc::new(Scripts::new()),
            prefix: String::new(),
            endpoint,
            acks: None,
        }
    }

    /// Waits, after each claim that wins a key, each completion and each
    /// batch of lease renewals, until at least `replicas` replicas of the
    /// record's primary acknowledge the write (`WAIT replicas timeout`), and
    /// fails closed when they do not within `timeout`: a claim then answers
    /// 503 (the handler does not run), and a completion is tried again for as
    /// long as the lease holds.
    ///
    /// Redis replicates asynchronously: without this, a completion
    /// acknowledged by a primary that dies before its replica has it is lost
    /// at failover, and a retry runs the handler again. With it, a failover
    /// keeps every key that reached its handler (as long as a replica that
    /// acknowledged is the one promoted, which Redis Cluster prefers). It
    /// costs a replica round trip on every first execution (see the README's
    /// benchmarks); replays are unaffected. Keep `timeout` below half the
    /// connection's response timeout (a renewal batch gives each primary,
    /// or each cluster slot on a caller's connection, that long) and below
    /// the runtime's store timeout.
    pub fn with_replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.acks = (replicas > 0).then_some(ReplicaAcks { replicas, timeout });
        self
    }

    /// Reads `maxmemory-policy` and `appendonly` on the server (on every
    /// primary of a cluster). A policy that evicts keys is refused with
    /// [`StoreError::Misconfigured`] or logged, as `on_eviction` says;
    /// `appendonly no` is logged. A server that refuses `CONFIG` (renamed,
    /// disabled, or denied by an ACL, as on some managed services) is logged
    /// and accepted. [`RedisStore::connect`] calls this with
    /// [`OnEviction::Refuse`].
    pub async fn check_server(&self, on_eviction: OnEviction) -> Result<(), StoreError> {
        durability::check_settings(&mut self.connection.clone(), &self.endpoint, on_eviction).await
    }

    /// The connection settings [`RedisStore::connect`] uses: fail fast
    /// rather than queue requests behind a dead server.
    /// [`RedisStore::DEFAULT_CONNECTION_TIMEOUT`] per connection attempt,
    /// [`RedisStore::DEFAULT_RESPONSE_TIMEOUT`] per reply, and
    /// [`RedisStore::DEFAULT_RECONNECT_RETRIES`] quick retries (50 ms to 1 s apart).
    pub fn default_config() -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Self::DEFAULT_CONNECTION_TIMEOUT))
            .set_response_timeout(Some(Self::DEFAULT_RESPONSE_TIMEOUT))
            .set_number_of_retries(Self::DEFAULT_RECONNECT_RETRIES)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1))
    }

    /// Places every record under `prefix` (such as `"shop:"`), before the
    /// storage key, so that several applications can share one database.
    ///
    /// Fails if the prefix contains `{` or `}`: the first hash tag of a key
    /// decides its cluster slot, and it must stay the record's own.
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Result<Self, InvalidKeyPrefix> {
        self.prefix = check_prefix(prefix.into())?;
        Ok(self)
    }

    /// The Redis key that holds the record of `key`.
    pub fn record_key(&self, key: &StorageKey) -> String {
        let mut record = String::with_capacity(self.prefix.len() + key.as_str().len());
        record.push_str(&self.prefix);
        record.push_str(key.as_str());
        record
    }

    /// Loads every script with `SCRIPT LOAD` in one round trip, so that the
    /// first operations need no `NOSCRIPT` fallback.
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        let fail = |e| self.endpoint.error("load scripts", e);
        let hashes: Vec<String> = if connection.is_cluster() {
            // One `SCRIPT LOAD` per script, each sent to every primary (a
            // pipeline would reach one node only).
            let mut hashes = Vec::new();
            for (_, source) in self.scripts.all() {
                hashes.push(
                    redis::cmd("SCRIPT").arg("LOAD").arg(source).query_async(&mut connection).await.map_err(fail)?,
                );
            }
            hashes
        } else {
            let mut pipeline = redis::pipe();
            for (_, source) in self.scripts.all() {
                pipeline.cmd("SCRIPT").arg("LOAD").arg(source);
            }
            pipeline.query_async(&mut connection).await.map_err(fail)?
        };
        let expected = self.scripts.all().map(|(script, _)| script.get_hash().to_owned());
        if hashes != expected {
            return Err(StoreError::Corrupt {
                store: "redis",
                message: format!("SCRIPT LOAD answered {hashes:?}, expected the SHA-1s {expected:?}"),
            });
        }
        Ok(())
    }

    /// `EVALSHA` of `script` on the record of `key`, with the arguments
    /// `args` writes: one command built in place (no intermediate script
    /// invocation, no copy). On `NOSCRIPT` (after a restart, a failover to a
    /// replica or a `SCRIPT FLUSH`) the script is loaded (on every primary of
    /// a cluster) and the command sent again. On a connection found dropped
    /// (the server restarted), it is sent once more on the new connection
    /// ([`RedisConnection::repeatable`]): every operation of the store is
    /// safe to repeat (the same token, the same claim or completion).
    async fn run(
        &self,
        operation: &str,
        script: &Script,
        key: &StorageKey,
        args: impl FnOnce(&mut Cmd),
    ) -> Result<Value, StoreError> {
        let command = self.evalsha(script, key, args);
        let reply = self
            .connection_here()
            .repeatable(|mut connection| {
                let command = &command;
                async move {
                    match command.query_async(&mut connection).await {
                        Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                            script.prepare_invoke().load_async(&mut connection).await?;
                            command.query_async(&mut connection).await
                        }
                        reply => reply,
                    }
                }
            })
            .await;
        reply.map_err(|e| self.endpoint.error(operation, e))
    }

    /// A plain command on the connection this thread's operations go
    /// through (see [`RedisStore::run`]), its error as the client gave it.
    async fn query(&self, command: &Cmd) -> redis::RedisResult<Value> {
        self.connection_here()
            .repeatable(|mut connection| async move { command.query_async(&mut connection).await })
            .await
    }

    /// Like [`RedisStore::run`], then, with replica acknowledgements on,
    /// `WAIT` in the same pipeline (one round trip, on the same connection
    /// as the write, so that it covers it): the script's reply, and whether
    /// enough replicas acknowledged (`Err` says how many did).
    async fn run_acked(
        &self,
        operation: &str,
        script: &Script,
        key: &StorageKey,
        args: impl FnOnce(&mut Cmd),
    ) -> Result<(Value, Result<(), StoreError>), StoreError> {
        let Some(acks) = self.acks else { return Ok((self.run(operation, script, key, args).await?, Ok(()))) };
        let mut pipeline = redis::pipe();
        pipeline.add_command(self.evalsha(script, key, args)).add_command(acks.wait());
        let pipeline = &pipeline;
        let replies: Result<Vec<Value>, _> = self
            .connection_here()
            .repeatable(|mut connection| async move {
                match pipeline.query_async(&mut connection).await {
                    Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        script.prepare_invoke().load_async(&mut connection).await?;
                        pipeline.query_async(&mut connection).await
                    }
                    replies => replies,
                }
            })
            .await;
        let mut replies = replies.map_err(|e| self.endpoint.error(operation, e))?.into_iter();
        match (replies.next(), replies.next()) {
            (Some(reply), Some(acked)) => Ok((reply, acks.check(operation, &acked))),
            other => Err(StoreError::Corrupt {
                store: "redis",
                message: format!("{operation} and WAIT were answered {other:?}"),
            }),
        }
    }

    /// The connection this thread's operations go through: its own (see
    /// `local.rs`), else the shared one.
    fn connection_here(&self) -> RedisConnection {
        match &self.local {
            Some(local) => local.here(&self.connection),
            None => self.connection.clone(),
        }
    }

    fn evalsha(&self, script: &Script, key: &StorageKey, args: impl FnOnce(&mut Cmd)) -> Cmd {
        let mut command = redis::cmd("EVALSHA");
        command.arg(script.get_hash()).arg(1).arg(self.record_key(key));
        args(&mut command);
        command
    }
}

/// The cluster slot of a record key: CRC16 (XMODEM) of its hash tag (the
/// text between its first `{` and the next `}`, when not empty), else of
/// the whole key, modulo 16384.
fn slot_of(key: &str) -> u16 {
    let tag = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % 16384
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use redis::aio::ConnectionManager;

    use super::*;
    use crate::key::IdempotencyKey;
    use crate::scope::Scope;

    fn storage_key() -> StorageKey {
        let key = IdempotencyKey::parse(b"order-1").unwrap();
        StorageKey::new(Scope::User, Some("alice"), "POST", "/orders", &key)
    }

    /// A loopback port with nothing listening on it.
    fn closed_port() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn record_keys_keep_the_hash_tag_after_the_prefix() {
        runtime().block_on(async {
            let port = closed_port();
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
            let manager = ConnectionManager::new_lazy_with_config(client, RedisStore::default_config()).unwrap();
            let key = storage_key();
            let store = RedisStore::from_manager(manager);
            assert_eq!(store.record_key(&key), key.as_str());
            let store = store.with_key_prefix("shop:").unwrap();
            let record = store.record_key(&key);
            assert_eq!(record, format!("shop:{}", key.as_str()));
            // Redis Cluster hashes the first `{...}` of a key: it must be the record's tag.
            let open = record.find('{').unwrap();
            let close = open + record[open..].find('}').unwrap();
            assert_eq!(&record[open..=close], key.hash_tag());
            assert!(store.with_key_prefix("{shop}:").is_err());
        });
    }

    #[test]
    fn a_refused_connection_is_unavailable_and_keeps_the_password_secret() {
        runtime().block_on(async {
            let url = format!("redis://app:hunter2@127.0.0.1:{}/", closed_port());
            let started = std::time::Instant::now();
            let error = RedisStore::connect(&url).await.unwrap_err();
            assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
            assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
            let shown = format!("{error} / {error:?}");
            assert!(shown.contains("redis://app:***@127.0.0.1:"), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
        });
    }

    #[test]
    fn debug_output_masks_the_password() {
        runtime().block_on(async {
            let url = format!("redis://:hunter2@127.0.0.1:{}/", closed_port());
            let client = redis::Client::open(url.as_str()).unwrap();
            let manager = ConnectionManager::new_lazy_with_config(client, RedisStore::default_config()).unwrap();
            let mut store = RedisStore::from_manager(manager);
            store.endpoint = Endpoint::new(Some(Redacted::new(&url)), None);
            let shown = format!("{store:?}");
            assert!(shown.contains("redis://:***@127.0.0.1:") && !shown.contains("hunter2"), "{shown}");
        });
    }

    #[test]
    fn slots_are_the_clusters() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot_of("123456789"), 0x31C3);
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        assert_ne!(slot_of("foo{}{bar}"), slot_of("bar"), "an empty tag: the whole key");
        assert_eq!(slot_of("foo{{bar}}zap"), slot_of("{bar"));
        assert_eq!(slot_of("foo{bar}{zap}"), slot_of("bar"));
    }
}
