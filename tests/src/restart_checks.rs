//! The order service while its backend goes away and comes back (a server
//! restarted, a cluster primary failed over): every 503 it sends meanwhile
//! says when to retry (`Retry-After`), and once the backend is back the
//! same process serves every route again within seconds. Each intent is
//! retried with its one key, as a client does: a backend error kept as the
//! key's answer would be replayed to it forever.

use std::time::{Duration, Instant};

use awc::http::StatusCode;

use crate::http::{Reply, fresh_key, send};
use crate::order_checks::create_order;
use crate::service::OrderService;
use crate::webhook_checks::{deliver, refund_event, signed};

/// How long the service may take to serve every route again once its
/// backend is back.
const RECOVERY: Duration = Duration::from_secs(10);

const ORDER: &str = r#"{"customer_id":"cus_1","amount_cents":1500,"currency":"EUR"}"#;
const PAYMENT: &str = r#"{"amount_cents":1500}"#;

/// One intent per route, each with its one key (or event).
struct Intents {
    order_key: String,
    payment_key: String,
    /// An order made before the outage.
    order_id: String,
    event: (String, String),
}

impl Intents {
    /// Every route once, each intent with its own key.
    async fn send_all(&self, service: &OrderService) -> Vec<(&'static str, Reply)> {
        let user = Some("rita");
        let payments = service.at(&format!("/orders/{}/payments", self.order_id));
        vec![
            ("POST /orders", send(&service.at("/orders"), user, Some(&self.order_key), Some(ORDER)).await),
            ("POST /orders/{id}/payments", send(&payments, user, Some(&self.payment_key), Some(PAYMENT)).await),
            ("GET /orders/{id}", send(&service.at(&format!("/orders/{}", self.order_id)), user, None, None).await),
            ("GET /orders", send(&service.at("/orders"), user, None, None).await),
            ("GET /stats", send(&service.at("/stats"), None, None, None).await),
            ("POST /webhooks/provider", deliver(service, &self.event.1, &self.event.0).await),
            ("GET /healthz", send(&service.at("/healthz"), None, None, None).await),
        ]
    }
}

/// Runs `service` through an outage of its backend: `take_away` and
/// `bring_back` make it (each may block; they run off the test's thread).
pub async fn every_route_serves_again_after_an_outage(
    service: &OrderService,
    take_away: impl FnOnce() + Send + 'static,
    bring_back: impl FnOnce() + Send + 'static,
) {
    let order = create_order(service, "rita").await;
    let (_, body) = refund_event();
    let intents = Intents {
        order_key: fresh_key(),
        payment_key: fresh_key(),
        order_id: order["id"].as_str().expect("an order id").to_owned(),
        event: (body.clone(), signed(&body)),
    };
    actix_web::rt::task::spawn_blocking(take_away).await.expect("taking the backend away");
    let mut refused = 0;
    for _ in 0..3 {
        for (route, reply) in intents.send_all(service).await {
            if reply.status == StatusCode::SERVICE_UNAVAILABLE {
                refused += 1;
                assert!(reply.retry_after.is_some(), "{route}: a 503 says when to retry: {reply:?}");
            } else {
                assert!(reply.status.is_success(), "{route} during the outage: {reply:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(refused > 0, "the outage was seen");
    actix_web::rt::task::spawn_blocking(bring_back).await.expect("bringing the backend back");
    let back = Instant::now();
    loop {
        let replies = intents.send_all(service).await;
        let failing: Vec<_> = replies.iter().filter(|(_, reply)| !reply.status.is_success()).collect();
        if failing.is_empty() {
            break;
        }
        for (route, reply) in &failing {
            assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{route} after the outage: {reply:?}");
            assert!(reply.retry_after.is_some(), "{route}: a 503 says when to retry: {reply:?}");
        }
        assert!(
            back.elapsed() < RECOVERY,
            "still failing {:?} after the backend came back: {failing:?}",
            back.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("every route served again {:?} after the backend came back", back.elapsed());
}
