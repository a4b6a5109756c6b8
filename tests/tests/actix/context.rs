//! The execution context (§8): which execution of a key a handler is, and
//! derived keys that keep a downstream effect single when the handler runs
//! again; and the transaction extractor refused on a store that is not
//! Postgres.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::{Attempt, ExecutionContext, Idem, MarkRetryable, MemoryStore, idempotent};
use idem_tests::counter::Counter;
use idem_tests::faults::FaultyStore;
use idem_tests::orders::TEST_STORE_TIMEOUT;
use serde_json::{Value, json};

/// A payment provider that deduplicates charges by idempotency key, as
/// Stripe does: the same key returns the first charge.
#[derive(Default)]
struct Provider {
    charges: Mutex<HashMap<String, usize>>,
}

impl Provider {
    /// The charge for `key`: a new one the first time, the same one after.
    fn charge(&self, key: &str) -> usize {
        let mut charges = self.charges.lock().unwrap();
        let next = charges.len() + 1;
        *charges.entry(key.to_owned()).or_insert(next)
    }

    fn count(&self) -> usize {
        self.charges.lock().unwrap().len()
    }
}

/// Charges through the provider with a derived key. The first execution
/// then stalls past its 3 s lease and the grace a retry gives it (a crash,
/// a pause: the keeper cannot renew it); a later one answers at once. `?retry` marks a first
/// execution's answer retryable instead.
#[idempotent(scope = "route", lock_ttl = "3s", ttl = "1h")]
#[post("/charge")]
async fn charge(
    execution: ExecutionContext,
    provider: web::Data<Provider>,
    query: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    let charge = provider.charge(&execution.derived_key("charge"));
    let body = json!({
        "charge": charge,
        "attempt": execution.attempt().as_str(),
        "derived": execution.derived_key("charge"),
        "other_label": execution.derived_key("refund"),
        "key_hash": execution.key_hash(),
        "token": execution.token().to_hex(),
    });
    if execution.attempt() == Attempt::First {
        if query.contains_key("retry") {
            return HttpResponse::ServiceUnavailable().json(body).retryable();
        }
        if query.contains_key("stall") {
            tokio::time::sleep(Duration::from_millis(6_000)).await;
        }
    }
    HttpResponse::Created().json(body)
}

fn post_charge(key: &str, query: &str) -> actix_http::Request {
    TestRequest::post().uri(&format!("/charge?{query}")).insert_header(("idempotency-key", key)).to_request()
}

async fn json_of(response: actix_web::dev::ServiceResponse) -> (StatusCode, Value) {
    let status = response.status();
    (status, serde_json::from_slice(&test::read_body(response).await).expect("a JSON body"))
}

/// A lease lost mid-execution on the memory store (every renewal fails, so
/// the lease lapses under the stalled first execution) lets a retry take the
/// key over and run the handler again; the derived key it passes to the
/// provider is the same, so the provider charges once.
#[actix_web::test]
async fn a_takeover_after_a_lost_lease_charges_once_through_the_derived_key() {
    let store = FaultyStore::default().renewals_fail_between(Duration::ZERO, Duration::from_secs(60));
    let provider = web::Data::new(Provider::default());
    let app = test::init_service(
        App::new()
            .app_data(Idem::new(store).store_timeout(TEST_STORE_TIMEOUT))
            .app_data(provider.clone())
            .service(charge),
    )
    .await;
    let first = test::call_service(&app, post_charge("k", "stall"));
    let takeover = async {
        // The first retry after the lapse gives the silent holder its grace.
        tokio::time::sleep(Duration::from_millis(3_400)).await;
        let graced = test::call_service(&app, post_charge("k", "stall")).await;
        assert_eq!(graced.status(), StatusCode::CONFLICT);
        tokio::time::sleep(idem_runtime::store::grace(Duration::from_secs(3)) + Duration::from_millis(100)).await;
        json_of(test::call_service(&app, post_charge("k", "stall")).await).await
    };
    let (first, (status, takeover)) = tokio::join!(first, takeover);
    let (_, first) = json_of(first).await;
    assert_eq!(status, StatusCode::CREATED, "{takeover}");
    assert_eq!((first["attempt"].as_str(), takeover["attempt"].as_str()), (Some("first"), Some("takeover")));
    assert_eq!(takeover["derived"], first["derived"], "the same derived key in both executions");
    assert_ne!(takeover["token"], first["token"], "each execution has its own fencing token");
    assert_eq!(takeover["key_hash"], first["key_hash"]);
    assert_eq!((first["charge"].as_u64(), takeover["charge"].as_u64()), (Some(1), Some(1)));
    assert_eq!(provider.count(), 1, "the provider charged once although the handler ran twice");
    // The takeover's answer is the one kept.
    let replay = test::call_service(&app, post_charge("k", "stall")).await;
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(json_of(replay).await.1, takeover);
}

