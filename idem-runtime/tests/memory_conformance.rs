//! The store conformance suite, run against [`MemoryStore`].

use std::sync::Arc;

use idem_runtime::MemoryStore;
use idem_runtime::store::Store;

async fn memory_store() -> Option<Arc<dyn Store>> {
    Some(Arc::new(MemoryStore::new()))
}

idem_runtime::store::testing::store_conformance_tests!(memory_store);

async fn operable_memory_store() -> Option<Arc<dyn idem_runtime::store::Operable>> {
    Some(Arc::new(MemoryStore::new()))
}

idem_runtime::store::testing::operable_conformance_tests!(operable_memory_store);

/// Purging, which the memory store offers (`PurgeExpired`).
#[tokio::test(flavor = "multi_thread")]
async fn purge_keeps_live_records() {
    idem_runtime::store::testing::purge_keeps_live_records(Arc::new(MemoryStore::new())).await;
}

// Random sequences of operations, each answer compared with a reference.
idem_runtime::store::testing::store_sequence_tests!(memory_store);
