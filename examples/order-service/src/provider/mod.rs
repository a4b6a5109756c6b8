//! The simulated payment provider: an external system that takes a while to
//! answer, fails on some test amounts, and deduplicates charges by the
//! idempotency key it is given, as Stripe does (unless told not to:
//! `--provider-dedup off`).
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
use serde::{Deserialize, Serialize};

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
    /// Every charge recorded, in the order recorded (on Postgres, by time).
    async fn list(&self) -> Result<Vec<Charge>, RepoError>;
}

/// What the provider answered to a charge: what it did with the money. The
/// payment records it as its durable step `charge` (JSON, tagged by
/// `outcome`, as `idem inspect` shows it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Outcome {
    /// The charge was captured.
    Captured(Charge),
    /// The card was declined: nothing was charged.
    Declined,
    /// The provider charged, then its answer timed out: the charge stands,
    /// unseen.
    TimedOutAfterCharge,
}

/// The provider as the routes call it.
#[derive(Clone)]
pub struct Provider {
    ledger: Arc<dyn Ledger>,
    delay: Duration,
    dedup: bool,
}

impl Provider {
    /// A provider keeping its charges in `ledger`, answering after `delay`,
    /// deduplicating charges by key if `dedup`.
    pub fn new(ledger: Arc<dyn Ledger>, delay: Duration, dedup: bool) -> Self {
        Self { ledger, delay, dedup }
    }

    /// Charges `amount_cents` for `order_id`, once per idempotency `key`: a
    /// key seen before gets its first charge back, never a second one
    /// (without `dedup`, every call charges anew). Special amounts behave
    /// like a provider's test cards.
    ///
    /// An error is a call that got no answer: the provider was unreachable
    /// before charging, or its ledger failed (with `dedup`, asking again is
    /// safe; without, the outcome is unknown and never asked again).
    pub async fn charge(&self, key: &str, order_id: &str, amount_cents: i64) -> Result<Outcome, ApiError> {
        if amount_cents == test_cards::UNAVAILABLE {
            // Refused before any charge: nothing happened.
            return Err(ApiError::ProviderUnavailable);
        }
        tokio::time::sleep(self.delay).await;
        if amount_cents == test_cards::DECLINED {
            return Ok(Outcome::Declined);
        }
        let charge = Charge::captured(order_id, amount_cents);
        let charge = if self.dedup {
            self.ledger.charge_once(key, &charge).await?
        } else {
            // A downstream without idempotency: the key is made unique per
            // call, so the ledger records every call as a charge of its own.
            // A failed call may have charged, and asking again would charge
            // again: its outcome is unknown, and kept as such.
            let unique = format!("{key}.{}", uuid::Uuid::new_v4().simple());
            self.ledger.charge_once(&unique, &charge).await.map_err(|error| {
                tracing::error!(%error, "the provider's ledger failed during a charge; its outcome is unknown");
                ApiError::ProviderOutcomeUnknown
            })?
        };
        if amount_cents == test_cards::TIMEOUT_AFTER_CHARGE {
            return Ok(Outcome::TimedOutAfterCharge);
        }
        Ok(Outcome::Captured(charge))
    }

    /// How many charges the provider captured.
    pub async fn charges(&self) -> Result<u64, RepoError> {
        self.ledger.charges().await
    }

    /// Every charge the provider captured: its ledger, as a reconciliation
    /// report would show it.
    pub async fn ledger(&self) -> Result<Vec<Charge>, RepoError> {
        self.ledger.list().await
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

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(dedup: bool) -> Provider {
        Provider::new(Arc::new(MemoryLedger::default()), Duration::ZERO, dedup)
    }

    #[actix_web::test]
    async fn with_dedup_a_key_charges_once_and_without_it_every_call_charges() {
        let deduplicating = provider(true);
        let first = deduplicating.charge("k1", "o1", 100).await.unwrap();
        assert_eq!(deduplicating.charge("k1", "o1", 100).await.unwrap(), first, "the first charge, again");
        assert_eq!(deduplicating.charges().await.unwrap(), 1);
        let careless = provider(false);
        let first = careless.charge("k1", "o1", 100).await.unwrap();
        assert_ne!(careless.charge("k1", "o1", 100).await.unwrap(), first, "another charge");
        assert_eq!(careless.charges().await.unwrap(), 2);
    }

    #[actix_web::test]
    async fn the_test_amounts_answer_or_fail_as_documented() {
        let provider = provider(false);
        assert_eq!(provider.charge("k", "o1", test_cards::DECLINED).await.unwrap(), Outcome::Declined);
        assert!(matches!(
            provider.charge("k", "o1", test_cards::UNAVAILABLE).await,
            Err(ApiError::ProviderUnavailable)
        ));
        assert_eq!(provider.charges().await.unwrap(), 0, "neither charged");
        let timed_out = provider.charge("k", "o1", test_cards::TIMEOUT_AFTER_CHARGE).await.unwrap();
        assert_eq!((timed_out, provider.charges().await.unwrap()), (Outcome::TimedOutAfterCharge, 1));
    }

    /// The step's records outlive a deployment: their JSON stays readable.
    #[test]
    fn outcomes_are_recorded_as_tagged_json() {
        let charge = Charge { id: "ch_1".into(), order_id: "o1".into(), amount_cents: 800, status: "captured".into() };
        let recorded = serde_json::to_string(&Outcome::Captured(charge.clone())).unwrap();
        assert_eq!(
            recorded,
            r#"{"outcome":"captured","id":"ch_1","order_id":"o1","amount_cents":800,"status":"captured"}"#
        );
        assert_eq!(serde_json::from_str::<Outcome>(&recorded).unwrap(), Outcome::Captured(charge));
        assert_eq!(
            serde_json::to_string(&Outcome::TimedOutAfterCharge).unwrap(),
            r#"{"outcome":"timed-out-after-charge"}"#
        );
    }
}
