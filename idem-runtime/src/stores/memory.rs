//! The embedded, process-local store.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::fingerprint::Fingerprint;
use crate::record::{Record, RecordState, StoredResponse};
use crate::scope::StorageKey;
use crate::store::{Attempt, Claim, Fence, FencingToken, Store, StoreError};

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
/// Its size is published as gauges: [`MemoryStore::BYTES_METRIC`],
/// [`MemoryStore::RECORDS_METRIC`] and [`MemoryStore::MAX_BYTES_METRIC`].
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct Inner {
    records: HashMap<Arc<str>, Entry>,
    /// Every record's end, soonest first. An entry whose record has moved
    /// its end (or is gone) is stale and skipped when it comes up.
    deadlines: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    /// What the records take, as [`Entry::size`] counts it.
    bytes: usize,
    /// A claim was refused for lack of room, and that was logged.
    full: bool,
}

#[derive(Debug)]
struct Entry {
    /// The map's own key, shared with the deadline index.
    key: Arc<str>,
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
    /// Bytes counted against `max_bytes`, besides the key and the fixed
    /// [`OVERHEAD`]: an in-flight record reserves room for a small record, so
    /// that its completion always has a place, at worst for the "processed"
    /// problem that replaces a response the store refuses.
    fn state_size(&self) -> usize {
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

/// What a record costs besides its key and state, an estimate on the
/// generous side: its map slot (with the map's slack), two entries in the
/// deadline index, the key's allocation, the fingerprint, and the
/// allocations of a stored response's body and headers.
const OVERHEAD: usize = 384;

/// `now + duration`, saturating far in the future instead of overflowing.
fn deadline(now: Instant, duration: Duration) -> Instant {
    now.checked_add(duration).unwrap_or_else(|| now + FAR_FUTURE)
}

/// Bytes each in-flight record reserves (see [`Entry::state_size`]).
const RESERVED: usize = 1024;

/// What "forever" means to [`deadline`] (about a century).
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Most expired records freed by one call (besides the one it touches):
/// a burst of expiries is spread over the calls that follow.
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
        Self { inner: Mutex::new(Inner::default()), max_entries: max_entries.max(1), max_bytes }
    }

    /// Number of records held, expired ones not yet freed included.
    pub fn len(&self) -> usize {
        self.inner.lock().records.len()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held, as the bound counts them.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }

    fn full(&self, inner: &mut Inner) -> StoreError {
        let detail = format!(
            "{} records, {} bytes of at most {} (MemoryStore::with_max_bytes)",
            inner.records.len(),
            inner.bytes,
            self.max_bytes
        );
        if !inner.full {
            inner.full = true;
            tracing::error!(
                records = inner.records.len(),
                bytes = inner.bytes,
                max_bytes = self.max_bytes,
                "the memory store is full: new keys get 503 until records expire; \
                 raise MemoryStore::with_max_bytes, shorten ttl, or use Redis or Postgres"
            );
        }
        StoreError::Full { store: "memory", detail }
    }

    fn crowded(&self, inner: &Inner, extra: usize) -> bool {
        inner.records.len() >= self.max_entries || inner.bytes + extra > self.max_bytes
    }
}

impl Inner {
    fn remove(&mut self, key: &str) {
        if let Some((key, entry)) = self.records.remove_entry(key) {
            self.bytes -= OVERHEAD + key.len() + entry.state_size();
        }
    }

    /// Frees up to `batch` records whose end has come, soonest first.
    fn free_expired(&mut self, now: Instant, batch: usize) -> u64 {
        let mut freed = 0;
        while freed < batch as u64 {
            match self.deadlines.peek() {
                Some(Reverse((at, _))) if *at <= now => {}
                _ => break,
            }
            let Some(Reverse((at, key))) = self.deadlines.pop() else { break };
            // Only the index entry of the record's current end frees it.
            if self.records.get(&key).is_some_and(|entry| entry.expires_at == at) {
                self.remove(&key);
                freed += 1;
            }
        }
        freed
    }

    /// Records `key`'s new end in the index (and rebuilds the index when
    /// stale entries pile up: one key claimed, released and claimed again
    /// adds one each time).
    fn index(&mut self, key: Arc<str>, at: Instant) {
        self.deadlines.push(Reverse((at, key)));
        self.compact();
    }

    /// The index holds one entry per record and per moved end; when stale
    /// entries outnumber records, it is rebuilt.
    fn compact(&mut self) {
        if self.deadlines.len() > 2 * self.records.len() + 1024 {
            self.deadlines = self.records.values().map(|e| Reverse((e.expires_at, Arc::clone(&e.key)))).collect();
        }
    }

