//! Orders and charges in Postgres, beside the idempotency records.

use async_trait::async_trait;
use sqlx::{PgPool, Row};

use super::{Repo, RepoError};
use crate::model::{Charge, Order, Stats};

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
CREATE TABLE IF NOT EXISTS order_service_charges (
    id           text PRIMARY KEY,
    order_id     text NOT NULL REFERENCES order_service_orders (id),
    amount_cents bigint NOT NULL,
    status       text NOT NULL
);
";

/// Orders and charges as rows.
#[derive(Clone)]
pub struct PostgresRepo {
    pool: PgPool,
}

fn fail(error: impl std::fmt::Display) -> RepoError {
    RepoError::new("postgres", error)
}

impl PostgresRepo {
    /// Uses an existing pool.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Creates the tables if they are missing; safe to run at every start,
    /// from many processes at once.
    pub async fn migrate(&self) -> Result<(), RepoError> {
        let mut tx = self.pool.begin().await.map_err(fail)?;
        // `CREATE ... IF NOT EXISTS` alone is not enough: two sessions can
        // both find the table missing, and the second then fails on a
        // catalog unique index (`pg_type_typname_nsp_index`). Processes
        // starting together therefore take turns on this lock, which the
        // commit (or a rollback) releases.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('order-service migrate'))")
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
        sqlx::raw_sql(SCHEMA).execute(&mut *tx).await.map_err(fail)?;
        tx.commit().await.map_err(fail)
    }
}

fn order_of(row: &sqlx::postgres::PgRow) -> Result<Order, RepoError> {
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
    async fn insert_order(&self, order: &Order) -> Result<(), RepoError> {
        sqlx::query(
            "INSERT INTO order_service_orders (id, owner, customer_id, amount_cents, currency, status, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&order.id)
        .bind(&order.owner)
        .bind(&order.customer_id)
        .bind(order.amount_cents)
        .bind(&order.currency)
        .bind(&order.status)
        .bind(&order.created_at)
        .execute(&self.pool)
        .await
        .map_err(fail)?;
        Ok(())
    }

    async fn order(&self, id: &str) -> Result<Option<Order>, RepoError> {
        let sql = "SELECT id, owner, customer_id, amount_cents, currency, status, created_at \
                   FROM order_service_orders WHERE id = $1";
        let row = sqlx::query(sql).bind(id).fetch_optional(&self.pool).await.map_err(fail)?;
        row.as_ref().map(order_of).transpose()
    }

    async fn orders_of(&self, owner: &str) -> Result<Vec<Order>, RepoError> {
        let sql = "SELECT id, owner, customer_id, amount_cents, currency, status, created_at \
                   FROM order_service_orders WHERE owner = $1 ORDER BY seq";
        let rows = sqlx::query(sql).bind(owner).fetch_all(&self.pool).await.map_err(fail)?;
        rows.iter().map(order_of).collect()
    }

    async fn insert_charge(&self, charge: &Charge) -> Result<(), RepoError> {
        sqlx::query("INSERT INTO order_service_charges (id, order_id, amount_cents, status) VALUES ($1, $2, $3, $4)")
            .bind(&charge.id)
            .bind(&charge.order_id)
            .bind(charge.amount_cents)
            .bind(&charge.status)
            .execute(&self.pool)
            .await
            .map_err(fail)?;
        Ok(())
    }

    async fn stats(&self) -> Result<Stats, RepoError> {
        let row = sqlx::query(
            "SELECT (SELECT count(*) FROM order_service_orders) AS orders, \
                    (SELECT count(*) FROM order_service_charges) AS charges",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(fail)?;
        let count = |name: &str| row.try_get::<i64, _>(name).map(|n| n.max(0) as u64).map_err(fail);
        Ok(Stats { orders_created: count("orders")?, charges: count("charges")? })
    }
}
