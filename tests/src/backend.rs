//! Where the backend test servers are, what to do when one is missing, and
//! stores connected to them.

use std::io::Write;

#[cfg(feature = "postgres")]
use idem_runtime::PostgresStore;
#[cfg(feature = "redis")]
use idem_runtime::RedisStore;

/// Whether `scripts/test` asked that no backend test skip.
pub fn required() -> bool {
    std::env::var_os("IDEM_REQUIRE_BACKENDS").is_some_and(|v| v == "1")
}

/// The URL in `variable`, or `None` after printing a skip line.
///
/// Under `scripts/test` (`IDEM_REQUIRE_BACKENDS=1`) a missing URL is a test
/// failure with a message saying what is missing.
pub fn url(variable: &str, test: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if required() => panic!(
            "{test}: {variable} is not set, but IDEM_REQUIRE_BACKENDS=1 forbids skipping; \
             run the suite through scripts/test, which starts the server"
        ),
        _ => {
            // Written straight to stderr: libtest would swallow `println!`.
            let line = format!("SKIP backend test {test}: {variable} is not set (scripts/test sets it)\n");
            let _ = std::io::stderr().write_all(line.as_bytes());
            None
        }
    }
}

/// A store on the shared Redis server (`IDEM_REDIS_URL`), or `None` after
/// [`url`] said why there is none.
#[cfg(feature = "redis")]
pub async fn redis_store(test: &str) -> Option<RedisStore> {
    let url = url("IDEM_REDIS_URL", test)?;
    Some(RedisStore::connect(&url).await.unwrap_or_else(|e| panic!("{test}: connecting to Redis: {e}")))
}

/// A store on the PostgreSQL server at `url`, with at most `max_connections`
/// pooled connections and its table migrated.
#[cfg(feature = "postgres")]
pub async fn postgres_store(url: &str, max_connections: u32) -> PostgresStore {
    let options = PostgresStore::pool_options().max_connections(max_connections);
    let store =
        PostgresStore::connect_with(url, options).await.unwrap_or_else(|e| panic!("connecting to PostgreSQL: {e}"));
    store.migrate().await.unwrap_or_else(|e| panic!("migrating the idem table: {e}"));
    store
}
