//! The operations as an actix service, for an application to mount behind
//! a guard of its own (feature `actix`): the same [`Operator`] as the `idem`
//! tool, over HTTP, answering JSON.
//!
//! | request | does |
//! |---|---|
//! | `GET {path}/records?state=held&older_than_seconds=60&route=POST%20/orders&limit=50` | list |
//! | `GET {path}/records/{id}` | inspect |
//! | `POST {path}/records/{id}/release` with `{"expect_token": "..", "expect_state": "held", "forget_steps": false, "force": false}` (all optional) | release |
//! | `POST {path}/records/{id}/resolve` with `{"status": 201, "headers": [["content-type", "application/json"]], "body": "..", "expect_token": "..", "expect_state": ".."}` | resolve |
//!
//! Answers: 200 with the record(s) or `{"id", "was", "now"}`; 404 not
//! found; 409 refused (the record changed, or is not in flight or held;
//! `"error": "running"` with a `Retry-After` for an execution whose lease
//! is live, or whose lease lapsed only now: its holder gets a grace first);
//! 400 a malformed request (a body that is not that JSON, whatever its
//! content type, or has a field not listed here); 503 the store failed.
//!
//! ```no_run
//! use std::sync::Arc;
//! use actix_web::{App, guard};
//! use idem_runtime::{MemoryStore, Operator};
//! use idem_runtime::operate::service;
//!
//! let store = Arc::new(MemoryStore::new());
//! let operator = Operator::new(store.clone());
//! let app = App::new().service(
//!     service::scope("/admin/idempotency", operator).guard(guard::Header("x-admin-token", "change me")),
//! );
//! # let _ = app;
//! ```
//!
//! Mount it only behind authentication: it releases and resolves any
//! record of the store.

use std::time::Duration;

use actix_web::{HttpResponse, Scope, web};
use serde::Deserialize;
use serde_json::json;

use super::{Expect, Operator, OperatorError, Settled, Target, to_json};
use crate::record::StoredResponse;
use crate::store::{FencingToken, ListFilter, StateName};

/// The service's routes under `path`, over `operator`.
pub fn scope(path: &str, operator: Operator) -> Scope {
    web::scope(path)
        .app_data(web::Data::new(operator))
        .route("/records", web::get().to(list))
        .route("/records/{id}", web::get().to(inspect))
        .route("/records/{id}/release", web::post().to(release))
        .route("/records/{id}/resolve", web::post().to(resolve))
}

#[derive(Deserialize)]
struct ListQuery {
    state: Option<String>,
    older_than_seconds: Option<u64>,
    route: Option<String>,
    limit: Option<usize>,
}

/// The body of a release: every field optional, an empty body too; any
/// other field is refused (a misspelled `expect_token` must never turn a
/// fenced release into an unfenced one).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Release {
    expect_token: Option<String>,
    expect_state: Option<String>,
    #[serde(default)]
    forget_steps: bool,
    #[serde(default)]
    force: bool,
}

/// The body of a resolve.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Resolution {
    status: u16,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body: String,
    expect_token: Option<String>,
    expect_state: Option<String>,
    #[serde(default)]
    force: bool,
}

fn bad_request(detail: impl std::fmt::Display) -> HttpResponse {
    HttpResponse::BadRequest().json(json!({"error": "usage", "detail": detail.to_string()}))
}

fn failed(error: &OperatorError) -> HttpResponse {
    let body = |kind| json!({"error": kind, "detail": error.to_string()});
    match error {
        OperatorError::NotFound(_) => HttpResponse::NotFound().json(body("not-found")),
        OperatorError::NotSettleable { .. } => HttpResponse::Conflict().json(body("not-settleable")),
        OperatorError::Changed { .. } => HttpResponse::Conflict().json(body("changed")),
        // The same write may apply after the lease, or the grace this one
        // gave a lapsed lease: Retry-After says when.
        OperatorError::Running { .. } | OperatorError::Graced { .. } => {
            let seconds = error.retry_after().unwrap_or_default().as_millis().div_ceil(1000);
            HttpResponse::Conflict().insert_header(("retry-after", seconds.to_string())).json(body("running"))
        }
        OperatorError::InvalidTarget(_) | OperatorError::InvalidResponse(_) => {
            HttpResponse::BadRequest().json(body("usage"))
        }
        OperatorError::Sealed { .. } => HttpResponse::Conflict().json(body("sealed")),
        _ => {
            tracing::error!(%error, "an operator's request failed");
            HttpResponse::ServiceUnavailable().json(json!({"error": "store", "detail": "the store failed"}))
        }
    }
}

