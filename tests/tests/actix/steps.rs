//! Durable steps and held executions (§8, §14) on the memory store, in
//! process: an execution whose lease is lost (its renewals fail while it
//! stalls, as a crashed or frozen process's would) is taken over by a retry,
//! which gets its recorded steps back instead of running them; under
//! `on_lapse = "hold"` the retry finds it held instead, until its holder
//! completes or an operator settles it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::operate::{Expect, Operator, Target, service};
use idem_runtime::store::{ListFilter, StateName, Store};
use idem_runtime::{ExecutionContext, Idem, MarkRetryable, MemoryStore, OnLapse, StepError, idempotent};
use idem_tests::faults::FaultyStore;
use idem_tests::orders::TEST_STORE_TIMEOUT;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde_json::{Value, json};

/// A provider that does not deduplicate: every call is a new charge (or
/// a new parcel).
#[derive(Default)]
struct Provider(AtomicUsize, AtomicUsize);

impl Provider {
    async fn charge(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) as u64 + 1
    }

    fn charges(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    fn ship(&self) -> usize {
        self.1.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn shipped(&self) -> usize {
        self.1.load(Ordering::SeqCst)
    }
}

/// How long a first execution stalls after charging: past its 3 s lease
/// and the grace a retry gives it.
const STALL: Duration = Duration::from_millis(6_000);

/// Charges as the durable step `charge`, then stalls on its first
/// execution (a frozen process: its renewals fail meanwhile).
#[idempotent(scope = "route", lock_ttl = "3s", ttl = "1h")]
#[post("/stepped")]
async fn stepped(execution: ExecutionContext, provider: web::Data<Provider>) -> Result<HttpResponse, StepError> {
    let charge: u64 = execution.step("charge", provider.charge()).await?;
    let shipped: String = execution.step("ship", async { format!("parcel-{charge}") }).await?;
    if execution.attempt() == idem_runtime::Attempt::First {
        tokio::time::sleep(STALL).await;
    }
    Ok(HttpResponse::Created()
        .json(json!({"charge": charge, "shipped": shipped, "attempt": execution.attempt().as_str()})))
}

/// The same handler without a step: what a takeover did before steps.
#[idempotent(scope = "route", lock_ttl = "3s", ttl = "1h")]
#[post("/unstepped")]
async fn unstepped(execution: ExecutionContext, provider: web::Data<Provider>) -> HttpResponse {
    let charge = provider.charge().await;
    if execution.attempt() == idem_runtime::Attempt::First {
        tokio::time::sleep(STALL).await;
    }
    HttpResponse::Created().json(json!({"charge": charge, "attempt": execution.attempt().as_str()}))
}

/// Charges as a step, then waits as long as `gate` says (a holder that is
/// only slow, or one that never comes back).
#[idempotent(scope = "route", lock_ttl = "3s", ttl = "1h", on_lapse = "hold")]
#[post("/held")]
async fn held(
    execution: ExecutionContext,
    provider: web::Data<Provider>,
    query: web::Query<std::collections::HashMap<String, String>>,
) -> Result<HttpResponse, StepError> {
    let charge: u64 = execution.step("charge", provider.charge()).await?;
    if execution.attempt() == idem_runtime::Attempt::First {
        let stall = query.get("stall_ms").and_then(|ms| ms.parse().ok()).unwrap_or(600_000);
        tokio::time::sleep(Duration::from_millis(stall)).await;
    }
    Ok(HttpResponse::Created().json(json!({"charge": charge, "attempt": execution.attempt().as_str()})))
}

/// Charges as a `try_step` whose failure (`x-mode: fail`: the provider
/// was unreachable) is not recorded; `x-mode: retry` answers retryable
/// after the step was recorded (the rest of the work did not happen).
#[idempotent(scope = "route", ttl = "1h")]
#[post("/flaky")]
async fn flaky(
    execution: ExecutionContext,
    provider: web::Data<Provider>,
    req: actix_web::HttpRequest,
) -> Result<HttpResponse, StepError> {
    let mode = req.headers().get("x-mode").map(|v| v.to_str().unwrap_or_default().to_owned()).unwrap_or_default();
    let call = async {
        if mode == "fail" {
            return Err("unreachable");
        }
        Ok(provider.charge().await)
    };
    let charge = match execution.try_step("charge", call).await? {
        Ok(charge) => charge,
        Err(why) => return Ok(HttpResponse::ServiceUnavailable().json(json!({"error": why})).retryable()),
    };
    if mode == "retry" {
        return Ok(HttpResponse::ServiceUnavailable().json(json!({"charge": charge})).retryable());
    }
    Ok(HttpResponse::Created().json(json!({"charge": charge, "attempt": execution.attempt().as_str()})))
}

fn post(path: &str, key: &str) -> actix_http::Request {
    TestRequest::post().uri(path).insert_header(("idempotency-key", key)).to_request()
}

async fn answer(response: actix_web::dev::ServiceResponse) -> (StatusCode, Option<String>, Value) {
    let status = response.status();
    let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, serde_json::from_slice(&test::read_body(response).await).expect("a JSON body"))
}

