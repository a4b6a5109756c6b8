//! The HTTP side of `#[idempotent]`, whatever the web framework: one
//! request, step by step (§4 of the behaviour contract), written once over
//! two small traits that each framework's glue (`actix/`, `axum/`)
//! implements.
//!
//! - [`Incoming`] is a request as the steps need it: its method, path,
//!   headers and host, its body buffered up to a limit, the handler's own
//!   extractors run over that body, the handler called and its response
//!   captured;
//! - [`Framework`] is how answers are made: a problem (§5), a replay, the
//!   handler's own response passed on.
//!
//! The files, in the order a request meets them:
//!
//! - `flow.rs`: steps 1 to 9: the key (`key_source.rs`, and
//!   `key_request.rs` for a key function), the subject, the
//!   body (`body.rs`), the fingerprint, the extractors, the claim, and the
//!   answer to a claim this request did not win;
//! - `run.rs`: a claimed request run to its end, in the request's own
//!   future and on a task of its own if the client leaves; `tx.rs` the same
//!   for a handler that takes a transaction (feature `postgres`); both end
//!   through `finish.rs` (the fenced completion or the release, and the
//!   request counted);
//! - `capture.rs`: the handler's response captured and kept, and a kept
//!   one replayed; `retryable.rs`: the marks a response may carry;
//!   `problem.rs`: the problem+json answers;
//! - `context.rs`: the execution context a handler may take;
//! - `route.rs`: the route as keys, records and metrics name it;
//! - `config.rs`: [`Idem`], the configuration (§3), and `head.rs` the
//!   request as a subject resolver sees it; `options.rs` the per-route
//!   arguments the attribute writes.

pub(crate) mod body;
mod capture;
mod config;
mod context;
mod finish;
mod flow;
mod head;
mod key_request;
mod key_source;
mod options;
pub(crate) mod problem;
mod retryable;
mod route;
mod run;
#[cfg(feature = "postgres")]
mod tx;

use std::future::Future;

use bytes::Bytes;

pub use self::capture::REPLAYED_HEADER;
pub(crate) use self::capture::{Captured, Sent};
pub(crate) use self::config::Config;
pub use self::config::{Idem, ServerErrorPolicy};
pub use self::context::ExecutionContext;
pub(crate) use self::context::{Annotated, PendingContext, not_in_a_keyed_request};
pub(crate) use self::finish::{Answer, Panicked};
pub(crate) use self::flow::{Served, serve, span};
pub use self::head::RequestHead;
pub use self::key_request::{ComputedKey, KeyFunction, KeyRequest};
pub use self::options::{InFlight, KeyPart, KeySource, RouteOptions};
pub(crate) use self::problem::{PROBLEM_JSON, Problem, StepEnd};
pub use self::retryable::{MarkRetryable, Retryable};
pub(crate) use self::retryable::{Marks, RetryableMark};
pub(crate) use self::route::{Route, UNMATCHED_ROUTE};
pub(crate) use self::run::{Detached, finish_detached, run};
#[cfg(feature = "postgres")]
pub use self::tx::Tx;
#[cfg(feature = "postgres")]
pub(crate) use self::tx::{PendingTx, run_without_key_in_tx, tx_for};
use crate::record::StoredResponse;

/// A path parameter that is not UTF-8 once percent-decoded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NotUtf8;

/// How a web framework makes the answers the runtime gives by itself.
pub(crate) trait Framework: Sized + 'static {
    /// The framework's response.
    type Response;
    /// A response's headers, as the handler left them.
    type Headers;
    /// What is left of a response body read past the stored-response
    /// limit, streamed on to the client.
    type Rest;

    /// A problem+json answer (§5 of the behaviour contract).
    fn problem(problem: Problem) -> Self::Response;

    /// A kept response, replayed: marked `Idempotent-Replayed: true`.
    fn replay(stored: StoredResponse) -> Self::Response;

    /// The handler's captured response, sent on to its client.
    fn respond(status: u16, headers: Self::Headers, body: Sent<Self::Rest>) -> Self::Response;

    /// The headers of a captured response, each as its lower-case name and
    /// its value's bytes, in order.
    fn header_entries(headers: &Self::Headers) -> impl Iterator<Item = (&str, &[u8])>;
}

/// One request to an `#[idempotent]` handler, as the steps of `flow.rs`
/// need it: the framework's request, its payload and the handler.
pub(crate) trait Incoming: Sized {
    /// How its answers are made.
    type Framework: Framework;
    /// The handler's arguments, as its extractors made them.
    type Args;

    /// The request's method.
    fn method(&self) -> &str;
    /// Its path, as requested (not decoded).
    fn path(&self) -> &str;
    /// Its query string, without the `?`.
    fn query(&self) -> &str;
    /// The values of the header `name` (any case), in order.
    fn header_values<'a>(&'a self, name: &'static str) -> impl Iterator<Item = &'a [u8]> + 'a;
    /// The value of the path parameter `name`, percent-decoded as the
    /// framework's path extractor gives it to the handler.
    fn path_param(&self, name: &str) -> Option<Result<std::borrow::Cow<'_, str>, NotUtf8>>;
    /// The host the request was sent to, as received: its `Host` header,
    /// else its target's authority; empty when there is neither.
    fn host(&self) -> &str;
    /// The request as a subject resolver sees it.
    fn head(&self) -> RequestHead<'_>;

    /// The whole body, read up to `limit` bytes.
    fn buffer(&mut self, limit: usize) -> impl Future<Output = Result<Bytes, Problem>>;

    /// Runs the handler's own extractors over `body`, the request marked
    /// `annotated` for the runtime's extractors; a refusal is their answer.
    fn extract(
        &mut self,
        body: Bytes,
        annotated: Annotated,
    ) -> impl Future<Output = Result<Self::Args, <Self::Framework as Framework>::Response>>;

    /// The slot an [`ExecutionContext`] extractor left, if one ran.
    fn take_context(&self) -> Option<PendingContext>;

    /// The slot a `Tx` extractor left, if one ran.
    #[cfg(feature = "postgres")]
    fn take_tx(&self) -> Option<PendingTx>;

    /// Calls the handler with `args` and captures its response, its body
    /// read up to `limit`; a panic is caught and logged.
    fn call(
        &mut self,
        args: Self::Args,
        limit: usize,
    ) -> impl Future<Output = Result<Captured<Self::Framework>, Panicked>>;

    /// Serves the request as if the handler were not annotated (no key, and
    /// none required), its body as it came, or `body` if already read.
    fn without_key(
        self,
        config: std::sync::Arc<Config>,
        body: Option<Bytes>,
    ) -> impl Future<Output = <Self::Framework as Framework>::Response>;
}
