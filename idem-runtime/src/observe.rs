//! Metrics (through the `metrics` facade) and store-call timing.

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

use metrics::{Key, Label, Level, Metadata};

use crate::store::StoreError;

/// Counter of idempotent requests, labelled `outcome` and `route`.
pub const REQUESTS_METRIC: &str = "idem_requests_total";
/// Histogram of store call latency in seconds, labelled `op` and `store`.
pub const STORE_LATENCY_METRIC: &str = "idem_store_call_seconds";
/// Gauge of the executions running in the process: claimed and not yet
/// completed or released, those whose client left and those whose
/// completion is still being retried included.
pub const RUNNING_METRIC: &str = "idem_executions_running";

/// How an idempotent request ended, as counted in [`REQUESTS_METRIC`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The handler ran.
    Executed,
    /// A stored response was replayed.
    Replayed,
    /// The same request was still in flight (409).
    InFlight,
    /// The key was reused for a different request (422).
    Mismatch,
    /// Refused before any store call: bad key, no subject, body too large,
    /// extractor failure, no configuration.
    Rejected,
    /// The store failed (503 before execution, or a failed completion).
    StoreError,
    /// The handler finished after its lease was lost; nothing was stored.
    LeaseLost,
    /// Refused before the claim (503): as many executions ran in the
    /// process as its bound allows.
    Overloaded,
    /// The execution lapsed unfinished on a route that holds such
    /// executions (409 `execution-held`).
    Held,
}

impl Outcome {
    /// Every outcome, in the order of their declaration.
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) const ALL: [Outcome; 9] = [
        Self::Executed,
        Self::Replayed,
        Self::InFlight,
        Self::Mismatch,
        Self::Rejected,
        Self::StoreError,
        Self::LeaseLost,
        Self::Overloaded,
        Self::Held,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::Replayed => "replayed",
            Self::InFlight => "in_flight",
            Self::Mismatch => "mismatch",
            Self::Rejected => "rejected",
            Self::StoreError => "store_error",
            Self::LeaseLost => "lease_lost",
            Self::Overloaded => "overloaded",
            Self::Held => "held",
        }
    }
}

/// The span the current request runs in: none when no subscriber was ever
/// set (no span can be seen then, and looking it up costs a thread-local
/// lookup on every call).
pub(crate) fn current_span() -> tracing::Span {
    if tracing::dispatcher::has_been_set() { tracing::Span::current() } else { tracing::Span::none() }
}

/// Counts one outcome for `route` and records it on the current span.
#[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
pub(crate) fn count(route: &str, outcome: Outcome) {
    metrics::counter!(REQUESTS_METRIC, "outcome" => outcome.as_str(), "route" => route.to_owned()).increment(1);
    current_span().record("outcome", outcome.as_str());
}

/// [`count`] with the labels made once for its route and outcome: no
/// allocation per request.
#[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
pub(crate) fn count_labelled(labels: &'static [Label], outcome: Outcome) {
    let key = Key::from_static_labels(REQUESTS_METRIC, labels);
    metrics::with_recorder(|recorder| recorder.register_counter(&key, &METADATA)).increment(1);
    current_span().record("outcome", outcome.as_str());
}

/// The metadata of this crate's metrics, as its macros would give them.
static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Most pairs of a store call's labels kept (see [`store_labels`]); past
/// it, each call makes its own.
const STORE_LABELS: usize = 64;

/// A store call's labels, by the addresses and lengths of its operation's
/// and store's names (both `'static`).
type KeptLabels = Vec<([usize; 4], &'static [Label])>;

/// Every pair of labels made, for the process (leaked: at most
/// [`STORE_LABELS`] of them).
static STORE_LABEL_PAIRS: std::sync::Mutex<KeptLabels> = std::sync::Mutex::new(Vec::new());

thread_local! {
    /// This thread's copy of the pairs it used, looked up without a lock.
    static KEPT_STORE_LABELS: std::cell::RefCell<KeptLabels> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The labels `op` and `store` of a store call's latency, made once for
/// the process.
fn store_labels(op: &'static str, store: &'static str) -> Option<&'static [Label]> {
    let id = [op.as_ptr() as usize, op.len(), store.as_ptr() as usize, store.len()];
    let find = |kept: &KeptLabels| kept.iter().find(|(kept, _)| *kept == id).map(|(_, labels)| *labels);
    if let Some(labels) = KEPT_STORE_LABELS.with_borrow(find) {
        return Some(labels);
    }
    let labels = {
        let mut pairs = STORE_LABEL_PAIRS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match find(&pairs) {
            Some(labels) => labels,
            None if pairs.len() < STORE_LABELS => {
                let labels: &'static [Label] =
                    Box::leak(Box::new([Label::from_static_parts("op", op), Label::from_static_parts("store", store)]));
                pairs.push((id, labels));
                labels
            }
            None => return None,
        }
    };
    KEPT_STORE_LABELS.with_borrow_mut(|kept| kept.push((id, labels)));
    Some(labels)
}

/// Records the latency of one store call.
fn record_latency(op: &'static str, store: &'static str, seconds: f64) {
    match store_labels(op, store) {
        Some(labels) => {
            let key = Key::from_static_labels(STORE_LATENCY_METRIC, labels);
            metrics::with_recorder(|recorder| recorder.register_histogram(&key, &METADATA)).record(seconds);
        }
        None => metrics::histogram!(STORE_LATENCY_METRIC, "op" => op, "store" => store).record(seconds),
    }
}

/// Runs one store call with the configured timeout, recording its latency.
pub(crate) async fn store_call<T>(
    store: &'static str,
    op: &'static str,
    timeout: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    store_call_since(Instant::now(), store, op, timeout, call).await
}

/// [`store_call`] for a call whose caller read the clock just before
/// making it (`started`): one clock read less.
pub(crate) async fn store_call_since<T>(
    started: Instant,
    store: &'static str,
    op: &'static str,
    timeout: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let mut call = std::pin::pin!(call);
    // A store that answers at once (the memory store) needs no timer.
    let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
    let result = match first {
        Poll::Ready(result) => result,
        Poll::Pending => match tokio::time::timeout(timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout { store, after: timeout }),
        },
    };
    record_latency(op, store, started.elapsed().as_secs_f64());
    if let Err(error) = &result {
        tracing::warn!(op, %error, "idempotency store call failed");
    }
    result
}
