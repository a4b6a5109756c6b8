//! What an axum handler returns is its own: anything `IntoResponse`, a
//! `Result` included, and the runtime's `Retryable` and `StepError`.
#![deny(warnings)]

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use idem_runtime::axum::idempotent;
use idem_runtime::{ExecutionContext, MarkRetryable, Retryable, StepError};

#[path = "../../support/axum_replay.rs"]
mod axum_replay;

#[idempotent]
async fn json() -> Json<Vec<u32>> {
    Json(vec![1, 2, 3])
}

#[idempotent]
async fn tuple() -> (StatusCode, Json<&'static str>) {
    (StatusCode::CREATED, Json("created"))
}

#[idempotent]
async fn result(Json(fail): Json<bool>) -> Result<String, StatusCode> {
    if fail { Err(StatusCode::PAYMENT_REQUIRED) } else { Ok("paid".to_owned()) }
}

#[idempotent]
async fn opaque() -> impl IntoResponse {
    (StatusCode::ACCEPTED, "accepted")
}

#[idempotent]
async fn response(Json(retry): Json<bool>) -> Response {
    let response = "done".into_response();
    if retry { response.retryable() } else { response }
}

#[idempotent]
async fn retryable(Json(retry): Json<bool>) -> Result<&'static str, Retryable<StatusCode>> {
    if retry { Err(Retryable(StatusCode::SERVICE_UNAVAILABLE)) } else { Ok("ok") }
}

#[idempotent]
async fn stepped(execution: ExecutionContext) -> Result<String, StepError> {
    let charge: u32 = execution.step("charge", async { 7 }).await?;
    Ok(charge.to_string())
}

fn main() {
    let router = Router::new()
        .route("/json", post(json))
        .route("/tuple", post(tuple))
        .route("/result", post(result))
        .route("/opaque", post(opaque))
        .route("/response", post(response))
        .route("/retryable", post(retryable))
        .route("/stepped", post(stepped));
    for uri in ["/json", "/tuple", "/opaque", "/stepped"] {
        axum_replay::execute_then_replay(router.clone(), uri, "");
    }
    for uri in ["/result", "/response", "/retryable"] {
        axum_replay::execute_then_replay(router.clone(), uri, "false");
    }
}
