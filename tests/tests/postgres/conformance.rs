//! The store conformance suite, run against `PostgresStore` on the shared
//! PostgreSQL server of `scripts/test` (`IDEM_POSTGRES_URL`).

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::testing::{fingerprint, fresh_key};
use idem_runtime::store::{
    Claim, ClaimTerms, Fence, FencingToken, OnLapse, Operable, PurgeExpired, Step, Store, StoreError,
};
use idem_tests::backend::postgres_store;

/// Connections per case: the 64-claimer race holds one per claimer.
const POOL_SIZE: u32 = 70;

async fn pg_store() -> Option<Arc<dyn Store>> {
    let url = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_conformance")?;
    Some(Arc::new(postgres_store(&url, POOL_SIZE).await))
}

idem_runtime::store::testing::store_conformance_tests!(pg_store);
// Its renewals never shorten a lease (docs/contract.md, section 8).
idem_runtime::store::testing::store_sequence_tests!(
    pg_store,
    idem_runtime::store::testing::sequences::Choices::renewals_never_shorten()
);

async fn operable_pg_store() -> Option<Arc<dyn Operable>> {
    let url = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_conformance")?;
    Some(Arc::new(postgres_store(&url, POOL_SIZE).await))
}

idem_runtime::store::testing::operable_conformance_tests!(operable_pg_store);

/// Purging, which the Postgres store offers ([`PurgeExpired`]).
#[test]
fn purge_keeps_live_records() {
    idem_runtime::store::testing::run(pg_store, |_| async {
        let url = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_conformance").expect("the server");
        let store: Arc<dyn PurgeExpired> = Arc::new(postgres_store(&url, POOL_SIZE).await);
        idem_runtime::store::testing::purge_keeps_live_records(store).await;
    });
}

/// Of many claims that find one lapsed execution past its grace at once,
/// under `on_lapse = hold`, exactly one holds it and says so: a claim whose
/// answer was read before the row was held meets it held in the upsert, and
/// is told it did not hold it.
#[test]
fn racing_claims_hold_a_lapsed_execution_once() {
    idem_runtime::store::testing::run(pg_store, |store| async move {
        let (key, fp, lease) = (fresh_key(), fingerprint("held"), Duration::from_secs(1));
        let hold = ClaimTerms::new(lease, Duration::from_secs(60)).on_lapse(OnLapse::Hold);
        let claim = || store.claim_with(&key, &fp, FencingToken::generate(), &hold);
        assert!(matches!(claim().await.unwrap(), Claim::Acquired { .. }));
        tokio::time::sleep(lease + Duration::from_millis(200)).await;
        assert!(matches!(claim().await.unwrap(), Claim::InFlight { .. }), "the grace first");
        tokio::time::sleep(idem_runtime::store::grace(lease) + Duration::from_millis(200)).await;
        let claims = (0..32).map(|_| {
            let (store, key, fp, hold) = (Arc::clone(&store), key.clone(), fp, hold.clone());
            tokio::spawn(async move { store.claim_with(&key, &fp, FencingToken::generate(), &hold).await })
        });
        let answers: Vec<Claim> =
            futures_util::future::join_all(claims).await.into_iter().map(|r| r.unwrap().unwrap()).collect();
        let newly = answers.iter().filter(|answer| **answer == Claim::Held { newly: true }).count();
        assert_eq!(newly, 1, "{answers:?}");
        assert!(answers.iter().all(|answer| matches!(answer, Claim::Held { .. })), "{answers:?}");
    });
}

/// A step the server refuses for its values (a name with a NUL byte, which
/// text cannot hold: SQLSTATE 22021) is refused for good, as
/// [`StoreError::Full`]: the runtime tries every other error again, until
/// the record's TTL.
#[test]
fn a_step_refused_for_its_values_is_refused_for_good() {
    idem_runtime::store::testing::run(pg_store, |store| async move {
        let (key, token) = (fresh_key(), FencingToken::generate());
        let (lease, ttl) = (Duration::from_secs(30), Duration::from_secs(60));
        let claim = store.claim_as(&key, &fingerprint("nul"), token, lease, ttl).await.unwrap();
        assert!(matches!(claim, Claim::Acquired { .. }), "{claim:?}");
        let step = |name: &str| Step { name: name.to_owned(), result: b"1".to_vec().into() };
        let refused = store.record_step(&key, token, &step("charge\0")).await;
        assert!(matches!(&refused, Err(StoreError::Full { detail, .. }) if detail.contains("0x00")), "{refused:?}");
        assert_eq!(store.record_step(&key, token, &step("charge")).await.unwrap(), Fence::Held);
    });
}
