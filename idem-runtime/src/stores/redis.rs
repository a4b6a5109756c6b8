//! The Redis / Valkey store (feature `redis`), on one server or a Redis
//! Cluster.

mod connection;
mod durability;
mod error;
pub(crate) mod layout;
mod local;
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
#[cfg(doc)]
use crate::store::Store;
use crate::store::StoreError;

/// A [`Store`] in Redis or Valkey, on one server or a
/// Redis Cluster: atomic Lua scripts, one round trip per operation, expiry
/// by the server's clock. The sections below give the key
/// layout and deployment advice.
///
/// Cloning is cheap and shares the connections.
///
/// A store that [`RedisStore::connect`] opened on a single server also
/// opens, in the background, a connection for each single-threaded runtime
/// that uses it (each actix worker): the connection's driver then runs on
/// the worker that waits for its replies, which spares two thread switches
/// per command. Until it is open, and whenever it cannot be, the worker
/// uses the store's shared connection. Count one connection per worker,
/// two for the lease keeper (its renewals, and completions it retries),
/// one shared, and one for each blocking thread (`web::block`) that uses
/// the store while it lives. Never block a worker thread on a store call
/// (`block_on` in a handler): its connection's driver runs on that thread.
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
/// # Round trips
///
/// A claim is one plain `SET <record> <in flight> NX PX <ttl> GET`: it
/// creates the record of a free key and hands back any record already
/// there, so a first claim and a replay (or a mismatch) of a completed
/// record are **one command**, with no script. A claim that finds the key
/// in flight or released takes a second round trip, `claim.lua`, which
/// judges the lease and may take the key over, atomically. `renew`,
/// `complete`, `release` and `get` are each one Lua script sent with
/// `EVALSHA` (loaded again on `NOSCRIPT`, after a server restart or
/// `SCRIPT FLUSH`). A first execution is two commands (the claim's `SET`
/// and `complete.lua`), a replay one. [`RedisStore::connect`] loads the
/// scripts once up front.
///
/// | script | does |
/// |---|---|
/// | `claim.lua` | claims a key in flight or released: takes over a lapsed lease or a released key (same request), else reports in flight or mismatch |
/// | `renew.lua` | moves a live lease's mark, and the key's expiry if the lease would outlive it |
/// | `complete.lua` | stores the response in place of the lease, sets the key's expiry to the TTL |
/// | `release.lua` | drops token and lease: the fingerprint stays until the key expires (a tombstone) |
/// | `get.lua` | reads the record and its time left |
///
/// [`Store::renew_many`] sends one `renew.lua` call per lease (each touches
/// its own key, so the batch is cluster-safe) in **one pipeline**, one round
/// trip, on a connection of its own: opened the first time the lease keeper
/// renews, on the keeper's runtime, so that renewals never queue behind the
/// application's commands. On a cluster, each primary gets such a
/// connection and its own pipeline, so that a dead primary leaves only its
/// own leases unanswered. (A store built with [`RedisStore::from_manager`]
/// has no URL to open it from: its renewals share the caller's connection.)
///
/// # Key layout
///
/// One record is one Redis string at `<prefix><storage key>`, where the
/// storage key is [`StorageKey::as_str`]: `idem:v1:{<hash tag>}:<rest>`,
/// the two halves of a SHA-256 of the encoded scope, subject, method, route
/// and key (the raw key and subject never reach Redis). The prefix is empty unless set
/// with [`RedisStore::with_key_prefix`], and may not contain braces, so the
/// record's `{hash tag}` decides its Redis Cluster slot. The value:
///
/// | state | bytes |
/// |---|---|
/// | in flight | `L`, the request's fingerprint (32), the owner's fencing token (16), the attempt (`0` first, `1` after a release, `2` a takeover), the lease mark (decimal milliseconds) |
/// | completed | `C`, the fingerprint, the completing token (so that the same completion sent again is recognised), the response ([`StoredResponse::to_bytes`], binary, postcard) |
/// | released | `R`, the fingerprint (a tombstone) |
///
/// The key's expiry is the record's TTL: from the claim while in flight or
/// released, never shorter than the lease (a renewal that would outlive it
/// extends it), and the completion's TTL once completed. The lease is kept
/// relative to it: the lease holds while the key's `PTTL` is above the
/// mark (a claim writes the TTL minus the lease; a renewal, the `PTTL`
/// minus the lease). An in-flight record whose lease ran out is a *lapsed*
/// lease (its owner crashed or stalled): its token owns nothing any more,
/// and only the same request may take it over. `ttl_left` is the `PTTL`,
/// `lease_left` and `retry_after` the `PTTL` minus the mark. All time is
/// Redis's own clock, never the application's: a record past its TTL is a
/// missing key, and [`Store::purge_expired`] has nothing to do. After a
/// failover, expiries (and so leases) are judged by the new primary's
/// clock: keep the servers' clocks in sync (NTP). A record without expiry
/// (`PERSIST` by hand, a restore) gets one again from the next claim or
/// renewal, and its lease is then counted from there.
///
/// The layout changed from a Redis hash in this version. During a rolling
/// upgrade (and until they expire), records of the earlier layout are
/// answered as the earlier version would (a replay, a mismatch, in
/// flight), and a claim that acquires one (a lapsed lease, a tombstone)
/// replaces it with a record of this layout; processes of the earlier
/// version answer 503 for records of this layout (their scripts fail on a
/// string: fail closed, nothing overwritten), so their retries wait for
/// the upgrade to finish, and a rollback to the earlier version answers
/// 503 on every key this version wrote, for up to one TTL. A key holding anything else is refused
/// ([`StoreError::Unavailable`], 503), never overwritten.
///
/// # Sizes
///
/// A record costs the response's encoded size plus about 100 bytes. The
/// runtime's stored-response limit bounds what reaches the store; beyond
/// that, [`complete`](Store::complete) refuses a record over
/// [`RedisStore::MAX_RECORD_BYTES`] (Redis's default `proto-max-bulk-len`, 512 MiB) with
/// [`StoreError::Full`] without sending it. A server at `maxmemory` under
/// `noeviction` refuses new claims with `OOM`, also reported as
/// [`StoreError::Full`] (503 before any handler runs), but still renews and
/// releases and completes the leases of running handlers (`renew.lua`,
/// `release.lua` and `complete.lua` carry the `allow-oom` flag), so none of
/// them can lapse and run twice. Replays, mismatches and duplicates in
/// flight are still answered: Redis refuses the claim's `SET` at
/// `maxmemory` even when it would write nothing, and the claim then goes
/// to `claim.lua`, which writes only to acquire (so does any claim whose
/// `SET` the server refuses: `NOREPLICAS` under `min-replicas-to-write`,
/// `READONLY`, an ACL, a record of the earlier layout).
///
/// Requires Redis 7.0 or later (Valkey 7.2 or later): the claim's `SET`
/// takes `NX` and `GET` together, and three scripts carry script flags.
///
/// # Deployment
///
/// - `maxmemory-policy noeviction`: an evicted record lets a retry run the
///   handler a second time, silently breaking at-most-once.
///   [`RedisStore::connect`] reads it on every primary and refuses any other
///   policy ([`RedisStore::check_server`]).
/// - Persistence: `appendonly yes` (`appendfsync everysec` or `always`); a
///   restart without it forgets every record (logged at connect).
/// - Replication is asynchronous: a claim or completion acknowledged by a
///   primary that dies before its replica has it is lost at failover, and a
///   retry runs the handler again. [`RedisStore::with_replica_acks`] closes
///   that window at the cost of a replica round trip per first execution.
///
/// # Redis Cluster
///
/// Give the seed nodes as `redis-cluster://host:port,host:port,...`. The
/// store uses the redis crate's async cluster client: it learns the slot
/// map from any seed, sends each script to the primary of its record's
/// slot, follows `MOVED` and `ASK`, loads the scripts on every primary (and
/// again on `NOSCRIPT`, as after a replica's promotion), and refreshes the
/// slot map after a failure. Every script touches one key, so no command is
/// ever `CROSSSLOT`. A batch of renewals is one pipeline per primary, each
/// on that primary's own connection, sent together (not through the
/// cluster client: see `primaries.rs`).
///
/// When a primary dies, operations on its slots fail within the timeouts
/// (503 before a handler runs, completions retried while their leases
/// hold) until the cluster promotes its replica, then succeed without a
/// restart. With replica acknowledgements,
/// writes to a slot whose primary has no live replica fail closed until
/// one is back: run two replicas per primary to keep taking writes after
/// one failover. Keep the lease (`lock_ttl`) well above the cluster's
/// failover time (about twice `cluster-node-timeout`): a lease that runs
/// out during a failover lets a retry take the key over.
///
/// # Outages
///
/// A single server is reached through
/// [`ConnectionManager`](redis::aio::ConnectionManager)s: multiplexed
/// connections that reconnect by themselves. With [`RedisStore::default_config`]
/// an operation fails within about the response timeout (2 s) when the server
/// hangs, and within a few connection attempts (1 s each at most) when it
/// is down, with [`StoreError::Timeout`] or [`StoreError::Unavailable`]
/// (the runtime answers 503 before a handler runs). Once the server is back,
/// the same store works again without a restart (the first call may still
/// see the failed reconnection: the first call on each actix worker,
/// which has a connection of its own). A timed-out operation may yet have run on
/// the server: a claim then holds its key until its lease runs out, so
/// retries get 409 meanwhile, never a second execution. Errors and `Debug`
/// output show the URL with its password masked.
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
            Source::Cluster(_) => None,
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
}
