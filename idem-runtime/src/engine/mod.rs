//! Claim, lease, complete and release: the orchestration every adapter
//! shares (the actix glue today), independent of any web framework.
//!
//! - `lease.rs`: a lease as this process sees it, with a deadline counted
//!   from when the claim was sent;
//! - `keeper.rs`: the process-wide keeper that renews every lease, and
//!   the holder's handle on one (`keeper::Lease`);
//! - `drain.rs`: the count of running executions, for graceful shutdown;
//! - `replay_cache.rs`: the opt-in cache of completed records this process
//!   has seen, looked up before every claim and filled from replays and
//!   completions;
//! - `tx_commit.rs`: the transactional mode, where the work's writes and
//!   the completion commit together in one transaction.
//!
//! An [`Execution`] is a claim this process won. It ends in exactly one of
//! two ways: [`Execution::complete`] (the response is kept, fenced) or
//! [`Execution::release`] (a tombstone: nothing happened, the same request
//! may run again). A completion is retried, at least once a second, until
//! it lands, the store shows the record no longer holds its token, or the
//! record's TTL has passed: the record holds the token through any outage
//! unless another claim takes it over, and the keeper renews the lease all
//! along, so a store that comes back after longer than a lease gets the
//! response rather than a second execution. A release is retried while
//! the lease is confirmed; given up, it lets the lease lapse, which allows
//! the same request to run again just as a release does.

mod drain;
mod held;
pub(crate) mod keeper;
mod lease;
#[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
mod replay_cache;
#[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
mod steps;
#[cfg(feature = "postgres")]
pub(crate) mod tx_commit;
mod waiting;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::drain::Drained;
pub(crate) use self::drain::{Refused, Running, RunningGuard};
pub use self::held::HELD_METRIC;
use self::keeper::Lease;
pub(crate) use self::lease::Standing;
#[cfg(any(feature = "actix", feature = "axum"))]
pub use self::replay_cache::ReplayCache;
pub(crate) use self::replay_cache::Replays;
pub use self::steps::StepError;
pub(crate) use self::steps::Steps;
pub(crate) use self::waiting::claim_until;
use crate::background;
use crate::clock::later;
use crate::fingerprint::Fingerprint;
use crate::observe::{Outcome, store_call, store_call_since};
use crate::record::{RecordState, StoredResponse};
use crate::scope::StorageKey;
use crate::sealing::{self, Keyring, Unopened};
use crate::store::{Attempt, Claim, ClaimTerms, Fence, FencingToken, OnLapse, Step, Store, StoreError};

/// The terms of one claim.
#[derive(Debug, Clone)]
pub(crate) struct Terms {
    /// The lease of an execution, renewed by the keeper.
    pub(crate) lease: Duration,
    /// How long the record lives.
    pub(crate) ttl: Duration,
    /// Longest wait for one store call.
    pub(crate) timeout: Duration,
    /// What a claim does with a lapsed execution of the same request.
    pub(crate) on_lapse: OnLapse,
    /// The claiming route, kept in the record for operators.
    pub(crate) route: Option<Arc<str>>,
}

impl Terms {
    /// The store's terms of the claim.
    fn claim_terms(&self) -> ClaimTerms {
        let terms = ClaimTerms::new(self.lease, self.ttl).on_lapse(self.on_lapse);
        match &self.route {
            Some(route) => terms.route(Arc::clone(route)),
            None => terms,
        }
    }
}

/// What a claim came to.
pub(crate) enum Claimed {
    /// This process owns the key: run the work.
    Acquired(Execution),
    /// Another answer of the store: replay, in flight, mismatch.
    Other(Claim),
    /// A drain has begun: nothing was claimed.
    Draining,
    /// As many executions run as the bound allows: nothing was claimed.
    Overloaded,
    /// The lease keeper has stopped, so nothing would renew a lease:
    /// nothing was claimed.
    KeeperStopped,
}

