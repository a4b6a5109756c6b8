//! Conformance cases of [`Operable`]: what the operator's tool relies on
//! (§14 of the behaviour contract). Instantiated with
//! [`operable_conformance_tests!`](crate::store::testing::operable_conformance_tests).

use std::sync::Arc;
use std::time::Duration;

use super::cases::{LONG, PAST_SHORT, SHORT, TTL, acquire, fingerprint, fresh_key, response};
use super::steps::step;
use crate::store::{
    Attempt, Claim, ClaimTerms, Fence, FencingToken, InFlightSettle, ListFilter, OnLapse, Operable, RecordState,
    Settle, Settlement, StateName, StorageKey, Store,
};

/// The grace an operator's settle gives a lapsed lease in these cases.
const GRACE: Duration = Duration::from_secs(1);

/// A settle as the operator's tool makes it without `--force`.
const AFTER_GRACE: InFlightSettle = InFlightSettle::AfterGrace(GRACE);

/// A route no other case (or run) uses, so that listings see this case's
/// records alone on a shared server.
fn fresh_route() -> String {
    format!("POST /operable-{}", FencingToken::generate().to_hex())
}

/// Claims a fresh key on `route` under `terms`; its key and token.
async fn claimed(store: &dyn Store, terms: &ClaimTerms, body: &str) -> (StorageKey, FencingToken) {
    let key = fresh_key();
    match store.claim_with(&key, &fingerprint(body), FencingToken::generate(), terms).await.expect("claim") {
        Claim::Acquired { token, .. } => (key, token),
        other => panic!("expected the key to be acquired, got {other:?}"),
    }
}

