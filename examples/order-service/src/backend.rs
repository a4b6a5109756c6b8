//! Connecting the idempotency store and the order repository to one backend.

use std::sync::Arc;

use idem_runtime::{MemoryStore, PostgresStore, RedisStore, Store};
use redis::aio::ConnectionManager;

use crate::config::StoreUrl;
use crate::repo::{MemoryRepo, PostgresRepo, RedisRepo, Repo};

/// Arbitrary key of the advisory lock that serializes migrations across
/// processes starting at once.
const MIGRATION_LOCK: i64 = 0x6964_656d_6f72_6473;

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
            let store = PostgresStore::connect(raw).await.map_err(|e| e.to_string())?;
            migrate(&store).await?;
            let repo = PostgresRepo::new(store.pool().clone());
            Ok((Arc::new(store), Arc::new(repo)))
        }
    }
}

/// Creates the tables under an advisory lock, so that several processes
/// starting together do not race on `CREATE TABLE IF NOT EXISTS`.
async fn migrate(store: &PostgresStore) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("postgres migration failed: {e}");
    let mut connection = store.pool().acquire().await.map_err(|e| fail(&e))?;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *connection)
        .await
        .map_err(|e| fail(&e))?;
    let result = async {
        store.migrate().await.map_err(|e| fail(&e))?;
        PostgresRepo::migrate(&mut connection).await.map_err(|e| fail(&e))
    }
    .await;
    let unlock = sqlx::query("SELECT pg_advisory_unlock($1)").bind(MIGRATION_LOCK).execute(&mut *connection).await;
    result?;
    unlock.map(drop).map_err(|e| fail(&e))
}
