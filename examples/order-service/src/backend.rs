//! Connecting the idempotency store and the order repository to one backend.

use std::sync::Arc;

use idem_runtime::{MemoryStore, PostgresStore, RedisStore, Store};
use redis::aio::ConnectionManager;

use crate::config::StoreUrl;
use crate::repo::{MemoryRepo, PostgresRepo, RedisRepo, Repo};

/// The idempotency store and the repository, sharing one backend.
pub async fn connect(url: &StoreUrl) -> Result<(Arc<dyn Store>, Arc<dyn Repo>), String> {
    match url {
        StoreUrl::Memory => Ok((Arc::new(MemoryStore::new()), Arc::new(MemoryRepo::default()))),
        StoreUrl::Redis(raw) => {
            let redacted = url.redacted();
            let fail = |e: &dyn std::fmt::Display| format!("cannot connect to redis at {redacted}: {e}");
            let client = redis::Client::open(raw.as_str()).map_err(|e| fail(&e))?;
            let connection =
                ConnectionManager::new_with_config(client, RedisStore::default_config()).await.map_err(|e| fail(&e))?;
            let store = RedisStore::from_manager(connection.clone());
            store.load_scripts().await.map_err(|e| fail(&e))?;
            Ok((Arc::new(store), Arc::new(RedisRepo::new(connection))))
        }
        StoreUrl::Postgres(raw) => {
            let fail = |e: &dyn std::fmt::Display| format!("postgres migration failed: {e}");
            let store = PostgresStore::connect(raw).await.map_err(|e| e.to_string())?;
            let repo = PostgresRepo::new(store.pool().clone());
            // Each takes its own lock, so processes starting together are safe.
            store.migrate().await.map_err(|e| fail(&e))?;
            repo.migrate().await.map_err(|e| fail(&e))?;
            Ok((Arc::new(store), Arc::new(repo)))
        }
    }
}
