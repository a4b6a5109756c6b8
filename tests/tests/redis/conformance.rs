//! The store conformance suite, run against a real Redis (`IDEM_REDIS_URL`).

use std::sync::Arc;

use idem_runtime::store::Store;
use idem_tests::backend::redis_store;

async fn shared_store() -> Option<Arc<dyn Store>> {
    Some(Arc::new(redis_store("redis_conformance").await?))
}

idem_runtime::store::testing::store_conformance_tests!(shared_store);
