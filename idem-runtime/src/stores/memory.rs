//! The embedded, process-local store.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::fingerprint::Fingerprint;
use crate::record::{Record, RecordState, StoredResponse};
use crate::scope::StorageKey;
use crate::store::{Attempt, Claim, Fence, FencingToken, Store, StoreError};

/// An in-process store: the embedded default, for one server process.
///
/// A response that would take the stored bytes over `max_bytes` is refused
/// at completion with [`StoreError::Full`] (the runtime then keeps a small
/// "processed" record instead).
///
/// Records live in this process only; use the Redis or Postgres store when
/// several processes serve the same routes. It is bounded: when it holds
/// `max_entries` live records or `max_bytes` of stored responses, expired
/// records are purged first, and if that is not enough new claims fail with
/// [`StoreError::Full`] (the runtime answers 503) rather than evicting a live
/// record, which would silently break at-most-once.
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct Inner {
    records: HashMap<String, Entry>,
    /// Sum of the sizes of stored responses.
    bytes: usize,
    /// When the store last scanned everything for expired records.
    last_full_purge: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    fingerprint: Fingerprint,
    /// End of the record (its TTL), whatever its state.
    expires_at: Instant,
    state: State,
}

#[derive(Debug)]
enum State {
    InFlight { token: FencingToken, lease_until: Instant },
    Completed { response: StoredResponse },
    Released,
}

impl Entry {
    /// Bytes counted against `max_bytes`: an in-flight record reserves
    /// room for a small record, so that its completion always has a place,
    /// at worst for the "processed" problem that replaces a response the
    /// store refuses.
    fn size(&self) -> usize {
        match &self.state {
            State::Completed { response } => response.size(),
            State::InFlight { .. } => RESERVED,
            State::Released => 0,
        }
    }

    fn owned_by(&self, token: FencingToken, now: Instant) -> bool {
        matches!(self.state, State::InFlight { token: t, lease_until } if t == token && lease_until > now)
    }
}

/// `now + duration`, saturating far in the future instead of overflowing.
fn deadline(now: Instant, duration: Duration) -> Instant {
    now.checked_add(duration).unwrap_or_else(|| now + FAR_FUTURE)
}

/// Bytes each in-flight record reserves (see [`Entry::size`]).
const RESERVED: usize = 1024;

