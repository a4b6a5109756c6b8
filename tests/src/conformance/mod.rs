//! One body of request-level tests for every web framework `#[idempotent]`
//! runs on: the same routes, written once per framework over the same
//! business code (`business.rs`, `actix_app.rs`, `axum_app.rs`), served
//! over real HTTP on loopback and driven by the same cases (`cases.rs`).
//!
//! A test binary instantiates the cases for a framework with
//! [`conformance_cases!`](crate::conformance_cases).

pub mod actix_app;
pub mod axum_app;
pub mod business;
pub mod cases;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::{Drained, Idem, MemoryStore, RequestHead};

pub use self::business::Calls;

/// A framework the conformance app runs on.
pub trait Framework: Copy + Send + 'static {
    /// Its name, in messages.
    const NAME: &'static str;

    /// Serves the conformance app on a free loopback port, under `idem` (or
    /// none registered), counting executions in `calls`.
    fn start(self, idem: Option<Idem>, calls: Arc<Calls>) -> impl Future<Output = Running> + Send;
}

/// A running conformance app.
pub struct Running {
    /// Its base URL, such as `http://127.0.0.1:41234`.
    pub url: String,
    /// What its handlers ran.
    pub calls: Arc<Calls>,
    stop: Option<Stop>,
}

/// How a running app is shut down.
type Stop = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = Drained> + Send>> + Send>;

impl Running {
    /// The full URL of `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Shuts the app down gracefully: no new connections, running
    /// executions drained, then stopped.
    pub async fn shut_down(mut self) -> Drained {
        match self.stop.take() {
            Some(stop) => stop().await,
            None => unreachable!("stopped once"),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // A test that ends without shutting down: stopped in the
            // background, without waiting.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                drop(runtime.spawn(stop()));
            }
        }
    }
}

/// The store timeout of the conformance app: short, so that a store that
/// hangs is found out quickly, and a third of the shortest lease (3 s).
pub const STORE_TIMEOUT: Duration = Duration::from_millis(900);

/// The largest body the conformance app buffers.
pub const BODY_LIMIT: usize = 64 << 10;

/// The subject of a request: its `X-User-ID`.
pub fn user(req: &RequestHead<'_>) -> Option<String> {
    req.header("x-user-id").map(str::to_owned)
}

/// The conformance app's configuration over a fresh memory store.
pub fn idem() -> Idem {
    Idem::new(MemoryStore::new()).subject(user).store_timeout(STORE_TIMEOUT).body_limit(BODY_LIMIT)
}

/// Starts the conformance app on `framework` with a fresh configuration.
pub async fn start<F: Framework>(framework: F) -> Running {
    framework.start(Some(idem()), Arc::default()).await
}

impl Running {
    /// A running app, stopped by `stop`.
    pub fn new<S, Fut>(url: String, calls: Arc<Calls>, stop: S) -> Self
    where
        S: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Drained> + Send + 'static,
    {
        Self { url, calls, stop: Some(Box::new(move || Box::pin(stop()))) }
    }
}

/// Instantiates every case of [`cases`] for the framework `$framework` (a
/// value of a type implementing [`Framework`]), as tests of the module it
/// is written in.
#[macro_export]
macro_rules! conformance_cases {
    ($framework:expr) => {
        $crate::conformance_cases!(@cases $framework;
            a_retry_gets_the_first_response_replayed,
            a_reserialized_body_is_the_same_request,
            another_body_under_the_key_is_refused,
            another_path_or_query_under_the_key_is_refused,
            a_nested_route_counts_the_whole_path,
            a_concurrent_duplicate_gets_409_and_never_runs,
            a_waiting_duplicate_gets_the_first_response,
            keys_are_read_as_sf_strings_and_tokens,
            missing_and_malformed_keys_are_refused_before_anything_runs,
            a_repeated_key_header_is_refused,
            user_scope_keeps_callers_apart,
            route_and_global_scopes_share_keys_across_callers,
            a_request_without_a_subject_is_refused,
            a_body_over_the_limit_is_refused,
            a_compressed_body_is_refused_with_415,
            an_extractor_refusal_keeps_nothing,
            failures_are_stored_and_replayed,
            a_retryable_failure_releases_the_key,
            a_panic_is_stored_as_a_500_problem,
            without_a_key_an_optional_route_runs_every_time,
            natural_keys_from_the_path_and_the_body,
            fingerprint_headers_count,
            excluded_fields_are_never_compared,
            composite_keys_join_their_parts,
            a_partial_composite_key_is_refused,
            computed_keys_come_from_the_function,
            the_handler_owns_the_replayed_header,
            the_execution_context_gives_stable_derived_keys,
            a_durable_step_runs_once,
            a_client_that_hangs_up_does_not_cancel_the_execution,
            a_handler_blocking_its_thread_keeps_its_lease,
            shutdown_drains_running_executions,
            a_route_without_a_configuration_answers_500,
        );
    };
    (@cases $framework:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::conformance::cases::$case($framework).await;
            }
        )*
    };
}
