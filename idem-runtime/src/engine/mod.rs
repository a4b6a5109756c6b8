//! Claim, lease, complete and release: the orchestration every adapter
//! shares (the actix glue today), independent of any web framework.
//!
//! - `lease.rs`: a lease as this process sees it, with a deadline counted
//!   from when the claim was sent;
//! - `keeper.rs`: the process-wide keeper thread that renews every lease;
//! - `drain.rs`: the count of running executions, for graceful shutdown;
//! - `transaction.rs`: the transactional mode on Postgres, where the work's
//!   writes and the completion commit together.
//!
//! An [`Execution`] is a claim this process won. It ends in exactly one of
//! two ways: [`Execution::complete`] (the response is kept, fenced) or
//! [`Execution::release`] (a tombstone: nothing happened, the same request
//! may run again). Both retry a failed store call for as long as the lease
//! is held: the lease is what keeps a retry from running the handler again.

mod drain;
pub(crate) mod keeper;
mod lease;
#[cfg(feature = "postgres")]
pub(crate) mod transaction;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::drain::Drained;
pub(crate) use self::drain::{Running, RunningGuard};
use self::lease::Lease;
use crate::fingerprint::Fingerprint;
use crate::observe::{Outcome, store_call, store_call_since};
use crate::record::{RecordState, StoredResponse};
use crate::scope::StorageKey;
use crate::store::{Attempt, Claim, Fence, FencingToken, Store, StoreError};

/// The terms of one claim.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    /// The lease of an execution, renewed by the keeper.
    pub(crate) lease: Duration,
    /// How long the record lives.
    pub(crate) ttl: Duration,
    /// Longest wait for one store call.
    pub(crate) timeout: Duration,
}

/// What a claim came to.
pub(crate) enum Claimed {
    /// This process owns the key: run the work.
    Acquired(Execution),
    /// Another answer of the store: replay, in flight, mismatch.
    Other(Claim),
    /// A drain has begun: nothing was claimed.
    Draining,
}

/// Claims `key`, counting the lease from the moment the claim is sent.
pub(crate) async fn claim(
    store: &Arc<dyn Store>,
    key: &StorageKey,
    fingerprint: &Fingerprint,
    terms: &Terms,
    timeout: Duration,
    running: &Arc<Running>,
) -> Result<Claimed, StoreError> {
    let Some(entered) = running.enter() else { return Ok(Claimed::Draining) };
    let sent = Instant::now();
    let call = store.claim(key, fingerprint, terms.lease, terms.ttl);
    match store_call_since(sent, store.kind(), "claim", timeout, call).await? {
        Claim::Acquired { token, attempt } => {
            // A claim answered after its lease would have ended (a stalled
            // worker, a slow store) is held by nobody safely: the lease is
            // born lost, and the execution refuses to run (see `is_held`).
            let lease = Lease::hold(Arc::clone(store), key.clone(), token, terms.lease, terms.timeout, sent);
            let execution = Execution {
                lease,
                attempt,
                length: terms.lease,
                ttl: terms.ttl,
                timeout: terms.timeout,
                _running: entered.keep(),
            };
            Ok(Claimed::Acquired(execution))
        }
        other => Ok(Claimed::Other(other)),
    }
}

/// A claim this process won: its lease is kept until it completes or
/// releases, or is dropped.
pub(crate) struct Execution {
    lease: Lease,
    /// Which execution of the key this is.
    attempt: Attempt,
    /// The lease's length.
    length: Duration,
    ttl: Duration,
    timeout: Duration,
    _running: RunningGuard,
}

/// How one try at a completion ended.
pub(crate) enum Tried {
    /// Settled: stored, or refused by the fence.
    Done(Outcome),
    /// The store refused the record for good (too large, a limit).
    Refused,
    /// The call failed; it may be tried again.
    Failed,
}

/// The first pause after a failed completion; it doubles up to a tenth of
/// the lease.
const FIRST_PAUSE: Duration = Duration::from_millis(50);

impl Execution {
    /// The key's storage key.
    pub(crate) fn key(&self) -> &StorageKey {
        self.lease.key()
    }

    /// The fencing token of this execution.
    pub(crate) fn token(&self) -> FencingToken {
        self.lease.token()
    }

    /// Which execution of the key this is.
    pub(crate) fn attempt(&self) -> Attempt {
        self.attempt
    }

    /// Whether this process still owns the key.
    pub(crate) fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// One attempt at storing `response`. `None` when it failed and may be
    /// tried again (see [`Execution::complete`]).
    pub(crate) async fn try_complete(&self, response: &StoredResponse) -> Tried {
        let store = self.lease.store();
        let call = store.complete(self.key(), self.token(), response, self.ttl);
        match store_call(store.kind(), "complete", self.timeout, call).await {
            Ok(Fence::Held) => Tried::Done(Outcome::Executed),
            Ok(_) => Tried::Done(self.report(Outcome::LeaseLost)),
            Err(StoreError::Full { .. }) => Tried::Refused,
            Err(_) => Tried::Failed,
        }
    }

