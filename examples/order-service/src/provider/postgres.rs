//! The provider's ledger in Postgres: a table of its own, written on a pool
//! of its own, never in the handler's transaction.

use async_trait::async_trait;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Row};

use super::Ledger;
use crate::model::Charge;
use crate::repo::{RepoError, count, create_tables};

/// The provider's table, created if missing.
const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS order_service_provider_charges (
    idempotency_key text PRIMARY KEY,
    id              text NOT NULL UNIQUE,
    order_id        text NOT NULL,
    amount_cents    bigint NOT NULL,
    status          text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
";

/// Connections of the provider's pool.
const CONNECTIONS: u32 = 4;

/// Charges as rows, one per idempotency key (the primary key).
#[derive(Clone)]
pub struct PostgresLedger {
    pool: PgPool,
}

fn fail(error: impl std::fmt::Display) -> RepoError {
    RepoError::new("postgres", format!("the payment provider's ledger: {error}"))
}

impl PostgresLedger {
    /// A pool of its own to the database of `pool` (the store's), opened
    /// lazily: every statement commits on its own (autocommit), outside any
    /// handler's transaction. A payment holds a connection of the store's
    /// pool for its transaction while it waits on the provider; on that same
    /// pool the provider could wait for a connection that only a finished
    /// payment frees.
    pub fn beside(pool: &PgPool) -> Self {
        let options =
            PgPoolOptions::new().max_connections(CONNECTIONS).acquire_timeout(pool.options().get_acquire_timeout());
        Self { pool: options.connect_lazy_with((*pool.connect_options()).clone()) }
    }

    /// Creates the table if it is missing; safe to run at every start, from
    /// many processes at once.
    pub async fn migrate(&self) -> Result<(), RepoError> {
        create_tables(&self.pool, SCHEMA).await.map_err(fail)
    }
}

/// The charge of a row of the provider's table.
fn charge_of(row: &sqlx::postgres::PgRow) -> Result<Charge, RepoError> {
    Ok(Charge {
        id: row.try_get("id").map_err(fail)?,
        order_id: row.try_get("order_id").map_err(fail)?,
        amount_cents: row.try_get("amount_cents").map_err(fail)?,
        status: row.try_get("status").map_err(fail)?,
    })
}

#[async_trait]
impl Ledger for PostgresLedger {
    async fn charge_once(&self, key: &str, charge: &Charge) -> Result<Charge, RepoError> {
        sqlx::query(
            "INSERT INTO order_service_provider_charges (idempotency_key, id, order_id, amount_cents, status) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (idempotency_key) DO NOTHING",
        )
        .bind(key)
        .bind(&charge.id)
        .bind(&charge.order_id)
        .bind(charge.amount_cents)
        .bind(&charge.status)
        .execute(&self.pool)
        .await
        .map_err(fail)?;
        // A statement of its own: at READ COMMITTED it sees the row of a
        // concurrent insert that won the key, which the INSERT's snapshot
        // may not.
        let row = sqlx::query(
            "SELECT id, order_id, amount_cents, status FROM order_service_provider_charges WHERE idempotency_key = $1",
        )
        .bind(key)
        .fetch_one(&self.pool)
        .await
        .map_err(fail)?;
        charge_of(&row)
    }

    async fn charges(&self) -> Result<u64, RepoError> {
        count(&self.pool, "SELECT count(*) FROM order_service_provider_charges").await.map_err(fail)
    }

    async fn list(&self) -> Result<Vec<Charge>, RepoError> {
        let rows = sqlx::query(
            "SELECT id, order_id, amount_cents, status FROM order_service_provider_charges ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(fail)?;
        rows.iter().map(charge_of).collect()
    }
}
