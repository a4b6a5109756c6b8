//! For store authors: the [`Store`] trait and the plain data it works on.
//!
//! Application code rarely needs this module: it picks one of the stores at
//! the crate root ([`MemoryStore`](crate::MemoryStore), `RedisStore`,
//! `PostgresStore`) and hands it to [`Idem`](crate::Idem). This module is
//! for writing a store of your own, or calling one directly.
//!
//! A store keeps one record per [`StorageKey`], for the TTL given at claim
//! (and again at completion). A record is *in flight* (a handler runs under
//! a lease owned by a [`FencingToken`]), *completed* (the response is kept
//! until its TTL runs out) or *released* (a tombstone: the handler reported
//! that nothing happened). Every operation is one atomic step on the store,
//! so many server processes can share one store. All expiry decisions use
//! the store's own clock.
//!
//! Ownership of a record is its token, not its lease. A lease is the
//! holder's claim of priority: while it runs, a claim of the same request
//! is answered [`Claim::InFlight`]; once it has run out, such a claim takes
//! the key over with a new token (crash recovery), after a [`grace`] that
//! the first claim to find it lapsed gives the holder. Until that happens the
//! holder's token still owns the record, lapsed or not: it may renew the
//! lease back into life, complete or release. So a store that was
//! unreachable for longer than a lease never by itself causes a second
//! execution: its holder renews and completes once it answers again
//! (§1 and §6 of the behaviour contract). Every other token is refused (the
//! fence), and a takeover is the only way a token loses its record.
//!
//! The record itself stays, with its fingerprint, until its TTL: a released
//! key and a key whose lease ran out (a crash) can be claimed again by the
//! *same* request only; a different request gets [`Claim::Mismatch`] (§4.8
//! of the behaviour contract). A record past its TTL is gone, for its token
//! too.
//!
//! Every store must pass the conformance suite in `store::testing` (feature
//! `testing`) against its real server.
//!
//! ```
//! use std::time::Duration;
//! use idem_runtime::MemoryStore;
//! use idem_runtime::store::{Claim, Fingerprint, IdempotencyKey, RequestParts, Scope, StorageKey, Store};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! let key = IdempotencyKey::parse(b"\"8e03978e-40d5\"")?;
//! let storage_key = StorageKey::new(Scope::User, Some("alice"), "POST", "/orders", &key);
//! let fingerprint = Fingerprint::of(&RequestParts {
//!     method: "POST",
//!     path: "/orders",
//!     query: "",
//!     headers: &[],
//!     host: Some("shop.example"),
//!     content_type: Some("application/json"),
//!     body: br#"{"amount_cents": 500}"#,
//! });
//! let (lease, ttl) = (Duration::from_secs(30), Duration::from_secs(86_400));
//! match store.claim(&storage_key, &fingerprint, lease, ttl).await? {
//!     Claim::Acquired { token, .. } => { /* run the handler, then complete or release with `token` */ }
//!     Claim::Replay(response) => { /* send `response` back with Idempotent-Replayed: true */ }
//!     Claim::InFlight { retry_after } => { /* 409 with Retry-After */ }
//!     Claim::Mismatch => { /* 422 */ }
//!     _ => { /* a later version's outcome */ }
//! }
//! # Ok(()) }
//! ```

mod operable;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "postgres")]
mod transactions;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use self::operable::{InFlightSettle, ListFilter, Operable, Settle, Settlement};
#[cfg(feature = "postgres")]
pub use self::transactions::{Opening, PgTransaction, Transactional};
pub use crate::error::{BoxError, StoreError};
pub use crate::fingerprint::{Fingerprint, RequestParts};
pub use crate::key::{IdempotencyKey, KeyError};
pub use crate::record::{Attempt, DecodeError, Record, RecordState, StateName, Step, StoredResponse, UnknownState};
pub use crate::scope::{Scope, StorageKey};
pub use crate::token::FencingToken;

