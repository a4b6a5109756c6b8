//! The store conformance suite, run against [`PostgresStore`] on the shared
//! PostgreSQL server of `scripts/test` (`IDEM_POSTGRES_URL`).

use std::sync::Arc;

use idem_runtime::{PostgresStore, Store};

/// Connections per case: the 64-claimer race holds one per claimer.
const POOL_SIZE: u32 = 70;

async fn pg_store() -> Option<Arc<dyn Store>> {
    let url = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_conformance")?;
    let options = PostgresStore::pool_options().max_connections(POOL_SIZE);
    let store = PostgresStore::connect_with(&url, options).await.expect("connecting to PostgreSQL");
    store.migrate().await.expect("migrating the idem table");
    Some(Arc::new(store))
}

idem_runtime::store_conformance_tests!(pg_store);
