//! A bounded in-process cache of completed records, in front of the store:
//! opt-in, with [`Idem::replay_cache`](crate::Idem::replay_cache).
//!
//! A completed record never changes before its TTL: nothing but its expiry
//! ends it (an operator settles only executions in flight or held). So a
//! replay this process has seen, or a completion it has stored, may be
//! answered again without asking the store, for a while.
//!
//! - **Looked up** by the storage key, before the claim. An entry answers
//!   only the request whose fingerprint it holds, and only until its end:
//!   every other request goes to the store, which decides as always (the
//!   cache never answers 409 or 422 by itself). A miss costs one hash
//!   lookup; a hit clones the headers, never the body (`Bytes`, shared).
//! - **Filled** from the store's replay, where the record's time left is
//!   not known: the entry ends `max_age` after the claim was sent, never
//!   later than the claim's TTL from then. And from this process's
//!   completion once the store confirmed it: `max_age` after the completion
//!   was sent, never later than the TTL counted from the claim (the record
//!   lives its TTL from its completion, which comes after). A completion
//!   whose outcome is unknown fills nothing.
//! - **Bounded** by entries and by bytes of stored responses (headers and
//!   body, as `StoredResponse::size` counts them). One weight bounds both:
//!   an entry weighs its response's size, and at least `max_bytes /
//!   max_entries`, in a cache of `max_bytes` (`quick_cache`, which evicts
//!   by how recently and how often entries were used).
//!
//! What staleness this allows, and why it is acceptable, is on
//! [`ReplayCache`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::{DefaultHashBuilder, OptionsBuilder, Weighter};

use crate::clock::later;
use crate::fingerprint::Fingerprint;
use crate::record::StoredResponse;
use crate::scope::StorageKey;

/// An in-process cache of completed records, in front of the store, so that
/// a replay this process has seen recently costs no store round trip: the
/// settings given to [`Idem::replay_cache`](crate::Idem::replay_cache).
/// Off unless set.
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::store::Store;
/// use idem_runtime::{Idem, ReplayCache};
///
/// // `store`: a `RedisStore` or a `PostgresStore`.
/// fn configure(store: impl Store + 'static) -> Idem {
///     Idem::new(store).replay_cache(
///         ReplayCache::new(10_000).max_bytes(64 << 20).max_age(Duration::from_secs(60)),
///     )
/// }
/// ```
///
/// It answers a request exactly as the store's replay would
/// (`Idempotent-Replayed: true`, counted `replayed`) when this process has
/// seen the record completed (replayed it, or stored its completion) less
/// than [`max_age`](ReplayCache::max_age) ago, and the request has the
/// same fingerprint. Anything else goes to the store: another body under
/// the key still gets 422 from the store.
///
/// **When to use it**: on Redis or Postgres, for retries that come in
/// bursts (a client or queue retrying a request whose answer it lost, a
/// webhook sender delivering twice) or hot keys replayed many times. The
/// memory store gains nothing from it (its claim is already an in-process
/// lookup) and only pays the cache's memory; it is allowed there all the
/// same.
///
/// **What it costs**: the memory of its bounds (an entry holds a response,
/// plus about 100 bytes); one hash lookup before every claim, one insertion
/// after every replay from the store and every completion. The cache is
/// split in up to 16 shards of at least 4 MiB each (one, in a smaller
/// cache), each bounded alone: a response larger than a shard is not kept,
/// and is replayed by the store as without the cache.
///
/// **What it may answer that the store would not.** A completed record
/// never changes before its TTL, so the cache is never stale for a record
/// the store still holds. It may outlive a record the store no longer
/// holds, by up to `max_age`:
///
/// - the record's TTL passed: an entry filled from a replay does not know
///   how long the record had left (an entry filled from this process's
///   completion does, and ends before the record);
/// - the record was removed behind the library's back (`DEL`, `FLUSHALL`, a
///   `DELETE` of the row), or lost by the store (a Redis restart without
///   persistence, a failover that lost the last writes).
///
/// In each case this process keeps replaying the response it saw for up to
/// `max_age`, where the store would run the handler again: the cache never
/// runs a handler, it may only hold back a re-run. Keep `max_age` short
/// (the default, [`ReplayCache::DEFAULT_MAX_AGE`], is a minute) where
/// records are removed by hand or TTLs are short.
///
/// An operator's `idem release` or `idem resolve` needs nothing from it:
/// they settle only executions in flight or held, which the cache never
/// holds. Each process has its own cache; processes share nothing but the
/// store, and a completion in one process fills only its own cache (the
/// others ask the store once, then keep it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayCache {
    max_entries: usize,
    max_bytes: usize,
    max_age: Duration,
}

