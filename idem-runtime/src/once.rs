//! Any async operation at most once per key, outside a web framework: a
//! job, a gRPC handler, a command-line tool (§15 of the behaviour
//! contract). The engine is the one `#[idempotent]` and the inbox run on:
//! a claim carrying a fingerprint of the operation's input, a lease kept by
//! the process-wide keeper while the work runs, a fenced completion that
//! stores its output, and for the same key and input a replay of that
//! output instead of a second run.
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_runtime::MemoryStore;
//! use idem_runtime::once::{Once, Ran};
//!
//! let charges = Once::new(MemoryStore::new(), "charges");
//! let charge = |amount: u64| async move { Ok::<_, std::io::Error>(format!("ch_{amount}")) };
//! let first = charges.run("order-17", &1500, |_| charge(1500)).await?;
//! assert_eq!(first, Ran::Executed("ch_1500".to_owned()));
//! // The same key and input again: the first output, the work not run.
//! let again = charges.run("order-17", &1500, |_| charge(1500)).await?;
//! assert_eq!(again, Ran::Replayed("ch_1500".to_owned()));
//! // The same key with another input is refused: nothing runs.
//! assert!(charges.run("order-17", &2500, |_| charge(2500)).await.is_err());
//! # Ok(()) }
//! ```
//!
//! What is kept is the output, serialized as JSON: the work's `Ok`. An
//! `Err` says that nothing happened: the key is released, and the same
//! input may run again (another input still gets
//! [`OnceError::Mismatch`]). A failure that may have had effects is an
//! output like any other (`Ok(Err(declined))`), kept and replayed.
//!
//! A panic in the work, or the caller dropping the future while the work
//! runs, is a crash: the lease lapses, and a later call takes the key over
//! ([`Attempt::Takeover`]), or, with [`OnLapse::Hold`], leaves it to an
//! operator. Pass [`OnceContext::derived_key`] to a downstream service that
//! deduplicates, so that a run repeated after a crash repeats nothing there.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::background;
use crate::engine::{self, Claimed, NotReady, Running, Terms};
use crate::fingerprint::{Fingerprint, RequestParts};
use crate::key::{IdempotencyKey, KeyError};
use crate::observe::Outcome;
use crate::record::StoredResponse;
use crate::scope::{Scope, StorageKey};
use crate::store::{Attempt, Claim, FencingToken, OnLapse, Store, StoreError};

/// The method the storage keys of operations are made with: not an HTTP
/// token (`:`), so no request's key ever meets an operation's, nor a
/// message's (`inbox`).
const OPERATION_METHOD: &str = "idem:operation";

/// The media type of a kept output, and of the input as fingerprinted.
const JSON: &str = "application/json";

/// Runs operations of one kind (its namespace) at most once per key.
///
/// Cloning is cheap: clones share the store and the bound on operations
/// running at once.
#[derive(Clone)]
pub struct Once {
    store: Arc<dyn Store>,
    namespace: Arc<str>,
    terms: Terms,
    wait: Option<Duration>,
    output_limit: usize,
    running: Arc<Running>,
}

impl std::fmt::Debug for Once {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Once")
            .field("store", &self.store.kind())
            .field("namespace", &self.namespace)
            .field("ttl", &self.terms.ttl)
            .field("lease", &self.terms.lease)
            .field("store_timeout", &self.terms.timeout)
            .field("on_lapse", &self.terms.on_lapse)
            .field("wait", &self.wait)
            .field("output_limit", &self.output_limit)
            .finish_non_exhaustive()
    }
}

/// How a call ended: the work ran, or its output was kept from before.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Ran<T> {
    /// This call ran the work; its output is kept for the key.
    Executed(T),
    /// An earlier call with the same key and input ran it: its output.
    Replayed(T),
}

impl<T> Ran<T> {
    /// The output, whichever call ran the work.
    pub fn into_inner(self) -> T {
        match self {
            Self::Executed(output) | Self::Replayed(output) => output,
        }
    }

