//! Per-route options, written by the `#[idempotent]` expansion.

use std::time::Duration;

use super::key_request::ComputedKey;
use crate::scope::Scope;

/// The arguments of one `#[idempotent(...)]` attribute, checked at compile
/// time by the macro.
#[derive(Debug, Clone, Copy)]
pub struct RouteOptions {
    /// How long a completed response is kept and replayed.
    pub ttl: Duration,
    /// Lease of an in-flight execution, renewed every third of it.
    pub lock_ttl: Duration,
    /// Namespace of the key.
    pub scope: Scope,
    /// Where the key comes from.
    pub key: KeySource,
    /// Request headers that are part of the fingerprint, lower case.
    pub fingerprint_headers: &'static [&'static str],
    /// JSON pointers whose values a JSON body's fingerprint leaves out.
    pub fingerprint_exclude: &'static [&'static str],
    /// Header that carries the key (with [`KeySource::Header`]).
    pub header: &'static str,
    /// Whether a request without the key is refused (400).
    pub required: bool,
    /// What a concurrent duplicate gets.
    pub in_flight: InFlight,
    /// What a retry does with an execution whose lease lapsed unfinished;
    /// `None`: the default of [`Idem`](crate::Idem).
    pub on_lapse: Option<crate::store::OnLapse>,
}

/// What a duplicate of an in-flight request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    /// 409 with `Retry-After`, at once.
    Reject,
    /// Wait up to this long for the first request's response, then 409.
    Wait(Duration),
}

/// Where a route's key comes from (`key = "..."`).
#[derive(Debug, Clone, Copy)]
pub enum KeySource {
    /// The route's key header (`header = ".."`, `Idempotency-Key` unless
    /// renamed).
    Header,
    /// A path parameter, by name: a natural key such as an order id.
    Path(&'static str),
    /// An RFC 6901 JSON pointer into the body: a natural key such as an
    /// event id. A string or an integer there counts.
    Json(&'static str),
    /// Two sources or more, each read as alone, joined so that no two
    /// different tuples give one key (`key = ["path:order_id", "json:/line_id"]`).
    Composite(&'static [KeyPart]),
    /// A function of the request (`key = "fn:path::to::function"`).
    Computed(ComputedKey),
}

/// One part of a composite key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPart {
    /// The route's key header.
    Header,
    /// A path parameter, by name.
    Path(&'static str),
    /// An RFC 6901 JSON pointer into the body.
    Json(&'static str),
}
