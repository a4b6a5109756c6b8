//! Where orders and payments live: the same backend as the idempotency
//! records, so every process sharing it shares them too.

mod memory;
mod postgres;
mod redis;
pub mod transactional;

use std::sync::Arc;

use async_trait::async_trait;

pub use self::memory::MemoryRepo;
pub use self::postgres::{PostgresRepo, count, create_tables};
pub use self::redis::RedisRepo;
use crate::model::Order;

/// A backend failure, with the cause (never a password).
#[derive(Debug, thiserror::Error)]
#[error("{backend} backend failed: {message}")]
pub struct RepoError {
    /// `redis` or `postgres`.
    pub backend: &'static str,
    /// What went wrong.
    pub message: String,
}

impl RepoError {
    pub(crate) fn new(backend: &'static str, error: impl std::fmt::Display) -> Self {
        Self { backend, message: error.to_string() }
    }
}

/// Orders as the routes read them, on every backend.
#[async_trait]
pub trait Repo: Send + Sync + 'static {
    /// The order with `id`, if any.
    async fn order(&self, id: &str) -> Result<Option<Order>, RepoError>;
    /// Every order of `owner`, oldest first.
    async fn orders_of(&self, owner: &str) -> Result<Vec<Order>, RepoError>;
    /// How many orders were created.
    async fn orders_created(&self) -> Result<u64, RepoError>;
    /// Records the refund the provider's event `event_id` reports, unless
    /// that event was recorded already; true if this call recorded it.
    /// Atomic: one record per event id, however many deliveries try.
    async fn record_refund(&self, event_id: &str, charge_id: &str) -> Result<bool, RepoError>;
    /// How many refunds were recorded.
    async fn refunds(&self) -> Result<u64, RepoError>;
}

/// Order writes without a transaction, on memory and Redis.
#[async_trait]
pub trait InsertOrder: Send + Sync + 'static {
    /// Stores `order` and counts it, unless an order with its id exists:
    /// then nothing changes. Returns the order stored under the id (`order`
    /// or the earlier one). Atomic: one insert per id, however many
    /// executions try.
    async fn insert_order(&self, order: &Order) -> Result<Order, RepoError>;
}

/// How the write routes keep their business rows.
#[derive(Clone)]
pub enum Writes {
    /// Memory and Redis: through the repository, each write safe to repeat
    /// (its id comes from the execution's derived key).
    Direct(Arc<dyn InsertOrder>),
    /// Postgres: in the transaction the runtime opens for each execution
    /// (`idem_runtime::Tx`), committed together with the stored response
    /// ([`transactional`]).
    Transactional,
}
