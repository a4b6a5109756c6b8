//! Black-box checks of the order service's HTTP contract, run against the
//! real binary for each store.

use std::time::Duration;

use awc::http::StatusCode;
use serde_json::{Value, json};

use crate::http::{Reply, fresh_key, send, try_send};
use crate::service::OrderService;

/// `GET /stats` as (orders_created, charges).
pub async fn stats(service: &OrderService) -> (u64, u64) {
    let reply = send(&service.at("/stats"), None, None, None).await;
    assert_eq!(reply.status, StatusCode::OK);
    let body = reply.json();
    (body["orders_created"].as_u64().unwrap(), body["charges"].as_u64().unwrap())
}

const ORDER: &str = r#"{"customer_id":"cus_1","amount_cents":1500,"currency":"EUR"}"#;

/// Creates an order for `user`, returning its JSON.
pub async fn create_order(service: &OrderService, user: &str) -> Value {
    let reply = send(&service.at("/orders"), Some(user), Some(&fresh_key()), Some(ORDER)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    reply.json()
}

/// The whole HTTP contract, on a service whose backend is empty and whose
/// charge delay is at least 300 ms.
pub async fn contract(service: &OrderService) {
    let at = |path: &str| service.at(path);
    assert_eq!(send(&at("/healthz"), None, None, None).await.status, StatusCode::OK);
    assert_eq!(stats(service).await, (0, 0));

    // Create, replay, mismatch.
    let key = fresh_key();
    let created = send(&at("/orders"), Some("alice"), Some(&key), Some(ORDER)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{created:?}");
    let order = created.json();
    let id = order["id"].as_str().expect("id").to_owned();
    assert_eq!(created.location.as_deref(), Some(format!("/orders/{id}").as_str()));
    assert_eq!(order["customer_id"], "cus_1");
    assert_eq!(order["amount_cents"], 1500);
    assert_eq!(order["currency"], "EUR");
    assert_eq!(order["status"], "created");
    assert!(order["created_at"].is_string());
    let reordered = r#"{ "currency": "EUR", "amount_cents": 1500, "customer_id": "cus_1" }"#;
    let replay = send(&at("/orders"), Some("alice"), Some(&key), Some(reordered)).await;
    assert_eq!((replay.status, replay.replayed.as_deref()), (StatusCode::CREATED, Some("true")));
    assert_eq!(replay.body, created.body, "byte for byte");
    assert_eq!(replay.location, created.location);
    let other = r#"{"customer_id":"cus_1","amount_cents":999,"currency":"EUR"}"#;
    send(&at("/orders"), Some("alice"), Some(&key), Some(other)).await.assert_problem(422);

    // Refusals.
    send(&at("/orders"), Some("alice"), None, Some(ORDER)).await.assert_problem(400);
    send(&at("/orders"), None, Some(&fresh_key()), Some(ORDER)).await.assert_problem(401);
    send(&at("/orders"), None, None, None).await.assert_problem(401);
    send(&at(&format!("/orders/{id}")), None, None, None).await.assert_problem(401);
    for invalid in [
        r#"{"customer_id":"cus_1","amount_cents":0,"currency":"EUR"}"#,
        r#"{"customer_id":"cus_1","amount_cents":-5,"currency":"EUR"}"#,
        r#"{"customer_id":"cus_1","amount_cents":1.5,"currency":"EUR"}"#,
        r#"{"customer_id":"cus_1","amount_cents":100,"currency":"eur"}"#,
        r#"{"customer_id":"cus_1","amount_cents":100,"currency":"EURO"}"#,
        r#"{"customer_id":"","amount_cents":100,"currency":"EUR"}"#,
        r#"{"amount_cents":100,"currency":"EUR"}"#,
        r#"not json"#,
    ] {
        send(&at("/orders"), Some("alice"), Some(&fresh_key()), Some(invalid)).await.assert_problem(400);
    }
    let huge = format!(r#"{{"customer_id":"{}","amount_cents":1,"currency":"EUR"}}"#, "x".repeat(1100 << 10));
    send(&at("/orders"), Some("alice"), Some(&fresh_key()), Some(&huge)).await.assert_problem(413);

    // Reads, per owner.
    let fetched = send(&at(&format!("/orders/{id}")), Some("alice"), None, None).await;
    assert_eq!((fetched.status, fetched.json()), (StatusCode::OK, order.clone()));
    assert_eq!(send(&at(&format!("/orders/{id}")), Some("bob"), None, None).await.status, StatusCode::NOT_FOUND);
    assert_eq!(send(&at("/orders/nope"), Some("alice"), None, None).await.status, StatusCode::NOT_FOUND);
    assert_eq!(send(&at("/orders"), Some("alice"), None, None).await.json(), json!([order]));
    assert_eq!(send(&at("/orders"), Some("bob"), None, None).await.json(), json!([]));

    // Payments: one charge, replayed; a concurrent duplicate gets 409.
    let pay_url = at(&format!("/orders/{id}/payments"));
    let pay_key = fresh_key();
    let (paid, duplicate) =
        tokio::join!(send(&pay_url, Some("alice"), Some(&pay_key), Some(r#"{"amount_cents":1500}"#)), async {
            actix_web::rt::time::sleep(Duration::from_millis(100)).await;
            send(&pay_url, Some("alice"), Some(&pay_key), Some(r#"{"amount_cents":1500}"#)).await
        });
    assert_eq!(paid.status, StatusCode::CREATED, "{paid:?}");
    let payment = paid.json();
    assert_eq!((payment["order_id"].as_str(), payment["amount_cents"].as_i64()), (Some(id.as_str()), Some(1500)));
    assert_eq!(payment["status"], "captured");
    assert!(payment["id"].is_string());
    duplicate.assert_problem(409);
    assert!(duplicate.retry_after.is_some(), "{duplicate:?}");
    let replay = send(&pay_url, Some("alice"), Some(&pay_key), Some(r#"{"amount_cents":1500}"#)).await;
    assert_eq!((replay.replayed.as_deref(), &replay.body), (Some("true"), &paid.body));
    let bob_pays = send(&pay_url, Some("bob"), Some(&fresh_key()), Some(r#"{"amount_cents":1}"#)).await;
    assert_eq!(bob_pays.status, StatusCode::NOT_FOUND, "another user's order");
    let unknown =
        send(&at("/orders/nope/payments"), Some("alice"), Some(&fresh_key()), Some(r#"{"amount_cents":1}"#)).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    send(&pay_url, Some("alice"), Some(&fresh_key()), Some(r#"{"amount_cents":0}"#)).await.assert_problem(400);

    assert_eq!(stats(service).await, (1, 1));
    let metrics = send(&at("/metrics"), None, None, None).await;
    assert_eq!(metrics.status, StatusCode::OK);
    let text = String::from_utf8_lossy(&metrics.body);
    for outcome in ["executed", "replayed", "mismatch", "in_flight", "rejected"] {
        assert!(text.contains(&format!("outcome=\"{outcome}\"")), "{outcome} missing from {text}");
    }
}

/// 200 concurrent requests with one key to `url`, spread over `services`;
/// every answer is the same 201 body or a 409 with `Retry-After`.
pub async fn storm(services: &[&OrderService], path: &str, body: &'static str) -> Reply {
    let key = fresh_key();
    let tasks = (0..200).map(|i| {
        let url = services[i % services.len()].at(path);
        let key = key.clone();
        actix_web::rt::spawn(async move { send(&url, Some("alice"), Some(&key), Some(body)).await })
    });
    let replies: Vec<Reply> = futures_util::future::join_all(tasks).await.into_iter().map(Result::unwrap).collect();
    let created: Vec<&Reply> = replies.iter().filter(|r| r.status == StatusCode::CREATED).collect();
    assert!(!created.is_empty(), "no request succeeded: {:?}", replies[0]);
    for reply in &replies {
        if reply.status == StatusCode::CONFLICT {
            assert!(reply.retry_after.is_some(), "{reply:?}");
        } else {
            assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
            assert_eq!(reply.body, created[0].body, "every 201 is the identical body");
        }
    }
    created[0].clone()
}

/// Storms order creation and then payment across `services`: one order and
/// one charge in all.
pub async fn storms(services: &[&OrderService]) {
    let order = storm(services, "/orders", ORDER).await.json();
    assert_eq!(stats(services[0]).await, (1, 0), "one order for 200 requests");
    let path = format!("/orders/{}/payments", order["id"].as_str().unwrap());
    let payment = storm(services, &path, r#"{"amount_cents":1500}"#).await;
    assert_eq!(payment.json()["status"], "captured");
    for service in services {
        assert_eq!(stats(service).await, (1, 1), "one charge for 200 requests");
    }
}

/// Kills the service with SIGKILL while a payment waits on the provider,
/// restarts it, and retries with the same key: 409 with `Retry-After` until
/// the 30 s lease runs out, then one execution; one charge in all. Another
/// body with that key gets 422 throughout, the lapsed lease included.
pub async fn kill_during_payment(service: &mut OrderService) {
    let order = create_order(service, "alice").await;
    let url = service.at(&format!("/orders/{}/payments", order["id"].as_str().unwrap()));
    let key = fresh_key();
    let body = r#"{"amount_cents":700}"#;
    let started = std::time::Instant::now();
    let in_flight = {
        let (url, key) = (url.clone(), key.clone());
        actix_web::rt::spawn(async move { try_send(&url, Some("alice"), Some(&key), Some(body)).await })
    };
    actix_web::rt::time::sleep(Duration::from_millis(500)).await;
    service.kill9();
    assert!(in_flight.await.unwrap().is_err(), "the killed process never answered");
    service.restart().await;
    assert_eq!(stats(service).await, (1, 0), "the provider was never reached");
    let mut conflicts = 0;
    let executed = loop {
        // The dead owner's record keeps its fingerprint, before its lease
        // ends and after (a tombstone of a lapsed lease): another request
        // with the key is refused; sent first, so that it meets the lapsed
        // lease in the round where the same request takes it over.
        let other = send(&url, Some("alice"), Some(&key), Some(r#"{"amount_cents":701}"#)).await;
        other.assert_problem(422);
        let reply = send(&url, Some("alice"), Some(&key), Some(body)).await;
        if reply.status != StatusCode::CONFLICT {
            break reply;
        }
        assert!(reply.retry_after.is_some(), "{reply:?}");
        conflicts += 1;
        assert!(started.elapsed() < Duration::from_secs(60), "the lease never expired");
        actix_web::rt::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(conflicts > 0, "the retry right after the restart met the dead owner's lease");
    assert!(
        started.elapsed() >= Duration::from_secs(25),
        "executed after {:?}, before the lease ran out",
        started.elapsed()
    );
    assert_eq!(executed.status, StatusCode::CREATED, "{executed:?}");
    assert!(executed.replayed.is_none(), "the retry executed");
    assert_eq!(stats(service).await, (1, 1), "one charge in all");
    let replay = send(&url, Some("alice"), Some(&key), Some(body)).await;
    assert_eq!((replay.replayed.as_deref(), &replay.body), (Some("true"), &executed.body));
}

/// The provider's test amounts (§13 of the contract): 402 declined (no charge, stored),
/// 503 unavailable before charging (no charge, retryable: the same request
/// runs again, another one with the key gets 422), 504 timed out after
/// charging (one charge, stored, never charged again).
pub async fn failure_outcomes(service: &OrderService) {
    let order = create_order(service, "erin").await;
    let url = service.at(&format!("/orders/{}/payments", order["id"].as_str().unwrap()));
    let pay = |key: String, amount: u32| {
        let url = url.clone();
        async move { send(&url, Some("erin"), Some(&key), Some(&format!(r#"{{"amount_cents":{amount}}}"#))).await }
    };
    let (_, charges) = stats(service).await;

    let declined = fresh_key();
    let first = pay(declined.clone(), 402).await;
    let problem = first.assert_problem(402);
    assert_eq!(problem["type"], "urn:order-service:problem:card-declined", "{problem}");
    let replay = pay(declined.clone(), 402).await;
    assert_eq!((replay.status, replay.replayed.as_deref(), &replay.body), (first.status, Some("true"), &first.body));
    assert_eq!(stats(service).await.1, charges, "a declined card is never charged");

    let unavailable = fresh_key();
    for attempt in 1..=2 {
        let reply = pay(unavailable.clone(), 503).await;
        reply.assert_problem(503);
        assert_eq!(reply.replayed, None, "attempt {attempt}: a retryable answer is released, so the retry runs");
    }
    pay(unavailable.clone(), 700).await.assert_problem(422);
    assert_eq!(stats(service).await.1, charges, "the provider was unavailable before charging");

    let timed_out = fresh_key();
    let first = pay(timed_out.clone(), 504).await;
    first.assert_problem(504);
    assert_eq!(stats(service).await.1, charges + 1, "charged, then timed out");
    for _ in 0..2 {
        let replay = pay(timed_out.clone(), 504).await;
        assert_eq!(
            (replay.status, replay.replayed.as_deref(), &replay.body),
            (first.status, Some("true"), &first.body)
        );
    }
    assert_eq!(stats(service).await.1, charges + 1, "a stored 504 is never charged again");
}

/// SIGTERM while a payment whose client already hung up waits on the
/// provider: the process exits only once the payment completed, and after a
/// restart on the same backend the retry is a replay. Needs a charge delay
/// of at least 2 s and a backend that outlives the process.
pub async fn sigterm_drains_a_payment_whose_client_left(service: &mut OrderService, charge_delay: Duration) {
    let order = create_order(service, "dora").await;
    let (_, charges) = stats(service).await;
    let url = service.at(&format!("/orders/{}/payments", order["id"].as_str().unwrap()));
    let key = fresh_key();
    let body = r#"{"amount_cents":900}"#;
    let started = std::time::Instant::now();
    // The client aborts after 300 ms with a TCP reset: actix drops the
    // connection and its request, the payment goes on without them.
    abort_after(&url, &key, body, Duration::from_millis(300)).await;
    actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    let exited =
        service.terminate(charge_delay + Duration::from_secs(20)).await.expect("the service exited after SIGTERM");
    let since_start = started.elapsed();
    assert!(
        since_start >= charge_delay,
        "the process exited {since_start:?} after the payment began (SIGTERM {exited:?} before), \
         before the provider's {charge_delay:?}: the payment was dropped"
    );
    service.restart().await;
    let retry = send(&url, Some("dora"), Some(&key), Some(body)).await;
    assert_eq!(retry.status, StatusCode::CREATED, "{retry:?}");
    assert_eq!(retry.replayed.as_deref(), Some("true"), "the drained payment was completed and kept");
    assert_eq!(stats(service).await.1, charges + 1, "one charge");
}

/// Sends a payment over a raw connection, then aborts it after `after` with
/// a TCP reset (on a blocking thread: the test's other work goes on).
async fn abort_after(url: &str, key: &str, body: &str, after: Duration) {
    let address = url.trim_start_matches("http://");
    let (host, path) = address.split_at(address.find('/').expect("a path"));
    let (host, path, key, body) = (host.to_owned(), path.to_owned(), key.to_owned(), body.to_owned());
    actix_web::rt::task::spawn_blocking(move || {
        let headers = [("content-type", "application/json"), ("x-user-id", "dora"), ("idempotency-key", &key)];
        crate::resets::post_then_reset(&host, &path, &headers, &body, after);
    })
    .await
    .expect("the aborted request");
}
