//! The capability behind the transactional mode (§8 of the behaviour
//! contract): a store that opens a transaction for the handler's own
//! writes and writes the fenced completion inside it, so that both commit
//! or neither does. Postgres offers it ([`Store::transactional`](super::Store::transactional)).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::PgConnection;

use super::{Fence, FencingToken, StorageKey, StoreError, StoredResponse};

/// The transaction of one execution, on the store's pool.
pub type PgTransaction = sqlx::Transaction<'static, sqlx::Postgres>;

/// A future of a transaction being opened, that owns all it needs.
pub type Opening = Pin<Box<dyn Future<Output = Result<PgTransaction, sqlx::Error>> + Send + 'static>>;

/// What a store offers the transactional mode. Reached through
/// [`Store::transactional`](super::Store::transactional); the runtime decides when each step runs.
#[async_trait]
pub trait Transactional: Send + Sync {
    /// Opens a transaction on the store's pool at `READ COMMITTED`, whatever
    /// the connection's default: the completion written in it must see the
    /// lease renewals committed since. Not bounded: the runtime runs it
    /// where it cannot be cancelled half way (a `BEGIN` cut short would put
    /// a connection back in its pool inside a transaction).
    fn begin(&self) -> Opening;

    /// The fenced completion of `key` by `token`, written on `tx`: the
    /// response stored for `ttl` if the record still holds `token`.
    async fn complete_in(
        &self,
        tx: &mut PgConnection,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, sqlx::Error>;

    /// The error `error` is for this store, with its server named.
    fn error(&self, error: sqlx::Error) -> StoreError;
}
