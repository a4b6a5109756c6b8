//! Each request is counted once, by what became of it, even when its
//! completion ends in the background (on the lease keeper's runtime): a
//! response the store refused for good, replaced by the small "processed"
//! record whose answer was then lost, is counted `executed` (the record
//! is there), never `lease_lost`.
//!
//! The count happens on the keeper's thread, so the scenario runs in a
//! child process of this test binary, with a process-wide recorder.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post};
use idem_runtime::observability::REQUESTS_METRIC;
use idem_runtime::store::{IdempotencyKey, RecordState, Scope, StorageKey, Store};
use idem_runtime::{Idem, idempotent};
use idem_tests::child::run_in_child;
use idem_tests::faults::FaultyStore;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

#[idempotent(scope = "route")]
#[post("/large")]
async fn large() -> HttpResponse {
    HttpResponse::Created().body(vec![b'x'; 4_096])
}

/// The requests counted by outcome since the last call, added to `counts`
/// (a snapshot hands each count over once).
fn count(snapshotter: &Snapshotter, counts: &mut BTreeMap<String, u64>) {
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let outcome = key.key().labels().find(|l| l.key() == "outcome").map(|l| l.value().to_owned());
        if let (REQUESTS_METRIC, Some(outcome), DebugValue::Counter(n)) = (key.key().name(), outcome, value) {
            *counts.entry(outcome).or_default() += n;
        }
    }
}

#[test]
fn a_refused_response_whose_replacement_was_stored_is_counted_executed() {
    run_in_child("completion_outcomes::a_refused_response_whose_replacement_was_stored_is_counted_executed", || {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("the child's only recorder");
        actix_web::rt::System::new().block_on(async {
            let store: Arc<dyn Store> =
                Arc::new(FaultyStore::default().refuses_bodies_over(1_024).first_completion_answers_lost(1));
            let idem = Idem::from_arc(Arc::clone(&store)).store_timeout(Duration::from_millis(200));
            let app = test::init_service(App::new().app_data(idem).service(large)).await;
            let request = TestRequest::post().uri("/large").insert_header(("idempotency-key", "k")).to_request();
            let response = test::call_service(&app, request).await;
            assert_eq!(response.status(), StatusCode::CREATED, "the client gets the response");
            let key = StorageKey::new(Scope::Route, None, "POST", "/large", &IdempotencyKey::parse(b"k").unwrap());
            let mut counts = BTreeMap::new();
            for _ in 0..100 {
                count(&snapshotter, &mut counts);
                if !counts.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let record = store.get(&key).await.unwrap().expect("the record");
            assert!(matches!(record.state, RecordState::Completed { .. }), "the processed record: {record:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
            count(&snapshotter, &mut counts);
            let expected = BTreeMap::from([("executed".to_owned(), 1)]);
            assert_eq!(counts, expected, "counted once, as executed, never as a lost lease");
        });
    });
}