/// The result of [`Store::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Claim {
    /// The key was free, its record had expired, or it holds a tombstone or
    /// a lapsed lease of the same request: the caller owns it now and must
    /// complete or release it.
    Acquired {
        /// Proof of ownership for renew / complete / release.
        token: FencingToken,
        /// What the key held before: which execution of it this is.
        attempt: Attempt,
        /// The durable steps the executions before this one recorded, in
        /// the order they were recorded: none for [`Attempt::First`] (§8 of
        /// the behaviour contract).
        steps: Vec<Step>,
    },
    /// The key holds a completed response for the same fingerprint.
    Replay(StoredResponse),
    /// The same request is still running under a live lease.
    InFlight {
        /// Time left on that lease, by the store's clock.
        retry_after: Duration,
    },
    /// The key's record (in flight, completed, released or lapsed) belongs
    /// to a different request.
    Mismatch,
    /// The same request's execution lapsed unfinished on a route whose
    /// lapse policy is [`OnLapse::Hold`]: it will not run again by itself
    /// (409 `execution-held`) until an operator releases or resolves it
    /// ([`Operable`]).
    Held {
        /// This claim is the one that found the lease lapsed past its
        /// grace and held the record: the first to know (the runtime logs
        /// it at error level, once).
        newly: bool,
    },
}

/// What a claim does with an execution of the same request whose lease
/// lapsed unfinished (its process crashed, or went silent past the lease
/// and its grace): `on_lapse` of the attribute (§2 and §14 of the
/// behaviour contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum OnLapse {
    /// Take the key over and run the handler again: crash recovery. Its
    /// recorded steps are handed back, not run again, and its derived keys
    /// keep a deduplicating downstream from acting twice.
    #[default]
    Takeover,
    /// Never run it again by itself: the record is *held* and answers
    /// [`Claim::Held`] (409 `execution-held`) until an operator releases or
    /// resolves it. The holder's token still owns it: an execution that was
    /// only slow and completes after all lands its response.
    Hold,
}

impl OnLapse {
    /// `takeover` or `hold`, as the attribute spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Takeover => "takeover",
            Self::Hold => "hold",
        }
    }
}

/// The terms of a claim besides its key, fingerprint and token.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimTerms {
    /// The new owner's lease.
    pub lease: Duration,
    /// How long the record (and so its fingerprint) lives from now; at
    /// least as long as the lease.
    pub ttl: Duration,
    /// What to do with a lapsed execution of the same request.
    pub on_lapse: OnLapse,
    /// The route of the claiming request (`POST /orders/{id}/payments`),
    /// kept in the record for operators ([`Operable::list`]); `None` for a
    /// claim that has none (a message of the inbox names its consumer).
    pub route: Option<Arc<str>>,
}

impl ClaimTerms {
    /// A claim with `lease` and `ttl`, taking lapsed executions over, with
    /// no route.
    pub fn new(lease: Duration, ttl: Duration) -> Self {
        Self { lease, ttl, on_lapse: OnLapse::Takeover, route: None }
    }

    /// The same terms with `on_lapse`.
    pub fn on_lapse(mut self, on_lapse: OnLapse) -> Self {
        self.on_lapse = on_lapse;
        self
    }

    /// The same terms with `route` kept in the record.
    pub fn route(mut self, route: impl Into<Arc<str>>) -> Self {
        self.route = Some(route.into());
        self
    }
}

/// The grace a claim gives the holder of a lease it finds lapsed, when no
/// claim had found it so before: half the claim's `lease`, at least a
/// second. The holder's keeper tries a lapsed lease again a tenth of its
/// lease after a failed try (at most a second later), each try bounded by
/// the store timeout, which the runtime keeps within a third of the lease:
/// a holder that can reach the store again renews within the grace. (A
/// route whose `lock_ttl` changed between the holder's deploy and the
/// claimer's gives the grace of the claimer's.)
pub fn grace(lease: Duration) -> Duration {
    (lease / 2).max(Duration::from_secs(1))
}

/// One lease for [`Store::renew_many`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The record.
    pub key: StorageKey,
    /// Its owner's token.
    pub token: FencingToken,
    /// The new lease, from now.
    pub lease: Duration,
}

