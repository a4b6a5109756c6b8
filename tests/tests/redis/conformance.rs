//! The store conformance suite, run against a real Redis (`IDEM_REDIS_URL`).

use std::sync::Arc;

use idem_runtime::{RedisStore, Store};

async fn redis_store() -> Option<Arc<dyn Store>> {
    let url = idem_tests::backend::url("IDEM_REDIS_URL", "redis_conformance")?;
    let store = RedisStore::connect(&url).await.unwrap_or_else(|e| panic!("connecting to Redis: {e}"));
    Some(Arc::new(store))
}

idem_runtime::store_conformance_tests!(redis_store);
