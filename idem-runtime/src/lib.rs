//! Make actix-web and axum endpoints safe to retry: the runtime behind
//! `#[idempotent]`.
//!
//! Networks lose responses; clients, proxies and queues retry. Annotate a
//! handler, register one [`Idem`] on the `App` (or the axum `Router`, with
//! `Idem::layer`), and a retried request with the same `Idempotency-Key`
//! gets the first response back instead of running the handler again:
//!
//! ```no_run
//! use actix_web::{App, HttpResponse, HttpServer, post, web};
//! use idem_runtime::{Idem, MemoryStore, idempotent};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct NewPayment {
//!     amount_cents: u64,
//! }
//!
//! #[idempotent(ttl = "24h", scope = "user")]
//! #[post("/payments")]
//! async fn pay(body: web::Json<NewPayment>) -> HttpResponse {
//!     // Business code only: charge once, answer. A retry with the same key
//!     // and body gets this response back, marked `Idempotent-Replayed: true`.
//!     HttpResponse::Created().json(serde_json::json!({ "charged": body.amount_cents }))
//! }
//!
//! #[actix_web::main]
//! async fn main() -> std::io::Result<()> {
//!     // `scope = "user"` keys are per caller: say who the caller is.
//!     let idem = Idem::new(MemoryStore::new())
//!         .subject(|req| req.header("x-user-id").map(str::to_owned));
//!     HttpServer::new(move || App::new().app_data(idem.clone()).service(pay))
//!         .bind(("127.0.0.1", 8080))?
//!         .run()
//!         .await
//! }
//! ```
//!
//! For several server processes, swap [`MemoryStore`] for `RedisStore` or
//! `PostgresStore` (features `redis` and `postgres`); nothing else changes.
//! On axum (feature `axum`), the attribute is `axum::idempotent`, with the
//! same arguments and behaviour. The crate's `examples/` hold one runnable
//! app per store and framework.
//!
//! The promises (at most one execution per key, byte-for-byte replays, 409
//! while in flight, 422 for a reused key) and every response the runtime
//! produces are specified in the project's behaviour contract,
//! `docs/contract.md`, cited below by section (§).
//!
//! # Map
//!
//! What an application author touches is at the root:
//!
//! - [`idempotent`]: the attribute; its arguments are checked at compile
//!   time (§2). `axum` (feature `axum`): the same on axum handlers, and
//!   the tower layer for routes without the attribute (§15).
//! - [`Idem`]: the configuration registered on the `App` (§3), with its
//!   [`ServerErrorPolicy`], and the graceful shutdown ([`Idem::drain`],
//!   [`Idem::shutdown_on_signal`], reporting [`Drained`]), and the opt-in
//!   [`ReplayCache`] of completed records in front of the store.
//! - [`MarkRetryable`] and [`Retryable`]: a handler's word that nothing
//!   happened, so the same request may run again (§4.8).
//! - [`ExecutionContext`]: which execution of its key a handler is
//!   ([`Attempt`]), its fencing token, and derived keys for downstream
//!   calls; `Tx` (feature `postgres`): the transactional mode, the
//!   handler's writes and the stored response committed together (§8).
//! - The stores: [`MemoryStore`] (default feature `memory`), `RedisStore`
//!   (feature `redis`), `PostgresStore` (feature `postgres`), and the errors
//!   their constructors return ([`StoreError`], `InvalidKeyPrefix`,
//!   `InvalidTableName`).
//!   [`SweeperHandle`]: the background task that deletes expired records
//!   from a store that keeps them ([`PurgeExpired`](store::PurgeExpired)).
//! - [`problem`]: the problem+json answers the runtime gives by itself (§5).
//! - [`observability`]: the metric names and the outcomes they count (§7).
//! - `openapi` (feature `utoipa`): every idempotent operation documented
//!   in the application's OpenAPI document.
//! - [`inbox`]: consumers of messages that process each message id at most
//!   once per TTL, on any store (§10).
//! - [`once`]: any async operation at most once per key, outside a web
//!   framework, its output kept and replayed (§15).
//! - [`outbox`]: events written with the business data and relayed at
//!   least once to a consumer (memory, Redis streams, Postgres; §10).
//! - `client` (feature `client`): a reqwest middleware that sends one key
//!   per intent and retries what is safe to retry (§11), with its
//!   [`Report`](client::Report) on the final response.
//!
//! Store authors get [`store`]: the [`Store`](store::Store) trait, its
//! optional capabilities ([`PurgeExpired`](store::PurgeExpired), and the
//! transactional mode through `Store::transactional`), the plain data it
//! works on, and the conformance suite every store must pass
//! (`store::testing`, feature `testing`) (§6).
//!
//! # One request's path
//!
//! The attribute keeps the handler whole and routes each request through
//! one function of its framework's glue, which runs the steps of §4 in
//! order (written once for both frameworks, in `web/`):
//!
//! 1. the **key** from the header (`key.rs`): an sf-string (its RFC 9651
//!    parameters ignored) or a bare token;
//! 2. the **subject** for `scope = "user"`, from [`Idem::subject`];
//! 3. the **body**, buffered up to [`Idem::body_limit`]; a
//!    content-encoded one is refused (415), never fingerprinted by its wire
//!    bytes;
//! 4. the **fingerprint** of method, path, query, media type and body
//!    (`fingerprint.rs`, with JSON canonicalised by `canonical_json.rs`);
//! 5. the handler's own **extractors**, over the buffered body;
//! 6. the **claim**, one atomic store call on the storage key built from
//!    scope, subject, route and key (`scope.rs`): acquired, replay, 409 or
//!    422;
//! 7. **execute** the handler on a task of its own, its lease renewed by
//!    the process-wide keeper thread (its execution context and its
//!    transaction, if it takes them, filled in first);
//! 8. **complete**: capture the response and store it, fenced by the
//!    claim's token (retried while the lease holds), or leave a tombstone
//!    when the handler marked it retryable; in transactional mode the
//!    completion is written in the handler's transaction, then committed;
//! 9. a **store failure** before the handler runs answers 503.
//!
//! Steps 6 to 8 live in the framework-neutral `engine` module (claim,
//! lease, keeper, completion, drain), on the runtime's own thread
//! (`background.rs`); `web/` runs the steps over a request of either
//! framework and calls into it, and the glue in `actix/` and `axum/` gives
//! it the framework's request and makes its responses; the stores are in
//! `backends/`. What the attribute expands to, written by hand, is in the
//! README.
#![cfg_attr(docsrs, feature(doc_cfg))]

