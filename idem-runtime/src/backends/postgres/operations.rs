//! The store's operations: each one SQL statement (see `sql.rs` and the
//! `.sql` files beside it), fenced by the record's token where it writes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::PgConnection;

use super::{KIND, PostgresStore, error, fence, interval, row, sql};
use crate::fingerprint::Fingerprint;
use crate::record::{Record, StoredResponse};
use crate::scope::StorageKey;
use crate::store::{
    Claim, ClaimTerms, Fence, FencingToken, OnLapse, Opening, PurgeExpired, Renewal, Step, Store, StoreError,
    Transactional,
};

#[async_trait]
impl Store for PostgresStore {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn claim_with(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        token: FencingToken,
        terms: &ClaimTerms,
    ) -> Result<Claim, StoreError> {
        self.open_renewals_ahead();
        if !self.columns_checked.load(Ordering::Acquire) {
            self.check_columns().await?;
        }
        let token_bytes = token.to_bytes();
        let call = |statement| {
            self.kept.fetch_one(
                sqlx::query(sql(statement))
                    .bind(key.as_str())
                    .bind(&fingerprint.as_bytes()[..])
                    .bind(&token_bytes[..])
                    .bind(interval(terms.lease))
                    .bind(interval(terms.ttl.max(terms.lease)))
                    .bind(terms.on_lapse == OnLapse::Hold)
                    .bind(terms.route.as_deref()),
            )
        };
        // Sent again on a dropped connection: the same token's claim is
        // answered as its own.
        if !self.claim_inline.load(Ordering::Acquire) {
            match self.timed(error::repeatable(|| call(&self.sql.claim))).await? {
                Ok(row) => return row::claim(&row, token).map_err(|reason| self.corrupt(reason)),
                // Refused before it ran: nothing was claimed.
                Err(error) if error::is_undefined_function(&error) => {
                    if !self.claim_inline.swap(true, Ordering::AcqRel) {
                        tracing::warn!(
                            table = %self.table,
                            "the claim function of the idempotency table is missing: claims use one larger \
                             statement instead, which makes replays slower; run PostgresStore::migrate() to create it"
                        );
                    }
                }
                Err(error) => return Err(self.error(error)),
            }
        }
        let row = self.run(error::repeatable(|| call(&self.sql.claim_inline))).await?;
        row::claim(&row, token).map_err(|reason| self.corrupt(reason))
    }

    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError> {
        let token_bytes = token.to_bytes();
        let renew = || {
            let query =
                sqlx::query(sql(&self.sql.renew)).bind(key.as_str()).bind(&token_bytes[..]).bind(interval(lease));
            self.kept.execute(query)
        };
        Ok(fence(self.run(error::repeatable(renew)).await?.rows_affected()))
    }

    /// One statement for the whole batch, on the renewals' own pool (see
    /// the type's docs).
    async fn renew_many(&self, renewals: &[Renewal]) -> Result<Vec<Fence>, StoreError> {
        self.renew_batch(renewals).await
    }

    async fn complete(
        &self,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, StoreError> {
        self.run(async {
            let mut held = self.kept.acquire().await?;
            let fence = self.complete_on(held.connection(), key, token, response, ttl).await?;
            held.succeeded();
            Ok(fence)
        })
        .await
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        self.release_if(key, token, true).await
    }

    async fn release_unless_held(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        self.release_if(key, token, false).await
    }

    /// One fenced statement outside the handler's transaction, in the
    /// transactional mode too (the step records an effect that its rollback
    /// cannot undo), on a connection no transaction holds: one of the
    /// store's if there is one at once, else one of the steps' own pool
    /// (see `steps.rs`).
    async fn record_step(&self, key: &StorageKey, token: FencingToken, step: &Step) -> Result<Fence, StoreError> {
        Ok(fence(self.run(self.record_step_now(key, token, step)).await?.rows_affected()))
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        let get = || self.kept.fetch_optional(sqlx::query(sql(&self.sql.get)).bind(key.as_str()));
        match self.run(error::repeatable(get)).await? {
            Some(row) => row::record(&row).map(Some).map_err(|reason| self.corrupt(reason)),
            None => Ok(None),
        }
    }

    fn transactional(&self) -> Option<Arc<dyn Transactional>> {
        Some(Arc::new(self.clone()))
    }
}

#[async_trait]
impl PurgeExpired for PostgresStore {
    async fn purge_expired(&self, batch: usize) -> Result<u64, StoreError> {
        let query = sqlx::query(sql(&self.sql.purge)).bind(i64::try_from(batch).unwrap_or(i64::MAX));
        Ok(self.run(query.execute(&self.pool)).await?.rows_affected())
    }
}

#[async_trait]
impl Transactional for PostgresStore {
    fn begin(&self) -> Opening {
        let pool = self.pool.clone();
        // Counted as waiting for the pool, when it has none free: the
        // workers give theirs way to it.
        Box::pin(
            self.kept.waiting_for_pool(async move { pool.begin_with("BEGIN ISOLATION LEVEL READ COMMITTED").await }),
        )
    }

    async fn complete_in(
        &self,
        tx: &mut PgConnection,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, sqlx::Error> {
        self.complete_on(tx, key, token, response, ttl).await
    }

    fn error(&self, error: sqlx::Error) -> StoreError {
        PostgresStore::error(self, error)
    }
}

impl PostgresStore {
    /// `release.sql`: the in-flight record of `key` that holds `token`
    /// becomes a tombstone; a held one only if `held_too`.
    async fn release_if(&self, key: &StorageKey, token: FencingToken, held_too: bool) -> Result<Fence, StoreError> {
        let token_bytes = token.to_bytes();
        let query = sqlx::query(sql(&self.sql.release)).bind(key.as_str()).bind(&token_bytes[..]).bind(held_too);
        Ok(fence(self.run(self.kept.execute(query)).await?.rows_affected()))
    }
}