    fn publish(&self) {
        metrics::gauge!(MemoryStore::BYTES_METRIC).set(self.bytes as f64);
        metrics::gauge!(MemoryStore::RECORDS_METRIC).set(self.records.len() as f64);
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
        inner.free_expired(now, FREE_PER_CALL);
        let lease_until = deadline(now, lease);
        let expires_at = deadline(now, ttl).max(lease_until);
        let bytes = inner.bytes;
        let mut took_over = None;
        if let Some(entry) = inner.records.get_mut(key.as_str())
            && entry.expires_at > now
        {
            if entry.fingerprint != *fingerprint {
                return Ok(Claim::Mismatch);
            }
            match &entry.state {
                State::Completed { response } => return Ok(Claim::Replay(response.clone())),
                &State::InFlight { lease_until, .. } if lease_until > now => {
                    return Ok(Claim::InFlight { retry_after: lease_until - now });
                }
                // A tombstone or a lapsed lease of this same request: take it over.
                State::InFlight { .. } | State::Released => {
                    let (extra, attempt) = match entry.state {
                        State::Released => (RESERVED, Attempt::AfterRelease),
                        _ => (0, Attempt::Takeover),
                    };
                    if bytes + extra > self.max_bytes {
                        return Err(self.full(&mut inner));
                    }
                    let token = FencingToken::generate();
                    entry.fingerprint = *fingerprint;
                    entry.expires_at = expires_at;
                    entry.state = State::InFlight { token, lease_until };
                    took_over = Some((Arc::clone(&entry.key), extra, token, attempt));
                }
            }
        }
        if let Some((stored_key, extra, token, attempt)) = took_over {
            inner.bytes += extra;
            inner.index(stored_key, expires_at);
            inner.publish();
            return Ok(Claim::Acquired { token, attempt });
        }
        // No record, or an expired one.
        inner.remove(key.as_str());
        let size = OVERHEAD + key.as_str().len() + RESERVED;
        if self.crowded(&inner, size) {
            inner.free_expired(now, usize::MAX);
            if self.crowded(&inner, size) {
                return Err(self.full(&mut inner));
            }
        }
        if inner.full {
            inner.full = false;
            tracing::info!(bytes = inner.bytes, "the memory store has room again");
        }
        let token = FencingToken::generate();
        let stored_key: Arc<str> = Arc::from(key.as_str());
        let state = State::InFlight { token, lease_until };
        let entry = Entry { key: Arc::clone(&stored_key), fingerprint: *fingerprint, expires_at, state };
        inner.records.insert(Arc::clone(&stored_key), entry);
        inner.bytes += size;
        inner.index(stored_key, expires_at);
        inner.publish();
        Ok(Claim::Acquired { token, attempt: Attempt::First })
    }

    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        let moved = match inner.records.get_mut(key.as_str()) {
            Some(entry) if entry.owned_by(token, now) => {
                let lease_until = deadline(now, lease);
                entry.state = State::InFlight { token, lease_until };
                let moved = lease_until > entry.expires_at;
                entry.expires_at = entry.expires_at.max(lease_until);
                moved.then(|| (Arc::clone(&entry.key), entry.expires_at))
            }
            _ => return Ok(Fence::Lost),
        };
        if let Some((stored_key, at)) = moved {
            inner.index(stored_key, at);
        }
        Ok(Fence::Held)
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
        let (stored_key, expires_at) = match inner.records.get_mut(key.as_str()) {
            Some(entry) if entry.owned_by(token, now) => {
                // The record's reservation always holds a small one.
                let total = bytes - RESERVED + size;
                if size > RESERVED && total > self.max_bytes {
                    return Err(StoreError::Full {
                        store: "memory",
                        detail: format!(
                            "a stored response of {size} bytes does not fit: {bytes} bytes of at most {} in use \
                             (MemoryStore::with_max_bytes)",
                            self.max_bytes
                        ),
                    });
                }
                entry.state = State::Completed { response: response.clone() };
                entry.expires_at = deadline(now, ttl);
                (Arc::clone(&entry.key), entry.expires_at)
            }
            _ => return Ok(Fence::Lost),
        };
        inner.bytes = bytes - RESERVED + size;
        inner.index(stored_key, expires_at);
        inner.free_expired(now, FREE_PER_CALL);
        inner.publish();
        Ok(Fence::Held)
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        match inner.records.get_mut(key.as_str()) {
            Some(entry) if entry.owned_by(token, now) => {
                entry.state = State::Released;
                inner.bytes -= RESERVED;
                inner.publish();
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
        let mut inner = self.inner.lock();
        let freed = inner.free_expired(Instant::now(), batch);
        inner.publish();
        Ok(freed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::RequestParts;
    use crate::key::IdempotencyKey;
    use crate::scope::Scope;

    fn key(n: usize) -> StorageKey {
        let key = IdempotencyKey::parse(format!("k-{n}").as_bytes()).unwrap();
        StorageKey::new(Scope::Global, None, "POST", "/", &key)
    }

    fn fingerprint() -> Fingerprint {
        Fingerprint::of(&RequestParts {
            method: "POST",
            path: "/",
            query: "",
            headers: &[],
            content_type: None,
            body: b"{}",
        })
    }

    fn response() -> StoredResponse {
        StoredResponse { status: 201, headers: vec![], body: vec![b'x'; 100].into() }
    }

    /// Claims and completes `key`.
    async fn keep(store: &MemoryStore, key: &StorageKey, ttl: Duration) -> Result<(), StoreError> {
        let Claim::Acquired { token, .. } = store.claim(key, &fingerprint(), ttl / 2, ttl).await? else {
            panic!("not acquired");
        };
        assert_eq!(store.complete(key, token, &response(), ttl).await?, Fence::Held);
        Ok(())
    }

    #[tokio::test]
    async fn records_are_freed_as_they_expire() {
        let store = MemoryStore::new();
        for n in 0..200 {
            keep(&store, &key(n), Duration::from_millis(40)).await.unwrap();
        }
        assert_eq!(store.len(), 200);
        let one = store.bytes() / 200;
        assert!(one >= OVERHEAD + 100, "{one} bytes a record");
        tokio::time::sleep(Duration::from_millis(80)).await;
        // Each call frees a bounded batch of the expired records, soonest
        // first, without scanning the live ones.
        for n in 1000..1004 {
            keep(&store, &key(n), Duration::from_secs(60)).await.unwrap();
        }
        assert_eq!(store.len(), 4);
        assert_eq!(store.bytes(), 4 * one);
    }

    #[tokio::test]
    async fn a_full_store_refuses_new_keys_until_records_expire() {
        let store = MemoryStore::with_max_bytes(4 * (OVERHEAD + 40 + RESERVED));
        let mut kept = 0;
        let refused = loop {
            match keep(&store, &key(kept), Duration::from_millis(60)).await {
                Ok(()) => kept += 1,
                Err(error) => break error,
            }
        };
        assert!(matches!(&refused, StoreError::Full { detail, .. } if detail.contains("with_max_bytes")), "{refused}");
        assert!(kept >= 3, "{kept} kept");
        // Replays of what is kept still work while full.
        assert!(matches!(
            store.claim(&key(0), &fingerprint(), Duration::from_secs(1), Duration::from_secs(1)).await,
            Ok(Claim::Replay(_))
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        keep(&store, &key(999), Duration::from_secs(60)).await.unwrap();
        assert_eq!(store.len(), 1, "the expired records made room");
    }

    #[tokio::test]
    async fn the_index_stays_small_when_one_key_is_claimed_again_and_again() {
        let store = MemoryStore::new();
        let k = key(7);
        for _ in 0..20_000 {
            let Claim::Acquired { token, .. } =
                store.claim(&k, &fingerprint(), Duration::from_secs(30), Duration::from_secs(3600)).await.unwrap()
            else {
                panic!("not acquired");
            };
            assert_eq!(store.release(&k, token).await.unwrap(), Fence::Held);
        }
        let index = store.inner.lock().deadlines.len();
        assert!(index <= 2 + 1024 + 1, "{index} index entries for one record");
    }

    #[tokio::test]
    async fn stale_index_entries_never_free_a_live_record() {
        let store = MemoryStore::new();
        let k = key(1);
        let Claim::Acquired { token, .. } =
            store.claim(&k, &fingerprint(), Duration::from_millis(20), Duration::from_millis(30)).await.unwrap()
        else {
            panic!()
        };
        // Completed with a long TTL: its claim-time end is now stale.
        assert_eq!(store.complete(&k, token, &response(), Duration::from_secs(60)).await.unwrap(), Fence::Held);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(store.purge_expired(100).await.unwrap(), 0);
        assert!(matches!(
            store.claim(&k, &fingerprint(), Duration::from_secs(1), Duration::from_secs(1)).await,
            Ok(Claim::Replay(_))
        ));
    }
}