    /// Whether the output is an earlier call's.
    pub fn is_replayed(&self) -> bool {
        matches!(self, Self::Replayed(_))
    }
}

/// Why a call gives no output. Only [`OnceError::Failed`],
/// [`OnceError::LeaseLost`] and [`OnceError::NotKept`] say that the work
/// ran; every other error comes before it could start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OnceError<E, T = ()> {
    /// The work returned this error: nothing happened, by its word. The key
    /// was released: the same input may run again.
    #[error("the operation failed; the same input may run again")]
    Failed(#[source] E),
    /// The work ran and returned this output, but the lease was lost before
    /// the output was kept (a stall longer than the lease, or another
    /// process took the key over): another call may run it again, or has.
    #[error("the operation ran, but its lease was lost before its output was kept")]
    LeaseLost(T),
    /// The key is not one (1 to 255 visible ASCII characters).
    #[error(transparent)]
    InvalidKey(#[from] KeyError),
    /// The key was used for another input: nothing ran.
    #[error("this key was already used for a different input; use a new key for a new operation")]
    Mismatch,
    /// A call with the same key and input is running (here or in another
    /// process), and this one did not wait (or waited its whole
    /// [`Once::wait`]): nothing ran.
    #[error("an operation with this key is still running")]
    InFlight {
        /// Time left on that call's lease.
        retry_after: Duration,
    },
    /// An earlier call stopped before it finished, and this kind of
    /// operation never runs such a key again by itself
    /// ([`Once::on_lapse`] with [`OnLapse::Hold`]): nothing ran. It waits
    /// for an operator to release or resolve its record.
    #[error("the key's earlier run stopped half way and is held for an operator (record {record})")]
    Held {
        /// The record's id, as the `idem` tool finds it.
        record: String,
    },
    /// The store failed before the work ran: nothing ran.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The claim was answered after its lease would have ended (a stalled
    /// process, a slow store), or the lease could not be confirmed: the work
    /// did not run.
    #[error("the store answered too slowly to hold the key; the operation did not run")]
    NotRun,
    /// The work ran, but its output could not be kept (it does not
    /// serialize as JSON, or is over [`Once::output_limit`]): this call and
    /// every later one with the key get this, never a second run.
    #[error("the operation ran, but its output could not be kept")]
    NotKept,
    /// The key's kept output does not read as this call's output type (the
    /// namespace holds operations of another type): nothing ran.
    #[error("the key's kept output does not read as this operation's output: {0}")]
    Unreadable(#[source] serde_json::Error),
    /// The input does not serialize as JSON: nothing ran.
    #[error("the operation's input does not serialize as JSON: {0}")]
    Input(#[source] serde_json::Error),
    /// The store timeout is above a third of the lease: the keeper could
    /// not renew in time, so nothing is claimed.
    #[error("the store timeout ({timeout:?}) must be at most a third of the lease ({lease:?})")]
    Misconfigured {
        /// The store timeout.
        timeout: Duration,
        /// The lease.
        lease: Duration,
    },
    /// A drain has begun ([`Once::drain`]): nothing ran.
    #[error("operations are draining; this one did not run")]
    Draining,
    /// As many operations run as [`Once::max_running`] allows: nothing ran.
    #[error("too many operations are running; this one did not run")]
    Overloaded,
    /// The process-wide lease keeper has stopped (a panic on its thread):
    /// nothing ran, as no lease could be kept.
    #[error("the idempotency lease keeper has stopped; the operation did not run")]
    KeeperStopped,
}

/// What the work of one call knows about its claim.
#[derive(Debug, Clone)]
pub struct OnceContext {
    key: StorageKey,
    fingerprint: Fingerprint,
    token: FencingToken,
    attempt: Attempt,
}

impl OnceContext {
    /// Which execution of the key this is: a takeover follows a run that
    /// stopped half way.
    pub fn attempt(&self) -> Attempt {
        self.attempt
    }

    /// The fencing token of this call's claim.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The record's id, as the `idem` tool and the logs name it.
    pub fn record(&self) -> &str {
        self.key.record_id()
    }

    /// A stable key derived from the key, the input and `label`: the same
    /// in every run of this operation, different for every other key,
    /// input or label. The idempotency key of a downstream call.
    pub fn derived_key(&self, label: &str) -> String {
        self.key.derive(&self.fingerprint, label)
    }
}

impl Once {
    /// Operations named `namespace` (their keys apart from every other
    /// namespace's) over `store`: kept a day, a lease of 30 s, store calls
    /// of at most 5 s, outputs of at most 1 MiB.
    pub fn new(store: impl Store + 'static, namespace: &str) -> Self {
        Self::from_arc(Arc::new(store), namespace)
    }

    /// [`Once::new`] over a shared store.
    pub fn from_arc(store: Arc<dyn Store>, namespace: &str) -> Self {
        let terms = Terms {
            lease: Duration::from_secs(30),
            ttl: Duration::from_secs(86_400),
            timeout: Duration::from_secs(5),
            on_lapse: OnLapse::Takeover,
            route: Some(format!("operation {namespace}").into()),
        };
        Self { store, namespace: namespace.into(), terms, wait: None, output_limit: 1 << 20, running: Arc::default() }
    }

    /// How long an output is kept and replayed.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.terms.ttl = ttl;
        self
    }

    /// The lease of a running operation, renewed while its work runs.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.terms.lease = lease;
        self
    }

    /// Longest wait for one store call.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.terms.timeout = timeout;
        self
    }

    /// What a call does with an earlier run of its key whose lease lapsed
    /// unfinished (its process crashed or stalled): [`OnLapse::Takeover`]
    /// (the default) runs the work again; [`OnLapse::Hold`] never does by
    /// itself ([`OnceError::Held`]).
    pub fn on_lapse(mut self, policy: OnLapse) -> Self {
        self.terms.on_lapse = policy;
        self
    }

    /// How long a call waits for a run of the same key and input in
    /// progress, for its output (default: not at all,
    /// [`OnceError::InFlight`] at once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Largest output kept, serialized (default 1 MiB): a larger one is
    /// returned to its call, and every later call gets
    /// [`OnceError::NotKept`].
    pub fn output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }

    /// Most operations running at once through this value and its clones
    /// (default 2048): past it a call is refused before its claim
    /// ([`OnceError::Overloaded`]).
    pub fn max_running(mut self, operations: usize) -> Self {
        self.running = Arc::new(Running::with_limit(operations));
        self
    }

    /// Runs `work` once for `key` and `input`: unless a call with them ran
    /// it before (its output, [`Ran::Replayed`]), or is running it now
    /// ([`OnceError::InFlight`], or its output after [`Once::wait`]). The
    /// key with another input is refused ([`OnceError::Mismatch`]).
    ///
    /// The input is fingerprinted as canonical JSON (object members in any
    /// order, any whitespace, are the same input).
    pub async fn run<I, T, E, F, Fut>(&self, key: &str, input: &I, work: F) -> Result<Ran<T>, OnceError<E, T>>
    where
        I: Serialize + ?Sized,
        T: Serialize + DeserializeOwned,
        F: FnOnce(OnceContext) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let (lease, timeout) = (self.terms.lease, self.terms.timeout);
        if timeout.saturating_mul(3) > lease {
            return Err(OnceError::Misconfigured { timeout, lease });
        }
        let key = IdempotencyKey::natural(key)?;
        let input = serde_json::to_vec(input).map_err(OnceError::Input)?;
        let storage_key = StorageKey::new(Scope::Route, None, OPERATION_METHOD, &self.namespace, &key);
        let fingerprint = Fingerprint::of(&RequestParts {
            method: OPERATION_METHOD,
            path: &self.namespace,
            query: "",
            headers: &[],
            host: None,
            content_type: Some(JSON),
            body: &input,
        });
        let until = self.wait.map(|wait| tokio::time::Instant::from_std(crate::clock::later(Instant::now(), wait)));
        let claimed =
            engine::claim_until(&self.store, None, &storage_key, &fingerprint, &self.terms, &self.running, until)
                .await?;
        let execution = match claimed {
            Claimed::Acquired(execution) => execution,
            Claimed::Other(Claim::Replay(stored)) => return replayed(&stored).map(Ran::Replayed),
            Claimed::Other(Claim::Mismatch) => return Err(OnceError::Mismatch),
            Claimed::Other(Claim::InFlight { retry_after }) => return Err(OnceError::InFlight { retry_after }),
            Claimed::Other(Claim::Held { .. }) => {
                return Err(OnceError::Held { record: storage_key.record_id().to_owned() });
            }
            Claimed::Other(other) => {
                tracing::error!(?other, "the store answered a claim in a way this version does not know");
                return Err(OnceError::NotRun);
            }
            Claimed::Draining => return Err(OnceError::Draining),
            Claimed::Overloaded => return Err(OnceError::Overloaded),
            Claimed::KeeperStopped => return Err(OnceError::KeeperStopped),
        };
        let execution = match execution.ready().await {
            Ok(execution) => execution,
            Err(NotReady::Held) => return Err(OnceError::Held { record: storage_key.record_id().to_owned() }),
            Err(NotReady::NotRun) => return Err(OnceError::NotRun),
        };
        let context =
            OnceContext { key: storage_key, fingerprint, token: execution.token(), attempt: execution.attempt() };
        let result = work(context).await;
        let kept = match &result {
            Ok(output) => Some(self.kept(output)),
            Err(_) => None,
        };
        // From here on the outcome is settled on the keeper's runtime: a
        // caller that stops waiting does not leave a finished run
        // unrecorded.
        let settled = background::spawn_joined(async move {
            match kept {
                Some(kept) => {
                    let first = execution.try_complete(&kept).await;
                    execution.complete(first, &kept, &not_kept()).await
                }
                None => execution.release(engine::Releaser::Handler).await,
            }
        });
        let outcome = settled.await.unwrap_or(Outcome::LeaseLost);
        match result {
            Ok(output) if outcome == Outcome::Executed => Ok(Ran::Executed(output)),
            Ok(output) => Err(OnceError::LeaseLost(output)),
            Err(error) => Err(OnceError::Failed(error)),
        }
    }

    /// Stops new calls and waits up to `timeout` for the running ones.
    pub async fn drain(&self, timeout: Duration) -> crate::Drained {
        self.running.drain(timeout).await
    }

    /// What `output` is kept as: its JSON, or the record that says it could
    /// not be kept.
    fn kept<T: Serialize>(&self, output: &T) -> StoredResponse {
        match serde_json::to_vec(output) {
            Ok(json) if json.len() <= self.output_limit => {
                StoredResponse { status: 200, headers: vec![("content-type".into(), JSON.into())], body: json.into() }
            }
            Ok(json) => {
                tracing::error!(
                    bytes = json.len(),
                    limit = self.output_limit,
                    "an operation's output is over the output limit; later calls with its key get NotKept"
                );
                not_kept()
            }
            Err(error) => {
                tracing::error!(%error, "an operation's output does not serialize; later calls with its key get NotKept");
                not_kept()
            }
        }
    }
}

/// The record of an output that could not be kept: the operation ran.
fn not_kept() -> StoredResponse {
    StoredResponse { status: 500, headers: Vec::new(), body: bytes::Bytes::new() }
}

/// The output a kept record holds.
fn replayed<T: DeserializeOwned, E>(stored: &StoredResponse) -> Result<T, OnceError<E, T>> {
    if stored.status != 200 {
        return Err(OnceError::NotKept);
    }
    serde_json::from_slice(&stored.body).map_err(OnceError::Unreadable)
}

#[cfg(all(test, feature = "memory"))]
mod tests;
