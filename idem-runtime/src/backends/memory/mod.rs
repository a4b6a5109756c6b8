//! The embedded, process-local store.

use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use parking_lot::Mutex;

use self::shard::{RESERVED, Shard, State, Totals};
use crate::clock::later;
use crate::fingerprint::Fingerprint;
use crate::record::{Record, StoredResponse};
use crate::scope::StorageKey;
use crate::store::{
    Attempt, Claim, ClaimTerms, Fence, FencingToken, OnLapse, PurgeExpired, Step, Store, StoreError, grace,
};

mod deadlines;
mod operable;
mod shard;

/// A record's key: the storage key's digest (see `StorageKey::digest`).
type Key = [u8; 32];

/// An in-process store: the embedded default, for one server process.
///
/// Records live in this process only; use the Redis or Postgres store when
/// several processes serve the same routes.
///
/// It is bounded by the bytes it holds (keys, fingerprints, stored
/// responses and bookkeeping; [`MemoryStore::DEFAULT_MAX_BYTES`] unless set
/// with [`MemoryStore::with_max_bytes`]). Records are freed as they expire,
/// through an index by deadline. When the bound is reached, new claims fail
/// with [`StoreError::Full`] (the runtime answers 503) rather than evicting a
/// live record, which would silently break at-most-once; the first refusal
/// of each such episode is logged, naming the setting. A response that
/// would not fit is refused at completion with [`StoreError::Full`] (the
/// runtime then keeps a small "processed" record instead).
///
/// Records are spread over [`MemoryStore::SHARDS`] independently locked
/// shards by their key: concurrent requests rarely wait for each other, and
/// a growing map rehashes one shard at a time, never the whole store under
/// one lock.
///
/// Its size is published as gauges: [`MemoryStore::BYTES_METRIC`],
/// [`MemoryStore::RECORDS_METRIC`] and [`MemoryStore::MAX_BYTES_METRIC`].
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    totals: Totals,
    max_entries: usize,
    max_bytes: usize,
}

/// Most expired records of its shard freed by one call (besides the one it
/// touches): a burst of expiries is spread over the calls that follow.
const FREE_PER_CALL: usize = 64;

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// Default bound on the bytes held (256 MiB: about half a million
    /// records of a small JSON response).
    pub const DEFAULT_MAX_BYTES: usize = 256 << 20;
    /// Number of independently locked shards the records are spread over.
    pub const SHARDS: usize = 64;
    /// Gauge of the bytes held, as the bound counts them.
    pub const BYTES_METRIC: &'static str = "idem_memory_store_bytes";
    /// Gauge of the records held (in flight, completed and released).
    pub const RECORDS_METRIC: &'static str = "idem_memory_store_records";
    /// Gauge of the bound on the bytes held.
    pub const MAX_BYTES_METRIC: &'static str = "idem_memory_store_max_bytes";

    /// A store bounded by [`MemoryStore::DEFAULT_MAX_BYTES`].
    pub fn new() -> Self {
        Self::with_max_bytes(Self::DEFAULT_MAX_BYTES)
    }

    /// A store holding at most `max_bytes` (keys, fingerprints, responses
    /// and bookkeeping).
    pub fn with_max_bytes(max_bytes: usize) -> Self {
        Self::with_limits(usize::MAX, max_bytes)
    }

    /// A store holding at most `max_entries` records and `max_bytes`.
    pub fn with_limits(max_entries: usize, max_bytes: usize) -> Self {
        metrics::gauge!(Self::MAX_BYTES_METRIC).set(max_bytes as f64);
        Self {
            shards: (0..Self::SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            totals: Totals::default(),
            max_entries: max_entries.max(1),
            max_bytes,
        }
    }

    /// Number of records held, expired ones not yet freed included.
    pub fn len(&self) -> usize {
        self.totals.records()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held, as the bound counts them.
    pub fn bytes(&self) -> usize {
        self.totals.bytes()
    }

    /// The shard of `key` (its digest is a SHA-256: any byte spreads keys
    /// evenly).
    fn shard(&self, key: &StorageKey) -> &Mutex<Shard> {
        &self.shards[usize::from(key.digest()[0]) % Self::SHARDS]
    }

    /// Frees expired records of another shard, picked by `key` too (other
    /// bits of its hash), unless that shard is busy: every shard's expired
    /// records are freed as calls go by, whichever keys they touch.
    fn sweep_beside(&self, key: &StorageKey, now: Instant) {
        let other = usize::from(key.digest()[1]) % Self::SHARDS;
        if let Some(mut shard) = self.shards[other].try_lock() {
            shard.free_expired(now, FREE_PER_CALL, &self.totals);
        }
    }

    /// Takes room for `bytes` more (and one more record, with `record`),
    /// freeing expired records of every shard first if the store is full.
    fn reserve(&self, bytes: usize, record: bool) -> bool {
        let totals = &self.totals;
        if totals.reserve(bytes, record, self.max_bytes, self.max_entries) {
            return true;
        }
        self.free_all_expired();
        totals.reserve(bytes, record, self.max_bytes, self.max_entries)
    }

    /// Frees the expired records of every shard, one shard lock at a time
    /// (the caller holds none).
    fn free_all_expired(&self) {
        let now = Instant::now();
        for shard in &self.shards {
            shard.lock().free_expired(now, usize::MAX, &self.totals);
        }
    }

    fn full(&self) -> StoreError {
        let (records, bytes) = (self.totals.records(), self.totals.bytes());
        let detail =
            format!("{records} records, {bytes} bytes of at most {} (MemoryStore::with_max_bytes)", self.max_bytes);
        if !self.totals.full.swap(true, std::sync::atomic::Ordering::AcqRel) {
            tracing::error!(
                records,
                bytes,
                max_bytes = self.max_bytes,
                "the memory store is full: new keys get 503 until records expire; \
                 raise MemoryStore::with_max_bytes, shorten ttl, or use Redis or Postgres"
            );
        }
        StoreError::Full { store: "memory", detail }
    }

    /// A claim found room: ends a full episode, if one was on.
    fn has_room(&self) {
        if self.totals.full.load(std::sync::atomic::Ordering::Acquire)
            && self.totals.full.swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            tracing::info!(bytes = self.totals.bytes(), "the memory store has room again");
        }
    }

    fn publish(&self) {
        metrics::gauge!(MemoryStore::BYTES_METRIC).set(self.totals.bytes() as f64);
        metrics::gauge!(MemoryStore::RECORDS_METRIC).set(self.totals.records() as f64);
    }
}