/// A store whose renewals all fail, in front of `memory`.
fn renewals_fail(memory: &Arc<MemoryStore>) -> FaultyStore {
    let inner: Arc<dyn Store> = memory.clone();
    FaultyStore::over(inner).renewals_fail_between(Duration::ZERO, Duration::from_secs(600))
}

/// Waits for the stalled first execution's lease to lapse and for the grace
/// the first retry gives it: the next claim finds it lapsed for good.
async fn past_the_lease_and_its_grace(send: impl AsyncFn() -> (StatusCode, Option<String>, Value)) {
    tokio::time::sleep(Duration::from_millis(3_400)).await;
    let (status, retry_after, _) = send().await;
    assert_eq!((status, retry_after.is_some()), (StatusCode::CONFLICT, true), "the grace");
    tokio::time::sleep(idem_runtime::store::grace(Duration::from_secs(3)) + Duration::from_millis(200)).await;
}

/// The first execution charges and records the step, then stalls with its
/// lease lost; the takeover gets the recorded charge back and runs only the
/// steps that never finished: one charge, with a provider that does not
/// deduplicate. Without the step (the control route), the takeover charges
/// again.
#[actix_web::test]
async fn a_takeover_gets_recorded_steps_back_and_charges_once() {
    let memory = Arc::new(MemoryStore::new());
    let provider = web::Data::new(Provider::default());
    let idem = Idem::new(renewals_fail(&memory)).store_timeout(TEST_STORE_TIMEOUT);
    let app =
        test::init_service(App::new().app_data(idem).app_data(provider.clone()).service(stepped).service(unstepped))
            .await;
    let first = test::call_service(&app, post("/stepped", "pay-1"));
    let retry = async {
        past_the_lease_and_its_grace(async || answer(test::call_service(&app, post("/stepped", "pay-1")).await).await)
            .await;
        answer(test::call_service(&app, post("/stepped", "pay-1")).await).await
    };
    let (first, (status, _, takeover)) = tokio::join!(first, retry);
    assert_eq!(status, StatusCode::CREATED, "{takeover}");
    assert_eq!(takeover["attempt"], "takeover");
    assert_eq!(takeover["charge"], 1, "the recorded charge, not a new one");
    assert_eq!(takeover["shipped"], "parcel-1", "the second step's recorded result too");
    assert_eq!(provider.charges(), 1, "one charge although the handler ran twice");
    // The first execution finished after it was taken over: its answer went
    // to its client, but the record keeps the takeover's.
    assert_eq!(answer(first).await.2["charge"], 1);
    let replay = test::call_service(&app, post("/stepped", "pay-1")).await;
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(answer(replay).await.2, takeover);

    // The control: the same story without a step charges twice.
    let first = test::call_service(&app, post("/unstepped", "pay-2"));
    let retry = async {
        past_the_lease_and_its_grace(async || {
            answer(test::call_service(&app, post("/unstepped", "pay-2")).await).await
        })
        .await;
        answer(test::call_service(&app, post("/unstepped", "pay-2")).await).await
    };
    let (_, (_, _, takeover)) = tokio::join!(first, retry);
    assert_eq!(takeover["attempt"], "takeover");
    assert_eq!(provider.charges(), 3, "without a step, the takeover charged a second time");
}

