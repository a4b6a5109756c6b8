//! Single-client conformance cases: claims, completion, replay, expiry.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::store::{
    Claim, Fence, FencingToken, Fingerprint, IdempotencyKey, PurgeExpired, RecordState, RequestParts, Scope,
    StorageKey, Store, StoredResponse,
};

/// A lease long enough never to run out during a case.
pub(crate) const LONG: Duration = Duration::from_secs(60);
/// A record TTL longer than [`LONG`], so that a case can tell the two apart.
pub(crate) const TTL: Duration = Duration::from_secs(600);
/// A lease or TTL short enough to run out within a case, and long enough
/// not to run out between two calls on a loaded 2-core machine (300 ms
/// did, once, on Postgres in CI).
pub(crate) const SHORT: Duration = Duration::from_millis(1_000);
/// Long enough for a [`SHORT`] lease or TTL to have run out, with margin.
pub(crate) const PAST_SHORT: Duration = Duration::from_millis(1_800);
/// Slack allowed between a duration asked for and the time left a store
/// reports (round trips, a slow machine).
pub(crate) const SLACK: Duration = Duration::from_secs(5);

/// A fresh storage key that no other case (or run) uses.
pub fn fresh_key() -> StorageKey {
    let key = format!("conformance-{}", FencingToken::generate().to_hex());
    let key = IdempotencyKey::parse(key.as_bytes()).expect("generated keys are valid");
    StorageKey::new(Scope::Route, None, "POST", "/conformance", &key)
}

/// The fingerprint of a request with `body`.
pub fn fingerprint(body: &str) -> Fingerprint {
    Fingerprint::of(&RequestParts {
        method: "POST",
        path: "/conformance",
        query: "",
        headers: &[],
        host: None,
        content_type: None,
        body: body.as_bytes(),
    })
}

/// A response with a multi-valued header and a binary body.
pub fn response(body: &'static [u8]) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![
            ("content-type".into(), b"application/octet-stream".to_vec()),
            ("x-multi".into(), b"first".to_vec()),
            ("location".into(), b"/orders/1".to_vec()),
            ("x-multi".into(), b"second".to_vec()),
        ],
        body: Bytes::from_static(body),
    }
}

/// Claims `key` with a `lease` and a record TTL of `ttl`; panics unless the
/// claim acquired the key.
pub(crate) async fn acquire(
    store: &dyn Store,
    key: &StorageKey,
    fp: &Fingerprint,
    lease: Duration,
    ttl: Duration,
) -> FencingToken {
    match store.claim(key, fp, lease, ttl).await.expect("claim") {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    }
}

/// Takes over `key`, whose lease lapsed, for a request with `fp`: the first
/// claim gives the holder its grace (half a [`SHORT`] lease, so the case is
/// quick), and the first claim after it acquires the key with `lease` and
/// `ttl`.
pub(crate) async fn take_over(
    store: &dyn Store,
    key: &StorageKey,
    fp: &Fingerprint,
    lease: Duration,
    ttl: Duration,
) -> FencingToken {
    match store.claim(key, fp, SHORT, ttl).await.expect("claim") {
        Claim::InFlight { retry_after } => {
            assert!(retry_after <= crate::store::grace(SHORT), "the grace: {retry_after:?}");
            tokio::time::sleep(retry_after + SHORT / 4).await;
        }
        other => panic!("the first claim after a lapse gives the holder a grace, got {other:?}"),
    }
    acquire(store, key, fp, lease, ttl).await
}

/// Whether `left` is what a store should report right after asking for `asked`.
pub(crate) fn close_to(left: Duration, asked: Duration) -> bool {
    left <= asked && left > asked.saturating_sub(SLACK)
}

/// A free key is acquired; the record is in flight under that token, its
/// lease and its TTL counted separately.
pub async fn claim_acquires_a_free_key(store: Arc<dyn Store>) {
    let key = fresh_key();
    assert_eq!(store.get(&key).await.unwrap(), None);
    let token = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    let record = store.get(&key).await.unwrap().expect("a record after claim");
    assert_eq!(record.fingerprint, fingerprint("a"));
    match record.state {
        RecordState::InFlight { token: held, lease_left, ttl_left } => {
            assert_eq!(held, token);
            assert!(close_to(lease_left, LONG), "{lease_left:?}");
            assert!(close_to(ttl_left, TTL), "{ttl_left:?}");
        }
        other => panic!("expected in flight, got {other:?}"),
    }
}

/// A claim whose lease outlasts its TTL keeps the record for the lease.
pub async fn record_lives_at_least_as_long_as_its_lease(store: Arc<dyn Store>) {
    let key = fresh_key();
    acquire(&*store, &key, &fingerprint("a"), LONG, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    match store.get(&key).await.unwrap().expect("the record outlives its TTL while leased").state {
        RecordState::InFlight { lease_left, ttl_left, .. } => {
            assert!(close_to(lease_left, LONG), "{lease_left:?}");
            assert!(ttl_left >= lease_left && close_to(ttl_left, LONG), "{ttl_left:?} < {lease_left:?}");
        }
        other => panic!("expected in flight, got {other:?}"),
    }
    assert!(matches!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::InFlight { .. }));
}

