//! Claiming a key that another execution may hold, for a caller that waits
//! for it (`in_flight = "wait"`): the claim is sent again, after a pause
//! that grows up to a quarter second, until the key is free, answered, or
//! the wait is over.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::drain::Running;
use super::{Claimed, Replays, Terms, claim};
use crate::fingerprint::Fingerprint;
use crate::scope::StorageKey;
use crate::store::{Claim, Store, StoreError};

/// Shortest time given to a claim, even at the very end of a wait.
const MIN_CLAIM_TIMEOUT: Duration = Duration::from_millis(50);

/// First pause between two claims while waiting.
const FIRST_PAUSE: Duration = Duration::from_millis(20);

/// Longest pause between two claims while waiting.
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// Claims `key` as [`claim`] does (looking in `replays` first, each time);
/// while the answer is in flight and
/// `until` is ahead, waits and claims again. `until` of `None` claims once.
/// No claim runs past `until` (on Tokio's clock, so that a test that
/// pauses time waits in virtual time): one that is cut short there is answered in
/// flight (the first execution runs, as far as anyone knows).
pub(crate) async fn claim_until(
    store: &Arc<dyn Store>,
    replays: Option<&Arc<Replays>>,
    key: &StorageKey,
    fingerprint: &Fingerprint,
    terms: &Terms,
    running: &Arc<Running>,
    until: Option<Instant>,
) -> Result<Claimed, StoreError> {
    let mut pause = FIRST_PAUSE;
    loop {
        let (timeout, cut) = match until {
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now()).max(MIN_CLAIM_TIMEOUT);
                (terms.timeout.min(left), left < terms.timeout)
            }
            None => (terms.timeout, false),
        };
        let claimed = match claim(store, replays, key, fingerprint, terms, timeout, running).await {
            Err(StoreError::Timeout { .. }) if cut => {
                Claimed::Other(Claim::InFlight { retry_after: Duration::from_secs(1) })
            }
            claimed => claimed?,
        };
        let now = Instant::now();
        match (claimed, until) {
            (Claimed::Other(Claim::InFlight { .. }), Some(until)) if now < until => {
                tokio::time::sleep(pause.min(until - now)).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            (claimed, _) => return Ok(claimed),
        }
    }
}
