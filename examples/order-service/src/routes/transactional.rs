//! The write routes on Postgres: the business rows are written in the
//! transaction the runtime opens for the execution (`Tx`), which commits
//! them together with the stored response. A crash before the commit
//! leaves neither. The provider's ledger is another system: never in `tx`.

use actix_web::{HttpResponse, post, web};
use idem_runtime::{ExecutionContext, Tx, idempotent};

use super::{AppState, User, charge, created, order_id, owned, payment_id};
use crate::error::ApiError;
use crate::model::{NewOrder, NewPayment, Order, Payment};
use crate::repo::transactional as rows;

/// Creates an order.
#[idempotent(ttl = "24h", scope = "user")]
#[post("/orders")]
pub(super) async fn create_order(
    user: User,
    body: web::Json<NewOrder>,
    execution: ExecutionContext,
    mut tx: Tx,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let new = body.into_inner();
    new.validate().map_err(ApiError::Invalid)?;
    let order = Order::new(order_id(&execution), &user.0, new);
    rows::insert_order(&mut tx, &order).await?;
    rows::publish(&mut tx, &order.created_event()).await?;
    state.faults.after_order_insert();
    Ok(created(&order))
}

/// Pays an order through the simulated provider (the durable step
/// `charge`), and records the payment.
#[idempotent(ttl = "24h", scope = "user")]
#[post("/orders/{id}/payments")]
pub(super) async fn create_payment(
    user: User,
    id: web::Path<String>,
    body: web::Json<NewPayment>,
    execution: ExecutionContext,
    mut tx: Tx,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    body.validate().map_err(ApiError::Invalid)?;
    let order = owned(rows::order(&mut tx, &id).await?, &user, &id)?;
    // The step's record is written outside `tx`, by the runtime: a rollback
    // does not undo the charge.
    let charge = charge(&execution, &state, &order.id, body.amount_cents).await?;
    let payment = Payment::new(payment_id(&execution), charge);
    rows::insert_payment(&mut tx, &payment).await?;
    tokio::time::sleep(state.post_charge_delay).await;
    Ok(HttpResponse::Created().json(payment.body()))
}
