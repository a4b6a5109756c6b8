//! The annotated app the `handle` target sends its requests to: four
//! `#[idempotent]` routes, one per way of finding the key, over a memory
//! store emptied for every input.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_http::Request;
use actix_service::boxed::BoxService;
use actix_web::dev::ServiceResponse;
use actix_web::{App, HttpResponse, test, web};
use idem_runtime::store::Store;
use idem_runtime::{ExecutionContext, Idem, MarkRetryable, REPLAYED_HEADER, RequestHead, idempotent};
use serde_json::json;

use super::store::FreshStore;

/// Largest body buffered: small, so that the fuzzer's bodies meet it.
pub(super) const BODY_LIMIT: usize = 2 << 10;

/// The response header a handler tells its outcome in: `keyed`, `keyless`
/// or `retryable`.
pub(super) const OUTCOME: &str = "x-outcome";

/// Handler executions of one input, all routes together.
#[derive(Debug, Default)]
pub(super) struct Runs(AtomicUsize);

impl Runs {
    /// Counts one execution; its number, from 1.
    fn add(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Executions so far.
    pub(super) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// The app of one thread, its store and its executions, reset for every
/// input.
pub(super) struct Harness {
    /// The app, as a service.
    pub(super) app: BoxService<Request, ServiceResponse, actix_web::Error>,
    store: Arc<FreshStore>,
    /// Handler executions of the current input.
    pub(super) runs: web::Data<Runs>,
}

impl Harness {
    /// The app over an empty store; subjects from `X-User-ID`.
    pub(super) async fn new() -> Self {
        let store = Arc::new(FreshStore::default());
        let runs = web::Data::new(Runs::default());
        let idem = Idem::from_arc(Arc::clone(&store) as Arc<dyn Store>).subject(user).body_limit(BODY_LIMIT);
        let app = test::init_service(
            App::new()
                .app_data(idem)
                .app_data(runs.clone())
                .route("/orders/{id}", web::post().to(create_order))
                .route("/orders/{id}/capture", web::post().to(capture))
                .route("/webhooks", web::post().to(webhook))
                .route("/forms", web::post().to(form)),
        )
        .await;
        Self { app: actix_service::boxed::service(app), store, runs }
    }

    /// An empty store, no executions.
    pub(super) fn reset(&self) {
        self.store.reset();
        self.runs.0.store(0, Ordering::SeqCst);
    }
}

fn user(req: &RequestHead<'_>) -> Option<String> {
    req.header("x-user-id").map(str::to_owned)
}

/// The key from `Idempotency-Key`, per user; `X-Account-ID` counts in the
/// fingerprint. Sets `Idempotent-Replayed` itself, which the runtime must
/// remove.
#[idempotent(fingerprint_headers = ["x-account-id"], lock_ttl = "10s", ttl = "1h")]
async fn create_order(
    id: web::Path<String>,
    order: web::Json<serde_json::Value>,
    runs: web::Data<Runs>,
) -> HttpResponse {
    let run = runs.add();
    HttpResponse::Created()
        .insert_header((OUTCOME, "keyed"))
        .append_header(("x-multi", "one"))
        .append_header(("x-multi", "two"))
        .insert_header(("set-cookie", "session=1"))
        .insert_header((REPLAYED_HEADER, "forged"))
        .json(json!({ "run": run, "id": id.into_inner(), "order": order.into_inner() }))
}

/// The key is the path's `id`, shared by every caller of the route.
#[idempotent(key = "path:id", scope = "route", lock_ttl = "10s", ttl = "1h")]
async fn capture(body: web::Bytes, runs: web::Data<Runs>) -> HttpResponse {
    let run = runs.add();
    HttpResponse::Ok().insert_header((OUTCOME, "keyed")).body(format!("capture {run}: {} bytes", body.len()))
}

/// A provider's event: the key is the body's `id`, shared by everyone;
/// duplicates wait for the first.
#[idempotent(key = "json:/id", scope = "global", in_flight = "wait", wait = "2s", lock_ttl = "10s", ttl = "1h")]
async fn webhook(body: web::Bytes, runs: web::Data<Runs>) -> HttpResponse {
    let run = runs.add();
    HttpResponse::Ok().insert_header((OUTCOME, "keyed")).insert_header(("x-run", run)).body(body)
}

/// A form, keyed by `X-Key` when it has one; an empty form is refused as
/// retryable (nothing happened).
#[idempotent(header = "X-Key", required = false, scope = "route", lock_ttl = "10s", ttl = "1h")]
async fn form(
    fields: web::Form<Vec<(String, String)>>,
    execution: Option<ExecutionContext>,
    runs: web::Data<Runs>,
) -> HttpResponse {
    let run = runs.add();
    let keyed = execution.is_some();
    if fields.is_empty() {
        let outcome = if keyed { "retryable" } else { "keyless" };
        return HttpResponse::BadRequest().insert_header((OUTCOME, outcome)).body("an empty form").retryable();
    }
    let outcome = if keyed { "keyed" } else { "keyless" };
    HttpResponse::Accepted().insert_header((OUTCOME, outcome)).json(json!({ "run": run, "fields": fields.0 }))
}
