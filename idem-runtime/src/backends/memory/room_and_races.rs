//! Totals under concurrent use, and room held by expired records of other
//! shards.

use std::sync::Arc;

use super::shard::OVERHEAD;
use super::tests::{fingerprint_of, key};
use super::*;

fn fingerprint(n: u8) -> Fingerprint {
    fingerprint_of(&[n])
}

/// Three claims living `short`, in shards that neither `a`'s own nor the
/// one its calls sweep beside it: only a sweep of every shard frees them.
async fn fill_elsewhere(store: &MemoryStore, a: &StorageKey, short: Duration) {
    let shard = |k: &StorageKey| usize::from(k.digest()[0]) % MemoryStore::SHARDS;
    let beside = |k: &StorageKey| usize::from(k.digest()[1]) % MemoryStore::SHARDS;
    let mut filled = 0;
    for n in 1.. {
        let k = key(n);
        if [shard(a), beside(a)].contains(&shard(&k)) {
            continue;
        }
        assert!(matches!(store.claim(&k, &fingerprint(0), short, short).await, Ok(Claim::Acquired { .. })));
        filled += 1;
        if filled == 3 {
            break;
        }
    }
}

/// The bytes the records of every shard take, as `Entry::size` counts
/// them, and their number.
fn counted(store: &MemoryStore) -> (usize, usize) {
    let shards: Vec<_> = store.shards.iter().map(|s| s.lock()).collect();
    let bytes = shards.iter().flat_map(|s| s.records.values()).map(|e| e.size()).sum();
    let records = shards.iter().map(|s| s.records.len()).sum();
    (bytes, records)
}

/// Many threads claim, renew, complete (small and large responses),
/// release and take over a few keys with short leases and TTLs in a
/// store that is often full: the totals always equal what the records
/// take, and come back to zero.
#[test]
fn the_totals_never_drift_under_concurrent_use() {
    let store = Arc::new(MemoryStore::with_limits(40, 40 * (OVERHEAD + RESERVED)));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                rt.block_on(async {
                    let mut rng = fastrand::Rng::with_seed(t as u64 + 1);
                    for _ in 0..20_000 {
                        let k = key(rng.usize(..64));
                        let fp = fingerprint(rng.u8(..2));
                        let lease = Duration::from_micros(rng.u64(200..2_200));
                        let ttl = Duration::from_micros(rng.u64(..5_000));
                        if let Ok(Claim::Acquired { token, .. }) = store.claim(&k, &fp, lease, ttl).await {
                            match rng.u8(..4) {
                                0 => {
                                    let _ = store.release(&k, token).await;
                                }
                                1 => {
                                    let _ = store.renew(&k, token, lease * 3).await;
                                }
                                _ => {
                                    let len = if rng.bool() { 10 } else { 3000 };
                                    let response =
                                        StoredResponse { status: 201, headers: vec![], body: vec![b'x'; len].into() };
                                    if store.complete(&k, token, &response, ttl).await.is_err() {
                                        let _ = store.release(&k, token).await;
                                    }
                                }
                            }
                        }
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(counted(&store), (store.bytes(), store.len()), "totals equal what the records take");
    // Past every record's end, a grace a claim gave a lapsed lease included.
    std::thread::sleep(crate::store::grace(Duration::from_micros(2_200)) + Duration::from_millis(20));
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(store.purge_expired(usize::MAX)).unwrap();
    assert_eq!((store.bytes(), store.len()), (0, 0));
}

/// A tombstone's request, retried in a store whose room is held by
/// expired records of other shards, takes the key again: the expired
/// records are freed first, as they are for a new key.
#[tokio::test]
async fn a_released_key_is_taken_again_when_only_expired_records_hold_the_room() {
    let store = MemoryStore::with_max_bytes(OVERHEAD + 3 * (OVERHEAD + RESERVED) + RESERVED - 1);
    let (a, long) = (key(0), Duration::from_secs(60));
    let Ok(Claim::Acquired { token, .. }) = store.claim(&a, &fingerprint(0), long, long).await else { panic!() };
    assert_eq!(store.release(&a, token).await.unwrap(), Fence::Held);
    // Three short-lived claims elsewhere fill the store.
    let short = Duration::from_millis(30);
    fill_elsewhere(&store, &a, short).await;
    assert!(matches!(store.claim(&a, &fingerprint(0), long, long).await, Err(StoreError::Full { .. })));
    tokio::time::sleep(3 * short).await;
    let retaken = store.claim(&a, &fingerprint(0), long, long).await;
    assert!(matches!(retaken, Ok(Claim::Acquired { attempt: Attempt::AfterRelease, .. })), "{retaken:?}");
}

/// A response larger than the room an in-flight record holds is kept
/// when only expired records of other shards stand in its way.
#[tokio::test]
async fn a_large_response_is_kept_when_only_expired_records_hold_the_room() {
    let store = MemoryStore::with_max_bytes(4 * (OVERHEAD + RESERVED) + 500);
    let (a, long) = (key(0), Duration::from_secs(60));
    let Ok(Claim::Acquired { token, .. }) = store.claim(&a, &fingerprint(0), long, long).await else { panic!() };
    let short = Duration::from_millis(30);
    fill_elsewhere(&store, &a, short).await;
    tokio::time::sleep(3 * short).await;
    let large = StoredResponse { status: 201, headers: vec![], body: vec![b'x'; 2 * RESERVED].into() };
    assert_eq!(store.complete(&a, token, &large, long).await.unwrap(), Fence::Held);
    assert_eq!(store.bytes(), OVERHEAD + large.size());
}

/// A reservation that fits is never refused because another one, too
/// large to fit, is being tried at the same moment.
#[test]
fn a_reservation_that_fits_is_never_refused_by_one_that_does_not() {
    let totals = Arc::new(Totals::default());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let greedy = {
        let (totals, stop) = (Arc::clone(&totals), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                assert!(!totals.reserve(2000, true, 1000, 10));
            }
        })
    };
    let mut refused = 0;
    for _ in 0..2_000_000 {
        if totals.reserve(500, true, 1000, 10) {
            totals.free(500, true);
        } else {
            refused += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    greedy.join().unwrap();
    assert_eq!(refused, 0, "reservations of 500 of 1000 bytes refused while the store held nothing");
}
