//! Under `on_lapse = "hold"`, an execution that won its claim but was
//! frozen before its handler started, past its lease and the grace, while
//! a retry held its record for an operator, never starts: the renewal that
//! confirms its lease again is answered held (so that a holder may still
//! complete), and it reads its record before starting. Had it started, an
//! operator who sees no steps and releases the record would let a retry
//! run beside it.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, post, web};
use idem_runtime::store::{Store, grace};
use idem_runtime::{Idem, idempotent};
use idem_tests::backend::redis_store;
use idem_tests::counter::Counter;
use idem_tests::faults::FaultyStore;
use idem_tests::http::{fresh_key, send};
use idem_tests::server::TestServer;
use idem_tests::start_gate::StartGate;

/// The route's lease.
const LEASE: Duration = Duration::from_secs(2);

/// Renewals of the frozen process fail until then (after its claim): its
/// lease lapses, and a retry finds it lapsed, then past its grace, about
/// two seconds before the renewals land again.
const RENEWALS_FAIL_FOR: Duration = Duration::from_millis(5_500);

/// Counts each start of its body.
#[idempotent(scope = "route", lock_ttl = "2s", ttl = "1h", on_lapse = "hold")]
#[post("/held-start/orders")]
async fn order(started: web::Data<Counter>) -> HttpResponse {
    let n = started.next();
    HttpResponse::Created().body(format!("order {n}"))
}

fn idem(store: impl Store + 'static) -> Idem {
    Idem::new(store).store_timeout(LEASE / 3)
}

#[actix_web::test]
async fn a_holder_frozen_before_its_start_never_starts_on_a_held_record() {
    const TEST: &str = "a_holder_frozen_before_its_start_never_starts_on_a_held_record";
    let Some(retry_store) = redis_store(TEST).await else { return };
    let started = web::Data::new(Counter::default());
    // Another process of the same app, where the retries land.
    let other = TestServer::start(idem(retry_store), {
        let started = started.clone();
        move |cfg| {
            cfg.app_data(started.clone()).service(order);
        }
    });
    let body = Some(r#"{"coffees": 2}"#);
    // The frozen process: one worker, where the first request stops at the
    // gate once its claim is won; its keeper's renewals fail meanwhile. A
    // claim that timed out on a loaded machine (503: nothing claimed that
    // could run) is tried again on a new process, under another key.
    let mut tries = 0;
    let (frozen, gate, key, first) = loop {
        let Some(frozen_store) = redis_store(TEST).await else { return };
        let gate = StartGate::default();
        let faulty = FaultyStore::over(Arc::new(frozen_store)).renewals_fail_between(Duration::ZERO, RENEWALS_FAIL_FOR);
        let frozen = TestServer::with_workers(1, idem(faulty), {
            let (gate, started) = (gate.clone(), started.clone());
            move |cfg| {
                gate.install_here();
                cfg.app_data(started.clone()).service(order);
            }
        });
        let key = fresh_key();
        let mut first = actix_web::rt::spawn({
            let (url, key) = (frozen.at("/held-start/orders"), key.clone());
            async move { send(&url, None, Some(&key), body).await }
        });
        match gate.reached_before(&mut first).await {
            Ok(()) => break (frozen, gate, key, first),
            // 503: the claim timed out on a loaded machine. 201: the gate
            // did not see the execution's span (the tracing harness, not the
            // runtime): nothing was held, the handler ran as a first
            // execution; counted below from after it.
            Err(answer) if matches!(answer.status.as_u16(), 201 | 503) && tries < 3 => {
                tries += 1;
                frozen.stop().await;
            }
            Err(answer) => panic!("the first request was answered before its start: {answer:?}"),
        }
    };
    let claimed = tokio::time::Instant::now();
    let started_before = started.get();
    let retry = async || send(&other.at("/held-start/orders"), None, Some(&key), body).await;

    // Past the lease: the retry finds it lapsed and gives it a grace; past
    // the grace, the next holds the record for an operator.
    tokio::time::sleep(LEASE + Duration::from_millis(150)).await;
    let graced = retry().await;
    assert_eq!((graced.status, graced.retry_after.is_some()), (StatusCode::CONFLICT, true), "{graced:?}");
    tokio::time::sleep(grace(LEASE) + Duration::from_millis(200)).await;
    let held = retry().await.assert_problem(409);
    assert_eq!(held["type"], "urn:idem:problem:execution-held");

    // The frozen process's renewals land again (answered held: the record
    // keeps its token); within a second, its lease is confirmed, and it
    // goes on to its start.
    tokio::time::sleep_until(claimed + RENEWALS_FAIL_FOR + Duration::from_millis(1_500)).await;
    gate.open();
    let first = first.await.expect("the first request's task");
    let problem = first.assert_problem(409);
    assert_eq!(problem["type"], "urn:idem:problem:execution-held", "{problem}");
    assert_eq!(started.get(), started_before, "the handler never started on the held record");
    // Left to the operator: still held, and nothing ran.
    let held = retry().await.assert_problem(409);
    assert_eq!(held["type"], "urn:idem:problem:execution-held");
    assert_eq!(started.get(), started_before);
    frozen.stop().await;
    other.stop().await;
}
