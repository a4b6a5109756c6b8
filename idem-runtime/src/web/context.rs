//! The execution context extractor: what a handler may know of the claim
//! it runs under (§8 of the behaviour contract).
//!
//! Extractors run before the claim (so that a failing one leaves no
//! trace); the context only exists after it. The extractor therefore hands
//! the runtime an empty slot through the request's extensions, and the
//! runtime fills it once the claim is won, before the handler starts.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::problem::{ProblemError, ProblemKind};
use crate::engine::{Execution, StepError, Steps};
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::scope::StorageKey;
use crate::store::{Attempt, FencingToken, Step};

/// Put in the request's extensions by the runtime before the handler's
/// extractors run: the request is served by `#[idempotent]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Annotated {
    /// With an idempotency key: the handler runs under a claim.
    Keyed,
    /// Without one (`required = false`): the handler runs as if not annotated.
    Keyless,
}

/// The execution a handler runs as, under an idempotency key: take it as an
/// extractor (actix-web and axum alike).
///
/// ```
/// # #[cfg(feature = "actix")] {
/// use actix_web::{HttpResponse, post};
/// use idem_runtime::{ExecutionContext, idempotent};
///
/// #[idempotent]
/// #[post("/payments")]
/// async fn pay(execution: ExecutionContext) -> HttpResponse {
///     // The same in every execution of this key, a retry after a crash
///     // included: the provider charges once per derived key.
///     let provider_key = execution.derived_key("charge");
///     # let _ = provider_key;
///     HttpResponse::Created().finish()
/// }
/// # }
/// ```
///
/// It is filled after the claim is won, before the handler starts. In a
/// handler without `#[idempotent]` the extractor fails with a 500 problem
/// (`not-configured`); on a request without a key (`required = false`) it
/// fails too: take `Option<ExecutionContext>` there.
#[derive(Clone)]
pub struct ExecutionContext {
    data: Arc<OnceLock<Context>>,
}

/// What the runtime fills in after the claim.
pub(crate) struct Context {
    key_hash: String,
    storage_key: StorageKey,
    fingerprint: Fingerprint,
    token: FencingToken,
    attempt: Attempt,
    steps: Steps,
}

/// The slot an [`ExecutionContext`] extractor left for the runtime.
#[derive(Clone)]
pub(crate) struct PendingContext(Arc<OnceLock<Context>>);

impl PendingContext {
    /// A new slot, and the context an extractor hands its handler.
    pub(crate) fn new() -> (Self, ExecutionContext) {
        let data = Arc::new(OnceLock::new());
        (Self(Arc::clone(&data)), ExecutionContext { data })
    }

    /// The context of this slot, for one more extraction of it (a custom
    /// extractor may take one too).
    pub(crate) fn context(&self) -> ExecutionContext {
        ExecutionContext { data: Arc::clone(&self.0) }
    }

    /// Fills the slot, once the claim is won. Step results up to `limit`
    /// bytes are recorded.
    pub(crate) fn fill(
        self,
        key: &IdempotencyKey,
        storage_key: &StorageKey,
        fingerprint: &Fingerprint,
        execution: &mut Execution,
        limit: usize,
    ) {
        let Self(slot) = self;
        let context = Context {
            key_hash: key.short_hash(),
            storage_key: storage_key.clone(),
            fingerprint: *fingerprint,
            token: execution.token(),
            attempt: execution.attempt(),
            steps: execution.steps(limit),
        };
        // Filled once per request: the claim is won once.
        let _ = slot.set(context);
    }
}

impl ExecutionContext {
    fn context(&self) -> &Context {
        // The runtime fills the slot before it calls the handler, and the
        // extractor exists only inside an annotated handler's request.
        self.data.get().expect("idem_runtime::ExecutionContext read before its claim was won")
    }

    /// A short hash of the idempotency key (12 hex digits), for logs: never
    /// the key itself.
    pub fn key_hash(&self) -> &str {
        &self.context().key_hash
    }

