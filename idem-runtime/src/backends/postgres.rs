//! The Postgres store (feature `postgres`).

mod error;
mod kept;
mod operable;
mod operations;
mod renewals;
mod replication;
mod row;
mod session;
mod sql;
mod steps;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::types::PgInterval;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use self::renewals::RenewalPool;
pub use self::replication::OnAsyncStandby;
use self::session::{Pool, session_settings};
use self::sql::DEFAULT_TABLE;
pub use self::sql::InvalidTableName;
use self::sql::{Statements, TableName, sql};
use self::steps::StepPool;
use crate::record::StoredResponse;
use crate::scope::StorageKey;
#[cfg(doc)]
use crate::store::Store;
use crate::store::{Fence, FencingToken, StoreError};
use crate::sweeper::SweeperHandle;

/// The store's name in errors, logs and metrics.
const KIND: &str = "postgres";

/// Longest lease or TTL written; longer ones are cut to this (100 years).
const MAX_INTERVAL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A [`Store`] in a PostgreSQL table, shared by every server process that
/// uses the same database.
///
/// Cheap to clone: clones share the connection pool. Records live in one
/// table (default [`PostgresStore::DEFAULT_TABLE`]) that
/// [`PostgresStore::migrate`] creates and brings up to date; every operation
/// is one SQL statement, and every expiry decision is the database's, from
/// its own clock. Rows past their TTL count as absent, and are deleted by
/// [`PurgeExpired::purge_expired`](crate::store::PurgeExpired::purge_expired)
/// or the background task of [`PostgresStore::spawn_sweeper`]. The store
/// offers the transactional mode ([`Store::transactional`]) and the
/// operator's view ([`Operable`](crate::store::Operable): what its listings
/// cost is said there).
///
/// Every statement runs at READ COMMITTED, whatever the database's default:
/// the store sets it as a startup option of each connection it opens, in
/// the pools of [`PostgresStore::connect`] and
/// [`PostgresStore::connect_with`], and in a pool given to
/// [`PostgresStore::new`] through [`PgPool::set_connect_options`], which
/// reaches only the connections opened after the call: give such a pool a
/// READ COMMITTED default yourself, or build it lazily
/// ([`PgPoolOptions::connect_lazy`]).
///
/// The statements, the schema, the connections each worker keeps, lease
/// renewals on a pool of their own, and what outages and failovers do are
/// described for operators in `docs/stores.md` (section Postgres) in the
/// repository.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use idem_runtime::PostgresStore;
///
/// # async fn demo() -> Result<(), idem_runtime::StoreError> {
/// let store = PostgresStore::connect("postgres://app:secret@db.internal/app").await?;
/// store.migrate().await?;
/// // Delete expired rows every minute, 1000 per statement.
/// let sweeper = store.spawn_sweeper(Duration::from_secs(60), 1000);
/// // ... register `store` with the app; at shutdown:
/// sweeper.stop().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// The connections each runtime keeps between operations.
    kept: Arc<kept::Kept>,
    /// Renewals' own pool, made ahead by `migrate` or the first claim.
    renewals: Arc<RenewalPool>,
    /// Steps' own pool, for when the store's has no connection at once.
    steps: Arc<StepPool>,
    table: TableName,
    sql: Statements,
    /// `postgres://user@host:port/db`, for errors: never the password.
    server: Arc<str>,
    timeout: Option<Duration>,
    /// The database has no claim function (its schema predates it, and
    /// `migrate()` has not run since): claims use the one-statement form.
    claim_inline: Arc<AtomicBool>,
    /// The table has every column this version writes: checked at claims
    /// until it holds (`migrate()` sets it).
    columns_checked: Arc<AtomicBool>,
}

