//! Single-client conformance cases.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::store::{
    Claim, Fence, FencingToken, Fingerprint, IdempotencyKey, RecordState, RequestParts, Scope, StorageKey, Store,
    StoredResponse,
};

/// A lease long enough never to run out during a case.
pub(crate) const LONG: Duration = Duration::from_secs(60);
/// A lease short enough to run out within a case.
pub(crate) const SHORT: Duration = Duration::from_millis(300);
/// Long enough for a [`SHORT`] lease to have run out, with margin.
pub(crate) const PAST_SHORT: Duration = Duration::from_millis(700);

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

pub(crate) async fn acquire(store: &dyn Store, key: &StorageKey, fp: &Fingerprint, lease: Duration) -> FencingToken {
    match store.claim(key, fp, lease, std::time::Duration::from_secs(3600)).await.expect("claim") {
        Claim::Acquired { token } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    }
}

/// A free key is acquired, and the record is in flight under that token.
pub async fn claim_acquires_a_free_key(store: Arc<dyn Store>) {
    let key = fresh_key();
    assert_eq!(store.get(&key).await.unwrap(), None);
    let token = acquire(&*store, &key, &fingerprint("a"), LONG).await;
    let record = store.get(&key).await.unwrap().expect("a record after claim");
    assert_eq!(record.fingerprint, fingerprint("a"));
    match record.state {
        RecordState::InFlight { token: held, lease_left, .. } => {
            assert_eq!(held, token);
            assert!(lease_left <= LONG && lease_left > LONG - Duration::from_secs(5), "{lease_left:?}");
        }
        other => panic!("expected in flight, got {other:?}"),
    }
}

/// A completed key replays the stored response, headers in order.
pub async fn completed_key_replays_byte_for_byte(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG).await;
    let stored = response(b"{\"id\":1}\n\x00\xff");
    assert_eq!(store.complete(&key, token, &stored, LONG).await.unwrap(), Fence::Held);
    for _ in 0..3 {
        assert_eq!(
            store.claim(&key, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
            Claim::Replay(stored.clone())
        );
    }
    match store.get(&key).await.unwrap().expect("record").state {
        RecordState::Completed { response, ttl_left } => {
            assert_eq!(response, stored);
            assert!(ttl_left <= LONG && ttl_left > LONG - Duration::from_secs(5), "{ttl_left:?}");
        }
        other => panic!("expected completed, got {other:?}"),
    }
}