impl ReplayCache {
    /// Default bound on the bytes of the responses kept (64 MiB).
    pub const DEFAULT_MAX_BYTES: usize = 64 << 20;
    /// Default longest time an entry answers (60 s): how long a record
    /// removed from the store behind the library's back may still be
    /// replayed by a process.
    pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(60);

    /// A cache of at most `max_entries` completed records, with the default
    /// [`max_bytes`](ReplayCache::max_bytes) and
    /// [`max_age`](ReplayCache::max_age). Zero keeps nothing.
    pub fn new(max_entries: usize) -> Self {
        Self { max_entries, max_bytes: Self::DEFAULT_MAX_BYTES, max_age: Self::DEFAULT_MAX_AGE }
    }

    /// Bound on the bytes of the responses kept, headers and body (default
    /// [`ReplayCache::DEFAULT_MAX_BYTES`]). Each entry counts at least
    /// `bytes / max_entries`, so that both bounds hold: with small responses
    /// the cache holds `max_entries` of them, with large ones fewer.
    pub fn max_bytes(self, bytes: usize) -> Self {
        Self { max_bytes: bytes, ..self }
    }

    /// Longest time an entry answers (default
    /// [`ReplayCache::DEFAULT_MAX_AGE`]), counted from before the store
    /// call that filled it, and never past the route's TTL. Zero keeps
    /// nothing.
    pub fn max_age(self, age: Duration) -> Self {
        Self { max_age: age, ..self }
    }
}

/// Most shards of the cache, each bounded alone, so that contention stays
/// low on many workers.
const MOST_SHARDS: u64 = 16;

/// Least bytes of a shard, unless the whole cache is smaller: a response
/// must fit in one shard to be kept. (`quick_cache` also keeps at least 32
/// entries per shard, using fewer shards for a cache of few entries.)
const SHARD_BYTES: u64 = 4 << 20;

/// The live cache of one configuration, built from its [`ReplayCache`].
pub(crate) struct Replays {
    entries: Cache<[u8; 32], Arc<Entry>, Weight>,
    settings: ReplayCache,
}

/// A completed record, as this process saw it.
struct Entry {
    /// The fingerprint of the request that completed it.
    fingerprint: Fingerprint,
    response: StoredResponse,
    /// When it stops answering.
    until: Instant,
}

/// An entry's weight: its response's size, and at least `least`.
#[derive(Clone)]
struct Weight {
    least: u64,
}

impl Weighter<[u8; 32], Arc<Entry>> for Weight {
    /// What the entry holds in memory: its body (copied to its own length
    /// when kept) and each header's name and value with their allocations.
    fn weight(&self, _: &[u8; 32], entry: &Arc<Entry>) -> u64 {
        let headers: usize = entry.response.headers.iter().map(|(n, v)| n.len() + v.len() + HEADER_OVERHEAD).sum();
        ((entry.response.body.len() + headers + ENTRY_OVERHEAD) as u64).max(self.least)
    }
}

/// What a kept header costs besides its bytes: its place in the list and
/// two allocations.
const HEADER_OVERHEAD: usize = 64;

/// What an entry costs besides its response: the entry, its key, its
/// place in the cache.
const ENTRY_OVERHEAD: usize = 128;

impl Replays {
    /// The cache `settings` describe; `None` when they keep nothing.
    pub(crate) fn new(settings: ReplayCache) -> Option<Self> {
        let ReplayCache { max_entries, max_bytes, max_age } = settings;
        if max_entries == 0 || max_bytes == 0 || max_age.is_zero() {
            return None;
        }
        let max_bytes = max_bytes as u64;
        // A power of two (`quick_cache` rounds up to one): shards of at
        // least `SHARD_BYTES`.
        let shards = 1 << (max_bytes / SHARD_BYTES).clamp(1, MOST_SHARDS).ilog2();
        // `max_entries` entries of `least` each fill `max_bytes`; an entry
        // is admitted only within about 97 % of a shard, so the least
        // weight stays below that (a cache of one entry keeps one).
        let least = max_bytes.div_ceil(max_entries as u64).min(max_bytes / shards as u64 * 9 / 10);
        let options = OptionsBuilder::new()
            .estimated_items_capacity(max_entries)
            .weight_capacity(max_bytes)
            .shards(shards)
            .build()
            .expect("every option is set");
        let entries =
            Cache::with_options(options, Weight { least }, DefaultHashBuilder::default(), DefaultLifecycle::default());
        Some(Self { entries, settings })
    }

    /// What it was built from.
    pub(crate) fn settings(&self) -> ReplayCache {
        self.settings
    }

    /// The response kept for `key` if it was completed by the request of
    /// `fingerprint` and has not reached its end: the clock is read only
    /// when there is such an entry.
    pub(crate) fn get(&self, key: &StorageKey, fingerprint: &Fingerprint) -> Option<StoredResponse> {
        self.get_at(key, fingerprint, Instant::now)
    }

