//! The write routes on Postgres, in the execution's transaction (see
//! `orders.rs`).

use actix_web::{HttpResponse, post, web};
use idem_runtime::{ExecutionContext, Tx, idempotent};

use super::{State, User, created};
use crate::error::ApiError;
use crate::model::{NewOrder, NewPayment};
use crate::orders;

/// Creates an order.
#[idempotent(ttl = "24h", scope = "user")]
#[post("/orders")]
pub(super) async fn create_order(
    user: User,
    body: web::Json<NewOrder>,
    execution: ExecutionContext,
    mut tx: Tx,
    state: State,
) -> Result<HttpResponse, ApiError> {
    let order = orders::create_order_in(&user.0, body.into_inner(), &execution, &mut tx, &state).await?;
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
    state: State,
) -> Result<HttpResponse, ApiError> {
    let payment = orders::create_payment_in(&user.0, &id, &body, &execution, &mut tx, &state).await?;
    Ok(HttpResponse::Created().json(payment.body()))
}
