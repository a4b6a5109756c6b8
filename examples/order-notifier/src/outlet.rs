//! Where notifications go. This example "sends" one by recording it in the
//! backend the order service shares, which is how `GET /stats` counts
//! `notifications_sent` across every process.
//!
//! Like a payment provider (or an e-mail API with idempotency keys), the
//! outlet takes a key with each notification and sends it once per key:
//! the inbox's derived key, the same in every delivery of one event. The
//! inbox keeps redeliveries from running the work at all; the key covers
//! the one window the inbox cannot, a process that dies after sending and
//! before the inbox recorded it (the next delivery takes over and sends
//! again, with the same key). On Postgres the send is written in the
//! inbox's transaction, so that window does not exist there.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

use idem_runtime::RedisConnection;
use redis::{AsyncCommands, Script};
use sqlx::{PgConnection, PgPool};

use crate::event::OrderCreated;

// The Redis keys share the hash tag `{order-notifier}`: on a Redis Cluster
// the keys of one script must live in one slot, and `SEND` writes all three
// kinds. (A real service would tag each notification's keys by its own id
// and count elsewhere, rather than keep every send in one slot.)

/// The Redis counter of notifications sent.
const SENT: &str = "{order-notifier}:notifications_sent";
/// The Redis list of the orders notified, one entry per notification.
pub const NOTIFIED: &str = "{order-notifier}:notified";

/// Sends once per key: records the key, and only if it is new counts the
/// notification and lists its order. One round trip, atomic.
const SEND: &str = r"
-- KEYS[1]: the notification's key; KEYS[2]: the counter; KEYS[3]: the list.
-- ARGV[1]: the order id.
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
    redis.call('INCR', KEYS[2])
    redis.call('RPUSH', KEYS[3], ARGV[1])
    return 1
end
return 0
";

/// The Postgres table of notifications sent, one row each.
const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS order_notifier_notifications (
    seq      bigserial PRIMARY KEY,
    key      text NOT NULL UNIQUE,
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
    /// Keys sent, in this process (the order service on the memory store).
    Memory(Arc<Mutex<HashSet<String>>>),
    /// A counter and a list in Redis, on one server or a Redis Cluster.
    Redis(RedisConnection),
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

    /// Notifications recorded in the Redis at `url` (one server, or a Redis
    /// Cluster's `redis-cluster://` seed nodes), on a connection of their
    /// own.
    pub async fn redis(url: &str) -> Result<Self, OutletError> {
        let config = idem_runtime::RedisStore::default_config();
        let connection = RedisConnection::open(url, &config).await.map_err(OutletError::redis)?;
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

    /// Sends the notification of `order` under `key`, unless one was sent
    /// under that key. On Postgres, prefer [`Outlet::send_in`] in the
    /// inbox's transaction.
    pub async fn send(&self, key: &str, order: &OrderCreated) -> Result<(), OutletError> {
        match self {
            Self::Memory(sent) => {
                sent.lock().insert(key.to_owned());
                Ok(())
            }
            Self::Redis(connection) => {
                static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SEND));
                let mut invocation = SCRIPT.key(format!("{{order-notifier}}:sent:{key}"));
                invocation.key(SENT).key(NOTIFIED).arg(&order.order_id);
                let invocation = &invocation;
                // Safe to send again: a repeat finds the key sent.
                connection
                    .repeatable(|mut connection| async move { invocation.invoke_async::<i64>(&mut connection).await })
                    .await
                    .map(drop)
                    .map_err(OutletError::redis)
            }
            Self::Postgres(pool) => {
                let mut connection = pool.acquire().await.map_err(OutletError::postgres)?;
                Self::send_in(&mut connection, key, order).await
            }
        }
    }

    /// Sends the notification of `order` under `key` on `tx`: recorded if
    /// and only if that transaction commits, once per key.
    pub async fn send_in(tx: &mut PgConnection, key: &str, order: &OrderCreated) -> Result<(), OutletError> {
        sqlx::query(
            "INSERT INTO order_notifier_notifications (key, order_id, owner) VALUES ($1, $2, $3) \
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
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
            Self::Memory(sent) => Ok(sent.lock().len() as u64),
            Self::Redis(connection) => {
                let count: Option<u64> = connection
                    .repeatable(|mut connection| async move { connection.get(SENT).await })
                    .await
                    .map_err(OutletError::redis)?;
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
