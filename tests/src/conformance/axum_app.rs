//! The conformance app on axum: served on the test's runtime, with the
//! handlers' state in axum's `State`.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem_runtime::axum::idempotent;
use idem_runtime::{ExecutionContext, Idem, MarkRetryable};
use serde_json::Value;

use super::business::{self, Calls, Reply};
use super::{Framework, Running};

/// axum.
#[derive(Clone, Copy, Debug)]
pub struct Axum;

type Shared = State<Arc<Calls>>;

fn respond(reply: Reply) -> Response {
    let mut response =
        (StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), Json(reply.body))
            .into_response();
    for (name, value) in reply.headers {
        response.headers_mut().insert(HeaderName::from_static(name), HeaderValue::from_static(value));
    }
    if reply.retryable { response.retryable() } else { response }
}

#[idempotent]
async fn orders(State(calls): Shared, Json(order): Json<Value>) -> Response {
    respond(business::orders(&calls, order))
}

#[idempotent(scope = "route")]
async fn items(State(calls): Shared, Path(id): Path<String>) -> Response {
    respond(business::items(&calls, &id))
}

#[idempotent(scope = "route")]
async fn shop_items(State(calls): Shared, Path(shop): Path<String>) -> Response {
    respond(business::shop_items(&calls, &shop))
}

#[idempotent(scope = "global")]
async fn global(State(calls): Shared) -> Response {
    respond(business::global(&calls))
}

#[idempotent(scope = "route", key = "path:order_id")]
async fn natural(State(calls): Shared, Path(order_id): Path<String>) -> Response {
    respond(business::natural(&calls, &order_id))
}

#[idempotent(scope = "global", key = "json:/id")]
async fn events(State(calls): Shared, Json(event): Json<Value>) -> Response {
    respond(business::events(&calls, &event))
}

#[idempotent(scope = "route")]
async fn slow(State(calls): Shared, Json(body): Json<Value>) -> Response {
    respond(business::slow(&calls, &body, "slow").await)
}

#[idempotent(scope = "route", in_flight = "wait", wait = "5s")]
async fn wait(State(calls): Shared, Json(body): Json<Value>) -> Response {
    respond(business::slow(&calls, &body, "wait").await)
}

#[idempotent(scope = "route")]
async fn status(State(calls): Shared, Json(body): Json<Value>) -> Response {
    respond(business::status(&calls, &body))
}

#[idempotent(scope = "route")]
async fn panic(State(calls): Shared) -> Response {
    respond(business::panic(&calls))
}

#[idempotent(scope = "route", required = false)]
async fn optional(State(calls): Shared) -> Response {
    respond(business::optional(&calls))
}

#[idempotent(scope = "route", fingerprint_headers = ["x-account-id"])]
async fn accounts(State(calls): Shared) -> Response {
    respond(business::accounts(&calls))
}

#[idempotent(scope = "route", lock_ttl = "3s")]
async fn blocking(State(calls): Shared, Json(body): Json<Value>) -> Response {
    respond(business::blocking(&calls, &body))
}

#[idempotent(scope = "route")]
async fn replayed_header(State(calls): Shared) -> Response {
    respond(business::replayed_header(&calls))
}

#[idempotent(scope = "route")]
async fn context(State(calls): Shared, execution: ExecutionContext) -> Response {
    respond(business::context(&calls, &execution))
}

#[idempotent(scope = "route")]
async fn steps(State(calls): Shared, execution: ExecutionContext, Json(body): Json<Value>) -> Response {
    respond(business::steps(&calls, &execution, &body).await)
}

#[idempotent(scope = "route", fingerprint_exclude = ["/attempt", "/meta/sent_at"])]
async fn deliveries(State(calls): Shared, Json(delivery): Json<Value>) -> Response {
    respond(business::deliveries(&calls, &delivery))
}

#[idempotent(scope = "route", key = ["path:order_id", "json:/line_id"])]
async fn lines(State(calls): Shared, Path(order_id): Path<String>, Json(line): Json<Value>) -> Response {
    respond(business::lines(&calls, &order_id, &line))
}

#[idempotent(scope = "route", key = ["header", "json:/account"], required = false)]
async fn transfers(State(calls): Shared, Json(transfer): Json<Value>) -> Response {
    respond(business::transfers(&calls, &transfer))
}

#[idempotent(scope = "route", key = "fn:business::invoice_key", required = false)]
async fn receipts(State(calls): Shared, Json(receipt): Json<Value>) -> Response {
    respond(business::receipts(&calls, &receipt))
}

#[idempotent(scope = "global", key = "fn:business::invoice_key")]
async fn invoices(State(calls): Shared, Json(invoice): Json<Value>) -> Response {
    respond(business::invoices(&calls, &invoice))
}

/// Every route of the app.
fn routes(calls: Arc<Calls>) -> Router {
    Router::new()
        .route("/orders", post(orders))
        .route("/items/{id}", post(items))
        .route("/global", post(global))
        .route("/natural/{order_id}/pay", post(natural))
        .route("/events", post(events))
        .route("/slow", post(slow))
        .route("/wait", post(wait))
        .route("/status", post(status))
        .route("/panic", post(panic))
        .route("/optional", post(optional))
        .route("/accounts", post(accounts))
        .route("/blocking", post(blocking))
        .route("/replayed-header", post(replayed_header))
        .route("/context", post(context))
        .route("/steps", post(steps))
        .route("/deliveries", post(deliveries))
        .route("/lines/{order_id}", post(lines))
        .route("/transfers", post(transfers))
        .route("/receipts", post(receipts))
        .route("/invoices", post(invoices))
        .nest("/shops/{shop}", Router::new().route("/items", post(shop_items)))
        .with_state(calls)
}

impl Framework for Axum {
    const NAME: &'static str = "axum";

    async fn start(self, idem: Option<Idem>, calls: Arc<Calls>) -> Running {
        let app = match &idem {
            Some(idem) => routes(Arc::clone(&calls)).layer(idem.layer()),
            None => routes(Arc::clone(&calls)),
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.expect("binding a loopback port");
        let address = listener.local_addr().expect("the bound address");
        let (stopping, stop_signal) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stop_signal.await;
            };
            let _ = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
        });
        let stop = move || async move {
            // No new connections, the requests in progress answered, then
            // the executions whose clients left drained.
            let _ = stopping.send(());
            let _ = server.await;
            match idem {
                Some(idem) => idem.drain().await,
                None => idem_runtime::Drained { still_running: 0, waited: std::time::Duration::ZERO },
            }
        };
        Running::new(format!("http://{address}"), calls, stop)
    }
}
