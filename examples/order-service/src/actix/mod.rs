//! The service on actix-web: its routes and its server. All idempotency
//! behaviour comes from `#[idempotent]`.
//!
//! The two write routes have two implementations with one HTTP contract:
//! `direct.rs` on memory and Redis, `transactional.rs` on Postgres, where
//! the business rows commit together with the stored response.

mod direct;
mod error;
mod transactional;
mod verified;
mod webhooks;

use std::future::{Ready, ready};
use std::sync::Arc;

use actix_web::dev::Payload;
use actix_web::http::header::LOCATION;
use actix_web::{App, FromRequest, HttpRequest, HttpResponse, HttpServer, get, web};

use crate::app::{AppState, caller, listening, prepare, shutdown_signal};
use crate::config::Config;
use crate::error::ApiError;
use crate::model::Order;
use crate::orders::owned;
use crate::repo::Writes;

/// The routes' state, as actix-web hands it out.
type State = web::Data<AppState>;

/// The caller, from `X-User-ID`.
pub(super) struct User(pub(super) String);

impl FromRequest for User {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let value = req.headers().get("x-user-id").and_then(|value| value.to_str().ok());
        ready(caller(value).map(User).ok_or(ApiError::Unauthenticated))
    }
}

/// Serves until SIGTERM or SIGINT, then drains running executions.
pub(crate) async fn serve(config: Config) -> std::io::Result<()> {
    let mut prepared = prepare(config).await?;
    if let Some(notifier) = prepared.notifier.take() {
        // The memory store's events stay in this process: notify here.
        actix_web::rt::spawn(async move { notifier.run(std::future::pending()).await });
    }
    let (idem, writes) = (prepared.idem.clone(), prepared.writes.clone());
    let state = web::Data::from(Arc::clone(&prepared.state));
    let app_idem = idem.clone();
    let server = HttpServer::new(move || {
        App::new().app_data(app_idem.clone()).app_data(state.clone()).configure(|routes| configure(routes, &writes))
    })
    // SIGTERM and SIGINT are handled below: drain first, then stop.
    .disable_signals()
    .bind(&prepared.config.addr)?;
    let addr = server.addrs().first().map_or(prepared.config.addr.clone(), ToString::to_string);
    listening(&prepared, &addr, "actix-web");
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutdown signal received: no new connections, draining idempotent executions");
        let drained = idem.shutdown(handle).await;
        tracing::info!(still_running = drained.still_running, "order-service stopped");
    });
    server.await
}

/// Registers every route; the write routes as `writes` says (their
/// transactional versions only on Postgres, whose store they need).
fn configure(config: &mut web::ServiceConfig, writes: &Writes) {
    config
        .app_data(web::JsonConfig::default().error_handler(|error, _| ApiError::Invalid(error.to_string()).into()))
        .app_data(web::PathConfig::default().error_handler(|error, _| ApiError::Invalid(error.to_string()).into()));
    match writes {
        Writes::Direct(orders) => config
            .app_data(web::Data::from(Arc::clone(orders)))
            .service(direct::create_order)
            .service(direct::create_payment),
        Writes::Transactional => config.service(transactional::create_order).service(transactional::create_payment),
    };
    config
        .service(webhooks::provider_event)
        .service(list_orders)
        .service(get_order)
        .service(stats)
        .service(provider_charges)
        .service(metrics)
        .service(healthz);
}

/// 201 with `order` and its `Location`.
fn created(order: &Order) -> HttpResponse {
    HttpResponse::Created().insert_header((LOCATION, format!("/orders/{}", order.id))).json(order.body())
}

/// One order of the caller.
#[get("/orders/{id}")]
async fn get_order(user: User, id: web::Path<String>, state: State) -> Result<HttpResponse, ApiError> {
    let order = owned(state.repo.order(&id).await?, &user.0, &id)?;
    Ok(HttpResponse::Ok().json(order.body()))
}

/// Every order of the caller.
#[get("/orders")]
async fn list_orders(user: User, state: State) -> Result<HttpResponse, ApiError> {
    let orders = state.repo.orders_of(&user.0).await?;
    Ok(HttpResponse::Ok().json(orders.iter().map(Order::body).collect::<Vec<_>>()))
}

/// Side-effect counts across every process sharing the backend.
#[get("/stats")]
async fn stats(state: State) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(crate::orders::stats(&state).await?))
}

/// The simulated provider's ledger: every charge it captured, for a
/// reconciliation (which orders were charged, and how often).
#[get("/provider/charges")]
async fn provider_charges(state: State) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.provider.ledger().await?))
}

/// Prometheus text exposition.
#[get("/metrics")]
async fn metrics(state: State) -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(state.metrics.render())
}

/// Liveness.
#[get("/healthz")]
async fn healthz() -> &'static str {
    "ok"
}
