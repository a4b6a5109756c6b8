//! The write routes on memory and Redis: each write is safe to repeat on
//! its own (the order's id comes from the execution, the provider
//! deduplicates charges by key), since there is no transaction to join.

use actix_web::{HttpResponse, post, web};
use idem_runtime::{ExecutionContext, idempotent};

use super::{AppState, User, charge, created, order_id, owned, payment_id};
use crate::error::ApiError;
use crate::model::{NewOrder, NewPayment, Order, Payment};
use crate::repo::InsertOrder;

/// Creates an order.
#[idempotent(ttl = "24h", scope = "user")]
#[post("/orders")]
pub(super) async fn create_order(
    user: User,
    body: web::Json<NewOrder>,
    execution: ExecutionContext,
    orders: web::Data<dyn InsertOrder>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let new = body.into_inner();
    new.validate().map_err(ApiError::Invalid)?;
    let order = orders.insert_order(&Order::new(order_id(&execution), &user.0, new)).await?;
    state.faults.after_order_insert();
    Ok(created(&order))
}

/// Pays an order through the simulated provider (the durable step `charge`).
#[idempotent(ttl = "24h", scope = "user")]
#[post("/orders/{id}/payments")]
pub(super) async fn create_payment(
    user: User,
    id: web::Path<String>,
    body: web::Json<NewPayment>,
    execution: ExecutionContext,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    body.validate().map_err(ApiError::Invalid)?;
    let order = owned(state.repo.order(&id).await?, &user, &id)?;
    let charge = charge(&execution, &state, &order.id, body.amount_cents).await?;
    let payment = Payment::new(payment_id(&execution), charge);
    tokio::time::sleep(state.post_charge_delay).await;
    Ok(HttpResponse::Created().json(payment.body()))
}
