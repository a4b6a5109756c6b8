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
            // The store first: its errors mask the password. The repository
            // gets a connection of its own, so business commands never delay
            // lease renewals (nor change the store's database).
            let store = RedisStore::connect(raw).await.map_err(|e| e.to_string())?;
            let repo = RedisRepo::connect(raw).await.map_err(|e| format!("the order repository on redis: {e}"))?;
            Ok(Backend { shown: format!("{store:?}"), store: Arc::new(store), repo: Arc::new(repo) })
        }
        StoreUrl::Unknown { scheme } => Err(format!(
            "--store / IDEM_STORE must be `memory`, a redis:// URL or a postgres:// URL; got {}",
            scheme.as_deref().map_or_else(|| "no URL scheme".to_owned(), |s| format!("scheme `{s}`"))
        )),
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
