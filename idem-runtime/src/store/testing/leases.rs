//! Conformance cases on leases: takeover, fencing, renewal, batched renewal.

use std::sync::Arc;
use std::time::Duration;

use super::cases::{LONG, PAST_SHORT, SHORT, TTL, acquire, close_to, fingerprint, fresh_key, response, take_over};
use crate::store::{Claim, Fence, FencingToken, RecordState, Renewal, StorageKey, Store};

/// The lease and TTL left on `key`'s in-flight record, whose owner must be `token`.
async fn in_flight(store: &dyn Store, key: &StorageKey, token: FencingToken) -> (Duration, Duration) {
    match store.get(key).await.unwrap().expect("an in-flight record").state {
        RecordState::InFlight { token: held, lease_left, ttl_left } => {
            assert_eq!(held, token, "the record changed owner");
            (lease_left, ttl_left)
        }
        other => panic!("expected in flight, got {other:?}"),
    }
}

/// Once a lease runs out, the same request takes over with a new token and
/// a new lease, after the grace the first claim to find it lapsed gives its
/// holder; the record lives the new claim's TTL.
pub async fn expired_lease_can_be_taken_over(store: Arc<dyn Store>) {
    let key = fresh_key();
    let first = acquire(&*store, &key, &fingerprint("a"), SHORT, TTL).await;
    assert!(matches!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::InFlight { .. }));
    tokio::time::sleep(PAST_SHORT).await;
    let second = take_over(&*store, &key, &fingerprint("a"), LONG, 2 * TTL).await;
    assert_ne!(first, second);
    let (lease_left, ttl_left) = in_flight(&*store, &key, second).await;
    assert!(close_to(lease_left, LONG), "{lease_left:?}");
    assert!(close_to(ttl_left, 2 * TTL), "{ttl_left:?}");
}

/// After a takeover the old owner can neither complete nor release, and the
/// new owner's work is what gets replayed.
pub async fn stale_owner_can_neither_complete_nor_release(store: Arc<dyn Store>) {
    let key = fresh_key();
    let stale = acquire(&*store, &key, &fingerprint("a"), SHORT, TTL).await;
    tokio::time::sleep(PAST_SHORT).await;
    let owner = take_over(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.complete(&key, stale, &response(b"stale"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.release(&key, stale).await.unwrap(), Fence::Lost);
    assert_eq!(store.renew(&key, stale, LONG).await.unwrap(), Fence::Lost);
    in_flight(&*store, &key, owner).await;
    assert_eq!(store.complete(&key, owner, &response(b"owner"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"owner")));
}

/// Ownership is the token, not the lease: a lease that ran out while
/// nobody claimed the key (its store was unreachable for longer than the
/// lease) is still its holder's, who renews it back into life and
/// completes, and the retry gets the replay.
pub async fn a_lapsed_owner_without_successor_renews_and_completes(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), SHORT, TTL).await;
    tokio::time::sleep(PAST_SHORT).await;
    let (lease_left, ttl_left) = in_flight(&*store, &key, token).await;
    assert_eq!(lease_left, Duration::ZERO);
    assert!(close_to(ttl_left, TTL), "{ttl_left:?}");
    assert_eq!(store.renew(&key, token, LONG).await.unwrap(), Fence::Held);
    let (lease_left, _) = in_flight(&*store, &key, token).await;
    assert!(close_to(lease_left, LONG), "{lease_left:?}");
    assert!(matches!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::InFlight { .. }));
    assert_eq!(store.complete(&key, token, &response(b"late"), TTL).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"late")));
}