/// A fresh key on `route`, held: its lease lapsed past its grace under
/// [`OnLapse::Hold`]. Its key and holder's token.
async fn held(store: &dyn Store, route: &str) -> (StorageKey, FencingToken) {
    let hold = ClaimTerms::new(SHORT, TTL).on_lapse(OnLapse::Hold).route(route);
    let (key, token) = claimed(store, &hold, "held").await;
    assert_eq!(store.record_step(&key, token, &step("charge", r#"{"charge":"ch_1"}"#)).await.unwrap(), Fence::Held);
    tokio::time::sleep(PAST_SHORT).await;
    let fp = fingerprint("held");
    let claim = || store.claim_with(&key, &fp, FencingToken::generate(), &hold);
    assert!(matches!(claim().await.unwrap(), Claim::InFlight { .. }));
    tokio::time::sleep(crate::store::grace(SHORT) + SHORT / 4).await;
    assert_eq!(claim().await.unwrap(), Claim::Held { newly: true });
    (key, token)
}

/// Listing finds records by state, route and age, up to a limit, each with
/// what it holds.
pub async fn listing_filters_by_state_route_and_age(store: Arc<dyn Operable>) {
    let route = fresh_route();
    let terms = ClaimTerms::new(LONG, TTL).route(route.as_str());
    let (running, _) = claimed(&*store, &terms, "running").await;
    let (completed, token) = claimed(&*store, &terms, "completed").await;
    assert_eq!(store.complete(&completed, token, &response(b"done"), TTL).await.unwrap(), Fence::Held);
    let (released, token) = claimed(&*store, &terms, "released").await;
    assert_eq!(store.release(&released, token).await.unwrap(), Fence::Held);
    let (held, holder) = held(&*store, &route).await;
    let list = |filter: ListFilter| {
        let store = Arc::clone(&store);
        async move { store.list(&filter).await.expect("list") }
    };
    let everything = list(ListFilter::new(100).route(route.as_str())).await;
    let mut keys: Vec<_> = everything.iter().map(|(key, _)| key.clone()).collect();
    keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let mut expected = vec![running.clone(), completed.clone(), released.clone(), held.clone()];
    expected.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(keys, expected);
    for (state, key) in [
        (StateName::InFlight, &running),
        (StateName::Held, &held),
        (StateName::Completed, &completed),
        (StateName::Released, &released),
    ] {
        let found = list(ListFilter::new(100).route(route.as_str()).state(state)).await;
        assert_eq!(found.len(), 1, "{state}: {found:?}");
        let (found_key, record) = &found[0];
        assert_eq!((found_key, record.state_name()), (key, state));
        assert_eq!(record.route.as_deref(), Some(route.as_str()));
    }
    let (_, record) = &list(ListFilter::new(10).route(route.as_str()).state(StateName::Held)).await[0];
    assert_eq!(record.token(), Some(holder));
    assert_eq!(record.steps, vec![step("charge", r#"{"charge":"ch_1"}"#)]);
    assert_eq!(record.attempt, Some(Attempt::First));
    assert_eq!(list(ListFilter::new(2).route(route.as_str())).await.len(), 2);
    assert!(list(ListFilter::new(100).route(route.as_str()).older_than(Duration::from_secs(3600))).await.is_empty());
    let old = list(ListFilter::new(100).route(route.as_str()).older_than(Duration::from_secs(1))).await;
    assert!(old.iter().any(|(key, _)| *key == running), "{old:?}");
}

/// A record is found by its id, and only a live one.
pub async fn a_record_is_found_by_its_id(store: Arc<dyn Operable>) {
    let key = fresh_key();
    acquire(&*store, &key, &fingerprint("a"), LONG, TTL).await;
    assert_eq!(store.find(key.record_id()).await.unwrap(), Some(key.clone()));
    assert_eq!(store.find(fresh_key().record_id()).await.unwrap(), None);
    assert_eq!(store.find("not an id").await.unwrap(), None);
    let gone = fresh_key();
    acquire(&*store, &gone, &fingerprint("a"), SHORT, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(store.find(gone.record_id()).await.unwrap(), None);
}

/// An operator's release or resolve applies only to the record as it was
/// inspected (its token and state), once.
pub async fn settling_applies_only_to_the_record_as_inspected(store: Arc<dyn Operable>) {
    let route = fresh_route();
    // In flight, no steps: released by the operator, as inspected (forced:
    // its lease is live).
    let (key, token) = claimed(&*store, &ClaimTerms::new(LONG, TTL).route(route.as_str()), "a").await;
    let release = Settlement::Release { forget_steps: false };
    let force = InFlightSettle::Force;
    assert_eq!(store.settle(&key, token, StateName::Held, &release, force).await.unwrap(), Settle::Changed, "not held");
    let other = FencingToken::generate();
    assert_eq!(store.settle(&key, other, StateName::InFlight, &release, force).await.unwrap(), Settle::Changed);
    match store.settle(&key, token, StateName::InFlight, &release, AFTER_GRACE).await.unwrap() {
        Settle::Running { lease_left } => assert!(lease_left > LONG / 2, "{lease_left:?}"),
        other => panic!("a live lease is refused as running, got {other:?}"),
    }
    assert_eq!(store.settle(&key, token, StateName::InFlight, &release, force).await.unwrap(), Settle::Applied);
    let twice = store.settle(&key, token, StateName::InFlight, &release, force).await.unwrap();
    assert_eq!(twice, Settle::Changed, "twice");
    assert!(matches!(store.get(&key).await.unwrap().map(|r| r.state), Some(RecordState::Released { .. })));
    assert_eq!(store.complete(&key, token, &response(b"late"), TTL).await.unwrap(), Fence::Lost);
    let again = store.claim(&key, &fingerprint("a"), LONG, TTL).await.unwrap();
    assert!(matches!(again, Claim::Acquired { attempt: Attempt::AfterRelease, ref steps, .. } if steps.is_empty()));

    // Held: resolved by the operator; retries replay the operator's response.
    let (key, holder) = held(&*store, &route).await;
    let resolved = Settlement::Resolve(response(b"established by the operator"));
    assert_eq!(
        store.settle(&key, holder, StateName::InFlight, &resolved, AFTER_GRACE).await.unwrap(),
        Settle::Changed,
        "held"
    );
    assert_eq!(store.settle(&key, other, StateName::Held, &resolved, AFTER_GRACE).await.unwrap(), Settle::Changed);
    let ttl_before = store.get(&key).await.unwrap().expect("held").ttl_left();
    assert_eq!(store.settle(&key, holder, StateName::Held, &resolved, AFTER_GRACE).await.unwrap(), Settle::Applied);
    let record = store.get(&key).await.unwrap().expect("resolved");
    assert!(record.ttl_left() <= ttl_before && record.ttl_left() > ttl_before - Duration::from_secs(10));
    let replay = store.claim(&key, &fingerprint("held"), LONG, TTL).await.unwrap();
    assert_eq!(replay, Claim::Replay(response(b"established by the operator")));
    assert_eq!(store.settle(&key, holder, StateName::Held, &release, AFTER_GRACE).await.unwrap(), Settle::Changed);
    assert_eq!(store.complete(&key, holder, &response(b"slow holder"), TTL).await.unwrap(), Fence::Lost);

    // Held, then released: the same request runs again, getting its
    // recorded steps back; the tombstone shows them meanwhile.
    let (key, holder) = held(&*store, &route).await;
    assert_eq!(store.settle(&key, holder, StateName::Held, &release, AFTER_GRACE).await.unwrap(), Settle::Applied);
    let tombstone = store.get(&key).await.unwrap().expect("a tombstone");
    assert_eq!((tombstone.state_name(), tombstone.steps.len()), (StateName::Released, 1));
    let again = store.claim(&key, &fingerprint("held"), LONG, TTL).await.unwrap();
    let recorded = vec![step("charge", r#"{"charge":"ch_1"}"#)];
    assert!(matches!(again, Claim::Acquired { attempt: Attempt::AfterRelease, ref steps, .. } if *steps == recorded));
    assert_eq!(
        store.settle(&fresh_key(), holder, StateName::Held, &release, AFTER_GRACE).await.unwrap(),
        Settle::Changed
    );

    // Released forgetting its steps: the next execution runs them all.
    let (key, holder) = held(&*store, &route).await;
    let forget = Settlement::Release { forget_steps: true };
    assert_eq!(store.settle(&key, holder, StateName::Held, &forget, AFTER_GRACE).await.unwrap(), Settle::Applied);
    assert!(store.get(&key).await.unwrap().expect("a tombstone").steps.is_empty());
    let again = store.claim(&key, &fingerprint("held"), LONG, TTL).await.unwrap();
    assert!(matches!(again, Claim::Acquired { attempt: Attempt::AfterRelease, ref steps, .. } if steps.is_empty()));
}

/// An operator's settle of an execution in flight whose lease lapsed is
/// refused first, giving its holder a grace, as a claim does: the holder's
/// renewal may have been on its way when the operator looked. A renewal
/// within the grace keeps the record its holder's (a settle is then
/// refused as running); without one, a settle after the grace applies.
pub async fn settling_a_lapsed_execution_first_gives_its_holder_a_grace(store: Arc<dyn Operable>) {
    let route = fresh_route();
    let (key, token) = claimed(&*store, &ClaimTerms::new(SHORT, TTL).route(route.as_str()), "lapsing").await;
    let release = Settlement::Release { forget_steps: false };
    let settle = || store.settle(&key, token, StateName::InFlight, &release, AFTER_GRACE);
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(settle().await.unwrap(), Settle::Graced { grace: GRACE }, "the first settle to find it lapsed");
    let record = store.get(&key).await.unwrap().expect("in flight");
    assert_eq!((record.state_name(), record.token()), (StateName::InFlight, Some(token)), "nothing else written");
    match settle().await.unwrap() {
        Settle::Running { lease_left } => assert!(lease_left <= GRACE, "{lease_left:?}"),
        other => panic!("within the grace a settle is refused as running, got {other:?}"),
    }

    // Its holder renews within the grace: alive, the record its own.
    assert_eq!(store.renew(&key, token, SHORT).await.unwrap(), Fence::Held);
    assert!(matches!(settle().await.unwrap(), Settle::Running { .. }), "renewed");
    // A later lapse gives a grace again: the renewal ended the first.
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(settle().await.unwrap(), Settle::Graced { grace: GRACE }, "lapsed again");

    // No renewal within this grace: the settle after it applies.
    tokio::time::sleep(GRACE + GRACE / 4).await;
    assert_eq!(settle().await.unwrap(), Settle::Applied, "after the grace");
    assert_eq!(store.get(&key).await.unwrap().expect("a tombstone").state_name(), StateName::Released);
    assert_eq!(store.renew(&key, token, SHORT).await.unwrap(), Fence::Lost, "the holder learns it lost the record");
}