impl MemoryStore {
    /// One claim under the key's shard lock; `None` when another claim took
    /// the key while room was being made, or when a tombstone found no room
    /// before the expired records of every shard were freed (`swept`): the
    /// claim must look again.
    fn try_claim(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        token: FencingToken,
        terms: &ClaimTerms,
        swept: bool,
    ) -> Option<Result<Claim, StoreError>> {
        let now = Instant::now();
        let lease_until = later(now, terms.lease);
        let expires_at = later(now, terms.ttl).max(lease_until);
        let mut shard = self.shard(key).lock();
        shard.free_expired(now, FREE_PER_CALL, &self.totals);
        if let Some(entry) = shard.records.get_mut(key.digest())
            && entry.expires_at > now
        {
            if entry.fingerprint != *fingerprint {
                return Some(Ok(Claim::Mismatch));
            }
            let attempt = match &mut entry.state {
                State::Completed { response } => {
                    // Copied out of the lock: a hot key's replays contend
                    // for it only as long as a reference count takes.
                    let response = std::sync::Arc::clone(response);
                    drop(shard);
                    return Some(Ok(Claim::Replay(StoredResponse::clone(&response))));
                }
                // This very claim, made again (its token is new to every
                // other claim): still its own, whatever is left of its lease.
                State::InFlight { token: held, steps, .. } if *held == token => {
                    let steps = steps.clone();
                    return Some(Ok(Claim::Acquired { token, attempt: entry.attempt, steps }));
                }
                State::InFlight { held: true, .. } => return Some(Ok(Claim::Held { newly: false })),
                &mut State::InFlight { lease_until, .. } if lease_until > now => {
                    return Some(Ok(Claim::InFlight { retry_after: lease_until - now }));
                }
                // A lapsed lease no claim had found so: its holder gets a
                // grace to renew or complete (it may only have been cut off
                // from the store); the first claim after it takes over.
                State::InFlight { lease_until, graced: graced @ false, .. } => {
                    let grace = grace(terms.lease);
                    *lease_until = later(now, grace);
                    *graced = true;
                    entry.expires_at = entry.expires_at.max(*lease_until);
                    return Some(Ok(Claim::InFlight { retry_after: grace }));
                }
                // Lapsed past its grace, on a route that never runs an
                // execution twice by itself: held for an operator.
                State::InFlight { held, .. } if terms.on_lapse == OnLapse::Hold => {
                    *held = true;
                    return Some(Ok(Claim::Held { newly: true }));
                }
                // A tombstone or a lapsed lease of this same request: take it over.
                State::Released { .. } => Attempt::AfterRelease,
                State::InFlight { .. } => Attempt::Takeover,
            };
            // A tombstone reserves no room for its completion yet.
            if attempt == Attempt::AfterRelease && !self.totals.reserve(RESERVED, false, self.max_bytes, usize::MAX) {
                if swept {
                    return Some(Err(self.full()));
                }
                // Room may be held by expired records of other shards.
                drop(shard);
                self.free_all_expired();
                return None;
            }
            // A takeover, or a claim after a release, keeps the steps
            // recorded before it (and their room).
            let steps = match std::mem::replace(&mut entry.state, State::Released { steps: Vec::new() }) {
                State::InFlight { steps, .. } | State::Released { steps } => steps,
                State::Completed { .. } => Vec::new(),
            };
            let earlier = expires_at < entry.expires_at;
            entry.expires_at = expires_at;
            entry.state = State::InFlight { token, lease_until, graced: false, held: false, steps: steps.clone() };
            entry.attempt = attempt;
            entry.route.clone_from(&terms.route);
            entry.claimed_at = SystemTime::now();
            if earlier {
                shard.index(*key.digest(), expires_at);
            }
            drop(shard);
            self.sweep_beside(key, now);
            self.has_room();
            self.publish();
            return Some(Ok(Claim::Acquired { token, attempt, steps }));
        }
        // No record, or an expired one.
        shard.remove(key.digest(), &self.totals);
        let size = shard::OVERHEAD + RESERVED;
        if !self.totals.reserve(size, true, self.max_bytes, self.max_entries) {
            // Room may be held by expired records of other shards: free
            // them (never holding two shard locks at once), then try again.
            drop(shard);
            if !self.reserve(size, true) {
                return Some(Err(self.full()));
            }
            shard = self.shard(key).lock();
            if shard.records.get(key.digest()).is_some_and(|entry| entry.expires_at > now) {
                // Another claim took the key meanwhile: answer as it stands.
                drop(shard);
                self.totals.free(size, true);
                return None;
            }
            shard.remove(key.digest(), &self.totals);
        }
        let state = State::InFlight { token, lease_until, graced: false, held: false, steps: Vec::new() };
        let entry = shard::Entry {
            fingerprint: *fingerprint,
            expires_at,
            state,
            route: terms.route.clone(),
            claimed_at: SystemTime::now(),
            attempt: Attempt::First,
        };
        shard.records.insert(*key.digest(), entry);
        shard.index(*key.digest(), expires_at);
        drop(shard);
        self.sweep_beside(key, now);
        self.has_room();
        self.publish();
        Some(Ok(Claim::Acquired { token, attempt: Attempt::First, steps: Vec::new() }))
    }