fn settled(settled: Result<Settled, OperatorError>) -> HttpResponse {
    match settled {
        Ok(settled) => HttpResponse::Ok().json(json!({
            "id": settled.id, "was": settled.was.as_str(), "now": settled.now.as_str()
        })),
        Err(error) => failed(&error),
    }
}

/// What a write expects of the record, as its body gives it.
fn expected(token: Option<&str>, state: Option<&str>, force: bool) -> Result<Expect, String> {
    let token = match token {
        Some(token) => Some(FencingToken::from_hex(token).ok_or("expect_token is 32 hex digits")?),
        None => None,
    };
    let state = match state {
        Some(state) => Some(state.parse::<StateName>().map_err(|error| error.to_string())?),
        None => None,
    };
    Ok(Expect { token, state, force })
}

/// A JSON body, or `T::default()` for an empty one; anything else is an
/// error for a 400, whatever its content type.
fn json_or_default<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|error| format!("the body is not the JSON this request takes: {error}"))
}

async fn list(operator: web::Data<Operator>, query: web::Query<ListQuery>) -> HttpResponse {
    let mut filter = ListFilter::new(query.limit.unwrap_or(100));
    if let Some(state) = &query.state {
        match state.parse() {
            Ok(state) => filter.state = Some(state),
            Err(error) => return bad_request(error),
        }
    }
    filter.older_than = query.older_than_seconds.map(Duration::from_secs);
    filter.route.clone_from(&query.route);
    match operator.list(&filter).await {
        Ok(found) => HttpResponse::Ok().json(found.iter().map(|found| to_json(found, false)).collect::<Vec<_>>()),
        Err(error) => failed(&OperatorError::Store(error)),
    }
}

async fn inspect(operator: web::Data<Operator>, id: web::Path<String>) -> HttpResponse {
    match operator.inspect(&Target::Id(id.into_inner())).await {
        Ok(inspection) => HttpResponse::Ok().json(to_json(&inspection, true)),
        Err(error) => failed(&error),
    }
}

async fn release(operator: web::Data<Operator>, id: web::Path<String>, body: web::Bytes) -> HttpResponse {
    let release: Release = match json_or_default(&body) {
        Ok(release) => release,
        Err(error) => return bad_request(error),
    };
    let expect = match expected(release.expect_token.as_deref(), release.expect_state.as_deref(), release.force) {
        Ok(expect) => expect,
        Err(error) => return bad_request(error),
    };
    settled(operator.release(&Target::Id(id.into_inner()), &expect, release.forget_steps).await)
}

async fn resolve(operator: web::Data<Operator>, id: web::Path<String>, body: web::Bytes) -> HttpResponse {
    let resolution: Resolution = match serde_json::from_slice(&body) {
        Ok(resolution) => resolution,
        Err(error) => return bad_request(format!("the body is not the JSON this request takes: {error}")),
    };
    let expect =
        match expected(resolution.expect_token.as_deref(), resolution.expect_state.as_deref(), resolution.force) {
            Ok(expect) => expect,
            Err(error) => return bad_request(error),
        };
    let headers =
        resolution.headers.into_iter().map(|(name, value)| (name.to_ascii_lowercase(), value.into_bytes())).collect();
    let response = StoredResponse { status: resolution.status, headers, body: resolution.body.into_bytes().into() };
    settled(operator.resolve(&Target::Id(id.into_inner()), response, &expect).await)
}