/// Under `on_lapse = "hold"` the retry after the lapse finds the execution
/// held: 409 `execution-held` without `Retry-After`, nothing runs; the
/// holder, only slow, completes after all and retries replay its response.
#[actix_web::test]
async fn a_held_execution_is_refused_until_its_slow_holder_completes() {
    let memory = Arc::new(MemoryStore::new());
    let provider = web::Data::new(Provider::default());
    let idem = Idem::new(renewals_fail(&memory)).store_timeout(TEST_STORE_TIMEOUT);
    let app = test::init_service(App::new().app_data(idem).app_data(provider.clone()).service(held)).await;
    let first = test::call_service(&app, post("/held?stall_ms=9000", "pay-3"));
    let retries = async {
        let send = async || answer(test::call_service(&app, post("/held?stall_ms=9000", "pay-3")).await).await;
        past_the_lease_and_its_grace(send).await;
        for _ in 0..3 {
            let (status, retry_after, problem) = send().await;
            assert_eq!((status, retry_after), (StatusCode::CONFLICT, None), "{problem}");
            assert_eq!(problem["type"], "urn:idem:problem:execution-held");
            assert!(problem["detail"].as_str().unwrap().contains("will not run again"), "{problem}");
        }
        assert_eq!(provider.charges(), 1, "nothing ran again");
    };
    let (first, ()) = tokio::join!(first, retries);
    let (status, _, first) = answer(first).await;
    assert_eq!((status, first["attempt"].as_str()), (StatusCode::CREATED, Some("first")));
    // Its completion landed: the held record was still its own.
    let replay = test::call_service(&app, post("/held?stall_ms=9000", "pay-3")).await;
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(answer(replay).await.2, first);
    assert_eq!(provider.charges(), 1);
}

/// A held execution whose holder never comes back is listed by the
/// operator's API, released through the actix service (a second release is
/// refused), and the next retry runs once, getting the recorded charge
/// back; another is resolved, and retries replay the operator's response.
#[actix_web::test]
async fn an_operator_releases_or_resolves_a_held_execution() {
    let memory = Arc::new(MemoryStore::new());
    let provider = web::Data::new(Provider::default());
    let operator = Operator::new(memory.clone());
    let idem = Idem::new(renewals_fail(&memory)).store_timeout(TEST_STORE_TIMEOUT);
    let app = test::init_service(
        App::new()
            .app_data(idem)
            .app_data(provider.clone())
            .service(held)
            .service(service::scope("/ops", operator.clone())),
    )
    .await;
    let abandoned =
        [test::call_service(&app, post("/held", "pay-4")), test::call_service(&app, post("/held", "pay-5"))];
    let ops = async {
        let send = async || answer(test::call_service(&app, post("/held", "pay-4")).await).await;
        past_the_lease_and_its_grace(send).await;
        let send = async || answer(test::call_service(&app, post("/held", "pay-5")).await).await;
        assert_eq!(send().await.0, StatusCode::CONFLICT, "pay-5's grace");
        tokio::time::sleep(idem_runtime::store::grace(Duration::from_secs(3)) + Duration::from_millis(200)).await;
        assert_eq!(
            answer(test::call_service(&app, post("/held", "pay-4")).await).await.2["type"],
            "urn:idem:problem:execution-held"
        );
        assert_eq!(
            answer(test::call_service(&app, post("/held", "pay-5")).await).await.2["type"],
            "urn:idem:problem:execution-held"
        );
        let found = operator.list(&ListFilter::new(10).state(StateName::Held)).await.unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().all(|h| h.record.route.as_deref() == Some("POST /held") && h.record.steps.len() == 1));
        // Which is which: release pay-4 through the service, by its id.
        let listed = test::call_service(&app, TestRequest::get().uri("/ops/records?state=held").to_request()).await;
        let listed: Vec<Value> = serde_json::from_slice(&test::read_body(listed).await).unwrap();
        assert_eq!(listed.len(), 2);
        let pay4 = operator
            .inspect(&Target::Key {
                route: "POST /held".into(),
                scope: idem_runtime::store::Scope::Route,
                subject: None,
                key: "pay-4".into(),
            })
            .await
            .unwrap();
        let release = |id: &str| TestRequest::post().uri(&format!("/ops/records/{id}/release")).to_request();
        let released = test::call_service(&app, release(pay4.id())).await;
        assert_eq!(released.status(), StatusCode::OK);
        let again = test::call_service(&app, release(pay4.id())).await;
        assert_eq!(again.status(), StatusCode::CONFLICT, "a second release is refused");
        let (status, _, run) = answer(test::call_service(&app, post("/held", "pay-4")).await).await;
        assert_eq!((status, run["attempt"].as_str()), (StatusCode::CREATED, Some("after_release")));
        assert_eq!(run["charge"], 1, "the recorded charge, handed back");
        assert_eq!(provider.charges(), 2, "the released execution ran once more, without charging again");
        // pay-5: resolved with the operator's response.
        let pay5 = operator.list(&ListFilter::new(10).state(StateName::Held)).await.unwrap();
        assert_eq!(pay5.len(), 1);
        let response = idem_runtime::store::StoredResponse {
            status: 201,
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            body: br#"{"resolved":"by the operator"}"#.to_vec().into(),
        };
        let target = Target::Id(pay5[0].id().to_owned());
        operator.resolve(&target, response, &Expect::as_inspected(&pay5[0])).await.unwrap();
        let replay = test::call_service(&app, post("/held", "pay-5")).await;
        assert_eq!(
            (replay.status(), replay.headers().get("idempotent-replayed").unwrap().to_str().unwrap()),
            (StatusCode::CREATED, "true")
        );
        assert_eq!(answer(replay).await.2, json!({"resolved": "by the operator"}));
        assert_eq!(provider.charges(), 2);
    };
    // The abandoned holders never finish within the test.
    tokio::select! {
        () = ops => {}
        _ = futures_util::future::join_all(abandoned) => panic!("the abandoned holders finished"),
    }
}

