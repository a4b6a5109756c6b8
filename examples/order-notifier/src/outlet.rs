//! Where notifications go. This example "sends" one by recording it in the
//! backend the order service shares, which is how `GET /stats` counts
//! `notifications_sent` across every process. Recording is deliberately
//! not idempotent, like a real e-mail: only the inbox keeps a redelivered
//! event from being notified twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use sqlx::{PgConnection, PgPool};

use crate::event::OrderCreated;

/// The Redis counter of notifications sent.
const SENT: &str = "order-notifier:notifications_sent";
/// The Redis list of the orders notified, one entry per notification.
pub const NOTIFIED: &str = "order-notifier:notified";

/// The Postgres table of notifications sent, one row each.
const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS order_notifier_notifications (
    seq      bigserial PRIMARY KEY,
    order_id text NOT NULL,
    owner    text NOT NULL,
    sent_at  timestamptz NOT NULL DEFAULT now()
);
";

/// Sending or counting notifications failed.
#[derive(Debug, thiserror::Error)]
#[error("{backend}: {message}")]
pub struct OutletError {
    backend: &'static str,
    message: String,
}

impl OutletError {
    fn redis(error: redis::RedisError) -> Self {
        Self { backend: "redis", message: error.to_string() }
    }

    fn postgres(error: sqlx::Error) -> Self {
        Self { backend: "postgres", message: error.to_string() }
    }
}

/// The notifications sent, on one backend.
#[derive(Clone)]
pub enum Outlet {
    /// Counted in this process (the order service on the memory store).
    Memory(Arc<AtomicU64>),
    /// A counter and a list in Redis.
    Redis(ConnectionManager),
    /// Rows of `order_notifier_notifications`, written in the inbox's
    /// transaction ([`Outlet::send_in`]).
    Postgres(PgPool),
}

impl std::fmt::Debug for Outlet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            Self::Memory(_) => "memory",
            Self::Redis(_) => "redis",
            Self::Postgres(_) => "postgres",
        };
        f.debug_tuple("Outlet").field(&kind).finish()
    }
}

impl Outlet {
    /// Notifications counted in this process.
    pub fn memory() -> Self {
        Self::Memory(Arc::default())
    }

    /// Notifications recorded in the Redis at `url`, on a connection of
    /// their own.
    pub async fn redis(url: &str) -> Result<Self, OutletError> {
        let client = redis::Client::open(url).map_err(OutletError::redis)?;
        let config = idem_runtime::RedisStore::default_config();
        let connection = ConnectionManager::new_with_config(client, config).await.map_err(OutletError::redis)?;
        Ok(Self::Redis(connection))
    }

    /// Notifications recorded in `pool`'s database; creates the table if
    /// missing (safe from many processes at once).
    pub async fn postgres(pool: PgPool) -> Result<Self, OutletError> {
        let mut tx = pool.begin().await.map_err(OutletError::postgres)?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('order-notifier migrate'))")
            .execute(&mut *tx)
            .await
            .map_err(OutletError::postgres)?;
        sqlx::raw_sql(SCHEMA).execute(&mut *tx).await.map_err(OutletError::postgres)?;
        tx.commit().await.map_err(OutletError::postgres)?;
        Ok(Self::Postgres(pool))
    }

    /// Sends the notification of `order` on memory or Redis; on Postgres it
    /// is sent in a transaction ([`Outlet::send_in`]).
    pub async fn send(&self, order: &OrderCreated) -> Result<(), OutletError> {
        match self {
            Self::Memory(sent) => {
                sent.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Self::Redis(connection) => {
                let mut connection = connection.clone();
                redis::pipe()
                    .atomic()
                    .incr(SENT, 1)
                    .ignore()
                    .rpush(NOTIFIED, &order.order_id)
                    .ignore()
                    .query_async::<()>(&mut connection)
                    .await
                    .map_err(OutletError::redis)
            }
            Self::Postgres(pool) => {
                let mut connection = pool.acquire().await.map_err(OutletError::postgres)?;
                Self::send_in(&mut connection, order).await
            }
        }
    }

    /// Sends the notification of `order` on `tx`: recorded if and only if
    /// that transaction commits.
    pub async fn send_in(tx: &mut PgConnection, order: &OrderCreated) -> Result<(), OutletError> {
        sqlx::query("INSERT INTO order_notifier_notifications (order_id, owner) VALUES ($1, $2)")
            .bind(&order.order_id)
            .bind(&order.owner)
            .execute(tx)
            .await
            .map_err(OutletError::postgres)?;
        Ok(())
    }

    /// How many notifications were sent, by every process sharing the
    /// backend.
    pub async fn sent(&self) -> Result<u64, OutletError> {
        match self {
            Self::Memory(sent) => Ok(sent.load(Ordering::Relaxed)),
            Self::Redis(connection) => {
                let count: Option<u64> = connection.clone().get(SENT).await.map_err(OutletError::redis)?;
                Ok(count.unwrap_or(0))
            }
            Self::Postgres(pool) => {
                let count: i64 = sqlx::query_scalar("SELECT count(*) FROM order_notifier_notifications")
                    .fetch_one(pool)
                    .await
                    .map_err(OutletError::postgres)?;
                Ok(count.max(0) as u64)
            }
        }
    }
}
