//! The service on axum: the same routes as on actix-web, with axum's
//! extractors, over the same business code. All idempotency behaviour
//! comes from `#[idempotent]`.

mod extract;
mod writes;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header::{CONTENT_TYPE, LOCATION, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idem_runtime::MarkRetryable;

use self::extract::{ApiPath, User};
use crate::app::{AppState, listening, prepare, shutdown_signal};
use crate::config::Config;
use crate::error::ApiError;
use crate::model::Order;
use crate::orders::owned;
use crate::repo::{InsertOrder, Writes};

/// The routes' state: the shared state, and where direct writes go.
#[derive(Clone)]
pub(super) struct Shared {
    app: Arc<AppState>,
    /// The order rows of the direct write routes (memory and Redis).
    rows: Option<Arc<dyn InsertOrder>>,
}

/// Serves until SIGTERM or SIGINT, then drains running executions.
pub(crate) async fn serve(config: Config) -> std::io::Result<()> {
    let mut prepared = prepare(config).await?;
    if let Some(notifier) = prepared.notifier.take() {
        // The memory store's events stay in this process: notify here.
        tokio::spawn(async move { notifier.run(std::future::pending()).await });
    }
    let listener = tokio::net::TcpListener::bind(&prepared.config.addr).await?;
    let addr = listener.local_addr().map_or(prepared.config.addr.clone(), |addr| addr.to_string());
    listening(&prepared, &addr, "axum");
    let app = routes(&prepared.state, &prepared.writes).layer(prepared.idem.layer());
    // No new connections once signalled, the requests in progress answered;
    // then the executions whose clients left are drained.
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            shutdown_signal().await;
            tracing::info!("shutdown signal received: no new connections, draining idempotent executions");
        })
        .await?;
    let drained = prepared.idem.drain().await;
    tracing::info!(still_running = drained.still_running, "order-service stopped");
    Ok(())
}

/// Every route; the write routes as `writes` says (their transactional
/// versions only on Postgres, whose store they need).
fn routes(app: &Arc<AppState>, writes: &Writes) -> Router {
    let (router, rows) = match writes {
        Writes::Direct(rows) => (
            Router::new()
                .route("/orders", post(writes::create_order).get(list_orders))
                .route("/orders/{id}/payments", post(writes::create_payment)),
            Some(Arc::clone(rows)),
        ),
        Writes::Transactional => (
            Router::new()
                .route("/orders", post(writes::create_order_in).get(list_orders))
                .route("/orders/{id}/payments", post(writes::create_payment_in)),
            None,
        ),
    };
    router
        .route("/orders/{id}", get(get_order))
        .route("/webhooks/provider", post(writes::provider_event))
        .route("/stats", get(stats))
        .route("/provider/charges", get(provider_charges))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(Shared { app: Arc::clone(app), rows })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A step's failure is the runtime's own problem, with its marks.
        if let Self::Step(error) = self {
            return error.into_response();
        }
        let answer = self.problem();
        let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, answer.body).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(seconds) = answer.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        if answer.retryable { response.retryable() } else { response }
    }
}

/// 201 with `order` and its `Location`.
fn created(order: &Order) -> Response {
    let location =
        HeaderValue::try_from(format!("/orders/{}", order.id)).unwrap_or(HeaderValue::from_static("/orders"));
    (StatusCode::CREATED, [(LOCATION, location)], axum::Json(order.body())).into_response()
}

/// One order of the caller.
async fn get_order(
    user: User,
    ApiPath(id): ApiPath<String>,
    State(shared): State<Shared>,
) -> Result<Response, ApiError> {
    let order = owned(shared.app.repo.order(&id).await?, &user.0, &id)?;
    Ok(axum::Json(order.body()).into_response())
}

/// Every order of the caller.
async fn list_orders(user: User, State(shared): State<Shared>) -> Result<Response, ApiError> {
    let orders = shared.app.repo.orders_of(&user.0).await?;
    Ok(axum::Json(orders.iter().map(Order::body).collect::<Vec<_>>()).into_response())
}

/// Side-effect counts across every process sharing the backend.
async fn stats(State(shared): State<Shared>) -> Result<Response, ApiError> {
    Ok(axum::Json(crate::orders::stats(&shared.app).await?).into_response())
}

/// The simulated provider's ledger.
async fn provider_charges(State(shared): State<Shared>) -> Result<Response, ApiError> {
    Ok(axum::Json(shared.app.provider.ledger().await?).into_response())
}

/// Prometheus text exposition.
async fn metrics(State(shared): State<Shared>) -> Response {
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], shared.app.metrics.render()).into_response()
}

/// Liveness.
async fn healthz() -> &'static str {
    "ok"
}