#[actix_web::test]
async fn derived_keys_are_stable_per_key_and_distinct_per_key_and_label() {
    let provider = web::Data::new(Provider::default());
    let idem = Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT);
    let app = test::init_service(App::new().app_data(idem).app_data(provider.clone()).service(charge)).await;
    // A retryable first answer releases the key; the same request runs again.
    let (status, released) = json_of(test::call_service(&app, post_charge("a", "retry")).await).await;
    assert_eq!((status, released["attempt"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("first")));
    let (status, again) = json_of(test::call_service(&app, post_charge("a", "retry")).await).await;
    assert_eq!((status, again["attempt"].as_str()), (StatusCode::CREATED, Some("after_release")));
    assert_eq!(again["derived"], released["derived"]);
    assert_eq!(again["charge"], released["charge"], "one charge for the key");
    // Another key: other derived keys; another label: another key.
    let (_, other) = json_of(test::call_service(&app, post_charge("b", "")).await).await;
    assert_ne!(other["derived"], again["derived"]);
    assert_ne!(again["derived"], again["other_label"]);
    let derived = again["derived"].as_str().unwrap();
    assert!(derived.len() == 64 && derived.bytes().all(|b| b.is_ascii_hexdigit()), "{derived}");
    assert_eq!(provider.count(), 2);
}

/// Takes the context without `#[idempotent]`.
#[post("/plain")]
async fn plain(execution: ExecutionContext) -> HttpResponse {
    HttpResponse::Ok().body(format!("{execution:?}"))
}

/// Takes the context where a key is optional.
#[idempotent(scope = "route", required = false)]
#[post("/optional")]
async fn optional(execution: Option<ExecutionContext>, ran: web::Data<Counter>) -> HttpResponse {
    ran.next();
    HttpResponse::Ok().body(execution.map_or("no key".to_owned(), |e| e.attempt().as_str().to_owned()))
}

/// Takes the context, a key being optional.
#[idempotent(scope = "route", required = false)]
#[post("/required-context")]
async fn required_context(execution: ExecutionContext, ran: web::Data<Counter>) -> HttpResponse {
    ran.next();
    HttpResponse::Ok().body(execution.key_hash().to_owned())
}

/// Takes the context twice (as a custom extractor wrapping it would).
#[idempotent(scope = "route")]
#[post("/twice")]
async fn twice(first: ExecutionContext, second: ExecutionContext) -> HttpResponse {
    HttpResponse::Ok().body(format!("{} {}", first.derived_key("x"), second.derived_key("x")))
}

#[actix_web::test]
async fn every_extraction_of_the_context_is_filled() {
    let app = test::init_service(App::new().app_data(Idem::new(MemoryStore::new())).service(twice)).await;
    let request = TestRequest::post().uri("/twice").insert_header(("idempotency-key", "k")).to_request();
    let response = test::call_service(&app, request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body = String::from_utf8(test::read_body(response).await.to_vec()).unwrap();
    let (first, second) = body.split_once(' ').unwrap();
    assert_eq!((first.len(), first), (64, second));
}

#[actix_web::test]
async fn the_context_exists_only_under_a_claim() {
    let ran = web::Data::new(Counter::default());
    let app = test::init_service(
        App::new()
            .app_data(Idem::new(MemoryStore::new()))
            .app_data(ran.clone())
            .service(plain)
            .service(optional)
            .service(required_context),
    )
    .await;
    let problem = |response: actix_web::dev::ServiceResponse| async move {
        let (status, body) = json_of(response).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert_eq!(body["type"], "urn:idem:problem:not-configured", "{body}");
        body["detail"].as_str().unwrap().to_owned()
    };
    let detail = problem(test::call_service(&app, TestRequest::post().uri("/plain").to_request()).await).await;
    assert!(detail.contains("#[idempotent]"), "{detail}");
    let keyless = TestRequest::post().uri("/required-context").to_request();
    let detail = problem(test::call_service(&app, keyless).await).await;
    assert!(detail.contains("Option<ExecutionContext>"), "{detail}");
    assert_eq!(ran.get(), 0, "the handler never ran without its context");

    let keyless = test::call_service(&app, TestRequest::post().uri("/optional").to_request()).await;
    assert_eq!(test::read_body(keyless).await, "no key");
    let keyed = TestRequest::post().uri("/optional").insert_header(("idempotency-key", "k")).to_request();
    assert_eq!(test::read_body(test::call_service(&app, keyed).await).await, "first");
}

#[cfg(feature = "postgres")]
mod transaction {
    use super::*;

    /// Takes a transaction, which only a PostgresStore can give.
    #[idempotent(scope = "route")]
    #[post("/tx")]
    async fn write(_tx: idem_runtime::Tx, ran: web::Data<Counter>) -> HttpResponse {
        ran.next();
        HttpResponse::Created().finish()
    }

    #[actix_web::test]
    async fn a_transaction_on_another_store_is_a_500_naming_it_and_never_runs() {
        let ran = web::Data::new(Counter::default());
        let app =
            test::init_service(App::new().app_data(Idem::new(MemoryStore::new())).app_data(ran.clone()).service(write))
                .await;
        for _ in 0..2 {
            let request = TestRequest::post().uri("/tx").insert_header(("idempotency-key", "k")).to_request();
            let (status, body) = json_of(test::call_service(&app, request).await).await;
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
            assert_eq!(body["type"], "urn:idem:problem:not-configured");
            let detail = body["detail"].as_str().unwrap();
            assert!(detail.contains("PostgresStore") && detail.contains("`memory`"), "{detail}");
        }
        assert_eq!(ran.get(), 0, "never a silent run without a transaction");
    }
}
