//! The inbox: a message consumer's side of "exactly once" (§10 of the
//! behaviour contract). Queues deliver at least once; [`Inbox::process`]
//! runs the work of one message id at most once per TTL, on any store, with
//! the engine the HTTP path uses: a claim, a lease kept by the process-wide
//! keeper, then a fenced completion, or a release (a tombstone) when the
//! work fails so that a later delivery runs it.
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_runtime::MemoryStore;
//! use idem_runtime::inbox::{Delivery, Inbox};
//!
//! let inbox = Inbox::new(MemoryStore::new(), "order-notifier");
//! match inbox.process("evt_1", |_| async { Ok::<_, std::io::Error>("sent") }).await? {
//!     Delivery::Processed(sent) => { /* acknowledge the message */ }
//!     Delivery::Duplicate => { /* processed before: acknowledge it */ }
//!     Delivery::InProgress { .. } => { /* another consumer has it: leave it for later */ }
//! }
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::background;
use crate::engine::{self, Claimed, Execution, NotReady, Terms};
use crate::fingerprint::{Fingerprint, RequestParts};
use crate::key::{IdempotencyKey, KeyError};
use crate::observe::Outcome;
use crate::record::StoredResponse;
use crate::scope::{Scope, StorageKey};
use crate::store::{Attempt, Claim, FencingToken, OnLapse, Store, StoreError};

#[cfg(feature = "postgres")]
mod in_tx;

/// The method the storage keys of messages are made with: no HTTP request
/// can have it, so a message id never meets an HTTP key.
/// Not an HTTP token (`:`), so no request can carry it.
const MESSAGE_METHOD: &str = "idem:message";

/// Processes messages by id, at most once per TTL, for one consumer.
#[derive(Clone)]
pub struct Inbox {
    store: Arc<dyn Store>,
    consumer: Arc<str>,
    terms: Terms,
    running: Arc<engine::Running>,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox").field("store", &self.store.kind()).field("consumer", &self.consumer).finish()
    }
}

/// What became of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Delivery<T> {
    /// This delivery ran the work, and its completion is recorded.
    Processed(T),
    /// The message was processed before: acknowledge it, do nothing.
    Duplicate,
    /// Another delivery of it is being processed right now (here or in
    /// another process): leave this one for later, do not acknowledge it.
    InProgress {
        /// Time left on that delivery's lease.
        retry_after: Duration,
    },
}