/// What "forever" means to [`deadline`] (about a century).
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Least time between two full purges of a full store: the scan holds the
/// lock, and a full store must not pay for it on every claim.
const FULL_PURGE_INTERVAL: Duration = Duration::from_millis(100);

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// Default bound on records (100 000).
    pub const DEFAULT_MAX_ENTRIES: usize = 100_000;
    /// Default bound on stored response bytes (256 MiB).
    pub const DEFAULT_MAX_BYTES: usize = 256 << 20;

    /// A store with the default bounds ([`MemoryStore::DEFAULT_MAX_ENTRIES`],
    /// [`MemoryStore::DEFAULT_MAX_BYTES`]).
    pub fn new() -> Self {
        Self::with_limits(Self::DEFAULT_MAX_ENTRIES, Self::DEFAULT_MAX_BYTES)
    }

    /// A store holding at most `max_entries` records and `max_bytes` of
    /// stored responses.
    pub fn with_limits(max_entries: usize, max_bytes: usize) -> Self {
        Self { inner: Mutex::new(Inner::default()), max_entries: max_entries.max(1), max_bytes }
    }

    /// Number of records held, expired ones not yet purged included.
    pub fn len(&self) -> usize {
        self.inner.lock().records.len()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl MemoryStore {
    fn full(&self, records: usize, bytes: usize) -> StoreError {
        StoreError::Full {
            store: "memory",
            detail: format!(
                "{records} live records of at most {}, {bytes} bytes of at most {}",
                self.max_entries, self.max_bytes
            ),
        }
    }
}

impl Inner {
    fn remove(&mut self, key: &str) {
        if let Some(entry) = self.records.remove(key) {
            self.bytes -= entry.size();
        }
    }

    fn purge(&mut self, now: Instant, batch: usize) -> u64 {
        let expired: Vec<String> = self
            .records
            .iter()
            .filter(|(_, entry)| entry.expires_at <= now)
            .map(|(key, _)| key.clone())
            .take(batch)
            .collect();
        for key in &expired {
            self.remove(key);
        }
        expired.len() as u64
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn claim(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        lease: Duration,
        ttl: Duration,
    ) -> Result<Claim, StoreError> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        let token = FencingToken::generate();
        let lease_until = deadline(now, lease);
        let expires_at = deadline(now, ttl).max(lease_until);
        let (bytes, records) = (inner.bytes, inner.records.len());
        let mut took_over = None;
        if let Some(entry) = inner.records.get_mut(key.as_str())
            && entry.expires_at > now
        {
            if entry.fingerprint != *fingerprint {
                return Ok(Claim::Mismatch);
            }
            match &entry.state {
                State::Completed { response } => return Ok(Claim::Replay(response.clone())),
                State::InFlight { lease_until, .. } if *lease_until > now => {
                    return Ok(Claim::InFlight { retry_after: *lease_until - now });
                }
                // A tombstone or a lapsed lease of this same request: take it over.
                State::InFlight { .. } | State::Released => {
                    let (extra, attempt) = match entry.state {
                        State::Released => (RESERVED, Attempt::AfterRelease),
                        _ => (0, Attempt::Takeover),
                    };
                    if bytes + extra > self.max_bytes {
                        return Err(self.full(records, bytes));
                    }
                    let state = State::InFlight { token, lease_until };
                    *entry = Entry { fingerprint: *fingerprint, expires_at, state };
                    took_over = Some((extra, attempt));
                }
            }
        }
        if let Some((extra, attempt)) = took_over {
            inner.bytes += extra;
            return Ok(Claim::Acquired { token, attempt });
        }
        inner.remove(key.as_str());
        let crowded =
            |inner: &Inner| inner.records.len() >= self.max_entries || inner.bytes + RESERVED > self.max_bytes;
        if crowded(&inner) {
            if inner.last_full_purge.is_none_or(|at| now.duration_since(at) >= FULL_PURGE_INTERVAL) {
                inner.last_full_purge = Some(now);
                inner.purge(now, usize::MAX);
            }
            if crowded(&inner) {
                return Err(self.full(inner.records.len(), inner.bytes));
            }
        }
        inner.bytes += RESERVED;
        let entry = Entry { fingerprint: *fingerprint, expires_at, state: State::InFlight { token, lease_until } };
        inner.records.insert(key.as_str().to_owned(), entry);
        Ok(Claim::Acquired { token, attempt: Attempt::First })
    }

    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        match inner.records.get_mut(key.as_str()) {
            Some(entry) if entry.owned_by(token, now) => {
                let lease_until = deadline(now, lease);
                entry.state = State::InFlight { token, lease_until };
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
        let now = Instant::now();
        let mut inner = self.inner.lock();
        let size = response.size();
        let bytes = inner.bytes;
        match inner.records.get_mut(key.as_str()) {
            Some(entry) if entry.owned_by(token, now) => {
                // The record's reservation always holds a small one.
                let total = bytes - RESERVED + size;
                if size > RESERVED && total > self.max_bytes {
                    return Err(StoreError::Full {
                        store: "memory",
                        detail: format!(
                            "a stored response of {size} bytes does not fit: {bytes} bytes of at most {} in use",
                            self.max_bytes
                        ),
                    });
                }
                entry.state = State::Completed { response: response.clone() };
                entry.expires_at = deadline(now, ttl);
                inner.bytes = total;
                Ok(Fence::Held)
            }
            _ => Ok(Fence::Lost),
        }
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        match inner.records.get_mut(key.as_str()) {
            Some(entry) if entry.owned_by(token, now) => {
                entry.state = State::Released;
                inner.bytes -= RESERVED;
                Ok(Fence::Held)
            }
            _ => Ok(Fence::Lost),
        }
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        let now = Instant::now();
        let inner = self.inner.lock();
        let Some(entry) = inner.records.get(key.as_str()).filter(|e| e.expires_at > now) else {
            return Ok(None);
        };
        let ttl_left = entry.expires_at - now;
        let state = match &entry.state {
            State::InFlight { token, lease_until } => RecordState::InFlight {
                token: *token,
                lease_left: lease_until.saturating_duration_since(now),
                ttl_left,
            },
            State::Completed { response } => RecordState::Completed { response: response.clone(), ttl_left },
            State::Released => RecordState::Released { ttl_left },
        };
        Ok(Some(Record { fingerprint: entry.fingerprint, state }))
    }

    async fn purge_expired(&self, batch: usize) -> Result<u64, StoreError> {
        Ok(self.inner.lock().purge(Instant::now(), batch))
    }
}
