//! §7 of the behaviour contract: outcome counters, store latency, and a span that never shows
//! the raw key.
//!
//! This module shares its test binary with the other actix tests, which
//! reach the same metrics and tracing callsites on other threads at the same
//! time. The metrics recorder is local to the test's thread (an actix test
//! system runs every task of the test on it), so other tests' counts never
//! reach it. Tracing needs more care: see [`Quiet`].

use std::sync::Once;

use actix_web::test::{self, TestRequest};
use actix_web::{App, web};
use idem_tests::logs::Logs;
use idem_tests::orders::{Calls, memory_idem, routes};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde_json::json;

/// A process-wide subscriber that records nothing but keeps every callsite
/// asking whether it is enabled.
///
/// tracing caches each callsite's interest for the whole process, computed
/// on the thread that reaches the callsite first, from the dispatchers
/// registered then. With this test's scoped subscriber as the only one, a
/// sibling test reaching a runtime callsite on a thread without a subscriber
/// would cache "never" and silence that callsite for this test too. With
/// `Quiet` registered as well, every callsite is cached "sometimes", and each
/// event asks the subscriber of the thread it is on.
struct Quiet;

impl tracing::Subscriber for Quiet {
    fn register_callsite(&self, _: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::OFF)
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Installs [`Quiet`] as the global default, once per process.
fn install_quiet_global_default() {
    static QUIET: Once = Once::new();
    QUIET.call_once(|| {
        tracing::subscriber::set_global_default(Quiet).expect("no other global subscriber in this test binary");
    });
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
    install_quiet_global_default();
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
    let mut gauges = std::collections::BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: Vec<_> = key.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
        let label = |name: &str| labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        match (key.key().name(), value) {
            ("idem_requests_total", DebugValue::Counter(n)) => {
                assert_eq!(label("route").as_deref(), Some("/orders"));
                outcomes.insert(label("outcome").unwrap(), n);
            }
            (name, DebugValue::Gauge(value)) if name.starts_with("idem_memory_store_") => {
                gauges.insert(name.to_owned(), value.into_inner());
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
    // The memory store's size: one record (the replay and the refusals add none).
    assert_eq!(gauges.get("idem_memory_store_records"), Some(&1.0), "{gauges:?}");
    assert!(gauges.get("idem_memory_store_bytes").is_some_and(|&bytes| bytes > 0.0), "{gauges:?}");
    let max = idem_runtime::MemoryStore::DEFAULT_MAX_BYTES as f64;
    assert_eq!(gauges.get("idem_memory_store_max_bytes"), Some(&max), "{gauges:?}");
    // One claim per request that reached the store, and one more for the
    // mismatch: claimed again with the fingerprint the request has without
    // its host (a record an earlier version kept would match it).
    assert_eq!(claim_latencies, 4, "one claim per request that reached the store, two for the mismatch");

    let text = logs.text();
    assert!(text.contains("idempotent{"), "the span shows in the logs: {text}");
    for outcome in ["executed", "replayed", "mismatch", "rejected"] {
        assert!(text.contains(&format!("outcome=\"{outcome}\"")), "span outcome {outcome}: {text}");
    }
    assert!(!text.contains(secret), "the raw key leaked into the logs: {text}");
    let short = idem_runtime::store::IdempotencyKey::parse(secret.as_bytes()).unwrap().short_hash();
    assert!(text.contains(&short), "the key's short hash identifies it: {text}");
    // The record's id, as the operator's tool finds it.
    let id = text.split("record=").nth(1).map(|rest| rest.trim_start_matches('"'));
    let id = id.map(|rest| rest.chars().take_while(char::is_ascii_hexdigit).count());
    assert_eq!(id, Some(32), "the span names the record by its id: {text}");
}