/// A default of `Idem::on_lapse(OnLapse::Hold)` holds on routes that do not say.
#[actix_web::test]
async fn the_idem_default_applies_to_routes_that_do_not_say() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);
    let memory = Arc::new(MemoryStore::new());
    let provider = web::Data::new(Provider::default());
    let idem = Idem::new(renewals_fail(&memory)).store_timeout(TEST_STORE_TIMEOUT).on_lapse(OnLapse::Hold);
    let app = test::init_service(App::new().app_data(idem).app_data(provider.clone()).service(unstepped)).await;
    let first = test::call_service(&app, post("/unstepped", "pay-6"));
    let retry = async {
        past_the_lease_and_its_grace(async || {
            answer(test::call_service(&app, post("/unstepped", "pay-6")).await).await
        })
        .await;
        answer(test::call_service(&app, post("/unstepped", "pay-6")).await).await
    };
    let (_, (status, retry_after, problem)) = tokio::join!(first, retry);
    assert_eq!((status, retry_after), (StatusCode::CONFLICT, None), "{problem}");
    assert_eq!(problem["type"], "urn:idem:problem:execution-held");
    assert_eq!(provider.charges(), 1);
    // Counted as held, and in the gauge of held executions.
    let (mut counted, mut gauge) = (0, None);
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let outcome = key.key().labels().find(|label| label.key() == "outcome").map(|label| label.value().to_owned());
        match (key.key().name(), value) {
            ("idem_requests_total", DebugValue::Counter(n)) if outcome.as_deref() == Some("held") => counted += n,
            (idem_runtime::observability::HELD_METRIC, DebugValue::Gauge(value)) => gauge = Some(value.into_inner()),
            _ => {}
        }
    }
    assert_eq!(counted, 1);
    assert!(gauge.is_some_and(|records| records >= 1.0), "{gauge:?}");
}

