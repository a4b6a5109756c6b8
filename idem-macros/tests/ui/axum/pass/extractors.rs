//! An axum handler keeps every kind of extractor: the router's state, a
//! path, a JSON body, an extension, headers, a query, the execution
//! context, and extractors of the application's own, the last one taking
//! the whole request; none or many of them.
#![deny(warnings)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Extension, Json, Router};
use idem_runtime::ExecutionContext;
use idem_runtime::axum::idempotent;
use serde::Deserialize;

#[path = "../../support/axum_replay.rs"]
mod axum_replay;

#[derive(Deserialize)]
struct NewPayment {
    amount_cents: u64,
}

#[derive(Default)]
struct Db {
    payments: AtomicU64,
}

#[derive(Clone)]
struct Tenant(&'static str);

/// A caller, from a header: an extractor of the application's own.
struct Caller(String);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = StatusCode;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        Ok(Self(parts.headers.get("x-caller").map_or("anyone", |v| v.to_str().unwrap_or("?")).to_owned()))
    }
}

/// The body's length, taking the whole request.
struct Length(usize);

impl<S: Send + Sync> FromRequest<S> for Length {
    type Rejection = StatusCode;

    async fn from_request(req: Request, state: &S) -> Result<Self, StatusCode> {
        let body = String::from_request(req, state).await.map_err(|_| StatusCode::BAD_REQUEST)?;
        Ok(Self(body.len()))
    }
}

#[idempotent(scope = "user")]
async fn create_payment(
    State(db): State<Arc<Db>>,
    Path(order): Path<String>,
    Extension(tenant): Extension<Tenant>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    execution: ExecutionContext,
    Caller(caller): Caller,
    Json(body): Json<NewPayment>,
) -> (StatusCode, String) {
    let id = db.payments.fetch_add(1, Ordering::SeqCst);
    let key = execution.derived_key("charge");
    let shown = format!(
        "payment {id} of {} for order {order} of {} by {caller}, {} headers, {} query values, {}",
        body.amount_cents,
        tenant.0,
        headers.len(),
        query.len(),
        &key[..8]
    );
    (StatusCode::CREATED, shown)
}

#[idempotent(scope = "route")]
async fn ping() -> &'static str {
    "pong"
}

#[idempotent(scope = "route")]
async fn length(Length(length): Length) -> String {
    length.to_string()
}

fn main() {
    let db = Arc::new(Db::default());
    let router = Router::new()
        .route("/orders/{order}/payments", post(create_payment))
        .route("/ping", post(ping))
        .route("/length", post(length))
        .layer(Extension(Tenant("acme")))
        .with_state(db);
    axum_replay::execute_then_replay(router.clone(), "/orders/o-1/payments?x=1", r#"{"amount_cents": 500}"#);
    axum_replay::execute_then_replay(router.clone(), "/ping", "");
    axum_replay::execute_then_replay(router, "/length", "12345");
}