/// A completed key refuses a request with another fingerprint.
pub async fn completed_key_refuses_another_fingerprint(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG).await;
    assert_eq!(store.complete(&key, token, &response(b"a"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(
        store.claim(&key, &fingerprint("b"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::Mismatch
    );
    // The refusal changed nothing.
    assert_eq!(
        store.claim(&key, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::Replay(response(b"a"))
    );
}

/// The same request in flight is reported with the lease's time left.
pub async fn in_flight_key_reports_time_left(store: Arc<dyn Store>) {
    let key = fresh_key();
    acquire(&*store, &key, &fingerprint("a"), LONG).await;
    match store.claim(&key, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap() {
        Claim::InFlight { retry_after } => {
            assert!(retry_after <= LONG && retry_after > LONG - Duration::from_secs(5), "{retry_after:?}");
        }
        other => panic!("expected in flight, got {other:?}"),
    }
}

/// Another request for an in-flight key is a mismatch, not a wait.
pub async fn in_flight_key_refuses_another_fingerprint(store: Arc<dyn Store>) {
    let key = fresh_key();
    acquire(&*store, &key, &fingerprint("a"), LONG).await;
    assert_eq!(
        store.claim(&key, &fingerprint("b"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::Mismatch
    );
}

/// Once a lease runs out, the next claimer takes over with a new token.
pub async fn expired_lease_can_be_taken_over(store: Arc<dyn Store>) {
    let key = fresh_key();
    let first = acquire(&*store, &key, &fingerprint("a"), SHORT).await;
    assert!(matches!(
        store.claim(&key, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::InFlight { .. }
    ));
    tokio::time::sleep(PAST_SHORT).await;
    let second = acquire(&*store, &key, &fingerprint("a"), LONG).await;
    assert_ne!(first, second);
}

/// After a takeover the old owner can neither complete nor release, and the
/// new owner's work is what gets replayed.
pub async fn stale_owner_can_neither_complete_nor_release(store: Arc<dyn Store>) {
    let key = fresh_key();
    let stale = acquire(&*store, &key, &fingerprint("a"), SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    let owner = acquire(&*store, &key, &fingerprint("a"), LONG).await;
    assert_eq!(store.complete(&key, stale, &response(b"stale"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.release(&key, stale).await.unwrap(), Fence::Lost);
    assert_eq!(store.renew(&key, stale, LONG).await.unwrap(), Fence::Lost);
    match store.get(&key).await.unwrap().expect("record").state {
        RecordState::InFlight { token, .. } => assert_eq!(token, owner),
        other => panic!("the stale owner changed the record: {other:?}"),
    }
    assert_eq!(store.complete(&key, owner, &response(b"owner"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(
        store.claim(&key, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::Replay(response(b"owner"))
    );
}

/// Ownership ends with the lease, even when nobody has claimed the key since.
pub async fn expired_owner_without_successor_is_refused(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.complete(&key, token, &response(b"late"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.get(&key).await.unwrap(), None);
    acquire(&*store, &key, &fingerprint("a"), LONG).await;
}

/// Renewing keeps a short lease alive far past its first expiry.
pub async fn renew_keeps_the_lease_alive(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), SHORT).await;
    for _ in 0..8 {
        tokio::time::sleep(SHORT / 3).await;
        assert_eq!(store.renew(&key, token, SHORT).await.unwrap(), Fence::Held);
        assert!(matches!(
            store.claim(&key, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
            Claim::InFlight { .. }
        ));
    }
    assert_eq!(store.renew(&key, token, LONG).await.unwrap(), Fence::Held);
    match store.get(&key).await.unwrap().expect("record").state {
        RecordState::InFlight { lease_left, .. } => assert!(lease_left > LONG - Duration::from_secs(5)),
        other => panic!("expected in flight, got {other:?}"),
    }
    assert_eq!(store.complete(&key, token, &response(b"done"), LONG).await.unwrap(), Fence::Held);
}

/// A lease that ran out cannot be renewed back into life.
pub async fn stale_owner_cannot_renew(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.renew(&key, token, LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.get(&key).await.unwrap(), None);
}

/// Release frees the key at once; a second release is refused.
pub async fn release_frees_the_key(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG).await;
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Held);
    assert_eq!(store.get(&key).await.unwrap(), None);
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Lost);
    // Released, so another request may use the key now.
    let next = acquire(&*store, &key, &fingerprint("b"), LONG).await;
    assert_ne!(next, token);
}

/// A token that was never handed out owns nothing.
pub async fn forged_token_is_refused(store: Arc<dyn Store>) {
    let key = fresh_key();
    acquire(&*store, &key, &fingerprint("a"), LONG).await;
    let forged = FencingToken::generate();
    assert_eq!(store.renew(&key, forged, LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.complete(&key, forged, &response(b"x"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.release(&key, forged).await.unwrap(), Fence::Lost);
    assert!(matches!(
        store.claim(&key, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::InFlight { .. }
    ));
    // Fenced operations on a key that does not exist are refused too.
    let missing = fresh_key();
    assert_eq!(store.complete(&missing, forged, &response(b"x"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.get(&missing).await.unwrap(), None);
}

/// A completed record cannot be completed again, renewed or released.
pub async fn completion_is_final(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG).await;
    assert_eq!(store.complete(&key, token, &response(b"first"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(store.complete(&key, token, &response(b"second"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.renew(&key, token, LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Lost);
    assert_eq!(
        store.claim(&key, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::Replay(response(b"first"))
    );
}

/// A completed record lives for its TTL, then the key is free again.
pub async fn completed_record_expires_after_ttl(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG).await;
    assert_eq!(store.complete(&key, token, &response(b"a"), SHORT).await.unwrap(), Fence::Held);
    assert_eq!(
        store.claim(&key, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::Replay(response(b"a"))
    );
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.get(&key).await.unwrap(), None);
    acquire(&*store, &key, &fingerprint("b"), LONG).await;
}

/// Operations on one key never touch another.
pub async fn keys_are_independent(store: Arc<dyn Store>) {
    let (one, two) = (fresh_key(), fresh_key());
    let token_one = acquire(&*store, &one, &fingerprint("a"), LONG).await;
    let token_two = acquire(&*store, &two, &fingerprint("a"), LONG).await;
    assert_eq!(store.complete(&two, token_one, &response(b"x"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.complete(&one, token_one, &response(b"one"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(store.release(&two, token_two).await.unwrap(), Fence::Held);
    assert_eq!(
        store.claim(&one, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::Replay(response(b"one"))
    );
    assert_eq!(store.get(&two).await.unwrap(), None);
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
    let token = acquire(&*store, &key, &fingerprint("a"), LONG).await;
    assert_eq!(store.complete(&key, token, &stored, LONG).await.unwrap(), Fence::Held);
    assert_eq!(
        store.claim(&key, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::Replay(stored)
    );
}

/// Purging removes nothing that is still alive.
pub async fn purge_keeps_live_records(store: Arc<dyn Store>) {
    let (live, in_flight, expired) = (fresh_key(), fresh_key(), fresh_key());
    let token = acquire(&*store, &live, &fingerprint("a"), LONG).await;
    assert_eq!(store.complete(&live, token, &response(b"live"), LONG).await.unwrap(), Fence::Held);
    acquire(&*store, &in_flight, &fingerprint("a"), LONG).await;
    let token = acquire(&*store, &expired, &fingerprint("a"), LONG).await;
    assert_eq!(store.complete(&expired, token, &response(b"old"), SHORT).await.unwrap(), Fence::Held);
    tokio::time::sleep(PAST_SHORT).await;
    while store.purge_expired(1000).await.unwrap() > 0 {}
    assert_eq!(
        store.claim(&live, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::Replay(response(b"live"))
    );
    assert!(matches!(
        store.claim(&in_flight, &fingerprint("a"), LONG, std::time::Duration::from_secs(3600)).await.unwrap(),
        Claim::InFlight { .. }
    ));
    assert_eq!(store.get(&expired).await.unwrap(), None);
}