/// `try_step` records a result only: a failure (nothing happened) is not
/// recorded, and the next execution calls again. A release keeps what was
/// recorded: an execution that charged and then answered retryable (the
/// rest did not happen) hands its charge to the next one, which does not
/// charge again.
#[actix_web::test]
async fn a_release_keeps_recorded_steps_and_try_step_records_only_results() {
    let provider = web::Data::new(Provider::default());
    let idem = Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT);
    let app = test::init_service(App::new().app_data(idem).app_data(provider.clone()).service(flaky)).await;
    let send = async |mode: &str| {
        let request = TestRequest::post()
            .uri("/flaky")
            .insert_header(("idempotency-key", "pay-7"))
            .insert_header(("x-mode", mode))
            .to_request();
        answer(test::call_service(&app, request).await).await
    };
    let (status, _, body) = send("fail").await;
    assert_eq!((status, body["error"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("unreachable")));
    assert_eq!(provider.charges(), 0);
    let (status, _, body) = send("retry").await;
    assert_eq!((status, body["charge"].as_u64()), (StatusCode::SERVICE_UNAVAILABLE, Some(1)), "charged, then released");
    let (status, _, body) = send("").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!((body["charge"].as_u64(), body["attempt"].as_str()), (Some(1), Some("after_release")));
    assert_eq!(provider.charges(), 1, "the recorded charge was handed back, not made again");
}

/// Charges as a step whose result is too large to record.
#[idempotent(scope = "route", ttl = "1h")]
#[post("/oversized")]
async fn oversized(execution: ExecutionContext, provider: web::Data<Provider>) -> Result<HttpResponse, StepError> {
    let charge = execution.step("charge", async { format!("{:>200}", provider.charge().await) }).await?;
    Ok(HttpResponse::Created().body(charge))
}

/// A step that ran but could not be recorded answers 500 `step-failed`,
/// kept and replayed even when every other 5xx is released: the step's
/// effect happened, and a release would run it again.
#[actix_web::test]
async fn a_step_that_could_not_be_recorded_is_never_released() {
    let provider = web::Data::new(Provider::default());
    let idem = Idem::new(MemoryStore::new())
        .store_timeout(TEST_STORE_TIMEOUT)
        .response_limit(64)
        .server_errors(idem_runtime::ServerErrorPolicy::Release);
    let app = test::init_service(App::new().app_data(idem).app_data(provider.clone()).service(oversized)).await;
    for attempt in 0..3 {
        let response = test::call_service(&app, post("/oversized", "pay-8")).await;
        let replayed = response.headers().contains_key("idempotent-replayed");
        let (status, _, problem) = answer(response).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{problem}");
        if attempt == 0 {
            // (Its replay is the "processed" record: the problem is over the
            // small limit too.)
            assert_eq!(problem["type"], "urn:idem:problem:step-failed");
        }
        assert_eq!(replayed, attempt > 0, "kept, then replayed");
    }
    assert_eq!(provider.charges(), 1, "the step ran once");
}

