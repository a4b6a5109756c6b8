//! Opening the store a URL names.

use std::sync::Arc;

use idem_runtime::store::{Operable, StoreError};
use idem_runtime::{PostgresStore, RedisStore};

/// The store at `url`, with its table or key prefix.
pub(crate) async fn open(
    url: &str,
    table: Option<&str>,
    key_prefix: Option<&str>,
) -> Result<Arc<dyn Operable>, String> {
    let failed = |error: StoreError| error.to_string();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = PostgresStore::connect(url).await.map_err(failed)?;
        let store = match table {
            Some(table) => PostgresStore::with_table(store.pool().clone(), table).map_err(|e| e.to_string())?,
            None => store,
        };
        return Ok(Arc::new(store));
    }
    if url.starts_with("redis") || url.starts_with("valkey") {
        let store = RedisStore::connect(url).await.map_err(failed)?;
        let store = match key_prefix {
            Some(prefix) => store.with_key_prefix(prefix).map_err(|e| e.to_string())?,
            None => store,
        };
        return Ok(Arc::new(store));
    }
    if url.is_empty() {
        return Err("no store: give --store URL or set IDEM_STORE".to_owned());
    }
    // Not echoed: it may hold a password in a form we do not know.
    Err("the store URL must start with redis://, redis-cluster:// or postgres://".to_owned())
}