/// Whether a fenced operation was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Fence {
    /// The record held the token: the operation took effect.
    Held,
    /// The record does not hold the token (taken over, completed, released,
    /// or gone past its TTL): nothing was changed.
    Lost,
    /// No answer for this one lease: only [`Store::renew_many`] says so,
    /// for the leases of a batch whose part failed while the rest was
    /// answered (a Redis Cluster shard down, a row locked by another
    /// transaction). The keeper tries that lease again, as after a failed
    /// call.
    Unknown,
}

/// An idempotency record store.
///
/// Implementations must make each method a single atomic step on the store
/// (one round trip for networked stores) and must pass the conformance suite
/// in `store::testing` (feature `testing`). Stores are used as
/// `Arc<dyn Store>`.
///
/// Two capabilities are optional: [`PurgeExpired`], for a store whose
/// expired records stay until something deletes them, and
/// `Store::transactional` (feature `postgres`), for a store that can write
/// a completion inside the handler's own transaction.
#[async_trait]
pub trait Store: Send + Sync {
    /// A short name for logs and metrics, such as `"redis"`.
    fn kind(&self) -> &'static str;

    /// Claims `key` for a request with `fingerprint`, or reports what holds
    /// it; a new owner gets a fresh token. A new owner's lease lasts
    /// `lease`; the record (and so its fingerprint) lives `ttl` from now,
    /// and at least as long as its lease.
    ///
    /// | record of `key` | same fingerprint | other fingerprint |
    /// |---|---|---|
    /// | none, or past its TTL | acquired ([`Attempt::First`]) | acquired ([`Attempt::First`]) |
    /// | in flight, lease live | [`Claim::InFlight`] | [`Claim::Mismatch`] |
    /// | in flight, lease ran out, no claim found it so yet | [`Claim::InFlight`]: the holder gets a [`grace`] (below) | [`Claim::Mismatch`] |
    /// | in flight, lease ran out after a grace | acquired ([`Attempt::Takeover`]); with [`OnLapse::Hold`], held: [`Claim::Held`] | [`Claim::Mismatch`] |
    /// | held | [`Claim::Held`] | [`Claim::Mismatch`] |
    /// | released (tombstone) | acquired ([`Attempt::AfterRelease`]) | [`Claim::Mismatch`] |
    /// | completed | [`Claim::Replay`] | [`Claim::Mismatch`] |
    ///
    /// A lapsed lease is taken over in two steps. The first claim to find
    /// it lapsed extends it by a [`grace`] and answers in flight: its
    /// holder may be alive and only have been cut off from the store (an
    /// outage longer than the lease), and renews or completes with its
    /// token within the grace (a renewal ends the grace). Only a claim
    /// after the grace takes the key over. So the first retry after a store
    /// comes back never runs a handler whose holder is still there.
    async fn claim(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        lease: Duration,
        ttl: Duration,
    ) -> Result<Claim, StoreError> {
        self.claim_as(key, fingerprint, FencingToken::generate(), lease, ttl).await
    }

    /// [`Store::claim`], the new owner's token chosen by the caller: a
    /// fresh one from [`FencingToken::generate`], used for this claim
    /// alone. A caller whose claim failed in transit (a timeout, a lost
    /// connection) may so still release what the claim took, if it landed,
    /// instead of leaving the key in flight for a whole lease. The same
    /// claim sent again (same token) while the record holds it is answered
    /// as acquired again, as the attempt it was, whatever is left of its
    /// lease.
    async fn claim_as(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        token: FencingToken,
        lease: Duration,
        ttl: Duration,
    ) -> Result<Claim, StoreError> {
        self.claim_with(key, fingerprint, token, &ClaimTerms::new(lease, ttl)).await
    }

    /// [`Store::claim_as`] with every term: what to do with a lapsed
    /// execution of the same request ([`OnLapse`]: with [`OnLapse::Hold`],
    /// the claim that would take it over turns it into a held record and
    /// answers [`Claim::Held`] instead, and every later claim of the same
    /// request answers held too), and the route kept in the record.
    ///
    /// A takeover's [`Claim::Acquired`] carries the steps recorded before
    /// it; a held record keeps its token, its steps and its fingerprint: its
    /// holder may still renew, record steps, complete or release.
    async fn claim_with(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        token: FencingToken,
        terms: &ClaimTerms,
    ) -> Result<Claim, StoreError>;

