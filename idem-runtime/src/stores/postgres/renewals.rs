//! Batched lease renewals, on a pool of their own.
//!
//! The lease keeper renews every lease of a process at once, from a thread
//! and a Tokio runtime of its own. A batch is one fenced `UPDATE ... FROM
//! unnest(...)` statement on a small pool that only carries renewals, made
//! on the keeper's runtime (so its connections live there), so that renewals
//! never wait for a connection the application's queries hold, nor on an
//! application thread that is busy.
//!
//! Its connections are opened ahead, with the batch statement prepared on
//! each, when the store migrates or claims for the first time, and kept
//! open. Opened by the first renewals instead, over a slow network, they
//! took more than the store timeout (the connection, then preparing the
//! statement, each a round trip or more on top of the batch's own): attempt
//! after attempt ran out of time, the lease ran out with them, and a
//! duplicate ran the handler a second time.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use sqlx::Row;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::sync::OnceCell;

use super::sql::sql;
use super::{PostgresStore, interval_micros};
use crate::engine::keeper;
use crate::store::{Fence, Renewal, StoreError};

/// Connections of the renewal pool: one batch at a time needs one; the
/// second covers a batch still running when the next one starts.
const RENEWAL_CONNECTIONS: u32 = 2;

/// Longest wait of a renewal batch for a row lock (`lock_timeout` of the
/// renewal connections). A record's row is locked by a transactional
/// completion until its `COMMIT` (milliseconds, run on the keeper's
/// runtime); a batch that waits longer fails as a whole and is tried again
/// shortly, instead of holding up every lease of the process behind one row.
const LOCK_TIMEOUT: &str = "250ms";

/// The renewals' own pool, made ahead (see the module's docs).
#[derive(Debug, Default)]
pub(super) struct RenewalPool {
    pool: OnceCell<PgPool>,
    /// Its making has started.
    started: std::sync::atomic::AtomicBool,
}

impl PostgresStore {
    /// Makes the renewal pool on the keeper's runtime and opens its
    /// connections, in the background, unless that has started already.
    pub(super) fn open_renewals_ahead(&self) {
        if self.renewals.started.load(Ordering::Acquire) || self.renewals.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        keeper::spawn(async move {
            let pool = store.renewal_pool().await;
            // Each opened, and the batch statement prepared on it by a batch
            // of none, together; then back to the pool, which keeps them.
            let prepared = futures_util::future::join_all((0..RENEWAL_CONNECTIONS).map(|_| async {
                let mut connection = pool.acquire().await?;
                let (keys, tokens, leases): ([&str; 0], [&[u8]; 0], [i64; 0]) = ([], [], []);
                let query = sqlx::query(sql(&store.sql.renew_many)).bind(&keys[..]).bind(&tokens[..]).bind(&leases[..]);
                query.fetch_all(&mut *connection).await
            }))
            .await;
            if let Some(Err(error)) = prepared.into_iter().find(Result::is_err) {
                // The first renewal opens what is missing.
                tracing::debug!(%error, "could not open the lease renewals' connections ahead");
            }
        });
    }

    /// The renewal pool, made now (on the caller's runtime) if it is not
    /// made yet, with the main pool's connection options and acquire
    /// timeout. It keeps its connections open (a closed one is opened again
    /// at once).
    async fn renewal_pool(&self) -> &PgPool {
        self.renewals
            .pool
            .get_or_init(|| async {
                PgPoolOptions::new()
                    .max_connections(RENEWAL_CONNECTIONS)
                    .min_connections(RENEWAL_CONNECTIONS)
                    .acquire_timeout(self.pool.options().get_acquire_timeout())
                    .connect_lazy_with((*self.pool.connect_options()).clone().options([("lock_timeout", LOCK_TIMEOUT)]))
            })
            .await
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
        let pool = self.renewal_pool().await;
        let query = sqlx::query(sql(&self.sql.renew_many)).bind(&keys[..]).bind(&tokens[..]).bind(&leases[..]);
        let rows = self.run(query.fetch_all(pool)).await?;
        let mut held = HashSet::with_capacity(rows.len());
        for row in &rows {
            let key: String = row.try_get("key").map_err(|e| self.corrupt(e.to_string()))?;
            let token: Vec<u8> = row.try_get("token").map_err(|e| self.corrupt(e.to_string()))?;
            held.insert((key, token));
        }
        Ok(renewals
            .iter()
            .map(|r| {
                if held.contains(&(r.key.as_str().to_owned(), r.token.to_bytes().to_vec())) {
                    Fence::Held
                } else {
                    Fence::Lost
                }
            })
            .collect())
    }
}