    /// The fencing token of this execution: it owns the key while its
    /// lease holds.
    pub fn token(&self) -> FencingToken {
        self.context().token
    }

    /// Which execution of the key this is: the first, one after a release,
    /// or a takeover of an execution whose lease ran out. Whatever it says,
    /// an earlier execution may have had effects outside the store (a
    /// released one rolled back only what it wrote in its `Tx`): reach
    /// downstream services with [`ExecutionContext::derived_key`].
    pub fn attempt(&self) -> Attempt {
        self.context().attempt
    }

    /// A stable key derived from the storage key (scope, subject, route,
    /// idempotency key), the request's fingerprint and `label`: 64 hex
    /// digits, the same in every execution of this request under this key,
    /// different for every other key, request or label (a key reused for
    /// another request after its TTL gets other derived keys).
    ///
    /// Pass it as the idempotency key of a downstream call (a payment
    /// provider's `Idempotency-Key`): an execution repeated after a lost
    /// lease then never repeats the downstream effect. Use one label per
    /// distinct downstream call (`"charge"`, `"refund"`).
    pub fn derived_key(&self, label: &str) -> String {
        let context = self.context();
        context.storage_key.derive(&context.fingerprint, label)
    }
}

impl ExecutionContext {
    /// Runs `work` once per key, as the durable step `name` (§8 of the
    /// behaviour contract): its result is serialized (JSON) and recorded in
    /// the key's record, fenced by this execution's token, before this
    /// returns it. An execution that takes the key over after a crash gets
    /// the recorded result back without running `work` again; only the
    /// steps that never finished run.
    ///
    /// ```
    /// # #[cfg(feature = "actix")] {
    /// use actix_web::{HttpResponse, post};
    /// use idem_runtime::{ExecutionContext, idempotent};
    /// # async fn provider_charge(_key: &str, _cents: u64) -> String { "ch_1".into() }
    ///
    /// #[idempotent]
    /// #[post("/payments")]
    /// async fn pay(execution: ExecutionContext) -> Result<HttpResponse, idem_runtime::StepError> {
    ///     // The provider deduplicates by the derived key too: a crash between
    ///     // its charge and the step's record runs the step again.
    ///     let key = execution.derived_key("charge");
    ///     let charge: String = execution.step("charge", provider_charge(&key, 500)).await?;
    ///     Ok(HttpResponse::Created().json(charge))
    /// }
    /// # }
    /// ```
    ///
    /// Give each step of a handler its own name (up to
    /// [`Step::MAX_NAME_BYTES`]) and run them one after another. The
    /// result is bounded by the stored-response limit. A step cannot make
    /// its effect and its record one: a crash between them runs the step
    /// again, so a step that calls a provider passes it
    /// [`derived_key`](ExecutionContext::derived_key). In the
    /// transactional mode the record is written outside the handler's
    /// transaction (a rollback does not undo the step's effect).
    ///
    /// Errors ([`StepError`], answered as a 500 problem if returned from the
    /// handler): the execution lost its key (stop: another one owns it),
    /// the result could not be recorded, or a recorded result does not read
    /// back as `T`.
    pub async fn step<T, F>(&self, name: &str, work: F) -> Result<T, StepError>
    where
        F: Future<Output = T>,
        T: Serialize + DeserializeOwned,
    {
        check_name(name)?;
        if let Some(recorded) = self.context().steps.recorded(name) {
            return self.read_back(name, &recorded);
        }
        self.context().steps.confirmed(name).await?;
        let result = work.await;
        self.keep(name, result).await
    }

