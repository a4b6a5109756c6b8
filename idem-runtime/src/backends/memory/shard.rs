//! One shard of the memory store: its records and their deadline index.
//! Bytes and records are counted store-wide, in [`Totals`].

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use super::Key;
use super::deadlines::Deadlines;
use crate::fingerprint::Fingerprint;
use crate::record::{Record, RecordState, StoredResponse};
use crate::store::{Attempt, FencingToken, Step};

/// What a record costs besides its key and state, an estimate on the
/// generous side: its map slot (with the map's slack) and key, two entries
/// in the deadline index, the fingerprint, and the allocations of a stored response's body and headers.
pub(super) const OVERHEAD: usize = 384;

/// Bytes each in-flight record reserves (see [`Entry::state_size`]).
pub(super) const RESERVED: usize = 1024;

/// Stale index entries a shard keeps beyond twice its records before it
/// rebuilds its index: small, as every one of the 64 shards has this slack
/// and it is not counted against the bound.
const STALE_SLACK: usize = 16;

/// The store-wide counts the bound applies to, shared by every shard.
#[derive(Debug, Default)]
pub(super) struct Totals {
    /// What the records take, as [`Entry::size`] counts it.
    pub(super) bytes: AtomicUsize,
    pub(super) records: AtomicUsize,
    /// A claim was refused for lack of room, and that was logged.
    pub(super) full: AtomicBool,
}