    /// Records a durable step's `result` under `name` in the record, if it
    /// holds `token` (in flight, its lease live or not, or held): one
    /// fenced append, [`Fence::Held`] when the record holds the token. A
    /// name already recorded keeps its first result (the same step sent
    /// again after a lost answer is answered held, and changes nothing).
    /// The steps stay with the record through takeovers and releases (a
    /// claim after either gets them back: they recorded effects that
    /// happened), and go when it completes, when an operator's release
    /// forgets them, or with the record's TTL.
    async fn record_step(&self, key: &StorageKey, token: FencingToken, step: &Step) -> Result<Fence, StoreError>;

    /// Extends the lease of the record `token` owns to `lease` from now (and
    /// the record's life with it, if the lease would outlive it), whether
    /// or not the lease had run out: [`Fence::Held`] while the record holds
    /// `token`. A held record stays held (its lease is no longer what keeps
    /// it): the renewal answers [`Fence::Held`], so that its holder runs on
    /// and may still complete.
    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError>;

    /// Renews many leases at once, answering one [`Fence`] per renewal, in
    /// order. The runtime's lease keeper calls this from a thread of its
    /// own, outside the application's workers; a networked store should
    /// make it one round trip on a connection of its own, so that renewals
    /// never queue behind application traffic. A lease whose renewal could
    /// not be answered (a failed call, a locked row) is [`Fence::Unknown`];
    /// the batch fails only when none could be. The default sends every
    /// [`Store::renew`] at once.
    async fn renew_many(&self, renewals: &[Renewal]) -> Result<Vec<Fence>, StoreError> {
        let each = renewals.iter().map(|r| self.renew(&r.key, r.token, r.lease));
        let mut answers = futures_util::future::join_all(each).await;
        if answers.iter().all(Result::is_err)
            && let Some(Err(error)) = answers.pop()
        {
            return Err(error);
        }
        Ok(answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|error| {
                    tracing::warn!(%error, "one renewal failed");
                    Fence::Unknown
                })
            })
            .collect())
    }

    /// Stores `response` for `ttl`, if the record holds `token` (its lease
    /// live or not).
    async fn complete(
        &self,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, StoreError>;

    /// Turns an in-flight record into a tombstone, if it holds `token` (its
    /// lease live or not): the same request may claim the key again, another
    /// one is refused, until the record's TTL runs out. The tombstone keeps
    /// the recorded steps for the next execution.
    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError>;

    /// [`Store::release`], unless the record is held for an operator
    /// (`on_lapse = "hold"`): a held record is left as it is, answered
    /// [`Fence::Lost`]. The runtime ends this way an execution whose handler
    /// never said that nothing happened (a transactional execution that
    /// panicked, or whose success did not commit): a held execution never
    /// runs again by itself, so only its handler's own word, or an
    /// operator, releases it.
    async fn release_unless_held(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError>;

    /// The live record of `key`, if any (records past their TTL are absent;
    /// tombstones and lapsed leases are present).
    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError>;

    /// The transactional mode on this store: how to open a transaction and
    /// write a completion in it (§8 of the behaviour contract). `None`, the
    /// default, for a store that has none; the transactional mode is then
    /// refused (a handler taking [`Tx`](crate::Tx) answers 500
    /// `not-configured`).
    #[cfg(feature = "postgres")]
    fn transactional(&self) -> Option<std::sync::Arc<dyn Transactional>> {
        None
    }
}

/// A store whose expired records stay until deleted (Postgres, and the
/// memory store between its own sweeps): a sweeper
/// ([`SweeperHandle`](crate::SweeperHandle)) calls it now and then. Stores
/// whose records expire by themselves (Redis) do not implement it.
#[async_trait]
pub trait PurgeExpired: Store {
    /// Deletes up to `batch` records past their TTL, and nothing else;
    /// returns how many went.
    async fn purge_expired(&self, batch: usize) -> Result<u64, StoreError>;
}