    fn get_at(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        now: impl FnOnce() -> Instant,
    ) -> Option<StoredResponse> {
        let entry = self.entries.get(key.digest())?;
        (entry.fingerprint == *fingerprint && now() < entry.until).then(|| entry.response.clone())
    }

    /// Keeps `response`, which the store replayed to a claim of `key` sent
    /// at `sent` with `ttl`: the record's time left is unknown.
    pub(crate) fn replayed(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
        sent: Instant,
        ttl: Duration,
    ) {
        self.keep(key, fingerprint, response, later(sent, self.settings.max_age.min(ttl)));
    }

    /// Keeps `response`, whose completion of `key` (sent at `sent`, by an
    /// execution whose claim was sent at `claimed` with `ttl`) the store
    /// confirmed: the record lives `ttl` from the completion, so at least
    /// that long from the claim.
    pub(crate) fn completed(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
        sent: Instant,
        claimed: Instant,
        ttl: Duration,
    ) {
        self.keep(key, fingerprint, response, later(sent, self.settings.max_age).min(later(claimed, ttl)));
    }

    /// Forgets what is kept for `key`: the store answered a claim of it
    /// with something else than this replay (its record expired and was
    /// claimed again, or removed), so the entry no longer tells the truth.
    pub(crate) fn forget(&self, key: &StorageKey) {
        self.entries.remove(key.digest());
    }

