//! The store trait: small atomic operations on plain data.
//!
//! A store keeps one record per [`StorageKey`]. A record is either *in
//! flight* (a handler runs under a lease owned by a [`FencingToken`]) or
//! *completed* (the response is kept until its TTL runs out). Every
//! operation is one atomic step on the store, so many server processes can
//! share one store. All expiry decisions use the store's own clock.
//!
//! Ownership of an in-flight record ends when its lease runs out: from then
//! on its token can neither renew, complete nor release, even if nobody has
//! claimed the key yet.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::fingerprint::Fingerprint;
use crate::record::{Record, StoredResponse};
use crate::scope::StorageKey;

/// The result of [`Store::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Claim {
    /// The key was free (or its previous lease or record had expired): the
    /// caller owns it now and must complete or release it.
    Acquired {
        /// Proof of ownership for renew / complete / release.
        token: FencingToken,
    },
    /// The key holds a completed response for the same fingerprint.
    Replay(StoredResponse),
    /// The same request is still running under a live lease.
    InFlight {
        /// Time left on that lease, by the store's clock.
        retry_after: Duration,
    },
    /// The key is held (in flight or completed) by a different request.
    Mismatch,
}

/// Whether a fenced operation was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Fence {
    /// The token still owned the key: the operation took effect.
    Held,
    /// The token no longer owns the key (lease expired, taken over, or the
    /// record is gone): nothing was changed.
    Lost,
}

/// An opaque, unguessable proof of ownership of an in-flight record.
///
/// Random 128 bits, fresh for every successful claim, so a token from an
/// earlier life of a key can never match a later one.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FencingToken(u128);

impl FencingToken {
    /// A fresh random token.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 16];
        // The OS random source failing is not something a request can recover from.
        getrandom::fill(&mut bytes).expect("the operating system's random source failed");
        Self(u128::from_be_bytes(bytes))
    }

    /// The token as 16 big-endian bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// Rebuilds a token from [`FencingToken::to_bytes`].
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(u128::from_be_bytes(bytes))
    }

    /// The token as 32 lower-case hex digits.
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }

    /// Parses [`FencingToken::to_hex`].
    pub fn from_hex(text: &str) -> Option<Self> {
        (text.len() == 32).then(|| u128::from_str_radix(text, 16).ok().map(Self))?
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({:08x}…)", (self.0 >> 96) as u32)
    }
}

/// A boxed error from a store's client library.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a store operation failed. The runtime answers 503 (fail closed)
/// when this happens before a handler runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached or refused the operation.
    #[error("{store} store unavailable: {message}")]
    Unavailable {
        /// Which store (`"redis"`, `"postgres"`, ...).
        store: &'static str,
        /// What happened, with any password already removed.
        message: String,
        /// The client library's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The operation did not finish in time.
    #[error("{store} store did not answer within {after:?}")]
    Timeout {
        /// Which store.
        store: &'static str,
        /// The configured timeout.
        after: Duration,
    },
    /// The store is full and cannot take a new record.
    #[error("{store} store is full ({detail})")]
    Full {
        /// Which store.
        store: &'static str,
        /// Which limit was reached.
        detail: String,
    },
    /// The store returned data this version cannot read.
    #[error("{store} store returned an unreadable record: {message}")]
    Corrupt {
        /// Which store.
        store: &'static str,
        /// What was wrong.
        message: String,
    },
}

impl StoreError {
    /// An [`StoreError::Unavailable`] wrapping a client error.
    pub fn unavailable(store: &'static str, source: impl Into<BoxError>) -> Self {
        let source = source.into();
        Self::Unavailable { store, message: source.to_string(), source: Some(source) }
    }
}

/// An idempotency record store.
///
/// Implementations must make each method a single atomic step on the store
/// (one round trip for networked stores) and must pass the conformance suite
/// in [`crate::testing`] (feature `testing`). Stores are used as
/// `Arc<dyn Store>`.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A short name for logs and metrics, such as `"redis"`.
    fn kind(&self) -> &'static str;

    /// Claims `key` for a request with `fingerprint`, or reports what holds
    /// it. A new owner's lease lasts `lease`.
    async fn claim(&self, key: &StorageKey, fingerprint: &Fingerprint, lease: Duration) -> Result<Claim, StoreError>;

    /// Extends the owner's lease to `lease` from now.
    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError>;

    /// Stores `response` for `ttl`, if `token` still owns the key.
    async fn complete(
        &self,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, StoreError>;

    /// Removes an in-flight record, if `token` still owns it, so that a
    /// retry can run again.
    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError>;

    /// The live record of `key`, if any (expired records are absent).
    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError>;

    /// Deletes up to `batch` expired records; returns how many went.
    /// Stores whose records expire by themselves (Redis) return 0.
    async fn purge_expired(&self, batch: usize) -> Result<u64, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh_and_round_trip() {
        let a = FencingToken::generate();
        let b = FencingToken::generate();
        assert_ne!(a, b);
        assert_eq!(FencingToken::from_hex(&a.to_hex()), Some(a));
        assert_eq!(FencingToken::from_bytes(a.to_bytes()), a);
        assert_eq!(FencingToken::from_hex("12"), None);
        assert_eq!(FencingToken::from_hex(&"g".repeat(32)), None);
    }
}