    /// Stores `response` after a first attempt ended as `first`, retrying
    /// failed calls for as long as the lease is held. If the store refuses
    /// the record for good (too large, a limit), `processed` is stored
    /// instead, so that a retry never runs again.
    pub(crate) async fn complete(self, first: Tried, response: &StoredResponse, processed: &StoredResponse) -> Outcome {
        let (mut record, mut failed_before) = match first {
            Tried::Done(outcome) => return outcome,
            Tried::Refused => (processed, false),
            Tried::Failed => (response, true),
        };
        if matches!(first, Tried::Refused) {
            tracing::error!("the store refused the response for good; keeping a \"processed\" record instead");
        }
        let mut pause = FIRST_PAUSE;
        loop {
            let until_deadline = self.lease.deadline().saturating_duration_since(Instant::now());
            // An attempt that failed may yet have been applied (its answer
            // lost, or, with replica acknowledgements, not yet acknowledged),
            // after which renewals find the key completed and report the
            // lease lost. So after a failed attempt a lost lease does not end
            // the retries before its last deadline: the store's fence judges
            // each one, and a store that recognises its own completion
            // repeated (Redis) answers it held once it is safe.
            if until_deadline.is_zero() || (!self.is_held() && !failed_before) {
                // One last attempt after a failed one, for the same reason.
                if failed_before {
                    match self.try_complete(record).await {
                        Tried::Done(Outcome::LeaseLost) => return self.settle_unknown(record).await,
                        Tried::Done(outcome) => return outcome,
                        Tried::Refused | Tried::Failed => {}
                    }
                }
                tracing::error!("the response could not be stored before the lease ran out");
                return Outcome::LeaseLost;
            }
            tokio::time::sleep(pause.min(until_deadline)).await;
            pause = (pause * 2).min(self.lease_tenth());
            match self.try_complete(record).await {
                // A refusal after an attempt that failed in transit: that
                // attempt may have been applied. The record tells.
                Tried::Done(Outcome::LeaseLost) if failed_before => return self.settle_unknown(record).await,
                Tried::Done(outcome) => return outcome,
                Tried::Refused if !std::ptr::eq(record, processed) => {
                    tracing::error!("the store refused the response for good; keeping a \"processed\" record instead");
                    record = processed;
                    pause = FIRST_PAUSE;
                }
                Tried::Refused | Tried::Failed => failed_before = true,
            }
        }
    }

    /// One attempt at leaving a tombstone. `None` when it failed and may be
    /// tried again (see [`Execution::release`]).
    pub(crate) async fn try_release(&self) -> Option<Outcome> {
        let store = self.lease.store();
        let call = store.release(self.key(), self.token());
        match store_call(store.kind(), "release", self.timeout, call).await {
            Ok(Fence::Held) => Some(Outcome::Executed),
            Ok(_) => Some(self.report(Outcome::LeaseLost)),
            Err(_) => None,
        }
    }

    /// Leaves a tombstone, so that the same request may run again; retried
    /// like a completion while the lease holds.
    pub(crate) async fn release(self) -> Outcome {
        let mut pause = FIRST_PAUSE;
        loop {
            match self.try_release().await {
                Some(outcome) => return outcome,
                None if self.is_held() => {
                    tokio::time::sleep(pause.min(self.lease.deadline().saturating_duration_since(Instant::now())))
                        .await;
                    pause = (pause * 2).min(self.lease_tenth());
                }
                // The lease runs out by itself; the same request may take
                // it over then, exactly as after a release.
                None => return Outcome::Executed,
            }
        }
    }

    /// The longest pause between two attempts.
    fn lease_tenth(&self) -> Duration {
        (self.length / 10).clamp(FIRST_PAUSE, Duration::from_secs(1))
    }

    fn report(&self, outcome: Outcome) -> Outcome {
        if outcome == Outcome::LeaseLost {
            tracing::warn!("the lease was lost before completion; the response was not stored");
        }
        outcome
    }

    /// Whether an earlier attempt that failed in transit stored `sent`.
    async fn settle_unknown(&self, sent: &StoredResponse) -> Outcome {
        let store = self.lease.store();
        match store_call(store.kind(), "get", self.timeout, store.get(self.key())).await {
            Ok(Some(record)) if matches!(&record.state, RecordState::Completed { response, .. } if response == sent) => {
                Outcome::Executed
            }
            _ => self.report(Outcome::LeaseLost),
        }
    }
}
