//! A lease that runs out while its owner is paused (no renewals): a new
//! claimer takes over, the old owner is fenced off, and the new owner's
//! response is the one replayed.

use std::time::Duration;

use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, RecordState, Store};
use idem_tests::backend::redis_store;

const LEASE: Duration = Duration::from_millis(400);

fn acquired(claim: Claim) -> idem_runtime::store::FencingToken {
    match claim {
        Claim::Acquired { token } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn paused_owner_loses_its_lease_to_a_new_claimer() {
    let Some(store) = redis_store("paused_owner_loses_its_lease_to_a_new_claimer").await else {
        return;
    };
    let key = fresh_key();
    let request = fingerprint("charge 5 EUR");
    let paused = acquired(store.claim(&key, &request, LEASE).await.unwrap());

    // While the lease lives, a retry is told to come back, not run.
    match store.claim(&key, &request, LEASE).await.unwrap() {
        Claim::InFlight { retry_after } => assert!(retry_after <= LEASE && !retry_after.is_zero(), "{retry_after:?}"),
        other => panic!("expected in flight, got {other:?}"),
    }

    // The owner stalls (a GC pause, a stuck call) and renews nothing; the
    // lease runs out on the Redis server's clock.
    tokio::time::sleep(LEASE + Duration::from_millis(400)).await;
    let successor = acquired(store.claim(&key, &request, Duration::from_secs(30)).await.unwrap());
    assert_ne!(paused, successor);

    // The paused owner wakes up: everything it tries is refused.
    assert_eq!(store.renew(&key, paused, LEASE).await.unwrap(), Fence::Lost);
    assert_eq!(store.complete(&key, paused, &response(b"paused"), Duration::from_secs(60)).await.unwrap(), Fence::Lost);
    assert_eq!(store.release(&key, paused).await.unwrap(), Fence::Lost);
    match store.get(&key).await.unwrap().expect("the successor's record").state {
        RecordState::InFlight { token, .. } => assert_eq!(token, successor),
        other => panic!("the paused owner changed the record: {other:?}"),
    }

    // The successor completes, and its response is what retries get back.
    let stored = response(b"successor");
    assert_eq!(store.complete(&key, successor, &stored, Duration::from_secs(60)).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &request, LEASE).await.unwrap(), Claim::Replay(stored.clone()));
    assert_eq!(store.complete(&key, paused, &response(b"paused"), Duration::from_secs(60)).await.unwrap(), Fence::Lost);
    assert_eq!(store.claim(&key, &request, LEASE).await.unwrap(), Claim::Replay(stored));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_flight_record_stripped_of_its_expiry_cannot_hold_its_key_forever() {
    let test = "an_in_flight_record_stripped_of_its_expiry_cannot_hold_its_key_forever";
    let (Some(store), Some(url)) = (redis_store(test).await, idem_tests::backend::url("IDEM_REDIS_URL", test)) else {
        return;
    };
    let key = fresh_key();
    let request = fingerprint("charge 5 EUR");
    acquired(store.claim(&key, &request, LEASE).await.unwrap());
    // An operator (or a restore) removes the expiry of the in-flight record.
    let mut raw = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let persisted: i64 = redis::cmd("PERSIST").arg(store.record_key(&key)).query_async(&mut raw).await.unwrap();
    assert_eq!(persisted, 1);
    // The next claim gives it one more lease instead of a 409 forever.
    match store.claim(&key, &request, LEASE).await.unwrap() {
        Claim::InFlight { retry_after } => assert!(retry_after <= LEASE && !retry_after.is_zero(), "{retry_after:?}"),
        other => panic!("expected in flight, got {other:?}"),
    }
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    acquired(store.claim(&key, &request, LEASE).await.unwrap());
}
