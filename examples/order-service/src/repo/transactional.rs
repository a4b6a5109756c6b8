//! The Postgres statements of the transactional routes, run on the
//! connection of the handler's transaction (`idem_runtime::Tx`), so that
//! they commit together with the stored response, or not at all.

use idem_runtime::outbox::{Event, PostgresOutbox};
use sqlx::PgConnection;

use super::RepoError;
use super::postgres::{SELECT_ORDER, order_of};
use crate::model::{Order, Payment};

fn fail(error: impl std::fmt::Display) -> RepoError {
    RepoError::new("postgres", error)
}

/// The order with `id`, if any.
pub async fn order(tx: &mut PgConnection, id: &str) -> Result<Option<Order>, RepoError> {
    let row = sqlx::query(SELECT_ORDER).bind(id).fetch_optional(tx).await.map_err(fail)?;
    row.as_ref().map(order_of).transpose()
}

/// Inserts `order`.
pub async fn insert_order(tx: &mut PgConnection, order: &Order) -> Result<(), RepoError> {
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
    .execute(tx)
    .await
    .map_err(fail)?;
    Ok(())
}

/// Inserts `payment`.
pub async fn insert_payment(tx: &mut PgConnection, payment: &Payment) -> Result<(), RepoError> {
    sqlx::query(
        "INSERT INTO order_service_payments (id, order_id, charge_id, amount_cents, status) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&payment.id)
    .bind(&payment.order_id)
    .bind(&payment.charge_id)
    .bind(payment.amount_cents)
    .bind(&payment.status)
    .execute(tx)
    .await
    .map_err(fail)?;
    Ok(())
}

/// Writes `event` to the outbox table in the same transaction: it is
/// published if and only if the order commits.
pub async fn publish(tx: &mut PgConnection, event: &Event) -> Result<(), RepoError> {
    PostgresOutbox::publish(tx, event).await.map_err(fail)
}