/// The first claim to find a lease lapsed does not take the key over: it
/// gives the holder a grace of half its own lease (the holder may only have
/// been cut off from the store), answering in flight, and so does every
/// claim within the grace. A renewal by the holder ends the grace; without
/// one, the first claim after the grace takes the key over.
pub async fn a_lapsed_lease_gives_its_holder_a_grace_before_a_takeover(store: Arc<dyn Store>) {
    let key = fresh_key();
    let fp = fingerprint("a");
    let holder = acquire(&*store, &key, &fp, SHORT, TTL).await;
    tokio::time::sleep(PAST_SHORT).await;
    let grace = crate::store::grace(SHORT);
    match store.claim(&key, &fp, SHORT, TTL).await.unwrap() {
        Claim::InFlight { retry_after } => assert!(close_to(retry_after, grace), "{retry_after:?}"),
        other => panic!("the first claim after the lapse gives a grace, got {other:?}"),
    }
    assert!(matches!(store.claim(&key, &fp, SHORT, TTL).await.unwrap(), Claim::InFlight { .. }), "within the grace");
    in_flight(&*store, &key, holder).await;
    // The holder comes back within the grace: the key stays its own, and the
    // grace it had is spent: a later lapse gives a grace again.
    assert_eq!(store.renew(&key, holder, SHORT).await.unwrap(), Fence::Held);
    tokio::time::sleep(PAST_SHORT).await;
    assert!(matches!(store.claim(&key, &fp, SHORT, TTL).await.unwrap(), Claim::InFlight { .. }), "a new grace");
    tokio::time::sleep(grace + SHORT / 4).await;
    // No renewal this time: the first claim after the grace takes over.
    let taker = acquire(&*store, &key, &fp, LONG, TTL).await;
    assert_ne!(taker, holder);
    assert_eq!(store.renew(&key, holder, SHORT).await.unwrap(), Fence::Lost);
    in_flight(&*store, &key, taker).await;
}

/// A lapsed lease nobody took over is completed, or released, by its token
/// without being renewed first.
pub async fn a_lapsed_owner_completes_or_releases_without_renewing(store: Arc<dyn Store>) {
    let (completed, released) = (fresh_key(), fresh_key());
    let completing = acquire(&*store, &completed, &fingerprint("a"), SHORT, TTL).await;
    let releasing = acquire(&*store, &released, &fingerprint("a"), SHORT, TTL).await;
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.complete(&completed, completing, &response(b"late"), TTL).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&completed, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"late")));
    assert_eq!(store.release(&released, releasing).await.unwrap(), Fence::Held);
    match store.claim(&released, &fingerprint("a"), LONG, TTL).await.unwrap() {
        Claim::Acquired { attempt, .. } => assert_eq!(attempt, crate::store::Attempt::AfterRelease),
        other => panic!("expected the released key to be claimed again, got {other:?}"),
    }
}

/// A record past its TTL is gone, for its token too: nothing renews,
/// completes or releases it back into being.
pub async fn a_record_past_its_ttl_is_gone_for_its_token(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), SHORT, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.renew(&key, token, LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.complete(&key, token, &response(b"late"), TTL).await.unwrap(), Fence::Lost);
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Lost);
    assert_eq!(store.get(&key).await.unwrap(), None);
}

/// The same claim sent again (its token, say after its answer was lost)
/// is answered as acquired, as the attempt it was; any other claim of the
/// same request still finds the key in flight.
pub async fn the_same_claim_sent_again_is_its_own(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = FencingToken::generate();
    let first = store.claim_as(&key, &fingerprint("a"), token, SHORT, TTL).await.unwrap();
    assert_eq!(first, Claim::Acquired { token, attempt: crate::store::Attempt::First, steps: Vec::new() });
    assert_eq!(store.claim_as(&key, &fingerprint("a"), token, SHORT, TTL).await.unwrap(), first);
    assert!(matches!(store.claim(&key, &fingerprint("a"), SHORT, TTL).await.unwrap(), Claim::InFlight { .. }));
    in_flight(&*store, &key, token).await;
    // Sent again after its lease ran out: still its own, never a takeover
    // nor a grace of its own holder.
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.claim_as(&key, &fingerprint("a"), token, SHORT, TTL).await.unwrap(), first);
    in_flight(&*store, &key, token).await;
}

