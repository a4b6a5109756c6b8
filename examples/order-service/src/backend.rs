//! Connecting the idempotency store, the order repository and the payment
//! provider's ledger to one backend.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::inbox::Inbox;
use idem_runtime::outbox::PostgresOutbox;
use idem_runtime::store::Store;
use idem_runtime::{MemoryStore, PostgresStore, RedisStore};
use order_notifier::consumer::CONSUMER;
use order_notifier::{Consumer, Outlet};

use crate::config::StoreUrl;
use crate::provider::{Ledger, MemoryLedger, PostgresLedger, RedisLedger};
use crate::repo::{MemoryRepo, PostgresRepo, RedisRepo, Repo, Writes};

/// Most connections of the Postgres store's pool (opened on demand). A
/// transactional handler holds one for its whole execution, a payment's
/// wait on the provider included, while the claims, completions and reads
/// of other requests need theirs: sqlx's default of 10 would turn the 11th
/// concurrent payment into a 503.
const POSTGRES_CONNECTIONS: u32 = 32;

/// The idempotency store, the repository and the provider's ledger, sharing
/// one backend.
pub struct Backend {
    /// The idempotency store.
    pub store: Arc<dyn Store>,
    /// Orders, as the routes read them.
    pub repo: Arc<dyn Repo>,
    /// How the write routes keep their rows: transactional on Postgres.
    pub writes: Writes,
    /// The simulated payment provider's charges.
    pub ledger: Arc<dyn Ledger>,
    /// The notifications sent for created orders, as `/stats` counts them.
    pub outlet: Outlet,
    /// On the memory store, the notifier that runs in this process (its
    /// events cannot leave it); elsewhere the `order-notifier` processes.
    pub notifier: Option<Consumer>,
    /// Where they live, for logs: the store's own `Debug`, which masks any
    /// password.
    pub shown: String,
}

/// How long a write on Redis waits for its replicas' acknowledgements
/// (`--replica-acks`): below half the connection's response timeout (2 s)
/// and the runtime's store timeout (2 s), as `with_replica_acks` asks.
const REPLICA_ACK_TIMEOUT: Duration = Duration::from_millis(500);

/// Connects all three to the backend `url` names, with `replica_acks`
/// replicas acknowledging the idempotency records' writes on Redis. Errors
/// never hold a password: the stores mask it in their own errors.
pub async fn connect(url: &StoreUrl, replica_acks: u32) -> Result<Backend, String> {
    match url {
        StoreUrl::Memory => {
            let repo = Arc::new(MemoryRepo::default());
            let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
            let outlet = Outlet::memory();
            let inbox = Inbox::from_arc(Arc::clone(&store), CONSUMER);
            let notifier = Consumer::new(Arc::new(repo.outbox().clone()), inbox, outlet.clone());
            Ok(Backend {
                store,
                repo: repo.clone(),
                writes: Writes::Direct(repo),
                ledger: Arc::new(MemoryLedger::default()),
                outlet,
                notifier: Some(notifier),
                shown: "memory".to_owned(),
            })
        }
        StoreUrl::Redis(raw) | StoreUrl::RedisCluster(raw) => {
            // The store first: its errors mask the password. The repository
            // and the provider get connections of their own, so business
            // commands never delay lease renewals (nor change the store's
            // database). On one server or a cluster alike: every connection
            // is a `RedisConnection`, and each multi-key script touches one
            // slot (see `repo::redis`).
            let store = RedisStore::connect(raw)
                .await
                .map_err(|e| e.to_string())?
                .with_replica_acks(replica_acks, REPLICA_ACK_TIMEOUT);
            let repo =
                Arc::new(RedisRepo::connect(raw).await.map_err(|e| format!("the order repository on redis: {e}"))?);
            let ledger = RedisLedger::connect(raw).await.map_err(|e| format!("the payment provider on redis: {e}"))?;
            let outlet = Outlet::redis(raw).await.map_err(|e| format!("the notifications on redis: {e}"))?;
            Ok(Backend {
                shown: format!("{store:?}"),
                store: Arc::new(store),
                repo: repo.clone(),
                writes: Writes::Direct(repo),
                ledger: Arc::new(ledger),
                outlet,
                notifier: None,
            })
        }
        StoreUrl::Unknown { scheme } => Err(format!(
            "--store / IDEM_STORE must be `memory`, a redis:// URL, a redis-cluster:// URL or a postgres:// URL; \
             got {}",
            scheme.as_deref().map_or_else(|| "no URL scheme".to_owned(), |s| format!("scheme `{s}`"))
        )),
        StoreUrl::Postgres(raw) => {
            let fail = |e: &dyn std::fmt::Display| format!("postgres migration failed: {e}");
            let pool = PostgresStore::pool_options().max_connections(POSTGRES_CONNECTIONS);
            let store = PostgresStore::connect_with(raw, pool).await.map_err(|e| e.to_string())?;
            let repo = PostgresRepo::new(store.pool().clone());
            let ledger = PostgresLedger::beside(store.pool());
            // Each takes its own lock, so processes starting together are safe.
            store.migrate().await.map_err(|e| fail(&e))?;
            repo.migrate().await.map_err(|e| fail(&e))?;
            ledger.migrate().await.map_err(|e| fail(&e))?;
            PostgresOutbox::new(store.pool().clone()).migrate().await.map_err(|e| fail(&e))?;
            let outlet = Outlet::postgres(store.pool().clone()).await.map_err(|e| fail(&e))?;
            Ok(Backend {
                shown: format!("{store:?}"),
                store: Arc::new(store),
                repo: Arc::new(repo),
                writes: Writes::Transactional,
                ledger: Arc::new(ledger),
                outlet,
                notifier: None,
            })
        }
    }
}
