//! Where orders and charges live: the same backend as the idempotency
//! records, so every process sharing it shares them too.

mod memory;
mod postgres;
mod redis;

use async_trait::async_trait;

pub use self::memory::MemoryRepo;
pub use self::postgres::PostgresRepo;
pub use self::redis::RedisRepo;
use crate::model::{Charge, Order, Stats};

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

/// Orders and charges.
#[async_trait]
pub trait Repo: Send + Sync + 'static {
    /// Stores a new order and counts it.
    async fn insert_order(&self, order: &Order) -> Result<(), RepoError>;
    /// The order with `id`, if any.
    async fn order(&self, id: &str) -> Result<Option<Order>, RepoError>;
    /// Every order of `owner`, oldest first.
    async fn orders_of(&self, owner: &str) -> Result<Vec<Order>, RepoError>;
    /// Stores a captured charge and counts it.
    async fn insert_charge(&self, charge: &Charge) -> Result<(), RepoError>;
    /// Side-effect counts.
    async fn stats(&self) -> Result<Stats, RepoError>;
}
