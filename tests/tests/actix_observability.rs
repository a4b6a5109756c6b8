//! SPEC 7: outcome counters, store latency, and a span that never shows
//! the raw key.

use std::io::Write;
use std::sync::{Arc, Mutex};

use actix_web::test::{self, TestRequest};
use actix_web::{App, web};
use idem_tests::orders::{Calls, memory_idem, routes};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde_json::json;

/// Collects formatted log lines.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn order(key: &str, amount: u32) -> actix_http::Request {
    TestRequest::post()
        .uri("/orders")
        .insert_header(("idempotency-key", key))
        .insert_header(("x-user-id", "alice"))
        .set_json(json!({ "amount": amount }))
        .to_request()
}

#[actix_web::test]
async fn outcomes_are_counted_and_the_key_never_logged() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(move || writer.clone())
        .finish();
    let _tracing = tracing::subscriber::set_default(subscriber);

    let calls = web::Data::new(Calls::default());
    let app = test::init_service(App::new().app_data(memory_idem()).configure(routes(calls.clone()))).await;
    let secret = "secret-key-4f9a";
    for request in [order(secret, 1), order(secret, 1), order(secret, 2), order("bad key", 1)] {
        let _ = test::call_service(&app, request).await;
        tracing::info!("request done");
    }

    let mut outcomes = std::collections::BTreeMap::new();
    let mut claim_latencies = 0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: Vec<_> = key.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
        let label = |name: &str| labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        match (key.key().name(), value) {
            ("idem_requests_total", DebugValue::Counter(n)) => {
                assert_eq!(label("route").as_deref(), Some("/orders"));
                outcomes.insert(label("outcome").unwrap(), n);
            }
            ("idem_store_call_seconds", DebugValue::Histogram(samples)) if label("op").as_deref() == Some("claim") => {
                assert_eq!(label("store").as_deref(), Some("memory"));
                claim_latencies += samples.len();
            }
            _ => {}
        }
    }
    let expected: std::collections::BTreeMap<String, u64> =
        [("executed", 1), ("replayed", 1), ("mismatch", 1), ("rejected", 1)].map(|(k, v)| (k.to_owned(), v)).into();
    assert_eq!(outcomes, expected);
    assert_eq!(claim_latencies, 3, "one claim per request that reached the store");

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("idempotent{"), "the span shows in the logs: {text}");
    for outcome in ["executed", "replayed", "mismatch", "rejected"] {
        assert!(text.contains(&format!("outcome=\"{outcome}\"")), "span outcome {outcome}: {text}");
    }
    assert!(!text.contains(secret), "the raw key leaked into the logs: {text}");
    let short = idem_runtime::IdempotencyKey::parse(secret.as_bytes()).unwrap().short_hash();
    assert!(text.contains(&short), "the key's short hash identifies it: {text}");
}
