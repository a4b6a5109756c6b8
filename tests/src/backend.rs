//! Where the backend test servers are, what to do when one is missing,
//! stores connected to them, and the binaries and scratch directories of
//! private servers.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

#[cfg(feature = "postgres")]
use idem_runtime::PostgresStore;
#[cfg(feature = "redis")]
use idem_runtime::RedisStore;

/// Whether `scripts/test` asked that no backend test skip.
pub fn required() -> bool {
    std::env::var_os("IDEM_REQUIRE_BACKENDS").is_some_and(|v| v == "1")
}

/// Skips `test` because `missing` is missing, printing a `SKIP backend
/// test` line; `remedy` says how to provide it.
///
/// Under `scripts/test` (`IDEM_REQUIRE_BACKENDS=1`) this is a test failure
/// with a message saying what is missing.
pub fn skip(test: &str, missing: &str, remedy: &str) {
    assert!(!required(), "{test}: {missing}, but IDEM_REQUIRE_BACKENDS=1 forbids skipping; {remedy}");
    // Written straight to stderr: libtest would swallow `println!`.
    let line = format!("SKIP backend test {test}: {missing} ({remedy})\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The URL in `variable`, or `None` after [`skip`]ping `test`.
pub fn url(variable: &str, test: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            skip(
                test,
                &format!("{variable} is not set"),
                "run the suite through scripts/test, which starts the server",
            );
            None
        }
    }
}

/// A server binary: the path in `variable` (set by `scripts/test`), else
/// `name` from `PATH`; `None` when neither is there.
pub fn binary(variable: &str, name: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(variable).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(name)).find(|path| path.is_file())
}

/// A new empty directory for a private server, named `<name>-<pid>-...`
/// and unique even among tests starting servers at the same instant.
pub fn scratch_dir(name: &str) -> PathBuf {
    static SEQUENCE: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let sequence = SEQUENCE.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("{name}-{}-{nanos}-{sequence}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

/// A store on the shared Redis server (`IDEM_REDIS_URL`), or `None` after
/// [`url`] said why there is none.
#[cfg(feature = "redis")]
pub async fn redis_store(test: &str) -> Option<RedisStore> {
    let url = url("IDEM_REDIS_URL", test)?;
    Some(RedisStore::connect(&url).await.unwrap_or_else(|e| panic!("{test}: connecting to Redis: {e}")))
}

/// A store on the shared Redis Cluster (`IDEM_REDIS_CLUSTER_URL`, a
/// `redis-cluster://` URL of its six nodes), or `None` after [`url`] said
/// why there is none.
#[cfg(feature = "redis")]
pub async fn redis_cluster_store(test: &str) -> Option<RedisStore> {
    let url = url("IDEM_REDIS_CLUSTER_URL", test)?;
    Some(RedisStore::connect(&url).await.unwrap_or_else(|e| panic!("{test}: connecting to the Redis Cluster: {e}")))
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
