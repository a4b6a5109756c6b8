//! A memory store that starts empty for every input: the app is built once
//! per thread (actix-router leaks each route pattern's names by design, so
//! an app per input grows without end), and its store is swapped instead.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use idem_runtime::MemoryStore;
use idem_runtime::store::{
    Claim, ClaimTerms, Fence, FencingToken, Fingerprint, Record, Renewal, Step, StorageKey, Store, StoreError,
    StoredResponse,
};

/// A [`MemoryStore`] that [`FreshStore::reset`] replaces by an empty one.
#[derive(Debug, Default)]
pub(super) struct FreshStore(Mutex<Arc<MemoryStore>>);

impl FreshStore {
    /// Forgets every record.
    pub(super) fn reset(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Arc::default();
    }

    fn current(&self) -> Arc<MemoryStore> {
        Arc::clone(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[async_trait]
impl Store for FreshStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn claim_with(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        token: FencingToken,
        terms: &ClaimTerms,
    ) -> Result<Claim, StoreError> {
        self.current().claim_with(key, fingerprint, token, terms).await
    }

    async fn record_step(&self, key: &StorageKey, token: FencingToken, step: &Step) -> Result<Fence, StoreError> {
        self.current().record_step(key, token, step).await
    }

    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError> {
        self.current().renew(key, token, lease).await
    }

    async fn renew_many(&self, renewals: &[Renewal]) -> Result<Vec<Fence>, StoreError> {
        self.current().renew_many(renewals).await
    }

    async fn complete(
        &self,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, StoreError> {
        self.current().complete(key, token, response, ttl).await
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        self.current().release(key, token).await
    }

    async fn release_unless_held(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        self.current().release_unless_held(key, token).await
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        self.current().get(key).await
    }
}
