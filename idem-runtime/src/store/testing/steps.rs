//! Conformance cases on durable steps, held executions and what a record
//! tells about itself (§8 and §14 of the behaviour contract).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::cases::{LONG, PAST_SHORT, SHORT, TTL, acquire, fingerprint, fresh_key, response, take_over};
use crate::store::{
    Attempt, Claim, ClaimTerms, Fence, FencingToken, Fingerprint, OnLapse, RecordState, Step, StorageKey, Store,
};

/// A step named `name` whose result is `result`.
pub fn step(name: &str, result: &str) -> Step {
    Step { name: name.to_owned(), result: Bytes::from(result.to_owned()) }
}

/// The steps of `key`'s record.
async fn steps_of(store: &dyn Store, key: &StorageKey) -> Vec<Step> {
    store.get(key).await.expect("get").expect("a record").steps
}

/// Claims `key` for `fp` under `terms` with a fresh token.
async fn claim(store: &dyn Store, key: &StorageKey, fp: &Fingerprint, terms: &ClaimTerms) -> Claim {
    store.claim_with(key, fp, FencingToken::generate(), terms).await.expect("claim")
}

/// A step is recorded once, fenced by the token: the same name recorded
/// again keeps its first result, and the steps keep the order they were
/// recorded in.
pub async fn a_step_name_recorded_twice_keeps_the_first(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert!(steps_of(&*store, &key).await.is_empty());
    assert_eq!(store.record_step(&key, token, &step("charge", r#"{"id":"ch_1"}"#)).await.unwrap(), Fence::Held);
    assert_eq!(store.record_step(&key, token, &step("charge", r#"{"id":"ch_2"}"#)).await.unwrap(), Fence::Held);
    assert_eq!(store.record_step(&key, token, &step("ship", "\"parcel\"")).await.unwrap(), Fence::Held);
    let binary = Step { name: "binary".into(), result: Bytes::from_static(b"\x00\xff\r\n:|{}") };
    assert_eq!(store.record_step(&key, token, &binary).await.unwrap(), Fence::Held);
    let expected = vec![step("charge", r#"{"id":"ch_1"}"#), step("ship", "\"parcel\""), binary];
    assert_eq!(steps_of(&*store, &key).await, expected);
    // A completion ends the execution: its steps go with it.
    assert_eq!(store.complete(&key, token, &response(b"done"), TTL).await.unwrap(), Fence::Held);
    assert!(steps_of(&*store, &key).await.is_empty());
}

/// Only the record's holder records steps: not a forged token, not an
/// execution taken over, not one that completed or released.
pub async fn a_stale_token_cannot_record_a_step(store: Arc<dyn Store>) {
    let key = fresh_key();
    let first = acquire(&*store, &key, &fingerprint("a"), SHORT, TTL).await;
    assert_eq!(store.record_step(&key, FencingToken::generate(), &step("forged", "1")).await.unwrap(), Fence::Lost);
    // Lapsed but not taken over: still the holder's.
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.record_step(&key, first, &step("late", "1")).await.unwrap(), Fence::Held);
    let second = take_over(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.record_step(&key, first, &step("stale", "1")).await.unwrap(), Fence::Lost);
    assert_eq!(steps_of(&*store, &key).await, vec![step("late", "1")]);
    assert_eq!(store.release(&key, second).await.unwrap(), Fence::Held);
    assert_eq!(store.record_step(&key, second, &step("released", "1")).await.unwrap(), Fence::Lost);
    assert_eq!(steps_of(&*store, &key).await, vec![step("late", "1")]);
    let third = acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.complete(&key, third, &response(b"done"), TTL).await.unwrap(), Fence::Held);
    assert_eq!(store.record_step(&key, third, &step("completed", "1")).await.unwrap(), Fence::Lost);
    assert_eq!(store.get(&key).await.unwrap().map(|r| r.steps), Some(Vec::new()));
    // No record at all.
    assert_eq!(store.record_step(&fresh_key(), third, &step("none", "1")).await.unwrap(), Fence::Lost);
}

/// A takeover gets back every step its predecessors recorded, in order,
/// and no other: not another key's, not those of a record past its TTL. A
/// release keeps them for the next execution; a completion drops them.
pub async fn a_takeover_sees_every_recorded_step_and_no_other(store: Arc<dyn Store>) {
    let (key, other) = (fresh_key(), fresh_key());
    let first = acquire(&*store, &key, &fingerprint("a"), SHORT, TTL).await;
    let beside = acquire(&*store, &other, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.record_step(&other, beside, &step("elsewhere", "0")).await.unwrap(), Fence::Held);
    assert_eq!(store.record_step(&key, first, &step("charge", "1")).await.unwrap(), Fence::Held);
    assert_eq!(store.record_step(&key, first, &step("reserve", "2")).await.unwrap(), Fence::Held);
    tokio::time::sleep(PAST_SHORT).await;
    let terms = ClaimTerms::new(SHORT, TTL);
    assert!(matches!(claim(&*store, &key, &fingerprint("a"), &terms).await, Claim::InFlight { .. }));
    tokio::time::sleep(crate::store::grace(SHORT) + SHORT / 4).await;
    let token = FencingToken::generate();
    let claimed = store.claim_with(&key, &fingerprint("a"), token, &terms).await.unwrap();
    let expected = vec![step("charge", "1"), step("reserve", "2")];
    assert_eq!(claimed, Claim::Acquired { token, attempt: Attempt::Takeover, steps: expected.clone() });
    // The same claim sent again is answered the same.
    let again = store.claim_with(&key, &fingerprint("a"), token, &terms).await.unwrap();
    assert_eq!(again, Claim::Acquired { token, attempt: Attempt::Takeover, steps: expected.clone() });
    // The successor records the rest; a second takeover sees all three.
    assert_eq!(store.record_step(&key, token, &step("ship", "3")).await.unwrap(), Fence::Held);
    tokio::time::sleep(PAST_SHORT).await;
    assert!(matches!(claim(&*store, &key, &fingerprint("a"), &terms).await, Claim::InFlight { .. }));
    tokio::time::sleep(crate::store::grace(SHORT) + SHORT / 4).await;
    let all = [expected, vec![step("ship", "3")]].concat();
    match claim(&*store, &key, &fingerprint("a"), &ClaimTerms::new(LONG, TTL)).await {
        Claim::Acquired { attempt: Attempt::Takeover, steps, token } => {
            assert_eq!(steps, all);
            // Released (a retryable answer: the rest did not happen): the
            // tombstone keeps the steps, whose effects did.
            assert_eq!(store.release(&key, token).await.unwrap(), Fence::Held);
        }
        other => panic!("expected a takeover, got {other:?}"),
    }
    assert_eq!(steps_of(&*store, &key).await, all, "the tombstone keeps the steps");
    match claim(&*store, &key, &fingerprint("a"), &ClaimTerms::new(LONG, TTL)).await {
        Claim::Acquired { attempt: Attempt::AfterRelease, steps, token } => {
            assert_eq!(steps, all);
            assert_eq!(store.complete(&key, token, &response(b"done"), TTL).await.unwrap(), Fence::Held);
        }
        other => panic!("expected a claim after the release, got {other:?}"),
    }
    assert!(steps_of(&*store, &key).await.is_empty(), "a completion drops them");
    // A record past its TTL leaves no steps to the next request.
    let key = fresh_key();
    let gone = acquire(&*store, &key, &fingerprint("a"), SHORT, SHORT).await;
    assert_eq!(store.record_step(&key, gone, &step("charge", "1")).await.unwrap(), Fence::Held);
    tokio::time::sleep(PAST_SHORT).await;
    match claim(&*store, &key, &fingerprint("a"), &ClaimTerms::new(LONG, TTL)).await {
        Claim::Acquired { attempt: Attempt::First, steps, .. } => assert!(steps.is_empty(), "{steps:?}"),
        other => panic!("expected a first claim, got {other:?}"),
    }
}

/// Under [`OnLapse::Hold`], the claim that would take a lapsed execution
/// over holds it instead: every claim of the same request answers held
/// (the first to hold it says so), another request is refused, and the
/// holder keeps its token: it renews, records steps and completes, and
/// retries replay what it stored; the runtime's own release
/// ([`Store::release_unless_held`]) leaves it held.
pub async fn a_lapsed_execution_under_hold_is_held_for_its_holder(store: Arc<dyn Store>) {
    let key = fresh_key();
    let hold = ClaimTerms::new(SHORT, TTL).on_lapse(OnLapse::Hold).route("POST /conformance");
    let holder = FencingToken::generate();
    let claimed = store.claim_with(&key, &fingerprint("a"), holder, &hold).await.unwrap();
    assert!(matches!(claimed, Claim::Acquired { attempt: Attempt::First, .. }), "{claimed:?}");
    // Another, whose holder releases it once held.
    let (other, other_holder) = (fresh_key(), FencingToken::generate());
    let claimed = store.claim_with(&other, &fingerprint("a"), other_holder, &hold).await.unwrap();
    assert!(matches!(claimed, Claim::Acquired { attempt: Attempt::First, .. }), "{claimed:?}");
    assert_eq!(store.record_step(&key, holder, &step("charge", "1")).await.unwrap(), Fence::Held);
    tokio::time::sleep(PAST_SHORT).await;
    // The grace first, as for a takeover.
    assert!(matches!(claim(&*store, &key, &fingerprint("a"), &hold).await, Claim::InFlight { .. }));
    assert!(matches!(claim(&*store, &other, &fingerprint("a"), &hold).await, Claim::InFlight { .. }));
    tokio::time::sleep(crate::store::grace(SHORT) + SHORT / 4).await;
    assert_eq!(claim(&*store, &key, &fingerprint("a"), &hold).await, Claim::Held { newly: true });
    assert_eq!(claim(&*store, &other, &fingerprint("a"), &hold).await, Claim::Held { newly: true });
    // Its holder's own word (a retryable answer) releases a held record.
    assert_eq!(store.release(&other, other_holder).await.unwrap(), Fence::Held);
    let again = claim(&*store, &other, &fingerprint("a"), &hold).await;
    assert!(matches!(again, Claim::Acquired { attempt: Attempt::AfterRelease, .. }), "{again:?}");
    assert_eq!(claim(&*store, &key, &fingerprint("a"), &hold).await, Claim::Held { newly: false });
    // A route deployed with `takeover` meanwhile does not take it either.
    let takeover = ClaimTerms::new(SHORT, TTL);
    assert_eq!(claim(&*store, &key, &fingerprint("a"), &takeover).await, Claim::Held { newly: false });
    assert_eq!(claim(&*store, &key, &fingerprint("b"), &hold).await, Claim::Mismatch);
    let record = store.get(&key).await.unwrap().expect("a held record");
    assert!(matches!(record.state, RecordState::Held { token, .. } if token == holder), "{record:?}");
    assert_eq!(record.steps, vec![step("charge", "1")]);
    // Only its holder writes to it; its renewals keep it held.
    assert_eq!(store.renew(&key, FencingToken::generate(), LONG).await.unwrap(), Fence::Lost);
    assert_eq!(store.renew(&key, holder, LONG).await.unwrap(), Fence::Held);
    assert_eq!(claim(&*store, &key, &fingerprint("a"), &hold).await, Claim::Held { newly: false });
    assert_eq!(store.record_step(&key, holder, &step("ship", "2")).await.unwrap(), Fence::Held);
    // The runtime's own release (its handler never said that nothing
    // happened) leaves it held.
    assert_eq!(store.release_unless_held(&key, holder).await.unwrap(), Fence::Lost);
    assert_eq!(claim(&*store, &key, &fingerprint("a"), &hold).await, Claim::Held { newly: false });
    let wrong = FencingToken::generate();
    assert_eq!(store.complete(&key, wrong, &response(b"no"), TTL).await.unwrap(), Fence::Lost);
    assert_eq!(store.complete(&key, holder, &response(b"slow"), TTL).await.unwrap(), Fence::Held);
    assert_eq!(claim(&*store, &key, &fingerprint("a"), &hold).await, Claim::Replay(response(b"slow")));
}

/// A live lease is never held, with or without [`OnLapse::Hold`]; a
/// holder that releases its execution leaves a tombstone as always, by
/// either release.
pub async fn hold_waits_for_the_lease_and_its_grace(store: Arc<dyn Store>) {
    let key = fresh_key();
    let hold = ClaimTerms::new(LONG, TTL).on_lapse(OnLapse::Hold);
    let holder = match claim(&*store, &key, &fingerprint("a"), &hold).await {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    };
    for _ in 0..3 {
        assert!(matches!(claim(&*store, &key, &fingerprint("a"), &hold).await, Claim::InFlight { .. }));
    }
    assert_eq!(store.release(&key, holder).await.unwrap(), Fence::Held);
    // A tombstone is not a lapse: the same request runs again.
    let again = claim(&*store, &key, &fingerprint("a"), &hold).await;
    assert!(matches!(again, Claim::Acquired { attempt: Attempt::AfterRelease, .. }), "{again:?}");

    let key = fresh_key();
    let holder = match claim(&*store, &key, &fingerprint("a"), &ClaimTerms::new(SHORT, TTL)).await {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    };
    tokio::time::sleep(PAST_SHORT).await;
    let hold = ClaimTerms::new(SHORT, TTL).on_lapse(OnLapse::Hold);
    assert!(matches!(claim(&*store, &key, &fingerprint("a"), &hold).await, Claim::InFlight { .. }));
    // The holder renews within the grace: alive, so never held.
    assert_eq!(store.renew(&key, holder, LONG).await.unwrap(), Fence::Held);
    tokio::time::sleep(crate::store::grace(SHORT) + SHORT / 4).await;
    assert!(matches!(claim(&*store, &key, &fingerprint("a"), &hold).await, Claim::InFlight { .. }));
    // Not held: the runtime's own release leaves a tombstone too.
    assert_eq!(store.release_unless_held(&key, FencingToken::generate()).await.unwrap(), Fence::Lost);
    assert_eq!(store.release_unless_held(&key, holder).await.unwrap(), Fence::Held);
    let again = claim(&*store, &key, &fingerprint("a"), &hold).await;
    assert!(matches!(again, Claim::Acquired { attempt: Attempt::AfterRelease, .. }), "{again:?}");
}

/// A record tells operators the route that claimed it, which execution
/// holds it and when it was claimed.
pub async fn a_record_tells_its_route_attempt_and_age(store: Arc<dyn Store>) {
    let key = fresh_key();
    let terms = ClaimTerms::new(LONG, TTL).route("POST /orders/{id}/payments");
    let before = SystemTime::now() - Duration::from_secs(2);
    let token = match claim(&*store, &key, &fingerprint("a"), &terms).await {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    };
    let record = store.get(&key).await.unwrap().expect("a record");
    assert_eq!(record.route.as_deref(), Some("POST /orders/{id}/payments"));
    assert_eq!(record.attempt, Some(Attempt::First));
    let claimed_at = record.claimed_at.expect("when it was claimed");
    assert!(claimed_at >= before && claimed_at <= SystemTime::now() + Duration::from_secs(2), "{claimed_at:?}");
    assert_eq!(store.complete(&key, token, &response(b"done"), TTL).await.unwrap(), Fence::Held);
    let record = store.get(&key).await.unwrap().expect("a record");
    assert_eq!(record.route.as_deref(), Some("POST /orders/{id}/payments"), "kept once completed");
    assert_eq!(record.claimed_at, Some(claimed_at));
}
