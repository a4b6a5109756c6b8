//! The engine as a tower layer on axum routes configured without the
//! attribute: the same answers as `#[idempotent]`, but for the extractors'
//! refusals, which a layer cannot run apart from its service.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing;
use idem_runtime::ExecutionContext;
use idem_runtime::axum::{IdempotentLayer, idempotent};
use idem_runtime::store::Scope;
use idem_tests::conformance::cases::post;
use idem_tests::conformance::{Calls, Running, idem};
use idem_tests::http::fresh_key;
use serde_json::{Value, json};

async fn charge(State(calls): State<Arc<Calls>>, axum::Json(body): axum::Json<Value>) -> axum::Json<Value> {
    let call = calls.hit("charge");
    tokio::time::sleep(Duration::from_millis(body["delay_ms"].as_u64().unwrap_or(0))).await;
    axum::Json(json!({"call": call}))
}

async fn keyed(State(calls): State<Arc<Calls>>, execution: ExecutionContext) -> axum::Json<Value> {
    axum::Json(json!({"call": calls.hit("keyed"), "derived": execution.derived_key("charge")}))
}

async fn transactional(State(calls): State<Arc<Calls>>, _tx: idem_runtime::Tx) -> axum::Json<Value> {
    axum::Json(json!({"call": calls.hit("transactional")}))
}

#[idempotent(scope = "route")]
async fn annotated(State(calls): State<Arc<Calls>>) -> axum::Json<Value> {
    axum::Json(json!({"call": calls.hit("annotated")}))
}

/// Serves `/charges` under the layer, and `/v1/charges` under a nested
/// router's layer; `/keyed` (the execution context), `/transactional` (a
/// `Tx`) and `/annotated` (a handler under the attribute too) under the
/// layer.
async fn start() -> Running {
    let calls = Arc::<Calls>::default();
    let layer = IdempotentLayer::builder().scope(Scope::Route).ttl(Duration::from_secs(600)).build().expect("valid");
    let lines = IdempotentLayer::builder()
        .scope(Scope::Route)
        .key_from_parts(["path:order_id", "json:/line_id"])
        .fingerprint_exclude(["/attempt"])
        .build()
        .expect("valid");
    let invoices = IdempotentLayer::builder()
        .scope(Scope::Global)
        .key_with(idem_tests::conformance::business::invoice_key)
        .build()
        .expect("valid");
    let nested = Router::new().route("/charges", routing::post(charge)).layer(IdempotentLayer::new());
    let app = Router::new()
        .route("/charges", routing::post(charge).layer(layer))
        .route("/keyed", routing::post(keyed).layer(layer))
        .route("/transactional", routing::post(transactional).layer(layer))
        .route("/annotated", routing::post(annotated).layer(layer))
        .route("/lines/{order_id}", routing::post(charge).layer(lines))
        .route("/invoices", routing::post(charge).layer(invoices))
        .nest("/v1", nested)
        .with_state(Arc::clone(&calls))
        .layer(idem().layer());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    Running::new(url, calls, move || async move {
        server.abort();
        idem_runtime::Drained { still_running: 0, waited: Duration::ZERO }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_through_the_layer_is_replayed_and_another_body_refused() {
    let app = start().await;
    for path in ["/charges", "/v1/charges"] {
        let request = post(path, &fresh_key(), json!({"cents": 500}));
        let first = request.to(&app).await;
        assert_eq!((first.status, first.replayed()), (200, false), "{first:?}");
        let again = request.to(&app).await;
        assert!(again.replayed(), "{again:?}");
        assert_eq!(again.body, first.body);
        let key = request.key.clone().unwrap();
        assert_eq!(post(path, &key, json!({"cents": 900})).to(&app).await.problem(422), "key-reused");
        assert_eq!(request.clone().keyless().to(&app).await.problem(400), "missing-key");
    }
    assert_eq!(app.calls.count("charge"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_in_flight_through_the_layer_gets_409() {
    let app = start().await;
    let request = post("/charges", &fresh_key(), json!({"delay_ms": 800}));
    let (first, duplicate) = tokio::join!(request.to(&app), async {
        while app.calls.count("charge") == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        request.to(&app).await
    });
    assert_eq!(first.status, 200);
    assert_eq!(duplicate.problem(409), "in-flight");
    assert_eq!(app.calls.count("charge"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_the_service_is_kept_as_its_answer() {
    let app = start().await;
    let key = fresh_key();
    let refused = post("/charges", &key, json!({})).raw("{not json").to(&app).await;
    assert_eq!(refused.status, 400, "the service's own refusal: {refused:?}");
    let again = post("/charges", &key, json!({})).raw("{not json").to(&app).await;
    assert!(again.replayed(), "kept for its key, as any 4xx: {again:?}");
    assert_eq!(app.calls.count("charge"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_execution_context_under_the_layer_is_its_claims() {
    let app = start().await;
    let request = post("/keyed", &fresh_key(), json!({}));
    let first = request.to(&app).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.json()["derived"].as_str().map(str::len), Some(64));
    let again = request.to(&app).await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(again.body, first.body);
    assert_ne!(post("/keyed", &fresh_key(), json!({})).to(&app).await.json()["derived"], first.json()["derived"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_layer_cannot_serve_is_refused_and_kept_nowhere() {
    let app = start().await;
    // A transaction cannot be lent to a service whose extractors run after
    // the claim; a handler under the attribute too would claim twice.
    for path in ["/transactional", "/annotated"] {
        let request = post(path, &fresh_key(), json!({}));
        assert_eq!(request.to(&app).await.problem(500), "not-configured", "{path}");
        let again = request.to(&app).await;
        assert!(!again.replayed(), "released, not kept for the key: {again:?}");
        assert_eq!(again.problem(500), "not-configured");
    }
    assert_eq!((app.calls.count("transactional"), app.calls.count("annotated")), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_takes_composite_and_computed_keys_and_exclusions() {
    let app = start().await;
    let order = fresh_key();
    let line = |line: &str, attempt: u64| {
        post(&format!("/lines/{order}"), "", json!({"line_id": line, "attempt": attempt})).keyless()
    };
    assert_eq!(line("l1", 1).to(&app).await.status, 200);
    assert!(line("l1", 2).to(&app).await.replayed(), "the attempt is excluded");
    assert!(!line("l2", 1).to(&app).await.replayed(), "another line");
    let number = fresh_key();
    let invoice =
        |tenant: &str| post("/invoices", "", json!({"number": number})).keyless().header("x-tenant-id", tenant);
    assert_eq!(invoice("t1").to(&app).await.status, 200);
    assert!(invoice("t1").by("u2").to(&app).await.replayed());
    assert!(!invoice("t2").to(&app).await.replayed());
    let unkeyed = post("/invoices", "", json!({"number": number})).keyless().to(&app).await;
    assert_eq!(unkeyed.problem(400), "missing-key");
    assert_eq!(app.calls.count("charge"), 4);
}
