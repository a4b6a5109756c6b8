//! The store conformance suite, run against `PostgresStore` on the shared
//! PostgreSQL server of `scripts/test` (`IDEM_POSTGRES_URL`).

use std::sync::Arc;

use idem_runtime::store::Store;
use idem_tests::backend::postgres_store;

/// Connections per case: the 64-claimer race holds one per claimer.
const POOL_SIZE: u32 = 70;

async fn pg_store() -> Option<Arc<dyn Store>> {
    let url = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_conformance")?;
    Some(Arc::new(postgres_store(&url, POOL_SIZE).await))
}

idem_runtime::store::testing::store_conformance_tests!(pg_store);
