//! Connecting the idempotency store and the order repository to one backend.

use std::sync::Arc;

use idem_runtime::store::Store;
use idem_runtime::{MemoryStore, PostgresStore, RedisStore};

use crate::config::StoreUrl;
use crate::repo::{MemoryRepo, PostgresRepo, RedisRepo, Repo};

/// The idempotency store and the repository, sharing one backend.
pub struct Backend {
    /// The idempotency store.
    pub store: Arc<dyn Store>,
    /// Orders, payments and charges.
    pub repo: Arc<dyn Repo>,
    /// Where they live, for logs: the store's own `Debug`, which masks any
    /// password.
    pub shown: String,
}

/// Connects both to the backend `url` names. Errors never hold a password:
/// the stores mask it in their own errors.
pub async fn connect(url: &StoreUrl) -> Result<Backend, String> {
    match url {
        StoreUrl::Memory => Ok(Backend {
            store: Arc::new(MemoryStore::new()),
            repo: Arc::new(MemoryRepo::default()),
            shown: "memory".to_owned(),
        }),
        StoreUrl::Redis(raw) => {
            let store = RedisStore::connect(raw).await.map_err(|e| e.to_string())?;
            let repo = RedisRepo::new(store.connection().clone());
            Ok(Backend { shown: format!("{store:?}"), store: Arc::new(store), repo: Arc::new(repo) })
        }
        StoreUrl::Postgres(raw) => {
            let fail = |e: &dyn std::fmt::Display| format!("postgres migration failed: {e}");
            let store = PostgresStore::connect(raw).await.map_err(|e| e.to_string())?;
            let repo = PostgresRepo::new(store.pool().clone());
            // Each takes its own lock, so processes starting together are safe.
            store.migrate().await.map_err(|e| fail(&e))?;
            repo.migrate().await.map_err(|e| fail(&e))?;
            Ok(Backend { shown: format!("{store:?}"), store: Arc::new(store), repo: Arc::new(repo) })
        }
    }
}