/// A completed key replays the stored response, headers in order.
pub async fn completed_key_replays_byte_for_byte(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    let stored = response(b"{\"id\":1}\n\x00\xff");
    assert_eq!(store.complete(&key, token, &stored, LONG).await.unwrap(), Fence::Held);
    for _ in 0..3 {
        assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(stored.clone()));
    }
    match store.get(&key).await.unwrap().expect("record").state {
        RecordState::Completed { response, ttl_left } => {
            assert_eq!(response, stored);
            // The completion's TTL, not the claim's.
            assert!(close_to(ttl_left, LONG), "{ttl_left:?}");
        }
        other => panic!("expected completed, got {other:?}"),
    }
}

/// A completed key refuses a request with another fingerprint.
pub async fn completed_key_refuses_another_fingerprint(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.complete(&key, token, &response(b"a"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("b"), LONG, TTL).await.unwrap(), Claim::Mismatch);
    // The refusal changed nothing.
    assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"a")));
}

/// The same request in flight is reported with the lease's time left.
pub async fn in_flight_key_reports_time_left(store: Arc<dyn Store>) {
    let key = fresh_key();
    acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    match store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap() {
        // The lease's time, not the record's.
        Claim::InFlight { retry_after } => assert!(close_to(retry_after, LONG), "{retry_after:?}"),
        other => panic!("expected in flight, got {other:?}"),
    }
}

/// Another request for an in-flight key is a mismatch, not a wait.
pub async fn in_flight_key_refuses_another_fingerprint(store: Arc<dyn Store>) {
    let key = fresh_key();
    acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.claim(&key, &fingerprint("b"), LONG, TTL).await.unwrap(), Claim::Mismatch);
}

/// A completed record cannot be completed again, renewed or released.
pub async fn completion_is_final(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.complete(&key, token, &response(b"first"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(store.complete(&key, token, &response(b"second"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.renew(&key, token, LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Lost);
    assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"first")));
}

/// A completed record lives for its TTL, then the key is free again.
pub async fn completed_record_expires_after_ttl(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.complete(&key, token, &response(b"a"), SHORT).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"a")));
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.get(&key).await.unwrap(), None);
    acquire(&*store, &key, &fingerprint("b"), LONG, TTL).await;
}

/// Operations on one key never touch another.
pub async fn keys_are_independent(store: Arc<dyn Store>) {
    let (one, two) = (fresh_key(), fresh_key());
    let token_one = acquire(&*store, &one, &fingerprint("a"), LONG, TTL).await;
    let token_two = acquire(&*store, &two, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.complete(&two, token_one, &response(b"x"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.complete(&one, token_one, &response(b"one"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(store.release(&two, token_two).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&one, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"one")));
    let released = store.get(&two).await.unwrap().expect("a tombstone");
    assert!(matches!(released.state, RecordState::Released { .. }), "{released:?}");
}

/// Bodies of every byte value and a few hundred KiB replay exactly.
pub async fn large_binary_bodies_round_trip(store: Arc<dyn Store>) {
    let key = fresh_key();
    let body: Vec<u8> = (0..300 * 1024).map(|i: u32| (i % 251) as u8).collect();
    let stored = StoredResponse {
        status: 200,
        headers: vec![("set-trace".into(), vec![0x80, b'a', 0xfe])],
        body: Bytes::from(body),
    };
    let token = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.complete(&key, token, &stored, LONG).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(stored));
}

/// Purging removes records past their TTL and nothing else: not a live
/// response, a running request, a tombstone or a lapsed lease. For stores
/// that implement [`PurgeExpired`]; not part of [`store_conformance_tests!`]
/// (call it from a test of your own).
///
/// [`store_conformance_tests!`]: crate::store::testing::store_conformance_tests
pub async fn purge_keeps_live_records(store: Arc<dyn PurgeExpired>) {
    let (live, in_flight, released, lapsed) = (fresh_key(), fresh_key(), fresh_key(), fresh_key());
    let (expired, expired_lease) = (fresh_key(), fresh_key());
    let token = acquire(&*store, &live, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.complete(&live, token, &response(b"live"), LONG).await.unwrap(), Fence::Held);
    acquire(&*store, &in_flight, &fingerprint("a"), LONG, TTL).await;
    let token = acquire(&*store, &released, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.release(&released, token).await.unwrap(), Fence::Held);
    acquire(&*store, &lapsed, &fingerprint("a"), SHORT, TTL).await;
    let token = acquire(&*store, &expired, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.complete(&expired, token, &response(b"old"), SHORT).await.unwrap(), Fence::Held);
    acquire(&*store, &expired_lease, &fingerprint("a"), SHORT, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    while store.purge_expired(1000).await.unwrap() > 0 {}
    assert_eq!(store.claim(&live, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"live")));
    assert!(matches!(store.claim(&in_flight, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::InFlight { .. }));
    for kept in [&released, &lapsed] {
        assert_eq!(store.claim(kept, &fingerprint("b"), LONG, TTL).await.unwrap(), Claim::Mismatch);
    }
    assert_eq!(store.get(&expired).await.unwrap(), None);
    assert_eq!(store.get(&expired_lease).await.unwrap(), None);
}

/// Once a completed record has expired and another request owns the key,
/// the old request gets a mismatch: never a replay of the old response.
pub async fn an_expired_record_is_never_replayed(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.complete(&key, token, &response(b"old"), SHORT).await.unwrap(), Fence::Held);
    tokio::time::sleep(PAST_SHORT).await;
    let token = acquire(&*store, &key, &fingerprint("b"), LONG, TTL).await;
    assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Mismatch);
    assert_eq!(store.complete(&key, token, &response(b"new"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Mismatch);
    assert_eq!(store.claim(&key, &fingerprint("b"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"new")));
}