    /// [`ExecutionContext::step`] for a step that may find that nothing
    /// happened: an `Ok` result is recorded (and handed back to later
    /// executions) as `step` records any result; an `Err` is returned as it
    /// is and **not** recorded, so the next execution runs the step again.
    /// Return `Err` only when the step had no effect (a provider that
    /// refused before charging, a connection never made); an effect whose
    /// outcome is a failure (a declined card, a timeout after charging) is
    /// an `Ok` worth recording.
    ///
    /// ```
    /// # #[cfg(feature = "actix")] {
    /// use actix_web::{HttpResponse, post};
    /// use idem_runtime::{ExecutionContext, MarkRetryable, idempotent};
    /// # #[derive(Debug)] struct Unreachable;
    /// # async fn provider_charge(_key: &str) -> Result<String, Unreachable> { Ok("ch_1".into()) }
    ///
    /// #[idempotent]
    /// #[post("/payments")]
    /// async fn pay(execution: ExecutionContext) -> Result<HttpResponse, idem_runtime::StepError> {
    ///     let key = execution.derived_key("charge");
    ///     match execution.try_step("charge", provider_charge(&key)).await? {
    ///         Ok(charge) => Ok(HttpResponse::Created().json(charge)),
    ///         // Nothing happened and nothing was recorded: the same request may run again.
    ///         Err(Unreachable) => Ok(HttpResponse::ServiceUnavailable().finish().retryable()),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn try_step<T, E, F>(&self, name: &str, work: F) -> Result<Result<T, E>, StepError>
    where
        F: Future<Output = Result<T, E>>,
        T: Serialize + DeserializeOwned,
    {
        check_name(name)?;
        if let Some(recorded) = self.context().steps.recorded(name) {
            return self.read_back(name, &recorded).map(Ok);
        }
        self.context().steps.confirmed(name).await?;
        match work.await {
            Ok(result) => self.keep(name, result).await.map(Ok),
            Err(error) => Ok(Err(error)),
        }
    }

    /// A recorded result of step `name`, read back.
    fn read_back<T: DeserializeOwned>(&self, name: &str, recorded: &[u8]) -> Result<T, StepError> {
        tracing::info!(step = name, "durable step recorded by an earlier execution: not run again");
        serde_json::from_slice(recorded).map_err(|source| StepError::Unreadable { name: name.to_owned(), source })
    }

    /// Records `result` as step `name`, and hands it back.
    async fn keep<T: Serialize>(&self, name: &str, result: T) -> Result<T, StepError> {
        let encoded = serde_json::to_vec(&result)
            .map_err(|source| StepError::Unserializable { name: name.to_owned(), source })?;
        self.context().steps.record(Step { name: name.to_owned(), result: encoded.into() }).await?;
        Ok(result)
    }

    /// How many durable steps are recorded for this key, those of earlier
    /// executions included.
    pub fn steps_recorded(&self) -> usize {
        self.context().steps.count()
    }
}

/// A step's name: 1 to [`Step::MAX_NAME_BYTES`] bytes, no control
/// characters (every store keeps it as text).
fn check_name(name: &str) -> Result<(), StepError> {
    if name.is_empty() || name.len() > Step::MAX_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(StepError::InvalidName(name.len()));
    }
    Ok(())
}

impl fmt::Debug for ExecutionContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.data.get() {
            Some(context) => f
                .debug_struct("ExecutionContext")
                .field("key", &format_args!("#{}", context.key_hash))
                .field("token", &context.token)
                .field("attempt", &context.attempt)
                .finish(),
            None => f.write_str("ExecutionContext(<before the claim>)"),
        }
    }
}

/// Why a request that is not served under a key has no execution context.
pub(crate) fn not_in_a_keyed_request(annotated: Option<Annotated>) -> ProblemError {
    match annotated {
        Some(Annotated::Keyless) => ProblemError::new(
            ProblemKind::NotConfigured,
            "this request has no idempotency key (the route has required = false), so it has no execution \
             context; take Option<ExecutionContext> in this handler",
        ),
        _ => ProblemError::new(
            ProblemKind::NotConfigured,
            "idem_runtime::ExecutionContext is only available in a handler annotated with #[idempotent]",
        ),
    }
}
