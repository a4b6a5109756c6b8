//! The memory store's own tests.

use super::shard::OVERHEAD;
use super::*;
use crate::fingerprint::RequestParts;
use crate::key::IdempotencyKey;
use crate::scope::Scope;

pub(super) fn key(n: usize) -> StorageKey {
    let key = IdempotencyKey::parse(format!("k-{n}").as_bytes()).unwrap();
    StorageKey::new(Scope::Global, None, "POST", "/", &key)
}

/// The fingerprint of a request whose body is `body`.
pub(super) fn fingerprint_of(body: &[u8]) -> Fingerprint {
    Fingerprint::of(&RequestParts {
        method: "POST",
        path: "/",
        query: "",
        headers: &[],
        host: None,
        content_type: None,
        body,
    })
}

fn fingerprint() -> Fingerprint {
    fingerprint_of(b"{}")
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
    // Each call frees a bounded batch of the expired records of its own
    // shard and of one more, soonest first, without scanning the live
    // ones: a few calls per shard free them all.
    let fresh = 4 * MemoryStore::SHARDS;
    for n in 1000..1000 + fresh {
        keep(&store, &key(n), Duration::from_secs(60)).await.unwrap();
    }
    assert_eq!(store.len(), fresh);
    assert_eq!(store.bytes(), fresh * one);
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
    // As many new keys as the store held: each that finds no room frees
    // the expired records of every shard, and succeeds.
    for n in 900..900 + kept {
        keep(&store, &key(n), Duration::from_secs(60)).await.unwrap();
    }
    assert_eq!(store.purge_expired(usize::MAX).await.unwrap(), 0, "nothing expired is left behind");
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
    let index: usize = store.shards.iter().map(|shard| shard.lock().deadlines.len()).sum();
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

#[tokio::test]
async fn a_record_whose_end_moved_is_freed_at_its_new_end() {
    let store = MemoryStore::new();
    let (later, earlier) = (key(2), key(3));
    for (k, claim_ttl, ttl) in [(&later, 30, 150), (&earlier, 2_000, 40)] {
        let Claim::Acquired { token, .. } =
            store.claim(k, &fingerprint(), Duration::from_millis(20), Duration::from_millis(claim_ttl)).await.unwrap()
        else {
            panic!()
        };
        assert_eq!(store.complete(k, token, &response(), Duration::from_millis(ttl)).await.unwrap(), Fence::Held);
    }
    tokio::time::sleep(Duration::from_millis(80)).await;
    // The earlier end was indexed; the later one waits for the claim's entry, then moves.
    assert_eq!(store.purge_expired(100).await.unwrap(), 1, "the record whose end came earlier is freed at it");
    assert_eq!(store.len(), 1);
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(store.purge_expired(100).await.unwrap(), 1, "the record whose end moved later is freed at it");
    assert!(store.is_empty());
    // Only the claim-time entry of the record freed early is left, until its time.
    let index: usize = store.shards.iter().map(|shard| shard.lock().deadlines.len()).sum();
    assert_eq!(index, 1);
}

/// Entries of live records that come up first (completed with a longer
/// TTL than their claim's) move on without using up a purge's batch: an
/// expired record behind them is still freed.
#[tokio::test]
async fn entries_that_move_on_do_not_use_up_a_purge() {
    let store = MemoryStore::new();
    // Five keys of one shard.
    let shard_of = |k: &StorageKey| usize::from(k.digest()[0]) % MemoryStore::SHARDS;
    let first = key(0);
    let keys: Vec<_> = (0..).map(key).filter(|k| shard_of(k) == shard_of(&first)).take(5).collect();
    for k in &keys[..4] {
        let Claim::Acquired { token, .. } =
            store.claim(k, &fingerprint(), Duration::from_millis(10), Duration::from_millis(10)).await.unwrap()
        else {
            panic!()
        };
        assert_eq!(store.complete(k, token, &response(), Duration::from_secs(10)).await.unwrap(), Fence::Held);
    }
    tokio::time::sleep(Duration::from_millis(2)).await;
    let _ = store.claim(&keys[4], &fingerprint(), Duration::from_millis(1), Duration::from_millis(13)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(store.purge_expired(1).await.unwrap(), 1, "the expired record is freed");
    assert_eq!(store.len(), 4);
}

/// The map's hash of a record's key comes from eight bytes of the digest
/// and the map's seed: keys that differ there land apart, the same key
/// hashes the same in one map, and two maps (two seeds) hash it apart.
#[test]
fn record_keys_hash_by_their_digest_bytes_and_seed() {
    use std::hash::BuildHasher;

    use super::shard::DigestHash;

    let mut a = [0u8; 32];
    a[8] = 1;
    let mut b = a;
    b[15] = 1;
    let (one, two) = (DigestHash::default(), DigestHash::default());
    assert_eq!(one.hash_one(a), one.hash_one(a));
    assert_ne!(one.hash_one(a), one.hash_one(b));
    assert_ne!(one.hash_one([0u8; 32]), one.hash_one(a));
    assert_ne!(one.hash_one(a), two.hash_one(a), "each map has a seed of its own");
    // Keys that differ only in a few low bits of the word differ in the
    // hash's high bits too (hashbrown's tags, compared first).
    let high = |hash: u64| hash >> 57;
    let spread: std::collections::HashSet<_> = (0..64u8)
        .map(|low| {
            let mut key = [0u8; 32];
            key[8] = low;
            high(one.hash_one(key))
        })
        .collect();
    assert!(spread.len() > 32, "{} distinct tags of 64", spread.len());
}

/// Records claimed and completed one after the other, freed as they
/// expire, stay in the index's runs: its heap (a cache miss per level for
/// every record freed) holds almost none of them.
#[tokio::test]
async fn records_that_come_and_go_in_order_stay_out_of_the_heap() {
    let store = MemoryStore::new();
    let started = Instant::now();
    let mut n = 0;
    while started.elapsed() < Duration::from_millis(300) {
        keep(&store, &key(n), Duration::from_millis(40)).await.unwrap();
        n += 1;
    }
    let (mut heap, mut runs, mut entries) = (0, 0, 0);
    for shard in store.shards.iter() {
        let shard = shard.lock();
        let (rest, count) = shard.deadlines.shape();
        heap += rest;
        runs += count;
        entries += shard.deadlines.len();
    }
    eprintln!("{n} records kept, {entries} index entries, {runs} runs, {heap} in the heap");
    assert!(heap * 20 <= entries, "{heap} of {entries} index entries in the heap");
}