    fn keep(&self, key: &StorageKey, fingerprint: &Fingerprint, response: &StoredResponse, until: Instant) {
        // The body copied to its own length: the handler's buffer may be
        // far larger than what it holds, and the bound counts the length.
        let mut response = response.clone();
        response.body = bytes::Bytes::copy_from_slice(&response.body);
        let entry = Entry { fingerprint: *fingerprint, response, until };
        self.entries.insert(*key.digest(), Arc::new(entry));
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::fingerprint::RequestParts;
    use crate::key::IdempotencyKey;
    use crate::scope::Scope;

    const TTL: Duration = Duration::from_secs(3_600);

    fn key(name: &str) -> StorageKey {
        let key = IdempotencyKey::parse(name.as_bytes()).expect("a valid key");
        StorageKey::new(Scope::Route, None, "POST", "/orders", &key)
    }

    fn fingerprint(body: &str) -> Fingerprint {
        Fingerprint::of(&RequestParts {
            method: "POST",
            path: "/orders",
            query: "",
            headers: &[],
            host: None,
            content_type: None,
            body: body.as_bytes(),
        })
    }

    fn response(body: &[u8]) -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: vec![("x-order".into(), b"1".to_vec())],
            body: Bytes::copy_from_slice(body),
        }
    }

    fn cache(settings: ReplayCache) -> Replays {
        Replays::new(settings).expect("a cache that keeps something")
    }

    #[test]
    fn an_entry_answers_its_own_request_until_its_end() {
        let replays = cache(ReplayCache::new(10).max_age(Duration::from_secs(60)));
        let (key, request, sent) = (key("k"), fingerprint("a"), Instant::now());
        replays.replayed(&key, &request, &response(b"created"), sent, TTL);

        let at = |after: u64| move || sent + Duration::from_secs(after);
        assert_eq!(replays.get_at(&key, &request, at(59)), Some(response(b"created")));
        assert_eq!(replays.get_at(&key, &request, at(60)), None, "max_age after the claim was sent");
        assert_eq!(replays.get_at(&key, &fingerprint("b"), at(1)), None, "another request goes to the store");
        assert_eq!(replays.get_at(&self::key("other"), &request, at(1)), None, "another key");
    }

    #[test]
    fn a_hit_shares_the_body() {
        let replays = cache(ReplayCache::new(10));
        let (key, request) = (key("k"), fingerprint("a"));
        let kept = response(&[7; 4096]);
        replays.replayed(&key, &request, &kept, Instant::now(), TTL);
        let (hit, again) = (replays.get(&key, &request).expect("a hit"), replays.get(&key, &request).expect("a hit"));
        assert_eq!(hit.body, kept.body);
        assert_eq!(hit.body.as_ptr(), again.body.as_ptr(), "hits share the kept body");
        // Kept as a copy of its own length, whatever buffer it came in.
        assert_ne!(hit.body.as_ptr(), kept.body.as_ptr());
    }

    #[test]
    fn a_cache_of_one_entry_keeps_one() {
        let replays = cache(ReplayCache::new(1));
        let (key, request) = (key("k"), fingerprint("a"));
        replays.replayed(&key, &request, &response(b"kept"), Instant::now(), TTL);
        assert_eq!(replays.get(&key, &request), Some(response(b"kept")));
    }

    #[test]
    fn an_entry_never_outlives_the_ttl_of_the_claim() {
        let replays = cache(ReplayCache::new(10).max_age(Duration::from_secs(60)));
        let (key, request, sent) = (key("k"), fingerprint("a"), Instant::now());
        let ttl = Duration::from_secs(5);
        replays.replayed(&key, &request, &response(b"created"), sent, ttl);
        assert!(replays.get_at(&key, &request, || sent + Duration::from_secs(4)).is_some());
        assert!(replays.get_at(&key, &request, || sent + ttl).is_none(), "the TTL, shorter than max_age");

        // A completion: max_age from when it was sent, but never past the
        // TTL counted from the claim, which came before.
        let claimed = sent;
        let completed = claimed + Duration::from_secs(3);
        replays.completed(&key, &request, &response(b"created"), completed, claimed, ttl);
        assert!(replays.get_at(&key, &request, || claimed + Duration::from_secs(4)).is_some());
        assert!(replays.get_at(&key, &request, || claimed + ttl).is_none(), "the TTL from the claim");

        let long = Duration::from_secs(86_400);
        replays.completed(&key, &request, &response(b"created"), completed, claimed, long);
        assert!(replays.get_at(&key, &request, || completed + Duration::from_secs(59)).is_some());
        assert!(replays.get_at(&key, &request, || completed + Duration::from_secs(60)).is_none(), "max_age");
    }

    #[test]
    fn a_new_fill_replaces_the_entry_of_its_key() {
        let replays = cache(ReplayCache::new(10));
        let (key, sent) = (key("k"), Instant::now());
        replays.replayed(&key, &fingerprint("a"), &response(b"first"), sent, TTL);
        replays.replayed(&key, &fingerprint("b"), &response(b"second"), sent, TTL);
        assert_eq!(replays.get(&key, &fingerprint("a")), None);
        assert_eq!(replays.get(&key, &fingerprint("b")), Some(response(b"second")));
    }

    #[test]
    fn a_forgotten_key_is_asked_of_the_store_again() {
        let replays = cache(ReplayCache::new(10));
        let (key, sent) = (key("k"), Instant::now());
        replays.replayed(&key, &fingerprint("a"), &response(b"first"), sent, TTL);
        replays.forget(&key);
        assert_eq!(replays.get(&key, &fingerprint("a")), None);
    }

    #[test]
    fn the_entry_bound_evicts() {
        let replays = cache(ReplayCache::new(20));
        let (request, sent) = (fingerprint("a"), Instant::now());
        for n in 0..1_000 {
            replays.replayed(&key(&format!("k{n}")), &request, &response(b"created"), sent, TTL);
        }
        assert!(replays.entries.len() <= 20, "{} entries", replays.entries.len());
        let kept = (0..1_000).filter(|n| replays.get(&key(&format!("k{n}")), &request).is_some()).count();
        assert_eq!(kept, replays.entries.len());
        assert!(kept > 0, "the latest ones are kept");
    }

    #[test]
    fn the_byte_bound_evicts() {
        // 1,000 entries allowed, but only about 40 KiB: ten 4 KiB responses.
        let replays = cache(ReplayCache::new(1_000).max_bytes(40 << 10));
        let (request, sent) = (fingerprint("a"), Instant::now());
        for n in 0..100 {
            replays.replayed(&key(&format!("k{n}")), &request, &response(&[0; 4_000]), sent, TTL);
        }
        assert!(replays.entries.weight() <= 40 << 10, "{} bytes", replays.entries.weight());
        assert!((1..=10).contains(&replays.entries.len()), "{} entries", replays.entries.len());

        // A response over the whole bound is never kept.
        replays.replayed(&key("huge"), &request, &response(&[0; 50 << 10]), sent, TTL);
        assert_eq!(replays.get(&key("huge"), &request), None);
    }

    #[test]
    fn the_default_cache_keeps_a_response_of_the_default_limit() {
        let replays = cache(ReplayCache::new(10_000));
        let (key, request) = (key("k"), fingerprint("a"));
        // Just under `Idem::DEFAULT_RESPONSE_LIMIT`, 1 MiB.
        let largest = response(&vec![0; (1 << 20) - 64]);
        replays.replayed(&key, &request, &largest, Instant::now(), TTL);
        assert_eq!(replays.get(&key, &request), Some(largest));
    }

    #[test]
    fn settings_that_keep_nothing_make_no_cache() {
        assert!(Replays::new(ReplayCache::new(0)).is_none());
        assert!(Replays::new(ReplayCache::new(10).max_bytes(0)).is_none());
        assert!(Replays::new(ReplayCache::new(10).max_age(Duration::ZERO)).is_none());
    }
}
