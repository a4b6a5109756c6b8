//! The HTTP interface. All idempotency behaviour comes from `#[idempotent]`.
//!
//! The two write routes have two implementations with one HTTP contract:
//! [`direct`] on memory and Redis, [`transactional`] on Postgres, where the
//! business rows commit together with the stored response.

mod direct;
mod transactional;

use std::future::{Ready, ready};
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::http::header::LOCATION;
use actix_web::{FromRequest, HttpRequest, HttpResponse, get, web};
use idem_runtime::{ExecutionContext, RequestHead};
use metrics_exporter_prometheus::PrometheusHandle;
use order_notifier::Outlet;

use crate::error::ApiError;
use crate::faults::{DurableStep, Faults};
use crate::model::{Charge, Order, Stats, uuid_shaped};
use crate::provider::{Outcome, Provider};
use crate::repo::{Repo, RepoError, Writes};

/// Shared state of the routes.
pub struct AppState {
    /// Orders, as the routes read them.
    pub repo: Arc<dyn Repo>,
    /// The simulated payment provider.
    pub provider: Provider,
    /// Crash points armed for tests.
    pub faults: Faults,
    /// How long a payment waits after the charge, before it returns.
    pub post_charge_delay: Duration,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// The notifications sent for created orders.
    pub outlet: Outlet,
}

/// The caller, from `X-User-ID`.
pub struct User(pub String);

/// The subject resolver given to idem for `scope = "user"`.
pub fn user_id(req: &RequestHead<'_>) -> Option<String> {
    caller(req.header("x-user-id"))
}

/// The caller an `X-User-ID` value names, if any.
fn caller(value: Option<&str>) -> Option<String> {
    let value = value?.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

impl FromRequest for User {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let value = req.headers().get("x-user-id").and_then(|value| value.to_str().ok());
        ready(caller(value).map(User).ok_or(ApiError::Unauthenticated))
    }
}

/// Registers every route; the write routes as `writes` says (their
/// transactional versions only on Postgres, whose store they need).
pub fn configure(config: &mut web::ServiceConfig, writes: &Writes) {
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
        .service(crate::webhooks::provider_event)
        .service(list_orders)
        .service(get_order)
        .service(stats)
        .service(provider_charges)
        .service(metrics)
        .service(healthz);
}

/// The id of the order an execution creates: the same in every execution of
/// one idempotency key.
fn order_id(execution: &ExecutionContext) -> String {
    uuid_shaped(&execution.derived_key("order"))
}

/// The id of the payment an execution records: the same in every execution
/// of one idempotency key.
fn payment_id(execution: &ExecutionContext) -> String {
    uuid_shaped(&execution.derived_key("payment"))
}

/// The idempotency key the provider gets for an execution's charge.
fn charge_key(execution: &ExecutionContext) -> String {
    execution.derived_key("charge")
}

/// Charges `amount_cents` for `order_id` through the provider, as the
/// payment's durable step `charge`: at most one charge per idempotency key,
/// even with a provider that does not deduplicate.
///
/// The step records the provider's answer about the money, whatever it is:
/// a captured charge, a declined card, a timeout after the charge (504). A
/// takeover after a crash gets that answer back and does not call the
/// provider again: a captured or timed-out charge is never made twice, and
/// the takeover answers as the first execution would have. A call that got
/// no answer is not recorded (`try_step` records results only): the
/// provider unreachable before charging, or its ledger failing while it
/// deduplicates, is a 503 marked retryable (nothing happened, or asking
/// again is safe), and the next execution asks the provider again; a ledger
/// failing while it does not deduplicate is a 502 kept for the key, since
/// the charge may stand.
///
/// The step runs again if the crash came between the charge and its record
/// (`--crash-after-charge`), which is why the provider still gets the
/// execution's derived key.
async fn charge(
    execution: &ExecutionContext,
    state: &AppState,
    order_id: &str,
    amount_cents: i64,
) -> Result<Charge, ApiError> {
    let key = charge_key(execution);
    let call = async {
        let outcome = state.provider.charge(&key, order_id, amount_cents).await?;
        if let Outcome::Captured(_) = outcome {
            state.faults.after_charge();
        }
        Ok::<_, ApiError>(outcome)
    };
    // An error is no answer: not recorded, and returned as it is.
    let outcome = execution.try_step(DurableStep::Charge.name(), call).await??;
    state.faults.after_step(DurableStep::Charge);
    match outcome {
        Outcome::Captured(charge) => Ok(charge),
        Outcome::Declined => Err(ApiError::Declined),
        Outcome::TimedOutAfterCharge => Err(ApiError::ProviderTimeout),
    }
}

/// 201 with `order` and its `Location`.
fn created(order: &Order) -> HttpResponse {
    HttpResponse::Created().insert_header((LOCATION, format!("/orders/{}", order.id))).json(order.body())
}

/// `order`, if the caller owns it; else 404 for `id`.
fn owned(order: Option<Order>, user: &User, id: &str) -> Result<Order, ApiError> {
    match order {
        Some(order) if order.owner == user.0 => Ok(order),
        _ => Err(ApiError::NotFound(id.to_owned())),
    }
}

/// One order of the caller.
#[get("/orders/{id}")]
async fn get_order(user: User, id: web::Path<String>, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let order = owned(state.repo.order(&id).await?, &user, &id)?;
    Ok(HttpResponse::Ok().json(order.body()))
}

/// Every order of the caller.
#[get("/orders")]
async fn list_orders(user: User, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let orders = state.repo.orders_of(&user.0).await?;
    Ok(HttpResponse::Ok().json(orders.iter().map(Order::body).collect::<Vec<_>>()))
}

/// Side-effect counts across every process sharing the backend: orders
/// created, charges at the provider, refunds it reported, notifications
/// the order notifier sent.
#[get("/stats")]
async fn stats(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let orders_created = state.repo.orders_created().await?;
    let charges = state.provider.charges().await?;
    let refunds = state.repo.refunds().await?;
    let notifications_sent = state.outlet.sent().await.map_err(|e| RepoError::new("notifications", e))?;
    Ok(HttpResponse::Ok().json(Stats { orders_created, charges, refunds, notifications_sent }))
}

/// The simulated provider's ledger: every charge it captured, for a
/// reconciliation (which orders were charged, and how often).
#[get("/provider/charges")]
async fn provider_charges(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.provider.ledger().await?))
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