    /// Turns the in-flight record of `key` that holds `token` into a
    /// tombstone; a held one only if `held_too`.
    fn release_if(&self, key: &StorageKey, token: FencingToken, held_too: bool) -> Fence {
        let now = Instant::now();
        let mut shard = self.shard(key).lock();
        match shard.records.get_mut(key.digest()) {
            Some(entry)
                if entry.owned_by(token, now)
                    && (held_too || !matches!(entry.state, State::InFlight { held: true, .. })) =>
            {
                // The tombstone keeps the steps (and their room).
                if let State::InFlight { steps, .. } = &mut entry.state {
                    entry.state = State::Released { steps: std::mem::take(steps) };
                }
                self.totals.free(RESERVED, false);
                drop(shard);
                self.publish();
                Fence::Held
            }
            _ => Fence::Lost,
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn claim_with(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        token: FencingToken,
        terms: &ClaimTerms,
    ) -> Result<Claim, StoreError> {
        let mut swept = false;
        loop {
            if let Some(claim) = self.try_claim(key, fingerprint, token, terms, swept) {
                return claim;
            }
            swept = true;
        }
    }

    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError> {
        let now = Instant::now();
        let mut shard = self.shard(key).lock();
        match shard.records.get_mut(key.digest()) {
            Some(entry) if entry.owned_by(token, now) => {
                let lease_until = later(now, lease);
                if let State::InFlight { lease_until: until, graced, held: false, .. } = &mut entry.state {
                    *until = lease_until;
                    // The holder is alive: a grace a claim gave ends.
                    *graced = false;
                }
                // Only ever later: the record's index entry comes up first,
                // and moves it then (see `Shard::free_expired`).
                entry.expires_at = entry.expires_at.max(lease_until);
                Ok(Fence::Held)
            }
            _ => Ok(Fence::Lost),
        }
    }

    async fn complete(
        &self,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, StoreError> {
        let size = response.size();
        // The record's reservation always holds a small one; a larger one
        // takes the rest. Room for it may be held by expired records of
        // other shards: those are freed (holding no shard lock) before the
        // response is refused.
        let extra = size.saturating_sub(RESERVED);
        let mut swept = false;
        let (now, mut shard) = loop {
            let now = Instant::now();
            let shard = self.shard(key).lock();
            if !shard.records.get(key.digest()).is_some_and(|entry| entry.owned_by(token, now)) {
                return Ok(Fence::Lost);
            }
            if extra == 0 || self.totals.reserve(extra, false, self.max_bytes, usize::MAX) {
                break (now, shard);
            }
            if swept {
                return Err(StoreError::Full {
                    store: "memory",
                    detail: format!(
                        "a stored response of {size} bytes does not fit: {} bytes of at most {} in use \
                         (MemoryStore::with_max_bytes)",
                        self.totals.bytes(),
                        self.max_bytes
                    ),
                });
            }
            drop(shard);
            self.free_all_expired();
            swept = true;
        };
        // Owned (checked under this lock), and the room is taken.
        let Some(entry) = shard.records.get_mut(key.digest()) else { return Ok(Fence::Lost) };
        if size <= RESERVED {
            self.totals.free(RESERVED - size, false);
        }
        // The steps go with the completion (and their room).
        if let State::InFlight { steps, .. } = &entry.state {
            self.totals.free(shard::steps_size(steps), false);
        }
        // The body copied: the caller's may be a slice of a larger buffer,
        // or carry spare capacity, which the bound would not count.
        let kept = StoredResponse {
            status: response.status,
            headers: response.headers.clone(),
            body: bytes::Bytes::copy_from_slice(&response.body),
        };
        entry.state = State::Completed { response: std::sync::Arc::new(kept) };
        let expires_at = later(now, ttl);
        // A later end (the usual case) waits for the record's index entry
        // to come up; an earlier one is indexed now.
        let earlier = expires_at < entry.expires_at;
        entry.expires_at = expires_at;
        if earlier {
            shard.index(*key.digest(), expires_at);
        }
        shard.free_expired(now, FREE_PER_CALL, &self.totals);
        drop(shard);
        self.sweep_beside(key, now);
        self.publish();
        Ok(Fence::Held)
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        Ok(self.release_if(key, token, true))
    }

    async fn release_unless_held(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        Ok(self.release_if(key, token, false))
    }

    async fn record_step(&self, key: &StorageKey, token: FencingToken, step: &Step) -> Result<Fence, StoreError> {
        let now = Instant::now();
        let mut shard = self.shard(key).lock();
        let Some(entry) = shard.records.get_mut(key.digest()).filter(|entry| entry.owned_by(token, now)) else {
            return Ok(Fence::Lost);
        };
        let State::InFlight { steps, .. } = &mut entry.state else { return Ok(Fence::Lost) };
        if steps.iter().any(|kept| kept.name == step.name) {
            return Ok(Fence::Held);
        }
        if !self.totals.reserve(step.size(), false, self.max_bytes, usize::MAX) {
            return Err(StoreError::Full {
                store: "memory",
                detail: format!(
                    "a step result of {} bytes does not fit: {} bytes of at most {} in use \
                     (MemoryStore::with_max_bytes)",
                    step.result.len(),
                    self.totals.bytes(),
                    self.max_bytes
                ),
            });
        }
        // Copied, as a response is: the caller's may be a slice of more.
        steps.push(Step { name: step.name.clone(), result: bytes::Bytes::copy_from_slice(&step.result) });
        drop(shard);
        self.publish();
        Ok(Fence::Held)
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        let now = Instant::now();
        let shard = self.shard(key).lock();
        let Some(entry) = shard.records.get(key.digest()).filter(|e| e.expires_at > now) else {
            return Ok(None);
        };
        Ok(Some(entry.record(now)))
    }
}

/// Records past their TTL are freed as new claims need the room, and by
/// this (a sweeper, or a test).
#[async_trait]
impl PurgeExpired for MemoryStore {
    async fn purge_expired(&self, batch: usize) -> Result<u64, StoreError> {
        let now = Instant::now();
        let mut freed = 0;
        for shard in &self.shards {
            let left = (batch as u64).saturating_sub(freed);
            if left == 0 {
                break;
            }
            freed += shard.lock().free_expired(now, usize::try_from(left).unwrap_or(usize::MAX), &self.totals);
        }
        self.publish();
        Ok(freed)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod room_and_races;
