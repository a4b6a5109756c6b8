//! The write routes and the webhook on axum (see `orders.rs` and
//! `webhooks.rs` of the crate): the same attributes as on actix-web.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem_runtime::axum::idempotent;
use idem_runtime::{ExecutionContext, Tx};
use serde_json::json;

use super::extract::{ApiJson, ApiPath, User, Verified};
use super::{Shared, created};
use crate::error::ApiError;
use crate::model::{NewOrder, NewPayment};
use crate::orders;
use crate::webhooks::{Event, record};

/// Creates an order, its row written on its own (memory, Redis).
#[idempotent(ttl = "24h", scope = "user")]
pub(super) async fn create_order(
    user: User,
    execution: ExecutionContext,
    State(shared): State<Shared>,
    ApiJson(body): ApiJson<NewOrder>,
) -> Result<Response, ApiError> {
    let rows = shared.rows.as_deref().ok_or(ApiError::Misconfigured("no order rows for the direct writes"))?;
    let order = orders::create_order(&user.0, body, &execution, rows, &shared.app).await?;
    Ok(created(&order))
}

/// Creates an order in the execution's transaction (Postgres).
#[idempotent(ttl = "24h", scope = "user")]
pub(super) async fn create_order_in(
    user: User,
    execution: ExecutionContext,
    mut tx: Tx,
    State(shared): State<Shared>,
    ApiJson(body): ApiJson<NewOrder>,
) -> Result<Response, ApiError> {
    let order = orders::create_order_in(&user.0, body, &execution, &mut tx, &shared.app).await?;
    Ok(created(&order))
}

/// Pays an order through the simulated provider (the durable step `charge`).
#[idempotent(ttl = "24h", scope = "user")]
pub(super) async fn create_payment(
    user: User,
    ApiPath(id): ApiPath<String>,
    execution: ExecutionContext,
    State(shared): State<Shared>,
    ApiJson(body): ApiJson<NewPayment>,
) -> Result<Response, ApiError> {
    let payment = orders::create_payment(&user.0, &id, &body, &execution, &shared.app).await?;
    Ok((StatusCode::CREATED, Json(payment.body())).into_response())
}

/// Pays an order, and records the payment in the execution's transaction
/// (Postgres).
#[idempotent(ttl = "24h", scope = "user")]
pub(super) async fn create_payment_in(
    user: User,
    ApiPath(id): ApiPath<String>,
    execution: ExecutionContext,
    mut tx: Tx,
    State(shared): State<Shared>,
    ApiJson(body): ApiJson<NewPayment>,
) -> Result<Response, ApiError> {
    let payment = orders::create_payment_in(&user.0, &id, &body, &execution, &mut tx, &shared.app).await?;
    Ok((StatusCode::CREATED, Json(payment.body())).into_response())
}

/// Records what a provider event reports, once per event id.
#[idempotent(key = "json:/id", scope = "global", in_flight = "wait", wait = "10s")]
pub(super) async fn provider_event(State(shared): State<Shared>, event: Verified<Event>) -> Result<Response, ApiError> {
    record(&event.0, &shared.app).await?;
    Ok(Json(json!({ "received": true })).into_response())
}
