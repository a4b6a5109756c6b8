//! The actix-web glue the `#[idempotent]` expansion calls into.
//!
//! One request goes through these files in order (§4 of the behaviour
//! contract):
//!
//! - `entry.rs`: [`handle`], the one entry point. Finds the [`Idem`]
//!   configuration, reads the key and the subject, buffers the body
//!   (`body.rs`), fingerprints it, runs the handler's extractors, then
//!   claims the key and dispatches on the answer: execute, replay, 409,
//!   422 or 503. `key_source.rs` reads the key where the route says: the
//!   header, a path parameter or a JSON pointer into the body.
//! - `execute.rs`: runs a claimed request in its own future (on a task of
//!   its own if the client leaves), its lease kept by the engine's keeper,
//!   and a request without a key as if not annotated; `run_in_tx.rs`: the
//!   same for a handler that takes a `Tx` (feature `postgres`), its writes
//!   and its completion committed together. Both end through `finish.rs`:
//!   the handler called and captured, then the fenced completion (the
//!   response stored) or the release, and the request counted.
//! - `capture.rs`: turns the handler's response into a stored one, and a
//!   stored one back into a replay marked `Idempotent-Replayed: true`.
//! - `context.rs`: the [`ExecutionContext`] extractor (token, attempt,
//!   derived keys), filled after the claim; `tx_extractor.rs`: the `Tx`
//!   extractor of the transactional mode (feature `postgres`).
//! - `retryable.rs`: the mark a handler puts on a response that changed
//!   nothing; `problem.rs`: the problem+json answers (§5).
//! - `shutdown.rs`: the drain wired into actix's shutdown.
//! - `config.rs`: [`Idem`], the configuration on the `App` (§3);
//!   `options.rs`: the per-route arguments the attribute writes.

mod body;
mod capture;
mod config;
mod context;
mod entry;
mod execute;
mod finish;
mod key_source;
mod options;
pub(crate) mod problem;
mod retryable;
mod route;
#[cfg(feature = "postgres")]
mod run_in_tx;
mod shutdown;
#[cfg(feature = "postgres")]
mod tx_extractor;

pub use capture::REPLAYED_HEADER;
pub use config::{Idem, ServerErrorPolicy};
pub use context::ExecutionContext;
pub use entry::handle;
pub use options::{InFlight, KeySource, RouteOptions};
pub use retryable::{MarkRetryable, Retryable};

/// A handler `#[idempotent]` wraps: an actix-web handler whose output is a
/// responder. Named once here for every function that runs one.
#[doc(hidden)]
pub trait IdempotentHandler<Args>: actix_web::Handler<Args, Output: actix_web::Responder + 'static> {}

impl<F, Args> IdempotentHandler<Args> for F
where
    F: actix_web::Handler<Args>,
    F::Output: actix_web::Responder + 'static,
{
}
#[cfg(feature = "postgres")]
pub use tx_extractor::Tx;