/// The operator's service refuses a release whose body it cannot read,
/// whatever its content type, rather than release without its fence.
#[actix_web::test]
async fn the_operator_service_refuses_a_body_it_cannot_read() {
    let memory = Arc::new(MemoryStore::new());
    let app = test::init_service(App::new().service(service::scope("/ops", Operator::new(memory.clone())))).await;
    let key = idem_runtime::store::StorageKey::new(
        idem_runtime::store::Scope::Route,
        None,
        "POST",
        "/pay",
        &idem_runtime::store::IdempotencyKey::parse(b"pay-9").unwrap(),
    );
    let fingerprint = idem_runtime::store::Fingerprint::from_bytes([9; 32]);
    let claimed = memory.claim(&key, &fingerprint, Duration::from_secs(60), Duration::from_secs(600)).await.unwrap();
    assert!(matches!(claimed, idem_runtime::store::Claim::Acquired { .. }));
    let stale = "00000000000000000000000000000000";
    for (content_type, body) in [
        ("application/json", format!(r#"{{"expect_tokn": "{stale}"}}"#)),
        ("application/json", "not json".to_owned()),
        ("text/plain", format!(r#"["{stale}"]"#)),
    ] {
        let request = TestRequest::post()
            .uri(&format!("/ops/records/{}/release", key.record_id()))
            .insert_header(("content-type", content_type))
            .set_payload(body.clone())
            .to_request();
        let response = test::call_service(&app, request).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{content_type} {body}");
    }
    let record = memory.get(&key).await.unwrap().expect("the record");
    assert_eq!(record.state_name(), StateName::InFlight, "nothing was released");
    // The fenced body with a stale token is refused as a change, whatever
    // its content type says.
    for content_type in ["application/json", "text/plain"] {
        let request = TestRequest::post()
            .uri(&format!("/ops/records/{}/release", key.record_id()))
            .insert_header(("content-type", content_type))
            .set_payload(format!(r#"{{"expect_token": "{stale}"}}"#))
            .to_request();
        assert_eq!(test::call_service(&app, request).await.status(), StatusCode::CONFLICT, "{content_type}");
    }
    assert_eq!(memory.get(&key).await.unwrap().expect("the record").state_name(), StateName::InFlight);
}

/// Charges, then (on its first execution) stalls for 11.6 s before it
/// ships: a holder frozen past its lease and grace, that wakes after its
/// record was held and settled.
#[idempotent(scope = "route", lock_ttl = "6s", ttl = "1h", on_lapse = "hold")]
#[post("/frozen")]
async fn frozen(execution: ExecutionContext, provider: web::Data<Provider>) -> Result<HttpResponse, StepError> {
    let charge: u64 = execution.step("charge", provider.charge()).await?;
    if execution.attempt() == idem_runtime::Attempt::First {
        tokio::time::sleep(Duration::from_millis(11_600)).await;
    }
    let shipped: usize = execution.step("ship", async { provider.ship() }).await?;
    Ok(HttpResponse::Created().json(json!({"charge": charge, "shipped": shipped})))
}

/// A holder whose lease lapsed and whose record was held, then released by
/// an operator while it was frozen, starts no new step when it wakes (its
/// renewal had found the held record still its own): the record is read
/// first. The operator's release runs the payment once more, which gets the
/// recorded charge back and ships once.
#[actix_web::test]
async fn a_holder_that_wakes_after_its_record_was_held_starts_no_new_step() {
    let memory = Arc::new(MemoryStore::new());
    let provider = web::Data::new(Provider::default());
    let operator = Operator::new(memory.clone());
    let inner: Arc<dyn Store> = memory.clone();
    let store = FaultyStore::over(inner).renewals_fail_between(Duration::ZERO, Duration::from_millis(10_000));
    let idem = Idem::new(store).store_timeout(TEST_STORE_TIMEOUT);
    let app = test::init_service(App::new().app_data(idem).app_data(provider.clone()).service(frozen)).await;
    let first = test::call_service(&app, post("/frozen", "pay-10"));
    let operate = async {
        let send = async || answer(test::call_service(&app, post("/frozen", "pay-10")).await).await;
        tokio::time::sleep(Duration::from_millis(6_400)).await;
        assert_eq!(send().await.0, StatusCode::CONFLICT, "the grace");
        tokio::time::sleep(idem_runtime::store::grace(Duration::from_secs(6)) + Duration::from_millis(200)).await;
        assert_eq!(send().await.2["type"], "urn:idem:problem:execution-held");
        // Renewals come back at 10 s and find the held record their own.
        tokio::time::sleep(Duration::from_millis(11_200).saturating_sub(Duration::from_millis(9_600))).await;
        let listed = operator.list(&ListFilter::new(10).state(StateName::Held)).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].record.steps.len(), 1, "charged, not shipped");
        operator
            .release(&Target::Id(listed[0].id().to_owned()), &Expect::as_inspected(&listed[0]), false)
            .await
            .unwrap();
    };
    let (first, ()) = tokio::join!(first, operate);
    let (status, _, problem) = answer(first).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(provider.shipped(), 0, "the woken holder did not ship");
    let (status, _, run) = answer(test::call_service(&app, post("/frozen", "pay-10")).await).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!((run["charge"].as_u64(), run["shipped"].as_u64()), (Some(1), Some(1)));
    assert_eq!((provider.charges(), provider.shipped()), (1, 1), "one charge, one parcel");
}