impl PostgresStore {
    /// The table [`PostgresStore::new`] and [`PostgresStore::connect`] use.
    pub const DEFAULT_TABLE: &str = DEFAULT_TABLE;
    /// How long [`PostgresStore::pool_options`] lets an operation wait for a
    /// connection: during an outage, operations fail after this long.
    pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);
    /// How long a connection of [`PostgresStore::pool_options`] may have been
    /// idle and still be used without a ping first.
    pub const PING_AFTER_IDLE: Duration = Duration::from_secs(10);
    /// Default bound on one operation, connection wait included; guards
    /// against a server that stops answering without closing the connection.
    pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

    /// A store in table [`PostgresStore::DEFAULT_TABLE`] of the pool's database.
    ///
    /// The pool's settings are used as they are, except that connections it
    /// opens from now on default to READ COMMITTED (see the type's docs;
    /// connections already open keep their setting). Build it from
    /// [`PostgresStore::pool_options`] for an acquire timeout that makes an
    /// outage fail fast.
    pub fn new(pool: PgPool) -> Self {
        Self::build(pool, TableName::default_table())
    }

    /// A store in table `name` (`table` or `schema.table`, each part
    /// matching `[a-z_][a-z0-9_]*`; the schema must exist). The pool is
    /// used as by [`PostgresStore::new`].
    pub fn with_table(pool: PgPool, name: &str) -> Result<Self, InvalidTableName> {
        Ok(Self::build(pool, TableName::parse(name)?))
    }

    fn build(pool: PgPool, table: TableName) -> Self {
        let options = pool.connect_options();
        let server = error::describe(&options).into();
        pool.set_connect_options(session_settings((*options).clone(), Pool::Given));
        Self {
            sql: Statements::new(&table),
            kept: kept::Kept::new(pool.clone()),
            pool,
            renewals: Arc::default(),
            steps: Arc::default(),
            table,
            server,
            timeout: Some(Self::DEFAULT_OPERATION_TIMEOUT),
            claim_inline: Arc::default(),
            columns_checked: Arc::default(),
        }
    }

    /// Pool settings suited to the store: connections are awaited at most
    /// [`PostgresStore::DEFAULT_ACQUIRE_TIMEOUT`], so requests fail fast (503) during an
    /// outage instead of piling up; and a connection is pinged before use
    /// only when it has been idle for [`PostgresStore::PING_AFTER_IDLE`] (sqlx pings
    /// every time by default: a round trip on top of every statement's
    /// own). A connection the server closed within that time fails the one
    /// operation that finds it (503 before a handler runs) and is replaced:
    /// after a server restart, up to one 503 for each connection of the
    /// pool. Adjust the pool size to the number of concurrent idempotent
    /// requests a process serves; on actix workers, each keeps the
    /// connections its store operations used for a quarter of a second
    /// (see the type's docs).
    pub fn pool_options() -> PgPoolOptions {
        PgPoolOptions::new().acquire_timeout(Self::DEFAULT_ACQUIRE_TIMEOUT).test_before_acquire(false).before_acquire(
            |connection, meta| {
                Box::pin(async move {
                    if meta.idle_for >= Self::PING_AFTER_IDLE {
                        connection.ping().await?;
                    }
                    Ok(true)
                })
            },
        )
    }

    /// Connects to `url` with [`PostgresStore::pool_options`] and uses table
    /// [`PostgresStore::DEFAULT_TABLE`]. Errors never contain the URL's password.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, Self::pool_options()).await
    }

    /// Connects to `url` with the given pool settings. Every connection of
    /// the pool runs at READ COMMITTED, whatever the database's default.
    /// Checks the server's replication with [`OnAsyncStandby::Warn`] (see
    /// [`PostgresStore::check_server`]).
    pub async fn connect_with(url: &str, options: PgPoolOptions) -> Result<Self, StoreError> {
        let connect: PgConnectOptions = url.parse().map_err(|e| error::connect_error(e, url))?;
        let pool = options
            .connect_with(session_settings(connect, Pool::Own))
            .await
            .map_err(|e| error::connect_error(e, url))?;
        let store = Self::new(pool);
        store.check_server(OnAsyncStandby::Warn).await?;
        Ok(store)
    }

    /// Reads whether the server has standbys that replicate asynchronously
    /// (`pg_stat_replication`, `synchronous_standby_names`,
    /// `synchronous_commit`): a failover to one can lose the claims and
    /// completions of its last moments, after which a retry runs its
    /// handler a second time. Such a server is logged or refused with
    /// [`StoreError::Misconfigured`], as `on_async_standby` says; a server
    /// that does not answer the check is logged and accepted.
    /// [`PostgresStore::connect`] calls this with [`OnAsyncStandby::Warn`];
    /// call it with [`OnAsyncStandby::Refuse`] to refuse such a server.
    pub async fn check_server(&self, on_async_standby: OnAsyncStandby) -> Result<(), StoreError> {
        replication::check(&self.pool, &self.server, on_async_standby).await
    }

    /// Bounds every operation (connection wait included) by `timeout`,
    /// after which it fails with [`StoreError::Timeout`]; `None` leaves only
    /// the pool's acquire timeout. Default: [`PostgresStore::DEFAULT_OPERATION_TIMEOUT`].
    ///
    /// A claim cut short may still have been applied by the server; its
    /// lease then runs out unused.
    pub fn with_operation_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The connection pool (not the renewals' own).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The table's name, as given (`idem_records`, `app.idem_records`).
    pub fn table_name(&self) -> String {
        self.table.to_string()
    }

    /// Creates the table and its indexes if they do not exist, adds the
    /// columns of this version to a table an earlier one made, and makes
    /// the claim function anew. Safe to run at every start, from many
    /// processes at once (they take turns on an advisory lock). Run it
    /// before a new version serves traffic: until it has run, that
    /// version's claims on a table an earlier one made are refused
    /// ([`StoreError::Misconfigured`], 503). A migration that waits more
    /// than 5 s for a lock on the table (a long transaction on it) fails:
    /// run it again.
    ///
    /// The first migration of a table made by an earlier version also
    /// builds the index of executions in flight (for
    /// [`Operable::list`](crate::store::Operable::list)), which reads the
    /// whole table while writes to it wait (a time in proportion to the
    /// table's size). Processes of the earlier version may go on serving meanwhile
    /// and after: they call their own claim function, which this one never
    /// replaces, and they see a held execution as a running one.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let result = async {
            let mut tx = self.pool.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(format!("idem-runtime migrate {}", self.table))
                .execute(&mut *tx)
                .await?;
            // Adding a column waits for every transaction on the table,
            // and every claim would queue behind that wait: a migration
            // that cannot get its lock soon fails instead (run it again).
            sqlx::query("SET LOCAL lock_timeout = '5s'").execute(&mut *tx).await?;
            sqlx::raw_sql(sql(&self.sql.schema)).execute(&mut *tx).await?;
            tx.commit().await
        }
        .await;
        result.map_err(|e| self.error(e))?;
        self.open_renewals_ahead();
        // The claim function exists now: a store that fell back to the
        // one-statement claim (it ran before the migration) calls it again.
        self.claim_inline.store(false, Ordering::Release);
        self.columns_checked.store(true, Ordering::Release);
        Ok(())
    }

    /// Refuses claims on a table an earlier version made and `migrate()`
    /// has not brought up to date: its renewals, completions and releases
    /// would fail on the columns it lacks, and handlers would run with
    /// nothing able to keep their key. Checked until it holds.
    async fn check_columns(&self) -> Result<(), StoreError> {
        let check = self.kept.fetch_optional(sqlx::query(sql(&self.sql.columns)));
        match self.timed(check).await? {
            Ok(_) => {
                self.columns_checked.store(true, Ordering::Release);
                Ok(())
            }
            Err(error) if error::is_undefined_column(&error) => Err(StoreError::Misconfigured {
                store: KIND,
                message: format!(
                    "table {} on {} was made by an earlier version and lacks columns this one writes: run \
                     PostgresStore::migrate() (claims are refused until then)",
                    self.table, self.server
                ),
            }),
            Err(error) => Err(self.error(error)),
        }
    }

    /// Starts a task on the current Tokio runtime that deletes expired rows
    /// every `interval`, `batch` rows per statement, until a batch comes back
    /// short. Failures are logged (`warn`) and retried at the next interval.
    /// The same as [`SweeperHandle::spawn`] with this store.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime (as `tokio::spawn` does).
    pub fn spawn_sweeper(&self, interval: Duration, batch: usize) -> SweeperHandle {
        SweeperHandle::spawn(Arc::new(self.clone()), interval, batch)
    }

    async fn run<T>(&self, operation: impl Future<Output = Result<T, sqlx::Error>>) -> Result<T, StoreError> {
        self.timed(operation).await?.map_err(|e| self.error(e))
    }

    /// `operation` within the operation timeout, its own error kept as it is.
    async fn timed<T>(
        &self,
        operation: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<Result<T, sqlx::Error>, StoreError> {
        match self.timeout {
            Some(after) => {
                tokio::time::timeout(after, operation).await.map_err(|_| StoreError::Timeout { store: KIND, after })
            }
            None => Ok(operation.await),
        }
    }

    /// The fenced completion (`complete.sql`) on `executor`: the pool, or
    /// the transaction of a transactional handler.
    async fn complete_on<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, sqlx::Error> {
        let token_bytes = token.to_bytes();
        let names: Vec<&str> = response.headers.iter().map(|(name, _)| name.as_str()).collect();
        let values: Vec<&[u8]> = response.headers.iter().map(|(_, value)| value.as_slice()).collect();
        let query = sqlx::query(sql(&self.sql.complete))
            .bind(key.as_str())
            .bind(&token_bytes[..])
            .bind(interval(ttl))
            .bind(i32::from(response.status))
            .bind(&names[..])
            .bind(&values[..])
            .bind(&response.body[..]);
        Ok(fence(query.execute(executor).await?.rows_affected()))
    }

    /// The error `error` maps to, with the server and table named.
    fn error(&self, error: sqlx::Error) -> StoreError {
        error::store_error(error, &self.server, &self.table)
    }

    fn corrupt(&self, reason: String) -> StoreError {
        StoreError::Corrupt { store: KIND, message: format!("table {} on {}: {reason}", self.table, self.server) }
    }
}

