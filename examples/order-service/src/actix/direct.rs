//! The write routes on memory and Redis (see `orders.rs`).

use actix_web::{HttpResponse, post, web};
use idem_runtime::{ExecutionContext, idempotent};

use super::{State, User, created};
use crate::error::ApiError;
use crate::model::{NewOrder, NewPayment};
use crate::orders;
use crate::repo::InsertOrder;

/// Creates an order.
#[idempotent(ttl = "24h", scope = "user")]
#[post("/orders")]
pub(super) async fn create_order(
    user: User,
    body: web::Json<NewOrder>,
    execution: ExecutionContext,
    rows: web::Data<dyn InsertOrder>,
    state: State,
) -> Result<HttpResponse, ApiError> {
    let order = orders::create_order(&user.0, body.into_inner(), &execution, &**rows, &state).await?;
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
    state: State,
) -> Result<HttpResponse, ApiError> {
    let payment = orders::create_payment(&user.0, &id, &body, &execution, &state).await?;
    Ok(HttpResponse::Created().json(payment.body()))
}
