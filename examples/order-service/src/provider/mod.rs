//! The simulated payment provider: an external system that takes a while to
//! answer, fails on some test amounts, and deduplicates charges by the
//! idempotency key it is given, as Stripe does.
//!
//! Its ledger lives in the backend, apart from the service's rows: on Redis
//! under keys of its own, on Postgres in a table of its own written outside
//! the handler's transaction (a provider's charge survives whatever happens
//! to the service that asked for it), in the process for `memory`.

mod memory;
mod postgres;
mod redis;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use self::memory::MemoryLedger;
pub use self::postgres::PostgresLedger;
pub use self::redis::RedisLedger;
use crate::error::ApiError;
use crate::model::Charge;
use crate::repo::RepoError;

/// The provider's charges, one per idempotency key.
#[async_trait]
pub trait Ledger: Send + Sync + 'static {
    /// Records `charge` under `key` unless a charge is recorded there
    /// already, and returns the charge recorded under `key`: `charge`, or
    /// the earlier one. Atomic: two calls with one key record one charge.
    async fn charge_once(&self, key: &str, charge: &Charge) -> Result<Charge, RepoError>;
    /// How many charges are recorded.
    async fn charges(&self) -> Result<u64, RepoError>;
}

/// The provider as the routes call it.
#[derive(Clone)]
pub struct Provider {
    ledger: Arc<dyn Ledger>,
    delay: Duration,
}

impl Provider {
    /// A provider keeping its charges in `ledger`, answering after `delay`.
    pub fn new(ledger: Arc<dyn Ledger>, delay: Duration) -> Self {
        Self { ledger, delay }
    }

    /// Charges `amount_cents` for `order_id`, once per idempotency `key`: a
    /// key seen before gets its first charge back, never a second one.
    /// Special amounts behave like a provider's test cards.
    pub async fn charge(&self, key: &str, order_id: &str, amount_cents: i64) -> Result<Charge, ApiError> {
        if amount_cents == test_cards::UNAVAILABLE {
            // Refused before any charge: nothing happened.
            return Err(ApiError::ProviderUnavailable);
        }
        tokio::time::sleep(self.delay).await;
        if amount_cents == test_cards::DECLINED {
            return Err(ApiError::Declined);
        }
        let charge = self.ledger.charge_once(key, &Charge::captured(order_id, amount_cents)).await?;
        if amount_cents == test_cards::TIMEOUT_AFTER_CHARGE {
            return Err(ApiError::ProviderTimeout);
        }
        Ok(charge)
    }

    /// How many charges the provider captured.
    pub async fn charges(&self) -> Result<u64, RepoError> {
        self.ledger.charges().await
    }
}

/// Amounts that make the simulated provider fail, like test card numbers.
mod test_cards {
    /// The card is declined: no charge, 402 (stored and replayed).
    pub const DECLINED: i64 = 402;
    /// The provider is unreachable before charging: no charge, 503 marked
    /// retryable (the same request may run again).
    pub const UNAVAILABLE: i64 = 503;
    /// The provider charges, then times out: one charge, 504 (stored and
    /// replayed, never charged again).
    pub const TIMEOUT_AFTER_CHARGE: i64 = 504;
}