/// A lease or TTL in whole microseconds, rounded up so a lease is never
/// shorter than asked, and bounded by [`MAX_INTERVAL`].
fn interval_micros(duration: Duration) -> i64 {
    let micros = duration.min(MAX_INTERVAL).as_nanos().div_ceil(1000);
    i64::try_from(micros).unwrap_or(i64::MAX)
}

/// A lease or TTL as an SQL interval ([`interval_micros`]).
fn interval(duration: Duration) -> PgInterval {
    PgInterval { months: 0, days: 0, microseconds: interval_micros(duration) }
}

fn fence(rows_affected: u64) -> Fence {
    if rows_affected == 1 { Fence::Held } else { Fence::Lost }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the pool's connect options: their Debug shows the password.
        f.debug_struct("PostgresStore")
            .field("server", &self.server)
            .field("table", &self.table)
            .field("pool_size", &self.pool.size())
            .field("operation_timeout", &self.timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_round_up_to_microseconds_and_are_bounded() {
        assert_eq!(interval(Duration::from_millis(300)).microseconds, 300_000);
        assert_eq!(interval(Duration::from_nanos(1)).microseconds, 1);
        assert_eq!(interval(Duration::from_nanos(1_001)).microseconds, 2);
        assert_eq!(interval(Duration::ZERO).microseconds, 0);
        assert_eq!(interval(Duration::MAX).microseconds, MAX_INTERVAL.as_micros() as i64);
    }

    #[tokio::test]
    async fn debug_output_never_shows_the_password() {
        let pool = PostgresStore::pool_options().connect_lazy("postgres://idem:hunter2@db.invalid:5432/app").unwrap();
        let store = PostgresStore::with_table(pool, "app.records").unwrap();
        let debug = format!("{store:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("postgres://idem@db.invalid:5432/app"), "{debug}");
        assert!(debug.contains("app.records"), "{debug}");
        assert_eq!(store.table_name(), "app.records");
    }
}