/// A claim is its own only for its request: another request sending the
/// holder's token is a mismatch, as any other claim of it is, its lease
/// running or lapsed, and the record stays its holder's, the request's.
pub async fn the_holders_token_with_another_request_is_a_mismatch(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = FencingToken::generate();
    let first = store.claim_as(&key, &fingerprint("a"), token, SHORT, TTL).await.unwrap();
    assert!(matches!(first, Claim::Acquired { .. }), "{first:?}");
    assert_eq!(store.claim_as(&key, &fingerprint("b"), token, SHORT, TTL).await.unwrap(), Claim::Mismatch);
    in_flight(&*store, &key, token).await;
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.claim_as(&key, &fingerprint("b"), token, SHORT, TTL).await.unwrap(), Claim::Mismatch);
    let record = store.get(&key).await.unwrap().expect("an in-flight record");
    assert_eq!(record.fingerprint, fingerprint("a"), "the record is the first request's");
    assert_eq!(in_flight(&*store, &key, token).await.0, Duration::ZERO, "no grace, no new lease");
    assert_eq!(store.claim_as(&key, &fingerprint("a"), token, SHORT, TTL).await.unwrap(), first);
}

/// Renewing keeps a short lease alive far past its first expiry.
pub async fn renew_keeps_the_lease_alive(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), SHORT, TTL).await;
    for _ in 0..8 {
        tokio::time::sleep(SHORT / 3).await;
        assert_eq!(store.renew(&key, token, SHORT).await.unwrap(), Fence::Held);
        assert!(matches!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::InFlight { .. }));
    }
    assert_eq!(store.renew(&key, token, LONG).await.unwrap(), Fence::Held);
    let (lease_left, ttl_left) = in_flight(&*store, &key, token).await;
    assert!(close_to(lease_left, LONG), "{lease_left:?}");
    // A lease within the record's life leaves the TTL as it was.
    assert!(close_to(ttl_left, TTL), "{ttl_left:?}");
    assert_eq!(store.complete(&key, token, &response(b"done"), LONG).await.unwrap(), Fence::Held);
}

/// A renewal whose lease would outlive the record extends the record too.
pub async fn renew_extends_a_record_past_its_ttl(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), SHORT, SHORT).await;
    assert_eq!(store.renew(&key, token, LONG).await.unwrap(), Fence::Held);
    tokio::time::sleep(PAST_SHORT).await;
    let (lease_left, ttl_left) = in_flight(&*store, &key, token).await;
    assert!(close_to(lease_left, LONG), "{lease_left:?}");
    assert!(ttl_left >= lease_left, "the record ({ttl_left:?}) must outlive its lease ({lease_left:?})");
    assert_eq!(store.complete(&key, token, &response(b"done"), LONG).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::Replay(response(b"done")));
}