/// Claims `key`, counting the lease from the moment the claim is sent. The
/// claim is made only if the execution may run: not while draining, past
/// the bound on running executions, or with the lease keeper stopped.
///
/// With `replays`, a replay it holds for this request answers first, as
/// the store's would, whatever the drain, the bound or the keeper (it runs
/// nothing); a replay of the store fills it, and so does the execution's
/// completion.
pub(crate) async fn claim(
    store: &Arc<dyn Store>,
    replays: Option<&Arc<Replays>>,
    key: &StorageKey,
    fingerprint: &Fingerprint,
    terms: &Terms,
    timeout: Duration,
    running: &Arc<Running>,
) -> Result<Claimed, StoreError> {
    if let Some(response) = replays.and_then(|replays| replays.get(key, fingerprint)) {
        return Ok(Claimed::Other(Claim::Replay(response)));
    }
    let entered = match running.enter() {
        Ok(entered) => entered,
        Err(Refused::Draining) => return Ok(Claimed::Draining),
        Err(Refused::Full) => return Ok(Claimed::Overloaded),
    };
    if !keeper::is_running() {
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::error!(
                "the idempotency lease keeper thread has stopped (a panic on it, such as in a tracing layer): \
                 idempotent requests are refused with 503 until the process restarts"
            );
        }
        return Ok(Claimed::KeeperStopped);
    }
    let token = FencingToken::generate();
    let sent = Instant::now();
    let claim_terms = terms.claim_terms();
    let call = store.claim_with(key, fingerprint, token, &claim_terms);
    let claimed = match store_call_since(sent, store.kind(), "claim", timeout, call).await {
        Ok(claimed) => claimed,
        Err(error) => {
            // The claim may have landed and its answer been lost: what it
            // took is released with its token, so that the key does not
            // answer 409 for a whole lease (a store that refused it for
            // good took nothing).
            if !matches!(error, StoreError::Full { .. }) {
                release_unanswered(store, key, token, terms, sent);
            }
            return Err(error);
        }
    };
    if let Some(replays) = replays
        && !matches!(claimed, Claim::Replay(_))
    {
        // Whatever the cache kept for this key is no longer the store's
        // record (another request's claim found it expired, or it went).
        replays.forget(key);
    }
    match claimed {
        Claim::Acquired { token, attempt, steps } => {
            // A claim answered after its lease would have ended (a stalled
            // worker, a slow store) is held by nobody safely: the lease is
            // born lost, and the execution refuses to run (see `is_held`).
            let lease = Lease::hold(Arc::clone(store), key.clone(), token, terms.lease, terms.timeout, sent);
            let execution = Execution {
                lease,
                attempt,
                steps,
                claimed: sent,
                replays: replays.cloned(),
                fingerprint: *fingerprint,
                sealing: None,
                length: terms.lease,
                ttl: terms.ttl,
                timeout: terms.timeout,
                _running: entered.keep(),
            };
            Ok(Claimed::Acquired(execution))
        }
        Claim::Held { newly } => {
            held::seen(store, key, newly);
            Ok(Claimed::Other(Claim::Held { newly }))
        }
        Claim::Replay(response) => {
            if let Some(replays) = replays {
                replays.replayed(key, fingerprint, &response, sent, terms.ttl);
            }
            Ok(Claimed::Other(Claim::Replay(response)))
        }
        other => Ok(Claimed::Other(other)),
    }
}

/// Lost claims whose release is under way (see [`release_unanswered`]).
static UNANSWERED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Most lost claims released at once: beyond, a lost claim is left to
/// lapse with its lease (409 until then), as a store outage makes many.
const MAX_UNANSWERED: usize = 1024;

/// Most tries at releasing one lost claim.
const MAX_UNANSWERED_TRIES: usize = 12;

