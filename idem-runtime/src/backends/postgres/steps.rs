//! Durable steps' records, which never wait for a connection a handler's
//! transaction may hold.
//!
//! A step is recorded outside the handler's transaction (its effect is one
//! a rollback cannot undo), while the handler holds that transaction's
//! connection of the store's pool. Had the record waited for another
//! connection of the same pool, as many transactional handlers as the pool
//! has connections, each at a step, would wait for each other for good:
//! the engine tries a failed record again until the record's TTL, and the
//! lease keeper, on its own pool, keeps their leases alive meanwhile.
//!
//! So a step takes a connection of the store's pool only when one is there
//! at once ([`Kept::try_acquire`](super::kept::Kept::try_acquire): one its
//! runtime keeps idle, one the pool has idle, an idle one another runtime
//! keeps). Otherwise it runs on a small pool of its own, which carries
//! nothing but step records (one short fenced `UPDATE` each, bounded by
//! [`LOCK_TIMEOUT`] and the operation's timeout): its connections are
//! always given back soon, so a step waits for them at most behind other
//! steps. That pool is made on the lease keeper's runtime the first time
//! it is needed, opens its connections as steps need them, and closes
//! those left idle (sqlx's default idle timeout); a step runs on that
//! runtime too, where its connection lives, and is never cut short there
//! (an attempt that gives up leaves it to finish: the first result of a
//! name stays, so a step recorded twice is recorded once).
//!
//! Nothing else of the store uses it: the sweeper's deletions, larger and
//! not in a hurry, stay on the store's pool, whose connections the
//! transactions give back once they commit or roll back.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use sqlx::postgres::{PgPool, PgPoolOptions, PgQueryResult};

use super::sql::sql;
use super::{PostgresStore, error};
use crate::background;
use crate::scope::StorageKey;
use crate::store::{FencingToken, Step};

/// Connections of the steps' own pool.
const STEP_CONNECTIONS: u32 = 2;

/// Longest wait of a step record for a lock (`lock_timeout` of the steps'
/// connections). The row a step appends to is locked only briefly (a
/// claim, a renewal), or by a takeover's transactional completion until it
/// commits, and then the step is lost anyway: past this the record fails
/// and is tried again, rather than hold one of the few connections.
const LOCK_TIMEOUT: &str = "250ms";

/// The steps' own pool, made when first needed.
#[derive(Debug, Default)]
pub(super) struct StepPool {
    pool: OnceLock<PgPool>,
}

impl StepPool {
    /// The pool, made now (on the caller's runtime, where sqlx starts its
    /// upkeep task) if it is not made yet, with the store's connection
    /// options and acquire timeout.
    fn pool(&self, store: &PgPool) -> &PgPool {
        self.pool.get_or_init(|| {
            PgPoolOptions::new()
                .max_connections(STEP_CONNECTIONS)
                .acquire_timeout(store.options().get_acquire_timeout())
                .connect_lazy_with((*store.connect_options()).clone().options([("lock_timeout", LOCK_TIMEOUT)]))
        })
    }
}

impl PostgresStore {
    /// [`Store::record_step`](crate::store::Store::record_step)'s statement
    /// on a connection of the store's pool if one is there at once, else on
    /// the steps' own pool (see the module's docs). Sent again on a
    /// dropped connection: the first result of a name stays.
    pub(super) async fn record_step_now(
        &self,
        key: &StorageKey,
        token: FencingToken,
        step: &Step,
    ) -> Result<PgQueryResult, sqlx::Error> {
        let token = token.to_bytes();
        let record = || async {
            let Some(mut held) = self.kept.try_acquire() else {
                return self.record_step_apart(key, token, step).await;
            };
            let query = sqlx::query(sql(&self.sql.record_step))
                .bind(key.as_str())
                .bind(&token[..])
                .bind(step.name.as_str())
                .bind(&step.result[..]);
            let done = query.execute(held.connection()).await?;
            held.succeeded();
            Ok(done)
        };
        error::repeatable(record).await
    }

    /// The step's statement on the steps' own pool, on the lease keeper's
    /// runtime.
    async fn record_step_apart(
        &self,
        key: &StorageKey,
        token: [u8; 16],
        step: &Step,
    ) -> Result<PgQueryResult, sqlx::Error> {
        let (steps, store_pool, statement) =
            (Arc::clone(&self.steps), self.pool.clone(), Arc::clone(&self.sql.record_step));
        let (key, name, result): (String, String, Bytes) =
            (key.as_str().to_owned(), step.name.clone(), step.result.clone());
        let recorded = background::spawn_joined(async move {
            let pool = steps.pool(&store_pool);
            let mut connection = pool.acquire().await?;
            let query = sqlx::query(sql(&statement)).bind(key).bind(&token[..]).bind(name).bind(&result[..]);
            query.execute(&mut *connection).await
        });
        match recorded.await {
            Ok(result) => result,
            // The runtime is shutting down.
            Err(error) => Err(sqlx::Error::Io(std::io::Error::other(error))),
        }
    }
}