// `#[idempotent]` names this crate `::idem_runtime`, in it too.
extern crate self as idem_runtime;

#[cfg(feature = "actix")]
mod actix;
#[cfg(feature = "axum")]
pub mod axum;
mod backends;
mod background;
mod canonical_json;
#[cfg(feature = "client")]
pub mod client;
mod clock;
mod engine;
mod error;
mod fingerprint;
pub mod inbox;
mod key;
mod observe;
pub mod once;
#[cfg(all(feature = "utoipa", any(feature = "actix", feature = "axum")))]
pub mod openapi;
pub mod operate;
pub mod outbox;
mod record;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod redact;
mod scope;
pub mod sealing;
pub mod store;
mod sweeper;

#[cfg(test)]
mod import_circles_tests;
mod token;
#[cfg(any(feature = "actix", feature = "axum"))]
mod web;

#[cfg(feature = "memory")]
pub use backends::MemoryStore;
#[cfg(feature = "redis")]
pub use backends::{InvalidKeyPrefix, OnEviction, RedisConnection, RedisStore};
#[cfg(feature = "postgres")]
pub use backends::{InvalidTableName, OnAsyncStandby, PostgresStore};
#[cfg(any(feature = "actix", feature = "axum"))]
pub use engine::ReplayCache;
pub use engine::{Drained, StepError};
pub use error::StoreError;
/// Makes an actix-web handler idempotent.
///
/// ```ignore
/// #[idempotent(ttl = "24h", scope = "user", lock_ttl = "30s", in_flight = "reject")]
/// #[post("/orders")]
/// async fn create_order(body: web::Json<NewOrder>) -> impl Responder { ... }
/// ```
///
/// The arguments, their defaults and the compile-time checks are listed in
/// the README and in §2 of the behaviour contract; the [crate
/// documentation](crate) shows a complete program.
#[cfg(feature = "actix")]
pub use idem_macros::idempotent;
/// Makes an axum handler idempotent (feature `axum`, without `actix`; with
/// both, it is [`axum::idempotent`]).
#[cfg(all(feature = "axum", not(feature = "actix")))]
pub use idem_macros::idempotent_axum as idempotent;
pub use operate::Operator;
pub use store::{Attempt, OnLapse};
pub use sweeper::SweeperHandle;
#[cfg(all(any(feature = "actix", feature = "axum"), feature = "postgres"))]
pub use web::Tx;
#[cfg(any(feature = "actix", feature = "axum"))]
pub use web::{
    ExecutionContext, Idem, KeyRequest, MarkRetryable, REPLAYED_HEADER, RequestHead, Retryable, ServerErrorPolicy,
};

