//! Connecting the idempotency store and the order repository to one backend.

use std::sync::Arc;

use idem_runtime::store::Store;
use idem_runtime::{MemoryStore, PostgresStore, RedisStore};

use crate::config::StoreUrl;
use crate::repo::{MemoryRepo, PostgresRepo, RedisRepo, Repo};

/// Arbitrary key of the advisory lock that serializes migrations across
/// processes starting at once.
const MIGRATION_LOCK: i64 = 0x6964_656d_6f72_6473;

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
            let store = PostgresStore::connect(raw).await.map_err(|e| e.to_string())?;
            migrate(&store).await?;
            let repo = PostgresRepo::new(store.pool().clone());
            Ok(Backend { shown: format!("{store:?}"), store: Arc::new(store), repo: Arc::new(repo) })
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
