//! Per-route options, written by the `#[idempotent]` expansion.

use std::time::Duration;

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
    /// Header that carries the key.
    pub header: &'static str,
    /// Whether a request without the key is refused (400).
    pub required: bool,
    /// What a concurrent duplicate gets.
    pub in_flight: InFlight,
}

/// What a duplicate of an in-flight request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    /// 409 with `Retry-After`, at once.
    Reject,
    /// Wait up to this long for the first request's response, then 409.
    Wait(Duration),
}