/// A token that was never handed out owns nothing.
pub async fn forged_token_is_refused(store: Arc<dyn Store>) {
    let key = fresh_key();
    acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    let forged = FencingToken::generate();
    assert_eq!(store.renew(&key, forged, LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.complete(&key, forged, &response(b"x"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.release(&key, forged).await.unwrap(), Fence::Lost);
    assert!(matches!(store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap(), Claim::InFlight { .. }));
    // Fenced operations on a key that does not exist are refused, and create nothing.
    let missing = fresh_key();
    assert_eq!(store.complete(&missing, forged, &response(b"x"), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.renew(&missing, forged, LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.release(&missing, forged).await.unwrap(), Fence::Lost);
    assert_eq!(store.get(&missing).await.unwrap(), None);
}

/// One batch renews the leases still held, each to its own length (a
/// lapsed one nobody took over included), and answers lost for the others
/// (forged, missing, completed, released), in the order asked; an empty
/// batch is answered empty.
pub async fn renew_many_answers_each_lease(store: Arc<dyn Store>) {
    assert_eq!(store.renew_many(&[]).await.unwrap(), Vec::new());
    let fp = fingerprint("a");
    let (held, held_longer, lapsed, forged, missing, completed, released) =
        (fresh_key(), fresh_key(), fresh_key(), fresh_key(), fresh_key(), fresh_key(), fresh_key());
    let held_token = acquire(&*store, &held, &fp, SHORT, TTL).await;
    let held_longer_token = acquire(&*store, &held_longer, &fp, SHORT, TTL).await;
    let lapsed_token = acquire(&*store, &lapsed, &fp, SHORT, TTL).await;
    let forged_owner = acquire(&*store, &forged, &fp, LONG, TTL).await;
    let completed_token = acquire(&*store, &completed, &fp, LONG, TTL).await;
    assert_eq!(store.complete(&completed, completed_token, &response(b"done"), LONG).await.unwrap(), Fence::Held);
    let released_token = acquire(&*store, &released, &fp, LONG, TTL).await;
    assert_eq!(store.release(&released, released_token).await.unwrap(), Fence::Held);
    // Keep the two held leases alive while the third one lapses.
    for _ in 0..7 {
        tokio::time::sleep(PAST_SHORT / 7).await;
        for (key, token) in [(&held, held_token), (&held_longer, held_longer_token)] {
            assert_eq!(store.renew(key, token, SHORT).await.unwrap(), Fence::Held);
        }
    }
    let renewal = |key: &StorageKey, token, lease| Renewal { key: key.clone(), token, lease };
    let batch = [
        renewal(&lapsed, lapsed_token, LONG),
        renewal(&held, held_token, LONG),
        renewal(&forged, FencingToken::generate(), LONG),
        renewal(&missing, FencingToken::generate(), LONG),
        renewal(&held_longer, held_longer_token, 2 * LONG),
        renewal(&completed, completed_token, LONG),
        renewal(&released, released_token, LONG),
        renewal(&held, held_token, LONG),
    ];
    let expected =
        [Fence::Held, Fence::Held, Fence::Lost, Fence::Lost, Fence::Held, Fence::Lost, Fence::Lost, Fence::Held];
    assert_eq!(store.renew_many(&batch).await.unwrap(), expected);
    // Each held lease got its own length; nothing else changed.
    assert!(close_to(in_flight(&*store, &held, held_token).await.0, LONG));
    let (lease_left, ttl_left) = in_flight(&*store, &held_longer, held_longer_token).await;
    assert!(close_to(lease_left, 2 * LONG), "{lease_left:?}");
    assert!(close_to(ttl_left, TTL), "{ttl_left:?}");
    assert!(close_to(in_flight(&*store, &lapsed, lapsed_token).await.0, LONG));
    in_flight(&*store, &forged, forged_owner).await;
    assert_eq!(store.get(&missing).await.unwrap(), None);
    assert_eq!(store.claim(&completed, &fp, LONG, TTL).await.unwrap(), Claim::Replay(response(b"done")));
    let tombstone = store.get(&released).await.unwrap().expect("the tombstone");
    assert!(matches!(tombstone.state, RecordState::Released { .. }), "{tombstone:?}");
}

/// After a takeover, a batch that renews the key under both the stale and
/// the live token answers each for itself: the stale one lost, the live one
/// held (a store must match answers by token, not by key alone).
pub async fn renew_many_tells_a_stale_token_from_the_live_one(store: Arc<dyn Store>) {
    let key = fresh_key();
    let stale = acquire(&*store, &key, &fingerprint("a"), SHORT, TTL).await;
    tokio::time::sleep(PAST_SHORT).await;
    let live = take_over(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    let renewals = [
        Renewal { key: key.clone(), token: stale, lease: LONG },
        Renewal { key: key.clone(), token: live, lease: LONG },
        Renewal { key: key.clone(), token: stale, lease: LONG },
    ];
    assert_eq!(store.renew_many(&renewals).await.unwrap(), [Fence::Lost, Fence::Held, Fence::Lost]);
}
