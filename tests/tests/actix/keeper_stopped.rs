//! A lease keeper stopped by a panic on its thread (here a tracing layer
//! that panics, as a faulty log exporter can): the next claim fails closed
//! with 503 `keeper-stopped` and `Retry-After`, and its handler never runs;
//! work that was to finish on the keeper's runtime (a completion retried in
//! the background) runs on the caller's runtime instead, and is not lost.
//! (Replays are refused too while the keeper is stopped: whether a request
//! is one is known only from its claim.)
//!
//! The keeper is one per process, so the scenario runs in a child process
//! of this test binary.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpRequest, HttpResponse, post, web};
use idem_runtime::store::{IdempotencyKey, RecordState, Scope, StorageKey, Store};
use idem_runtime::{Idem, idempotent};
use idem_tests::child::run_in_child;
use idem_tests::counter::Counter;
use idem_tests::faults::FaultyStore;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Panics on every event logged on the keeper's thread.
struct PanicOnTheKeepersThread;

impl<S: tracing::Subscriber> Layer<S> for PanicOnTheKeepersThread {
    fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
        if std::thread::current().name() == Some("idem-lease-keeper") {
            panic!("a log exporter failed");
        }
    }
}

/// Counts its executions; takes the time `x-hold-ms` says.
#[idempotent(scope = "route", lock_ttl = "1s")]
#[post("/pay")]
async fn pay(request: HttpRequest, runs: web::Data<Counter>) -> HttpResponse {
    let run = runs.next();
    let hold = request.headers().get("x-hold-ms").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(hold)).await;
    HttpResponse::Created().body(format!("run {run}"))
}

fn request(key: &str, hold_ms: u64) -> actix_http::Request {
    TestRequest::post()
        .uri("/pay")
        .insert_header(("idempotency-key", key))
        .insert_header(("x-hold-ms", hold_ms.to_string()))
        .to_request()
}

#[test]
fn a_stopped_keeper_fails_claims_closed() {
    run_in_child("keeper_stopped::a_stopped_keeper_fails_claims_closed", scenario);
}

fn scenario() {
    let subscriber = tracing_subscriber::registry().with(PanicOnTheKeepersThread);
    tracing::subscriber::set_global_default(subscriber).expect("the child's only subscriber");
    actix_web::rt::System::new().block_on(async {
        // Renewals fail (so the keeper logs, and its layer panics), and so
        // does the first completion (so that its retry must go somewhere).
        let store = FaultyStore::default()
            .renewals_fail_between(Duration::ZERO, Duration::from_secs(3_600))
            .first_completions_fail(1);
        let runs = web::Data::new(Counter::default());
        let store: Arc<dyn Store> = Arc::new(store);
        let idem = Idem::from_arc(Arc::clone(&store)).store_timeout(Duration::from_millis(100));
        let app = test::init_service(App::new().app_data(idem).app_data(runs.clone()).service(pay)).await;

        // A payment whose lease lapses while it runs: the keeper logs it,
        // and dies of its layer's panic.
        let first = test::call_service(&app, request("before", 2_500)).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        let first = test::read_body(first).await;

        // Claims now fail closed, and nothing runs.
        let refused = test::call_service(&app, request("after", 0)).await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.headers().contains_key("retry-after"), "{:?}", refused.headers());
        let body = test::read_body(refused).await;
        let problem: serde_json::Value = serde_json::from_slice(&body).expect("a problem body");
        assert_eq!(problem["type"], "urn:idem:problem:keeper-stopped", "{problem}");
        assert_eq!(runs.get(), 1, "the refused request never ran");

        // The first payment's completion failed once and was retried on this
        // runtime, the keeper's being gone: its record holds its response.
        let key = StorageKey::new(Scope::Route, None, "POST", "/pay", &IdempotencyKey::parse(b"before").unwrap());
        let mut record = store.get(&key).await.unwrap();
        for _ in 0..40 {
            if matches!(record.as_ref().map(|r| &r.state), Some(RecordState::Completed { .. })) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            record = store.get(&key).await.unwrap();
        }
        match record.map(|r| r.state) {
            Some(RecordState::Completed { response, .. }) => assert_eq!(response.body, first, "the first answer"),
            other => panic!("the completion retried on the caller's runtime landed: {other:?}"),
        }
        assert_eq!(runs.get(), 1);
    });
}
