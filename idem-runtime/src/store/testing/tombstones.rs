//! Conformance cases on records that outlive their owner: released keys
//! (tombstones) and lapsed leases keep their fingerprint until their TTL.

use std::sync::Arc;
use std::time::Duration;

use super::cases::{LONG, PAST_SHORT, SHORT, TTL, acquire, close_to, fingerprint, fresh_key, response, take_over};
use crate::store::{Attempt, Claim, Fence, RecordState, Store};

/// A record TTL that outlasts a [`SHORT`] lease by enough to look at the
/// record in between.
const TWO_SECONDS: Duration = Duration::from_secs(2);

/// Release turns the record into a tombstone: the same request may claim
/// the key again (with a new token), another one is refused, and the
/// released token owns nothing. The tombstone goes with the record's TTL.
pub async fn release_leaves_a_tombstone(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Held);
    let record = store.get(&key).await.unwrap().expect("a tombstone");
    assert_eq!(record.fingerprint, fingerprint("a"));
    match record.state {
        RecordState::Released { ttl_left } => assert!(close_to(ttl_left, TTL), "{ttl_left:?}"),
        other => panic!("expected released, got {other:?}"),
    }
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Lost);
    assert_eq!(store.renew(&key, token, LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.complete(&key, token, &response(b"late"), LONG).await.unwrap(), Fence::Lost);
    for _ in 0..2 {
        assert_eq!(store.claim(&key, &fingerprint("b"), LONG, TTL).await.unwrap(), Claim::Mismatch);
    }
    let again = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_ne!(again, token);
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Lost);
    assert_eq!(store.complete(&key, again, &response(b"second try"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"second try")));

    // A tombstone lives as long as its record: then any request may use the key.
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), SHORT, SHORT).await;
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("b"), LONG, TTL).await.unwrap(), Claim::Mismatch);
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.get(&key).await.unwrap(), None);
    acquire(&*store, &key, &fingerprint("b"), LONG, TTL).await;
}

/// A lease that ran out (a crashed owner) keeps its fingerprint: another
/// request is refused, the same request takes the key over.
pub async fn lapsed_lease_keeps_its_fingerprint(store: Arc<dyn Store>) {
    let key = fresh_key();
    let crashed = acquire(&*store, &key, &fingerprint("a"), SHORT, TTL).await;
    assert_eq!(store.claim(&key, &fingerprint("b"), LONG, TTL).await.unwrap(), Claim::Mismatch);
    tokio::time::sleep(PAST_SHORT).await;
    for _ in 0..2 {
        assert_eq!(store.claim(&key, &fingerprint("b"), LONG, TTL).await.unwrap(), Claim::Mismatch);
    }
    let owner = take_over(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_ne!(owner, crashed);
    assert_eq!(store.claim(&key, &fingerprint("b"), LONG, TTL).await.unwrap(), Claim::Mismatch);
    assert!(matches!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::InFlight { .. }));
}

/// A record whose lease lapsed stays until its TTL, and no longer.
pub async fn record_outlives_a_lapsed_lease_until_its_ttl(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), SHORT, TWO_SECONDS).await;
    tokio::time::sleep(PAST_SHORT).await;
    let record = store.get(&key).await.unwrap().expect("the record outlives its lease");
    assert_eq!(record.fingerprint, fingerprint("a"));
    match record.state {
        RecordState::InFlight { token: held, lease_left, ttl_left } => {
            assert_eq!((held, lease_left), (token, Duration::ZERO));
            assert!(ttl_left > Duration::ZERO && ttl_left <= TWO_SECONDS - PAST_SHORT, "{ttl_left:?}");
        }
        other => panic!("expected a lapsed in-flight record, got {other:?}"),
    }
    assert_eq!(store.claim(&key, &fingerprint("b"), LONG, TTL).await.unwrap(), Claim::Mismatch);
    tokio::time::sleep(TWO_SECONDS - PAST_SHORT + Duration::from_millis(400)).await;
    assert_eq!(store.get(&key).await.unwrap(), None);
    acquire(&*store, &key, &fingerprint("b"), LONG, TTL).await;
}

/// A won claim says what the key held: nothing live ([`Attempt::First`],
/// a record past its TTL included), a tombstone of the same request
/// ([`Attempt::AfterRelease`]) or a lapsed lease of it ([`Attempt::Takeover`]).
pub async fn a_won_claim_tells_which_attempt_it_is(store: Arc<dyn Store>) {
    let attempt = |claim: Claim| match claim {
        Claim::Acquired { attempt, .. } => attempt,
        other => panic!("expected the key to be acquired, got {other:?}"),
    };
    let key = fresh_key();
    let first = store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap();
    let Claim::Acquired { token, attempt: Attempt::First, .. } = first else {
        panic!("expected a first claim: {first:?}")
    };
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Held);
    let again = store.claim(&key, &fingerprint("a"), SHORT, TTL).await.unwrap();
    assert_eq!(attempt(again), Attempt::AfterRelease);
    tokio::time::sleep(PAST_SHORT).await;
    take_over(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    let Some(RecordState::InFlight { token, .. }) = store.get(&key).await.unwrap().map(|r| r.state) else {
        panic!("the key is in flight again")
    };
    let again = store.claim_as(&key, &fingerprint("a"), token, LONG, TTL).await.unwrap();
    assert_eq!(attempt(again), Attempt::Takeover);

    // A record past its TTL is no record: whatever it was, the next claim is a first.
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), SHORT, SHORT).await;
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Held);
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(attempt(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap()), Attempt::First);
}
