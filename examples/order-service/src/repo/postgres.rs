//! Orders and payments in Postgres, beside the idempotency records. The
//! routes write them in the runtime's transaction ([`super::transactional`]);
//! this reads them.

use async_trait::async_trait;
use sqlx::{PgPool, Row};

use super::{Repo, RepoError};
use crate::model::Order;

/// The tables, created if missing (run by [`PostgresRepo::migrate`] under its lock).
const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS order_service_orders (
    seq          bigserial,
    id           text PRIMARY KEY,
    owner        text NOT NULL,
    customer_id  text NOT NULL,
    amount_cents bigint NOT NULL,
    currency     text NOT NULL,
    status       text NOT NULL,
    created_at   text NOT NULL
);
CREATE INDEX IF NOT EXISTS order_service_orders_owner ON order_service_orders (owner, seq);
CREATE TABLE IF NOT EXISTS order_service_payments (
    id           text PRIMARY KEY,
    order_id     text NOT NULL REFERENCES order_service_orders (id),
    charge_id    text NOT NULL UNIQUE,
    amount_cents bigint NOT NULL,
    status       text NOT NULL
);
CREATE INDEX IF NOT EXISTS order_service_payments_order ON order_service_payments (order_id);
CREATE TABLE IF NOT EXISTS order_service_refunds (
    event_id    text PRIMARY KEY,
    charge_id   text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
";

/// The order with id `$1`, as [`order_of`] reads it.
pub(super) const SELECT_ORDER: &str = "SELECT id, owner, customer_id, amount_cents, currency, status, created_at \
                                       FROM order_service_orders WHERE id = $1";

/// Orders and payments as rows.
#[derive(Clone)]
pub struct PostgresRepo {
    pool: PgPool,
}

fn fail(error: impl std::fmt::Display) -> RepoError {
    RepoError::new("postgres", error)
}

/// Runs `schema` (`CREATE ... IF NOT EXISTS` statements) in one transaction
/// under the service's migration lock: safe to run at every start, from
/// many processes at once.
pub async fn create_tables(pool: &PgPool, schema: &'static str) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    // `CREATE ... IF NOT EXISTS` alone is not enough: two sessions can
    // both find the table missing, and the second then fails on a
    // catalog unique index (`pg_type_typname_nsp_index`). Processes
    // starting together therefore take turns on this lock, which the
    // commit (or a rollback) releases.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('order-service migrate'))").execute(&mut *tx).await?;
    sqlx::raw_sql(schema).execute(&mut *tx).await?;
    tx.commit().await
}

impl PostgresRepo {
    /// Uses an existing pool.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Creates the tables if they are missing; safe to run at every start,
    /// from many processes at once.
    pub async fn migrate(&self) -> Result<(), RepoError> {
        create_tables(&self.pool, SCHEMA).await.map_err(fail)
    }
}

/// The one `count(*)` that `sql` selects.
pub async fn count(pool: &PgPool, sql: &'static str) -> Result<u64, sqlx::Error> {
    let count: i64 = sqlx::query_scalar(sql).fetch_one(pool).await?;
    Ok(count.max(0) as u64)
}

/// An order from a row of `order_service_orders`.
pub(super) fn order_of(row: &sqlx::postgres::PgRow) -> Result<Order, RepoError> {
    Ok(Order {
        id: row.try_get("id").map_err(fail)?,
        owner: row.try_get("owner").map_err(fail)?,
        customer_id: row.try_get("customer_id").map_err(fail)?,
        amount_cents: row.try_get("amount_cents").map_err(fail)?,
        currency: row.try_get("currency").map_err(fail)?,
        status: row.try_get("status").map_err(fail)?,
        created_at: row.try_get("created_at").map_err(fail)?,
    })
}

#[async_trait]
impl Repo for PostgresRepo {
    async fn order(&self, id: &str) -> Result<Option<Order>, RepoError> {
        let row = sqlx::query(SELECT_ORDER).bind(id).fetch_optional(&self.pool).await.map_err(fail)?;
        row.as_ref().map(order_of).transpose()
    }

    async fn orders_of(&self, owner: &str) -> Result<Vec<Order>, RepoError> {
        let sql = "SELECT id, owner, customer_id, amount_cents, currency, status, created_at \
                   FROM order_service_orders WHERE owner = $1 ORDER BY seq";
        let rows = sqlx::query(sql).bind(owner).fetch_all(&self.pool).await.map_err(fail)?;
        rows.iter().map(order_of).collect()
    }

    async fn orders_created(&self) -> Result<u64, RepoError> {
        count(&self.pool, "SELECT count(*) FROM order_service_orders").await.map_err(fail)
    }

    async fn record_refund(&self, event_id: &str, charge_id: &str) -> Result<bool, RepoError> {
        let sql = "INSERT INTO order_service_refunds (event_id, charge_id) VALUES ($1, $2) \
                   ON CONFLICT (event_id) DO NOTHING";
        let done = sqlx::query(sql).bind(event_id).bind(charge_id).execute(&self.pool).await.map_err(fail)?;
        Ok(done.rows_affected() == 1)
    }

    async fn refunds(&self) -> Result<u64, RepoError> {
        count(&self.pool, "SELECT count(*) FROM order_service_refunds").await.map_err(fail)
    }
}