/// The problem+json responses the runtime produces by itself (§5 of the
/// behaviour contract): a `type` URI starting with [`TYPE_PREFIX`](problem::TYPE_PREFIX),
/// a `title`, the `status` and a `detail` saying what to do.
#[cfg(any(feature = "actix", feature = "axum"))]
pub mod problem {
    pub use crate::web::problem::{ProblemError, ProblemKind, TYPE_PREFIX};
}

/// What the runtime reports through the `metrics` facade and `tracing` (§7).
///
/// Every idempotent request runs in an `idempotent` span with the fields
/// `method`, `route`, `scope`, `key` (a short hash, never the key),
/// `record` (the record's id, as the `idem` tool and
/// [`Operator`] find it) and `outcome`, and is counted
/// once, where it ends, in [`REQUESTS_METRIC`](observability::REQUESTS_METRIC).
/// [`HELD_METRIC`](observability::HELD_METRIC) counts the held executions
/// the process has met.
pub mod observability {
    pub use crate::engine::HELD_METRIC;
    pub use crate::observe::{Outcome, REQUESTS_METRIC, RUNNING_METRIC, STORE_LATENCY_METRIC};
}

/// What the `#[idempotent]` expansion uses. Not a public API.
#[cfg(any(feature = "actix", feature = "axum"))]
#[doc(hidden)]
pub mod __private {
    #[cfg(feature = "actix")]
    pub use ::actix_web::web::Payload;
    #[cfg(feature = "actix")]
    pub use ::actix_web::{HttpRequest, HttpResponse};
    pub use ::core::time::Duration;

    #[cfg(feature = "actix")]
    pub use crate::actix::handle;
    pub use crate::scope::Scope;
    pub use crate::store::OnLapse;
    pub use crate::web::{ComputedKey, InFlight, KeyFunction, KeyPart, KeySource, RouteOptions};

    /// What the axum expansion uses.
    #[cfg(feature = "axum")]
    pub mod axum {
        pub use ::axum::extract::Request;
        pub use ::axum::handler::Handler;
        pub use ::axum::response::Response;

        pub use crate::axum::{Answering, Call, Extract, handle};

        /// The marker of the `Handler` an `#[idempotent]` axum handler is,
        /// before its extractors' marker.
        #[derive(Debug, Clone, Copy)]
        pub struct Idempotent;
    }
}

/// What the repository's fuzz targets and their corpus replay reach that is
/// not public otherwise (feature `fuzzing`). Not a public API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod __fuzzing {
    /// The Redis store's record layout (feature `redis` too).
    #[cfg(feature = "redis")]
    pub use crate::backends::redis::layout::{
        State as RedisState, Stored as RedisRecord, claimed as redis_claimed, read as read_redis_record,
        tail as redis_tail,
    };
    pub use crate::canonical_json::{MAX_DEPTH, canonicalize};
}