/// Releases, in the background, what a claim whose answer was lost took,
/// if it landed: tried until the claim's lease would have run out, since
/// the claim may land after a first try (a store that was frozen, another
/// connection). Its token was never handed to a handler, so whatever holds
/// it is safe to release.
fn release_unanswered(store: &Arc<dyn Store>, key: &StorageKey, token: FencingToken, terms: &Terms, sent: Instant) {
    use std::sync::atomic::Ordering;
    if UNANSWERED.fetch_add(1, Ordering::AcqRel) >= MAX_UNANSWERED {
        UNANSWERED.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let (store, key, lease, timeout) = (Arc::clone(store), key.clone(), terms.lease, terms.timeout);
    background::spawn(async move {
        let end = later(sent, lease);
        // Past this, a store that answers "not held" will not see the claim
        // land later on the same path.
        let landed_by = later(sent, timeout.saturating_mul(2));
        let mut pause = FIRST_PAUSE;
        for _ in 0..MAX_UNANSWERED_TRIES {
            // Not through `store_call`: a store that is down fails each
            // try, and each is not worth a log line.
            let released = tokio::time::timeout(timeout, store.release(&key, token)).await;
            let now = Instant::now();
            match released {
                Ok(Ok(Fence::Held)) => {
                    tracing::info!(key = %key.hash_tag(), "released a claim whose answer was lost; the request may run again");
                    break;
                }
                Ok(Ok(_)) if now >= landed_by => break,
                _ => {}
            }
            if now >= end {
                break;
            }
            tokio::time::sleep(pause.min(end - now)).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
        UNANSWERED.fetch_sub(1, Ordering::AcqRel);
    });
}

/// A claim this process won: its lease is kept until it completes or
/// releases, or is dropped.
pub(crate) struct Execution {
    lease: Lease,
    /// Which execution of the key this is.
    attempt: Attempt,
    /// The durable steps recorded before it.
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    steps: Vec<Step>,
    /// When its claim was sent: the record lives `ttl` from about then.
    claimed: Instant,
    /// The replay cache its completion fills, if any.
    replays: Option<Arc<Replays>>,
    /// The request's fingerprint, for the replay cache.
    fingerprint: Fingerprint,
    /// The keys its response and step results are sealed with, if any
    /// (see [`Execution::open_steps`]).
    sealing: Option<Arc<Keyring>>,
    /// The lease's length.
    length: Duration,
    ttl: Duration,
    timeout: Duration,
    _running: RunningGuard,
}

/// Why a won claim's work may not start (see [`Execution::ready`]).
pub(crate) enum NotReady {
    /// Its record was held for an operator while its lease had lapsed: it
    /// is left held, for the operator to settle on what it saw (nothing ran).
    Held,
    /// Its lease could not be confirmed in time, or another execution took
    /// the key over: nothing ran, and the claim is released if it still
    /// holds the record.
    NotRun,
}

/// Who ends an execution with a tombstone, which decides what becomes of a
/// record held for an operator (`on_lapse = "hold"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Releaser {
    /// Its handler, saying that nothing happened (a retryable answer), or
    /// the runtime for a claim no handler ran under: a held record is
    /// released too.
    Handler,
    /// The runtime, for a handler that never said so (a transactional
    /// execution rolled back after a panic or a success): a held record
    /// stays held ([`Store::release_unless_held`]), since a held execution
    /// never runs again by itself.
    Runtime,
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
        &self.lease.state().key
    }

    /// The fencing token of this execution.
    pub(crate) fn token(&self) -> FencingToken {
        self.lease.state().token
    }

    /// Which execution of the key this is.
    pub(crate) fn attempt(&self) -> Attempt {
        self.attempt
    }

    /// Its durable steps, those recorded before it included: results up to
    /// `limit` bytes are recorded.
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) fn steps(&mut self, limit: usize) -> Steps {
        let steps = std::mem::take(&mut self.steps);
        Steps::new(self.lease.shared(), steps, limit, later(self.claimed, self.ttl), self.sealing.clone())
    }

    /// Seals this execution's response and step results with `keyring`
    /// (none: kept in the clear), after opening the step results recorded
    /// before it. A recorded result that does not open is the step's name
    /// and why: the execution must not run (its step would run again).
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) fn open_steps(&mut self, keyring: Option<&Arc<Keyring>>) -> Result<(), (String, Unopened)> {
        let key = &self.lease.state().key;
        for step in &mut self.steps {
            let opened = sealing::open_step(keyring.map(|keyring| &**keyring), key, &step.name, &step.result)
                .map_err(|unopened| (step.name.clone(), unopened))?;
            step.result = opened.into();
        }
        self.sealing = keyring.cloned();
        Ok(())
    }

    /// `response`, sealed if this execution seals (once: a sealed one is
    /// kept as it is).
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) fn sealed(&self, response: StoredResponse) -> StoredResponse {
        match &self.sealing {
            Some(keyring) if sealing::sealed_with(&response).is_none() => {
                sealing::seal_response(keyring, self.key(), &response)
            }
            _ => response,
        }
    }

    /// Whether this process owns the key with a confirmed lease.
    pub(crate) fn is_held(&self) -> bool {
        self.lease.state().is_held()
    }

    /// Whether it may start its work now: its lease confirmed, and, if the
    /// lease lapsed once, its record still its own and not held for an
    /// operator (one read, only after a lapse; see [`Standing`]).
    /// Waits at most a lease for the answer: a request whose store is away
    /// answers 503 rather than wait out the outage before its handler.
    pub(crate) async fn standing(&self) -> Standing {
        self.lease.state().standing(later(Instant::now(), self.length)).await
    }

    /// This execution, once it may start work its record does not know of:
    /// its lease confirmed (its claim may have been answered after the
    /// lease's end), and, if the lease lapsed once, its record still its own
    /// and not held for an operator (see [`Execution::standing`]).
    /// Otherwise nothing runs: a held record is left held, any other claim is
    /// released in the background, so that the same request may run again.
    pub(crate) async fn ready(self) -> Result<Self, NotReady> {
        let standing = if self.is_held() { self.standing().await } else { Standing::Unknown };
        match standing {
            Standing::Owner => Ok(self),
            Standing::Held => Err(NotReady::Held),
            Standing::Lost | Standing::Unknown => {
                background::spawn(async move {
                    let _ = self.release(Releaser::Handler).await;
                });
                Err(NotReady::NotRun)
            }
        }
    }

    /// One attempt at storing `response`. `None` when it failed and may be
    /// tried again (see [`Execution::complete`]).
    pub(crate) async fn try_complete(&self, response: &StoredResponse) -> Tried {
        let store = &self.lease.state().store;
        let sent = Instant::now();
        let call = store.complete(self.key(), self.token(), response, self.ttl);
        match store_call_since(sent, store.kind(), "complete", self.timeout, call).await {
            Ok(Fence::Held) => {
                self.completed(response, sent);
                Tried::Done(Outcome::Executed)
            }
            Ok(_) => Tried::Done(self.report(Outcome::LeaseLost)),
            Err(StoreError::Full { .. }) => Tried::Refused,
            Err(_) => Tried::Failed,
        }
    }

    /// Stores `response` after a first attempt ended as `first`, retrying
    /// failed calls at least once a second until one lands, the store shows
    /// the record no longer holds this execution's token, or the record's
    /// TTL has passed (see the module's docs). If the store refuses the
    /// record for good (too large, a limit), `processed` is stored instead,
    /// so that a retry never runs again.
    pub(crate) async fn complete(self, first: Tried, response: &StoredResponse, processed: &StoredResponse) -> Outcome {
        let (mut record, mut failed_before) = match first {
            Tried::Done(outcome) => return outcome,
            // The caller may have tried `processed` already, and that try
            // may have been applied with its answer lost: a later refusal
            // by the fence is then settled by what the record holds.
            Tried::Refused => (processed, true),
            Tried::Failed => (response, true),
        };
        if matches!(first, Tried::Refused) {
            tracing::error!("the store refused the response for good; keeping a \"processed\" record instead");
        }
        let ends = later(self.claimed, self.ttl);
        let mut pause = FIRST_PAUSE;
        loop {
            // The keeper found the record no longer holding this
            // execution's token: taken over, or completed by an attempt that
            // failed in transit (its answer lost, or, with replica
            // acknowledgements, not yet acknowledged). The record tells.
            if self.lease.state().is_lost() {
                return self.settle_unknown(record).await;
            }
            let now = Instant::now();
            if now >= ends {
                tracing::error!("the response could not be stored before the record's TTL ran out");
                return Outcome::LeaseLost;
            }
            tokio::time::sleep(pause.min(ends - now)).await;
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
        self.try_release_as(Releaser::Handler).await
    }

    /// [`Execution::try_release`] by `releaser`.
    pub(crate) async fn try_release_as(&self, releaser: Releaser) -> Option<Outcome> {
        let store = &self.lease.state().store;
        let call = match releaser {
            Releaser::Handler => store.release(self.key(), self.token()),
            Releaser::Runtime => store.release_unless_held(self.key(), self.token()),
        };
        match store_call(store.kind(), "release", self.timeout, call).await {
            Ok(Fence::Held) => Some(Outcome::Executed),
            Ok(_) if releaser == Releaser::Runtime && self.is_held_for_an_operator().await => {
                tracing::error!("the execution's record is held for an operator; it is left held");
                Some(Outcome::Held)
            }
            Ok(_) => Some(self.report(Outcome::LeaseLost)),
            Err(_) => None,
        }
    }

    /// Whether the record holds this execution's token and is held for an
    /// operator (one read; a failed read says no).
    async fn is_held_for_an_operator(&self) -> bool {
        matches!(self.lease.state().read_standing().await, Ok(Standing::Held))
    }

    /// Leaves a tombstone, so that the same request may run again; retried
    /// like a completion while the lease holds.
    pub(crate) async fn release(self, releaser: Releaser) -> Outcome {
        let mut pause = FIRST_PAUSE;
        loop {
            match self.try_release_as(releaser).await {
                Some(outcome) => return outcome,
                None if self.is_held() => {
                    tokio::time::sleep(
                        pause.min(self.lease.state().deadline().saturating_duration_since(Instant::now())),
                    )
                    .await;
                    pause = (pause * 2).min(self.lease_tenth());
                }
                // The lease runs out by itself; the same request may take
                // it over then, exactly as after a release.
                None => return Outcome::Executed,
            }
        }
    }

    /// Keeps `response`, whose completion sent at `sent` the store
    /// confirmed, in the replay cache if there is one.
    fn completed(&self, response: &StoredResponse, sent: Instant) {
        if let Some(replays) = &self.replays {
            replays.completed(self.key(), &self.fingerprint, response, sent, self.claimed, self.ttl);
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
    pub(crate) async fn settle_unknown(&self, sent: &StoredResponse) -> Outcome {
        let store = &self.lease.state().store;
        match store_call(store.kind(), "get", self.timeout, store.get(self.key())).await {
            Ok(Some(record)) if matches!(&record.state, RecordState::Completed { response, .. } if response == sent) => {
                Outcome::Executed
            }
            _ => self.report(Outcome::LeaseLost),
        }
    }
}
