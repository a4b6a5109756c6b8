//! The store conformance suite, run against `PostgresStore` on the shared
//! PostgreSQL server of `scripts/test` (`IDEM_POSTGRES_URL`).

use std::sync::Arc;

use idem_runtime::store::{Operable, PurgeExpired, Store};
use idem_tests::backend::postgres_store;

/// Connections per case: the 64-claimer race holds one per claimer.
const POOL_SIZE: u32 = 70;

async fn pg_store() -> Option<Arc<dyn Store>> {
    let url = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_conformance")?;
    Some(Arc::new(postgres_store(&url, POOL_SIZE).await))
}

idem_runtime::store::testing::store_conformance_tests!(pg_store);

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
