//! Races the conformance suite does not cover, on the Postgres store:
//! many claimers taking over one lapsed lease or one *expired* record at
//! once (the `DO UPDATE` path of the claim statement, not the insert), and
//! the sweeper deleting expired rows while claimers take them over.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::PostgresStore;
use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, PurgeExpired, StorageKey, Store};
use idem_tests::backend::postgres_store;
use tokio::sync::Barrier;

const CLAIMERS: usize = 64;
const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(200);
const PAST_SHORT: Duration = Duration::from_millis(600);

async fn store(test: &str) -> Option<Arc<PostgresStore>> {
    let url = idem_tests::backend::url("IDEM_POSTGRES_URL", test)?;
    Some(Arc::new(postgres_store(&url, CLAIMERS as u32 + 6).await))
}

/// `CLAIMERS` tasks claim `key` at once with fingerprint `body` and `lease`.
async fn race(store: &Arc<PostgresStore>, key: &StorageKey, body: &'static str, lease: Duration) -> Vec<Claim> {
    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let tasks: Vec<_> = (0..CLAIMERS)
        .map(|_| {
            let (store, key, barrier) = (Arc::clone(store), key.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store.claim(&key, &fingerprint(body), lease, LONG).await.expect("claim")
            })
        })
        .collect();
    let mut claims = Vec::new();
    for task in tasks {
        claims.push(task.await.expect("claimer task"));
    }
    claims
}

fn assert_one_winner(claims: &[Claim]) {
    let winners = claims.iter().filter(|c| matches!(c, Claim::Acquired { .. })).count();
    let in_flight = claims.iter().filter(|c| matches!(c, Claim::InFlight { .. })).count();
    assert_eq!((winners, in_flight), (1, CLAIMERS - 1), "{claims:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_claimers_take_over_a_lapsed_lease_once() {
    let Some(store) = store("postgres_claim_races lapsed lease").await else {
        return;
    };
    for _ in 0..5 {
        let key = fresh_key();
        // The lease lapses, the record stays: the same request takes it over.
        let Claim::Acquired { token: stale, .. } = store.claim(&key, &fingerprint("race"), SHORT, LONG).await.unwrap()
        else {
            panic!("first claim not acquired");
        };
        tokio::time::sleep(PAST_SHORT).await;
        // The first of many claimers to find it lapsed gives its holder a
        // grace: none of them takes it (and the grace is given once).
        let graced = race(&store, &key, "race", SHORT).await;
        assert!(graced.iter().all(|c| matches!(c, Claim::InFlight { .. })), "{graced:?}");
        // After the grace (the racing claims' lease's), one takes it over.
        tokio::time::sleep(idem_runtime::store::grace(SHORT) + Duration::from_millis(200)).await;
        assert_one_winner(&race(&store, &key, "race", LONG).await);
        assert_eq!(store.complete(&key, stale, &response(b"stale"), LONG).await.unwrap(), Fence::Lost);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_claimers_take_over_an_expired_record_of_another_request_once() {
    let Some(store) = store("postgres_claim_races expired record").await else {
        return;
    };
    for _ in 0..5 {
        let key = fresh_key();
        let Claim::Acquired { token, .. } = store.claim(&key, &fingerprint("old"), LONG, LONG).await.unwrap() else {
            panic!("first claim not acquired");
        };
        assert_eq!(store.complete(&key, token, &response(b"old"), SHORT).await.unwrap(), Fence::Held);
        tokio::time::sleep(PAST_SHORT).await;
        // Expired, so free whatever the fingerprint: no mismatch, one owner.
        assert_one_winner(&race(&store, &key, "new", LONG).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purging_while_claimers_take_over_never_loses_a_claim() {
    let Some(store) = store("postgres_claim_races purge").await else {
        return;
    };
    let keys: Vec<StorageKey> = (0..32).map(|_| fresh_key()).collect();
    for key in &keys {
        let Claim::Acquired { .. } = store.claim(key, &fingerprint("a"), SHORT, SHORT).await.unwrap() else {
            panic!("claim not acquired");
        };
    }
    tokio::time::sleep(PAST_SHORT).await;
    let purger = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            for _ in 0..50 {
                store.purge_expired(4).await.expect("purge");
            }
        })
    };
    let claimers: Vec<_> = keys
        .iter()
        .map(|key| {
            let (store, key) = (Arc::clone(&store), key.clone());
            tokio::spawn(async move { store.claim(&key, &fingerprint("a"), LONG, LONG).await.expect("claim") })
        })
        .collect();
    for claimer in claimers {
        assert!(matches!(claimer.await.unwrap(), Claim::Acquired { .. }));
    }
    purger.await.unwrap();
    // Every new claim survived the purges: the keys are in flight.
    for key in &keys {
        assert!(matches!(store.claim(key, &fingerprint("a"), LONG, LONG).await.unwrap(), Claim::InFlight { .. }));
    }
}