/// Why a delivery could not be settled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboxError<E, T = ()> {
    /// The work failed. Its claim was released: a later delivery runs it
    /// again. The work must not have had effects it cannot repeat.
    #[error("processing the message failed; a later delivery will run it again")]
    Failed(#[source] E),
    /// The message id is not a key (1 to 255 visible ASCII characters).
    #[error(transparent)]
    InvalidId(#[from] KeyError),
    /// The store failed before the work ran: nothing ran.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The work ran and returned this value, but the lease was lost before
    /// its completion was recorded (a stall longer than the lease): another
    /// delivery may run it again, or has. Acknowledge the message; use
    /// [`MessageContext::derived_key`] for downstream calls so that a second
    /// run repeats none of them.
    #[error("the message was processed, but its lease was lost before that was recorded")]
    LeaseLost(T),
    /// The claim was answered after its lease would have ended (a stalled
    /// process, a slow store): the work did not run. Do not acknowledge.
    #[error("the store answered too slowly to hold the message; it was not processed")]
    NotRun,
    /// The id's record is not this inbox's (another version's record, or
    /// a collision): nothing ran. Do not acknowledge; investigate.
    #[error("the message id's record belongs to something else; the message was not processed")]
    Conflict,
    /// The store timeout is above a third of the lease: the keeper could
    /// not renew in time, so nothing is claimed.
    #[error("the inbox's store timeout ({timeout:?}) must be at most a third of its lease ({lease:?})")]
    Misconfigured {
        /// The store timeout.
        timeout: Duration,
        /// The lease.
        lease: Duration,
    },
    /// [`Inbox::process_in_tx`]: the work returned, but its transaction was
    /// not committed (the lease was lost, a statement of the work had
    /// failed, the database refused or did not answer the `COMMIT`).
    /// Nothing of the work was kept, unless an unanswered `COMMIT` went
    /// through (the next delivery then finds the message processed). Do
    /// not acknowledge: a later delivery runs it, or reports it done (or,
    /// under [`OnLapse::Hold`], held, if it was held for an operator while
    /// this one's lease had lapsed).
    #[error("the message's transaction was not committed; a later delivery will run it again")]
    NotCommitted,
    /// [`Inbox::process_in_tx`] on a store that is not a `PostgresStore`:
    /// nothing ran.
    #[error("the transactional inbox needs a PostgresStore, not the {store} store")]
    NotPostgres {
        /// The inbox's store.
        store: &'static str,
    },
    /// A drain has begun ([`Inbox::drain`]): nothing ran.
    #[error("the inbox is draining; the message was not processed")]
    Draining,
    /// As many deliveries are being processed as [`Inbox::max_running`]
    /// allows: nothing ran. Do not acknowledge; a later delivery runs it.
    #[error("too many messages are being processed; the message was not processed")]
    Overloaded,
    /// The process-wide lease keeper has stopped (a panic on its thread):
    /// nothing ran, as no lease could be kept. Do not acknowledge.
    #[error("the idempotency lease keeper has stopped; the message was not processed")]
    KeeperStopped,
    /// An earlier delivery stopped before it finished, and this inbox never
    /// runs such a message again by itself ([`Inbox::on_lapse`] with
    /// [`OnLapse::Hold`]): nothing ran. It waits for an operator to release
    /// or resolve its record (`idem inspect <record>`); do not acknowledge
    /// it, or move it to a dead-letter queue.
    #[error("the message's earlier delivery stopped half way and is held for an operator (record {record})")]
    Held {
        /// The record's id, as the `idem` tool finds it.
        record: String,
    },
}

/// What the work of one delivery knows about it.
#[derive(Debug, Clone)]
pub struct MessageContext {
    key: StorageKey,
    token: FencingToken,
    attempt: Attempt,
}

impl MessageContext {
    /// Which execution of the message this is: a takeover follows a
    /// delivery that stopped half way.
    pub fn attempt(&self) -> Attempt {
        self.attempt
    }

    /// The fencing token of this delivery's claim.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// A stable key derived from the message and `label`, the same in
    /// every delivery: the idempotency key of a downstream call.
    pub fn derived_key(&self, label: &str) -> String {
        self.key.derive(&message_fingerprint(&self.key), label)
    }
}

impl Inbox {
    /// An inbox for `consumer` (its ids apart from every other consumer's)
    /// over `store`: a day of memory, a lease of 30 s, store calls of 5 s.
    pub fn new(store: impl Store + 'static, consumer: &str) -> Self {
        Self::from_arc(Arc::new(store), consumer)
    }

    /// [`Inbox::new`] over a shared store.
    pub fn from_arc(store: Arc<dyn Store>, consumer: &str) -> Self {
        let terms = Terms {
            lease: Duration::from_secs(30),
            ttl: Duration::from_secs(86_400),
            timeout: Duration::from_secs(5),
            on_lapse: OnLapse::Takeover,
            route: Some(format!("message {consumer}").into()),
        };
        Self { store, consumer: consumer.into(), terms, running: Arc::default() }
    }

    /// How long a processed id is remembered.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.terms.ttl = ttl;
        self
    }

    /// The lease of a delivery in progress, renewed while the work runs.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.terms.lease = lease;
        self
    }

    /// Longest wait for one store call.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.terms.timeout = timeout;
        self
    }

    /// What a delivery does with an earlier one whose lease lapsed
    /// unfinished (its consumer crashed or stalled): [`OnLapse::Takeover`]
    /// (the default) runs the work again; [`OnLapse::Hold`] never does by
    /// itself: the delivery is refused with [`InboxError::Held`] until an
    /// operator releases or resolves the record.
    pub fn on_lapse(mut self, policy: OnLapse) -> Self {
        self.terms.on_lapse = policy;
        self
    }

    /// Most deliveries processed at once by this inbox and its clones
    /// (default 2048): past it a delivery is refused before its claim
    /// ([`InboxError::Overloaded`]).
    pub fn max_running(mut self, deliveries: usize) -> Self {
        self.running = Arc::new(engine::Running::with_limit(deliveries));
        self
    }

    /// Runs `work` for message `id` unless it was processed or is being
    /// processed. `Ok(value)` completes the message; `Err` releases it for
    /// a later delivery ([`InboxError::Failed`]).
    ///
    /// Dropping the returned future while the work runs is a crash: the
    /// lease lapses and a later delivery takes the message over
    /// ([`Attempt::Takeover`]). Once the work has returned, its completion
    /// (or release) finishes on the keeper's runtime even if this future is
    /// dropped. A panic in the work is a crash too.
    pub async fn process<T, E, F, Fut>(&self, id: &str, work: F) -> Result<Delivery<T>, InboxError<E, T>>
    where
        F: FnOnce(MessageContext) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let (execution, context) = match self.start(id).await {
            Ok(started) => started,
            Err(skipped) => return skipped,
        };
        let token = execution.token();
        let result = work(context).await;
        // From here on the outcome is settled on the keeper's runtime: a
        // caller that stops waiting (a timeout, a shutdown) does not leave
        // a finished work unrecorded.
        let succeeded = result.is_ok();
        let settled = background::spawn_joined(async move {
            if succeeded {
                // The record names its execution: a retry that finds it
                // after a failed attempt knows it is its own.
                let done = processed(token);
                let first = execution.try_complete(&done).await;
                execution.complete(first, &done, &done).await
            } else {
                execution.release(engine::Releaser::Handler).await
            }
        });
        let outcome = settled.await.unwrap_or(Outcome::LeaseLost);
        match result {
            Ok(value) if outcome == Outcome::Executed => Ok(Delivery::Processed(value)),
            Ok(value) => Err(InboxError::LeaseLost(value)),
            Err(error) => Err(InboxError::Failed(error)),
        }
    }

    /// Claims message `id`: the execution and the work's context when this
    /// delivery is to run it; otherwise what became of the delivery.
    async fn start<T, E>(
        &self,
        id: &str,
    ) -> Result<(Execution, MessageContext), Result<Delivery<T>, InboxError<E, T>>> {
        let Terms { lease, timeout, .. } = &self.terms;
        let (lease, timeout) = (*lease, *timeout);
        if timeout.saturating_mul(3) > lease {
            return Err(Err(InboxError::Misconfigured { timeout, lease }));
        }
        let natural = IdempotencyKey::natural(id).map_err(|error| Err(InboxError::InvalidId(error)))?;
        let key = StorageKey::new(Scope::Route, None, MESSAGE_METHOD, &self.consumer, &natural);
        let fingerprint = message_fingerprint(&key);
        let claimed = engine::claim(&self.store, None, &key, &fingerprint, &self.terms, timeout, &self.running)
            .await
            .map_err(|error| Err(InboxError::Store(error)))?;
        let execution = match claimed {
            Claimed::Acquired(execution) => execution,
            Claimed::Other(Claim::InFlight { retry_after }) => return Err(Ok(Delivery::InProgress { retry_after })),
            Claimed::Other(Claim::Replay(_)) => return Err(Ok(Delivery::Duplicate)),
            Claimed::Other(Claim::Held { .. }) => {
                return Err(Err(InboxError::Held { record: key.record_id().to_owned() }));
            }
            Claimed::Other(_) => return Err(Err(InboxError::Conflict)),
            Claimed::Draining => return Err(Err(InboxError::Draining)),
            Claimed::Overloaded => return Err(Err(InboxError::Overloaded)),
            Claimed::KeeperStopped => return Err(Err(InboxError::KeeperStopped)),
        };
        // Its lease confirmed, and its record still its own (see `ready`).
        let execution = match execution.ready().await {
            Ok(execution) => execution,
            Err(NotReady::Held) => return Err(Err(InboxError::Held { record: key.record_id().to_owned() })),
            Err(NotReady::NotRun) => return Err(Err(InboxError::NotRun)),
        };
        let context = MessageContext { key, token: execution.token(), attempt: execution.attempt() };
        Ok((execution, context))
    }

    /// Stops new deliveries and waits up to `timeout` for the running ones.
    pub async fn drain(&self, timeout: Duration) -> crate::Drained {
        self.running.drain(timeout).await
    }
}

/// A message's fingerprint: its storage key alone, so that every delivery
/// of one id is "the same request".
fn message_fingerprint(key: &StorageKey) -> Fingerprint {
    Fingerprint::of(&RequestParts {
        method: MESSAGE_METHOD,
        path: key.as_str(),
        query: "",
        headers: &[],
        host: None,
        content_type: None,
        body: b"",
    })
}

/// What a processed message leaves: the fact, and the execution's token.
fn processed(token: FencingToken) -> StoredResponse {
    StoredResponse { status: 200, headers: Vec::new(), body: token.to_hex().into() }
}