impl Totals {
    /// Takes `bytes` (and a record, with `record`) if that stays within
    /// both bounds; nothing otherwise.
    /// Never adds what does not fit, not even for a moment: a concurrent
    /// reservation that does fit must not be refused because of it.
    pub(super) fn reserve(&self, bytes: usize, record: bool, max_bytes: usize, max_records: usize) -> bool {
        let take = |counter: &AtomicUsize, amount: usize, max: usize| {
            counter
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                    held.checked_add(amount).filter(|&total| total <= max)
                })
                .is_ok()
        };
        if record && !take(&self.records, 1, max_records) {
            return false;
        }
        if !take(&self.bytes, bytes, max_bytes) {
            if record {
                self.records.fetch_sub(1, Ordering::AcqRel);
            }
            return false;
        }
        true
    }

    /// Gives back `bytes` (and a record, with `record`).
    pub(super) fn free(&self, bytes: usize, record: bool) {
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        if record {
            self.records.fetch_sub(1, Ordering::AcqRel);
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    pub(super) fn records(&self) -> usize {
        self.records.load(Ordering::Acquire)
    }
}

/// Hashes a [`Key`] from eight of its bytes, mixed with this map's random
/// seed: it is a SHA-256 digest already, so hashing all of it again
/// (SipHash, three times in a first claim) would only cost time. The seed
/// keeps the hash unknown to clients: without them, one who grinds keys
/// until their digests share the bits that pick a bucket could slow every
/// lookup of that bucket down. Bytes 0 and 1 pick the shards
/// ([`MemoryStore`](super::MemoryStore)); the map mixes bytes 8 to 15.
#[derive(Debug, Clone, Copy)]
pub(super) struct DigestHash {
    seed: u64,
}

impl Default for DigestHash {
    /// A random seed, drawn as the standard library draws its own.
    fn default() -> Self {
        Self { seed: RandomState::new().hash_one(0u8) }
    }
}

impl BuildHasher for DigestHash {
    type Hasher = DigestHasher;

    fn build_hasher(&self) -> DigestHasher {
        DigestHasher { seed: self.seed, word: 0 }
    }
}

/// The [`Hasher`] of [`DigestHash`].
#[derive(Debug)]
pub(super) struct DigestHasher {
    seed: u64,
    word: u64,
}

impl Hasher for DigestHasher {
    /// The word, mixed with the seed: MurmurHash3's 64-bit finalizer
    /// (every bit of the result depends on every bit of its input) over
    /// the word and the seed.
    fn finish(&self) -> u64 {
        let mut x = self.word ^ self.seed;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }

    /// A `[u8; 32]` hashes as its length, then one write of its 32 bytes.
    fn write_usize(&mut self, length: usize) {
        self.word ^= length as u64;
    }

    /// Eight bytes of a digest; anything else (never given here) is folded
    /// in byte by byte, so that it is still a hash.
    fn write(&mut self, bytes: &[u8]) {
        match bytes.get(8..16) {
            Some(word) if bytes.len() == 32 => {
                self.word ^= u64::from_le_bytes(word.try_into().unwrap_or_default());
            }
            _ => {
                for &byte in bytes {
                    self.word = (self.word.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                }
            }
        }
    }
}

/// One record.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) fingerprint: Fingerprint,
    /// End of the record (its TTL), whatever its state.
    pub(super) expires_at: Instant,
    pub(super) state: State,
    /// For operators: the claiming route, when the claim named one.
    pub(super) route: Option<std::sync::Arc<str>>,
    /// For operators: when the execution was claimed.
    pub(super) claimed_at: std::time::SystemTime,
    /// Which execution holds or held it.
    pub(super) attempt: Attempt,
}

#[derive(Debug)]
pub(super) enum State {
    InFlight {
        token: FencingToken,
        lease_until: Instant,
        /// A claim found the lease lapsed and gave the holder a grace: the
        /// next claim after it takes over.
        graced: bool,
        /// A claim found it lapsed past its grace on a route that holds
        /// such executions: no claim takes it over.
        held: bool,
        /// Its durable steps, in the order recorded.
        steps: Vec<Step>,
    },
    Completed {
        /// Shared, so that a replay copies it outside the shard's lock.
        response: std::sync::Arc<StoredResponse>,
    },
    /// A tombstone, keeping the steps its execution recorded: the next
    /// execution gets them back.
    Released { steps: Vec<Step> },
}

impl State {
    /// The steps recorded, in flight, held or released; none otherwise.
    pub(super) fn steps(&self) -> &[Step] {
        match self {
            State::InFlight { steps, .. } | State::Released { steps } => steps,
            State::Completed { .. } => &[],
        }
    }
}

impl Entry {
    /// Bytes counted against the bound: the fixed [`OVERHEAD`] (the key
    /// included) and the state.
    pub(super) fn size(&self) -> usize {
        OVERHEAD + self.state_size()
    }

    /// Bytes of the state: an in-flight record reserves room for a small
    /// record, so that its completion always has a place, at worst for the
    /// "processed" problem that replaces a response the store refuses.
    pub(super) fn state_size(&self) -> usize {
        match &self.state {
            State::Completed { response } => response.size(),
            State::InFlight { steps, .. } => RESERVED + steps_size(steps),
            State::Released { steps } => steps_size(steps),
        }
    }

    /// The record as [`Store::get`](crate::store::Store::get) reports it at `now`.
    pub(super) fn record(&self, now: Instant) -> Record {
        let ttl_left = self.expires_at.saturating_duration_since(now);
        let state = match &self.state {
            &State::InFlight { token, held: true, .. } => RecordState::Held { token, ttl_left },
            &State::InFlight { token, lease_until, .. } => {
                RecordState::InFlight { token, lease_left: lease_until.saturating_duration_since(now), ttl_left }
            }
            State::Completed { response } => {
                RecordState::Completed { response: StoredResponse::clone(response), ttl_left }
            }
            State::Released { .. } => RecordState::Released { ttl_left },
        };
        let mut record = Record::new(self.fingerprint, state);
        record.route = self.route.as_deref().map(str::to_owned);
        record.claimed_at = Some(self.claimed_at);
        record.attempt = Some(self.attempt);
        record.steps = self.state.steps().to_vec();
        record
    }

    /// Whether this is a live in-flight record held by `token`, its lease
    /// running or not: the token owns it until another claim takes it over.
    pub(super) fn owned_by(&self, token: FencingToken, now: Instant) -> bool {
        self.expires_at > now && matches!(self.state, State::InFlight { token: t, .. } if t == token)
    }
}

/// Bytes the steps take, as the bound counts them.
pub(super) fn steps_size(steps: &[Step]) -> usize {
    steps.iter().map(Step::size).sum()
}

/// Records whose keys fall in this shard.
#[derive(Debug, Default)]
pub(super) struct Shard {
    pub(super) records: HashMap<Key, Entry, DigestHash>,
    /// Records' ends, soonest first. Every record has an entry at or
    /// before its end: a record that moved its end later keeps its entry,
    /// which moves when it comes up (in the common life of a record,
    /// claimed then completed, its one entry is pushed at the claim and
    /// moved once, at the claim's end); an earlier end gets an entry of
    /// its own. An entry whose record is gone is stale and skipped.
    pub(super) deadlines: Deadlines,
}

impl Shard {
    /// Removes `key`'s record, giving its bytes back to `totals`.
    pub(super) fn remove(&mut self, key: &Key, totals: &Totals) {
        if let Some(entry) = self.records.remove(key) {
            totals.free(entry.size(), true);
        }
    }

    /// Frees up to `batch` records whose end has come, soonest first. An
    /// entry moved on (its record's end is later) does not count: it
    /// comes up again only at that end, so each is looked at once.
    pub(super) fn free_expired(&mut self, now: Instant, batch: usize, totals: &Totals) -> u64 {
        let mut freed = 0;
        while freed < batch as u64 {
            let Some((_, key)) = self.deadlines.pop_due(now) else { break };
            match self.records.get(&key).map(|entry| entry.expires_at) {
                Some(end) if end <= now => {
                    self.remove(&key, totals);
                    freed += 1;
                }
                // The record moved its end later: its entry moves with it.
                Some(end) => self.deadlines.push(end, key),
                None => {}
            }
        }
        freed
    }

    /// Records `key`'s new end in the index (and rebuilds the index when
    /// stale entries pile up: a record freed on access, not through its
    /// entry, leaves that entry behind).
    pub(super) fn index(&mut self, key: Key, at: Instant) {
        self.deadlines.push(at, key);
        if self.deadlines.len() > 2 * self.records.len() + STALE_SLACK {
            self.deadlines = Deadlines::of(self.records.iter().map(|(key, e)| (e.expires_at, *key)));
        }
    }
}
