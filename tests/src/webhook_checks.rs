//! Black-box checks of the order service's webhook (`POST
//! /webhooks/provider`, §13 of the contract): deliveries signed here with the service's
//! default secret, independently of the service's own code.

use std::time::{SystemTime, UNIX_EPOCH};

use awc::http::StatusCode;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::http::{Reply, fresh_key, post_with, send};
use crate::service::OrderService;

/// The service's default webhook secret.
const SECRET: &[u8] = b"whsec_test";

/// `refunds` of `GET /stats`.
pub async fn refunds(service: &OrderService) -> u64 {
    let reply = send(&service.at("/stats"), None, None, None).await;
    reply.json()["refunds"].as_u64().expect("refunds in /stats")
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs()
}

/// `v1=` of `body` signed with `secret` at `t`.
fn signature(secret: &[u8], t: u64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(format!("{t}.{body}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// A `charge.refunded` event with a fresh id.
pub fn refund_event() -> (String, String) {
    let id = format!("evt_{}", fresh_key());
    let body = format!(r#"{{"id":"{id}","type":"charge.refunded","data":{{"charge_id":"ch_1"}}}}"#);
    (id, body)
}

/// The `Provider-Signature` header of `body`, signed now with the
/// service's default secret.
pub fn signed(body: &str) -> String {
    let t = now();
    format!("t={t},v1={}", signature(SECRET, t, body))
}

/// Delivers `body` with the `Provider-Signature` `header`.
pub async fn deliver(service: &OrderService, header: &str, body: &str) -> Reply {
    let headers = [("content-type", "application/json"), ("provider-signature", header)];
    post_with(&service.at("/webhooks/provider"), &headers, body.to_owned()).await
}

/// Every webhook check across `services` (processes sharing one backend).
pub async fn webhooks(services: &[&OrderService]) {
    let first = services[0];
    let before = refunds(first).await;

    // A redelivery storm of one event, spread over the processes: every
    // delivery gets the one answer, the refund counts once.
    let (_, body) = refund_event();
    let t = now();
    let header = format!("t={t},v1={}", signature(SECRET, t, &body));
    let tasks = (0..100).map(|i| {
        let (service, header, body) = (services[i % services.len()], header.clone(), body.clone());
        let url = service.at("/webhooks/provider");
        actix_web::rt::spawn(async move {
            let headers = [("content-type", "application/json"), ("provider-signature", header.as_str())];
            post_with(&url, &headers, body).await
        })
    });
    let replies = futures_util::future::join_all(tasks).await;
    for reply in replies {
        let reply = reply.expect("a delivery task");
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(reply.json(), serde_json::json!({ "received": true }));
    }
    for service in services {
        assert_eq!(refunds(service).await, before + 1, "one refund for 100 deliveries of one event");
    }
    // A later redelivery gets the stored answer.
    let again = deliver(first, &header, &body).await;
    assert_eq!((again.status, again.replayed.as_deref()), (StatusCode::OK, Some("true")), "{again:?}");

    // A forged delivery of a real event id, first: refused, and it blocks
    // nothing: the genuine delivery afterwards runs.
    let (id, genuine) = refund_event();
    let t = now();
    let forged = format!(r#"{{"id":"{id}","type":"charge.refunded","data":{{"charge_id":"ch_attacker"}}}}"#);
    let forged_header = format!("t={t},v1={}", signature(b"whsec_guessed", t, &forged));
    deliver(first, &forged_header, &forged).await.assert_problem(400);
    let genuine_header = format!("t={t},v1={}", signature(SECRET, t, &genuine));
    let processed = deliver(first, &genuine_header, &genuine).await;
    assert_eq!((processed.status, processed.replayed.as_deref()), (StatusCode::OK, None), "{processed:?}");
    assert_eq!(refunds(first).await, before + 2);
    // Sent again after the genuine one, the forgery is still refused, not
    // answered with the genuine event's response.
    deliver(first, &forged_header, &forged).await.assert_problem(400);

    // A tampered body under a valid signature of another body; a stale
    // timestamp; no signature at all: refused, nothing recorded.
    let (_, other) = refund_event();
    deliver(first, &genuine_header, &other).await.assert_problem(400);
    let stale = now() - 301;
    let (_, late) = refund_event();
    deliver(first, &format!("t={stale},v1={}", signature(SECRET, stale, &late)), &late).await.assert_problem(400);
    let headers = [("content-type", "application/json")];
    post_with(&first.at("/webhooks/provider"), &headers, late.clone()).await.assert_problem(400);
    assert_eq!(refunds(first).await, before + 2, "refused deliveries record nothing");

    // While the secret rotates the provider sends two signatures: either
    // one is enough.
    let (_, rotated) = refund_event();
    let t = now();
    let both = format!("t={t},v1={},v1={}", signature(b"whsec_old", t, &rotated), signature(SECRET, t, &rotated));
    assert_eq!(deliver(first, &both, &rotated).await.status, StatusCode::OK);
    assert_eq!(refunds(first).await, before + 3);
}

/// A refund event delivered while the backend fails inside the handler
/// (`break_backend` makes its write fail, `repair` undoes that): the
/// delivery is answered 503 with `Retry-After`, and, as the write was not
/// made (or is safe to make again), nothing is kept: the redelivery after
/// the repair records the refund, once.
pub async fn a_refund_during_a_backend_error_counts_once(
    service: &OrderService,
    break_backend: impl AsyncFnOnce(),
    repair: impl AsyncFnOnce(),
) {
    let before = refunds(service).await;
    let (_, body) = refund_event();
    let header = signed(&body);
    break_backend().await;
    let failed = deliver(service, &header, &body).await;
    failed.assert_problem(503);
    assert!(failed.retry_after.is_some(), "a 503 says when to retry: {failed:?}");
    repair().await;
    let redelivered = deliver(service, &header, &body).await;
    assert_eq!(redelivered.status, StatusCode::OK, "the redelivery runs: {redelivered:?}");
    assert_eq!(redelivered.replayed, None, "not a replay of the 503: {redelivered:?}");
    assert_eq!(refunds(service).await, before + 1, "the refund counts once");
    let again = deliver(service, &header, &body).await;
    assert_eq!((again.status, again.replayed.as_deref()), (StatusCode::OK, Some("true")), "{again:?}");
    assert_eq!(refunds(service).await, before + 1);
}
