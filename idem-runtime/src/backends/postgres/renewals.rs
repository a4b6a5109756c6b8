//! Batched lease renewals, on a pool of their own.
//!
//! The lease keeper renews every lease of a process at once, from a thread
//! and a Tokio runtime of its own. A batch is one fenced `UPDATE ... FROM
//! unnest(...)` statement that skips the rows other transactions hold
//! locked (answered [`Fence::Unknown`], tried again by the keeper), on a
//! small pool that only carries renewals, made
//! on the keeper's runtime (so its connections live there), so that renewals
//! never wait for a connection the application's queries hold, nor on an
//! application thread that is busy.
//!
//! Over a slow network, opening a connection and preparing the batch
//! statement on it take round trips of their own, and the first renewals
//! once paid for both: attempt after attempt ran out of the store timeout,
//! the lease ran out with them, and a duplicate ran the handler a second
//! time. So the renewals' connections are never opened in a renewal's
//! stead:
//!
//! - the pool is made, and its connections opened, ahead: when the store
//!   migrates or first claims, on the keeper's runtime;
//! - every connection it opens prepares the batch statement before it is
//!   used (`after_connect`), including those that replace one the server
//!   closed;
//! - it keeps them (no idle timeout, no lifetime), checks one before a batch
//!   uses it (a ping: a connection the server closed is replaced, not used),
//!   and checks an idle one every second while the other is idle too,
//!   replacing those the server closed before a renewal needs them;
//! - a batch takes its connection on a task of its own, which its timeout
//!   does not cut short: a connection still opening when the attempt gives
//!   up is there for the next one.
//!
//! What this does not cover: both connections lost while a lease is being
//! renewed over a network so slow that opening another (several round
//! trips) and a batch on it do not fit in what is left of the lease. The
//! lease is then lost, and a duplicate after its end runs the handler
//! again. Keep the store timeout, and so the lease, well above the time a
//! connection takes to open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::Row;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, PgPoolOptions, Postgres};
use tokio::sync::OnceCell;

use super::sql::sql;
use super::{PostgresStore, interval_micros};
use crate::background;
use crate::store::{Fence, Renewal, StoreError};

/// Connections of the renewal pool: one batch at a time needs one; the
/// second covers a batch still running when the next one starts.
const RENEWAL_CONNECTIONS: u32 = 2;

/// Longest wait of a renewal batch for a lock (`lock_timeout` of the
/// renewal connections). The batch skips rows locked by other transactions
/// (`renew_many.sql`), so it waits for none of them; this bounds any other
/// lock it might meet (a table lock taken by hand), so that the batch fails
/// and is tried again rather than hold up every lease of the process.
const LOCK_TIMEOUT: &str = "250ms";

/// The renewals' own pool, made ahead (see the module's docs).
#[derive(Debug, Default)]
pub(super) struct RenewalPool {
    pool: OnceCell<PgPool>,
    /// Its connections are being opened ahead, or are open.
    started: AtomicBool,
}

/// How often the keeper checks the renewals' idle connections.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// While the store lives, checks one of the renewals' idle connections
/// every [`CHECK_EVERY`] (a ping) and replaces those the server closed, so
/// that a renewal finds them open and prepared. A closed one is otherwise
/// found by the next renewal, which over a slow network cannot open and
/// prepare another within its time.
async fn check_renewal_connections(renewals: Weak<RenewalPool>, pool: PgPool) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        if renewals.strong_count() == 0 {
            return;
        }
        // One at a time, and only while the other is free too, so that a
        // batch never waits for a check: the one idle longest (the pool
        // hands them out in turn) is pinged as it is taken
        // (`test_before_acquire`), and if the server closed it, dropped and
        // another opened in its place. Or the one missing is opened.
        let check = pool.size() < RENEWAL_CONNECTIONS || pool.num_idle() >= RENEWAL_CONNECTIONS as usize;
        if check && let Err(error) = pool.acquire().await {
            tracing::debug!(%error, "could not check the lease renewals' connections");
        }
    }
}

