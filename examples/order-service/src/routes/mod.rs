//! The HTTP interface. All idempotency behaviour comes from `#[idempotent]`.

use std::future::{Ready, ready};
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::http::header::LOCATION;
use actix_web::{FromRequest, HttpRequest, HttpResponse, get, post, web};
use idem_runtime::idempotent;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::error::ApiError;
use crate::model::{Charge, NewOrder, NewPayment, Order};
use crate::repo::Repo;

/// Shared state of the routes.
pub struct AppState {
    /// Orders and charges.
    pub repo: Arc<dyn Repo>,
    /// Latency of the simulated payment provider.
    pub charge_delay: Duration,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
}

/// The caller, from `X-User-ID`.
pub struct User(pub String);

/// The subject resolver given to idem for `scope = "user"`.
pub fn user_id(req: &HttpRequest) -> Option<String> {
    let value = req.headers().get("x-user-id")?.to_str().ok()?.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

impl FromRequest for User {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(user_id(req).map(User).ok_or(ApiError::Unauthenticated))
    }
}

/// Registers every route.
pub fn configure(config: &mut web::ServiceConfig) {
    config
        .app_data(web::JsonConfig::default().error_handler(|error, _| ApiError::Invalid(error.to_string()).into()))
        .app_data(web::PathConfig::default().error_handler(|error, _| ApiError::Invalid(error.to_string()).into()))
        .service(create_order)
        .service(create_payment)
        .service(list_orders)
        .service(get_order)
        .service(stats)
        .service(metrics)
        .service(healthz);
}

/// Creates an order.
#[idempotent(ttl = "24h", scope = "user")]
#[post("/orders")]
async fn create_order(
    user: User,
    body: web::Json<NewOrder>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let new = body.into_inner();
    new.validate().map_err(ApiError::Invalid)?;
    let order = Order::new(&user.0, new);
    state.repo.insert_order(&order).await?;
    Ok(HttpResponse::Created().insert_header((LOCATION, format!("/orders/{}", order.id))).json(order.body()))
}

/// Pays an order through the simulated provider.
#[idempotent(ttl = "24h", scope = "user")]
#[post("/orders/{id}/payments")]
async fn create_payment(
    user: User,
    id: web::Path<String>,
    body: web::Json<NewPayment>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    body.validate().map_err(ApiError::Invalid)?;
    let order = owned_order(&state, &user, &id).await?;
    let charge = Charge {
        id: uuid::Uuid::new_v4().to_string(),
        order_id: order.id,
        amount_cents: body.amount_cents,
        status: "captured".into(),
    };
    charge_through_provider(&state, &charge).await?;
    Ok(HttpResponse::Created().json(charge.body()))
}

/// The simulated payment provider: a network call that takes a while, then
/// one charge. Special amounts behave like a provider's test cards.
async fn charge_through_provider(state: &AppState, charge: &Charge) -> Result<(), ApiError> {
    if charge.amount_cents == test_cards::UNAVAILABLE {
        // Refused before any charge: nothing happened.
        return Err(ApiError::ProviderUnavailable);
    }
    tokio::time::sleep(state.charge_delay).await;
    if charge.amount_cents == test_cards::DECLINED {
        return Err(ApiError::Declined);
    }
    state.repo.insert_charge(charge).await?;
    if charge.amount_cents == test_cards::TIMEOUT_AFTER_CHARGE {
        return Err(ApiError::ProviderTimeout);
    }
    Ok(())
}

/// Amounts that make the simulated provider fail, like test card numbers.
mod test_cards {
    /// The card is declined: no charge, 402 (stored and replayed).
    pub const DECLINED: i64 = 402;
    /// The provider is unreachable before charging: no charge, 503 marked
    /// retryable (the same request may run again).
    pub const UNAVAILABLE: i64 = 503;
    /// The provider charges, then times out: one charge, 504 (stored and
    /// replayed, never charged again).
    pub const TIMEOUT_AFTER_CHARGE: i64 = 504;
}

async fn owned_order(state: &AppState, user: &User, id: &str) -> Result<Order, ApiError> {
    match state.repo.order(id).await? {
        Some(order) if order.owner == user.0 => Ok(order),
        _ => Err(ApiError::NotFound(id.to_owned())),
    }
}

/// One order of the caller.
#[get("/orders/{id}")]
async fn get_order(user: User, id: web::Path<String>, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let order = owned_order(&state, &user, &id).await?;
    Ok(HttpResponse::Ok().json(order.body()))
}

/// Every order of the caller.
#[get("/orders")]
async fn list_orders(user: User, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let orders = state.repo.orders_of(&user.0).await?;
    Ok(HttpResponse::Ok().json(orders.iter().map(Order::body).collect::<Vec<_>>()))
}

/// Side-effect counts across every process sharing the backend.
#[get("/stats")]
async fn stats(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.repo.stats().await?))
}

/// Prometheus text exposition.
#[get("/metrics")]
async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(state.metrics.render())
}

/// Liveness.
#[get("/healthz")]
async fn healthz() -> &'static str {
    "ok"
}
