//! The runtime behind `#[idempotent]`: make actix-web endpoints safe to retry.
//!
//! This crate holds the pieces the attribute expands into calls of: key
//! parsing ([`IdempotencyKey`]), request fingerprints ([`Fingerprint`]),
//! scopes and storage keys ([`Scope`], [`StorageKey`]), stored responses
//! ([`StoredResponse`]) and the [`Store`] trait with its backends
//! ([`MemoryStore`] by default; Redis and Postgres behind features).
//!
//! The behaviour contract is the project's `SPEC.md`; the README shows the
//! attribute and what it expands to.
//!
//! ```
//! use std::time::Duration;
//! use idem_runtime::{Claim, Fingerprint, IdempotencyKey, MemoryStore, RequestParts, Scope, StorageKey, Store};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! let key = IdempotencyKey::parse(b"\"8e03978e-40d5\"")?;
//! let storage_key = StorageKey::new(Scope::User, Some("alice"), "POST", "/orders", &key);
//! let fingerprint = Fingerprint::of(&RequestParts {
//!     method: "POST",
//!     path: "/orders",
//!     query: "",
//!     content_type: Some("application/json"),
//!     body: br#"{"amount_cents": 500}"#,
//! });
//! match store.claim(&storage_key, &fingerprint, Duration::from_secs(30)).await? {
//!     Claim::Acquired { token } => { /* run the handler, then complete or release with `token` */ }
//!     Claim::Replay(response) => { /* send `response` back with Idempotent-Replayed: true */ }
//!     Claim::InFlight { retry_after } => { /* 409 with Retry-After */ }
//!     Claim::Mismatch => { /* 422 */ }
//! }
//! # Ok(()) }
//! ```

mod actix;
mod canonical_json;
mod duration;
mod fingerprint;
mod key;
mod record;
mod redact;
mod scope;
mod store;
pub mod stores;
#[cfg(feature = "testing")]
pub mod testing;

pub use actix::{
    DEFAULT_BODY_LIMIT, DEFAULT_RESPONSE_LIMIT, DEFAULT_STORE_TIMEOUT, Idem, Outcome, PROBLEM_TYPE_PREFIX, ProblemKind,
    REPLAYED_HEADER, REQUESTS_METRIC, STORE_LATENCY_METRIC, ServerErrorPolicy, SubjectResolver,
};
pub use duration::{DurationError, parse_duration};
pub use fingerprint::{Fingerprint, RequestParts};
/// Makes an actix-web handler idempotent; see the crate docs and the README.
pub use idem_macros::idempotent;
pub use key::{IdempotencyKey, KeyError, MAX_KEY_LEN};
pub use record::{DecodeError, Record, RecordState, StoredResponse};
pub use redact::redact_url;
pub use scope::{KEY_FORMAT_VERSION, Scope, StorageKey, UnknownScope};
pub use store::{BoxError, Claim, Fence, FencingToken, Store, StoreError};
#[cfg(feature = "memory")]
pub use stores::MemoryStore;
#[cfg(feature = "postgres")]
pub use stores::postgres::PostgresStore;
#[cfg(feature = "redis")]
pub use stores::redis::RedisStore;

/// What the `#[idempotent]` expansion uses. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use ::actix_web::web::Payload;
    pub use ::actix_web::{HttpRequest, HttpResponse};
    pub use ::core::time::Duration;

    pub use crate::Scope;
    pub use crate::actix::{InFlight, RouteOptions, handle};
}