impl PostgresStore {
    /// Makes the renewal pool on the keeper's runtime and opens its
    /// connections, in the background, unless that is done or under way.
    /// If it fails, the next call tries again.
    pub(super) fn open_renewals_ahead(&self) {
        if self.renewals.started.load(Ordering::Acquire) || self.renewals.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        background::spawn(async move {
            let pool = store.renewal_pool().await.clone();
            // Together (each prepares the batch statement as it opens);
            // then back to the pool, which keeps them.
            let opened = futures_util::future::join_all((0..RENEWAL_CONNECTIONS).map(|_| pool.acquire())).await;
            if let Some(Err(error)) = opened.into_iter().find(Result::is_err) {
                tracing::debug!(%error, "could not open the lease renewals' connections ahead; trying at the next claim");
                store.renewals.started.store(false, Ordering::Release);
                return;
            }
            let renewals = Arc::downgrade(&store.renewals);
            drop(store);
            check_renewal_connections(renewals, pool).await;
        });
    }

    /// The renewal pool, made now (on the caller's runtime) if it is not
    /// made yet, with the main pool's connection options and acquire
    /// timeout (see the module's docs).
    async fn renewal_pool(&self) -> &PgPool {
        self.renewals
            .pool
            .get_or_init(|| async {
                let prepare = Arc::clone(&self.sql.renew_many);
                PgPoolOptions::new()
                    .max_connections(RENEWAL_CONNECTIONS)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .acquire_timeout(self.pool.options().get_acquire_timeout())
                    .after_connect(move |connection, _| {
                        let statement = Arc::clone(&prepare);
                        Box::pin(async move {
                            // A batch of none: prepared, nothing renewed.
                            let (keys, tokens, leases): ([&str; 0], [&[u8]; 0], [i64; 0]) = ([], [], []);
                            let query =
                                sqlx::query(sql(&statement)).bind(&keys[..]).bind(&tokens[..]).bind(&leases[..]);
                            query.fetch_all(connection).await.map(drop)
                        })
                    })
                    .connect_lazy_with((*self.pool.connect_options()).clone().options([("lock_timeout", LOCK_TIMEOUT)]))
            })
            .await
    }

    /// A connection of the renewal pool, taken on a task of its own so
    /// that the caller's timeout never cuts its opening short.
    async fn renewal_connection(&self) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        let pool = self.renewal_pool().await.clone();
        match tokio::spawn(async move { pool.acquire().await }).await {
            Ok(connection) => connection,
            // The runtime is shutting down.
            Err(error) => Err(sqlx::Error::Io(std::io::Error::other(error))),
        }
    }

    /// [`Store::renew_many`](crate::store::Store::renew_many): one
    /// statement for the whole batch, answered in the batch's order.
    pub(super) async fn renew_batch(&self, renewals: &[Renewal]) -> Result<Vec<Fence>, StoreError> {
        if renewals.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<&str> = renewals.iter().map(|r| r.key.as_str()).collect();
        let tokens: Vec<[u8; 16]> = renewals.iter().map(|r| r.token.to_bytes()).collect();
        let tokens: Vec<&[u8]> = tokens.iter().map(|t| t.as_slice()).collect();
        let leases: Vec<i64> = renewals.iter().map(|r| interval_micros(r.lease)).collect();
        // Sent again on a dropped connection (renewals are safe to repeat).
        let batch = || async {
            let query = sqlx::query(sql(&self.sql.renew_many)).bind(&keys[..]).bind(&tokens[..]).bind(&leases[..]);
            let mut connection = self.renewal_connection().await?;
            query.fetch_all(&mut *connection).await
        };
        let rows = self.run(super::error::repeatable(batch)).await?;
        let mut answers = HashMap::with_capacity(rows.len());
        for row in &rows {
            let key: String = row.try_get("key").map_err(|e| self.corrupt(e.to_string()))?;
            let token: Vec<u8> = row.try_get("token").map_err(|e| self.corrupt(e.to_string()))?;
            let fence = match row.try_get::<&str, _>("fence").map_err(|e| self.corrupt(e.to_string()))? {
                "held" => Fence::Held,
                "lost" => Fence::Lost,
                "unknown" => Fence::Unknown,
                other => return Err(self.corrupt(format!("a renewal answered {other:?}"))),
            };
            answers.insert((key, token), fence);
        }
        renewals
            .iter()
            .map(|r| {
                answers
                    .get(&(r.key.as_str().to_owned(), r.token.to_bytes().to_vec()))
                    .copied()
                    .ok_or_else(|| self.corrupt("a renewal of the batch got no answer".to_owned()))
            })
            .collect()
    }
}
