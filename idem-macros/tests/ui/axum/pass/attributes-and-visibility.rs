//! The handler's docs, visibility, cfg and lint levels describe the type
//! the attribute makes of it; attributes below it (`tracing::instrument`)
//! stay on the function, so they trace executions, not replays. Every
//! argument of the attribute is taken.
#![deny(warnings, missing_docs)]

use axum::Router;
use axum::routing::post;
use idem_runtime::axum::idempotent;

mod routes {
    use idem_runtime::axum::idempotent;

    /// Creates an order, once per key.
    #[idempotent(
        ttl = "1h30m",
        scope = "global",
        key = "header",
        header = "X-Request-Key",
        fingerprint_headers = ["x-account-id"],
        lock_ttl = "1m",
        required = false,
        in_flight = "wait",
        wait = "15s",
        on_lapse = "hold"
    )]
    #[tracing::instrument]
    pub async fn create_order(body: String) -> String {
        body
    }

    /// Only in tests.
    #[cfg(any())]
    #[idempotent]
    pub async fn never_compiled() -> &'static str {
        "never"
    }

    /// An unused handler, allowed to be.
    #[allow(dead_code)]
    #[idempotent(scope = "route")]
    pub(crate) async fn unused() -> &'static str {
        "unused"
    }

    /// A natural key from the path.
    #[idempotent(scope = "route", key = "path:id")]
    pub async fn by_path(axum::extract::Path(id): axum::extract::Path<String>) -> String {
        id
    }

    /// A natural key from the body.
    #[idempotent(scope = "global", key = "json:/event/id")]
    pub async fn by_body(body: String) -> String {
        body
    }

    /// A key of two parts, a redelivery counter left out of the fingerprint.
    #[idempotent(scope = "route", key = ["path:id", "json:/line"], fingerprint_exclude = ["/attempt"])]
    pub async fn by_parts(body: String) -> String {
        body
    }

    /// The tenant and the invoice number.
    fn invoice_key(req: &idem_runtime::KeyRequest<'_>) -> Option<String> {
        Some(format!("{}/{}", req.header("x-tenant")?, req.query()))
    }

    /// A computed key.
    #[idempotent(scope = "global", key = "fn:invoice_key")]
    pub async fn computed(body: String) -> String {
        body
    }
}

#[idempotent(crate = "idem_runtime")]
async fn with_the_crate_named() -> &'static str {
    "named"
}

fn main() {
    let _: Router = Router::new()
        .route("/orders", post(routes::create_order))
        .route("/orders/{id}", post(routes::by_path))
        .route("/events", post(routes::by_body))
        .route("/lines/{id}", post(routes::by_parts))
        .route("/invoices", post(routes::computed))
        .route("/named", post(with_the_crate_named));
}
