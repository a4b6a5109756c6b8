//! Crashes of the order service at the points its fault knobs name
//! (`--crash-after-charge`, `--crash-after-step charge`,
//! `--crash-after-order-insert`), then a restart without the knob and a
//! retry of the same request: it waits for the dead owner's lease, then runs
//! once, and nothing is done twice.
//!
//! Each check comes in two halves, so that a test can look at the backend
//! in between (the rows a crash left, or did not leave).

use std::time::{Duration, Instant};

use awc::http::StatusCode;
use serde_json::Value;

use crate::http::{Reply, fresh_key, send, try_send};
use crate::order_checks::{create_order, stats};
use crate::service::OrderService;
use crate::tool_checks::Tool;

/// How long a process may take to abort once its request was sent.
const ABORT_LIMIT: Duration = Duration::from_secs(10);

/// The order that `--crash-after-order-insert` interrupts, and its owner.
const ORDER: &str = r#"{"customer_id":"cus_9","amount_cents":2500,"currency":"EUR"}"#;
/// The owner of the interrupted order: no other order of the checks is hers.
pub const ORDER_OWNER: &str = "frank";

/// The payment that `--crash-after-charge` interrupts, and its payer.
const PAYMENT: &str = r#"{"amount_cents":800}"#;
const PAYER: &str = "carol";
/// The payment route, as the records name it.
const PAYMENTS: &str = "POST /orders/{id}/payments";

/// A payment whose process aborted right after the provider recorded its
/// charge, before the handler returned.
#[derive(Debug)]
pub struct CrashedPayment {
    /// The order paid.
    pub order_id: String,
    url: String,
    key: String,
    sent: Instant,
    charges: u64,
}

/// On a service started with `--crash-after-charge`: creates an order (the
/// knob only fires on a charge) and pays it; the process aborts, so the
/// client gets a connection error. Restarts the service on its port
/// without the knob: the provider, another system, kept the charge.
pub async fn crash_after_charge(service: &mut OrderService) -> CrashedPayment {
    crash_a_payment(service, &[]).await
}

/// On a service started with `--provider-dedup off --crash-after-step
/// charge`: creates an order and pays it; the process aborts right after
/// the runtime recorded the payment's durable step `charge`, so the client
/// gets a connection error. Restarts the service on its port without the
/// crash knob, its provider still charging every call anew: the provider
/// kept the charge, and the record, in flight under the dead owner's lease,
/// holds the step's result, the captured charge, as `idem inspect` shows.
pub async fn crash_after_step(service: &mut OrderService) -> CrashedPayment {
    let crashed = crash_a_payment(service, &["--provider-dedup", "off"]).await;
    let args = ["inspect", "--route", PAYMENTS, "--subject", PAYER, "--key", &crashed.key, "--json"];
    let inspected = Tool::on(service.store()).run(&args).await.exited(0).json_lines();
    let record = &inspected[0];
    assert_eq!(record["state"], "in-flight", "{record}");
    let steps = record["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1, "{record}");
    let (step, result) = (&steps[0]["name"], &steps[0]["result"]);
    assert_eq!((step.as_str(), result["outcome"].as_str()), (Some("charge"), Some("captured")), "{record}");
    assert_eq!(result["order_id"].as_str(), Some(&*crashed.order_id), "{record}");
    crashed
}

/// Creates an order and pays it on a service whose knob aborts the payment;
/// restarts the service with `args` instead: one charge more.
async fn crash_a_payment(service: &mut OrderService, args: &[&str]) -> CrashedPayment {
    let order = create_order(service, PAYER).await;
    let order_id = order["id"].as_str().expect("an order id").to_owned();
    let (orders, charges) = stats(service).await;
    let url = service.at(&format!("/orders/{order_id}/payments"));
    let key = fresh_key();
    let sent = Instant::now();
    let reply = try_send(&url, Some(PAYER), Some(&key), Some(PAYMENT)).await;
    assert!(reply.is_err(), "the process aborted before it answered: {reply:?}");
    service.assert_aborts(ABORT_LIMIT).await;
    service.restart_with(args, &[]).await;
    assert_eq!(stats(service).await, (orders, charges + 1), "the provider's charge outlived the crash");
    CrashedPayment { order_id, url, key, sent, charges }
}

/// Retries the crashed payment with its key and body: 409 with
/// `Retry-After` until the dead owner's 30 s lease lapses, then exactly one
/// 201, an execution (not a replay), that charges nothing more: one charge
/// in all. After `--crash-after-charge` the step `charge` runs again and
/// the provider returns the first charge (it knows the derived key); after
/// `--crash-after-step charge` the takeover gets the recorded charge back
/// and never calls the provider. A further retry is a replay, byte for
/// byte. Returns the 201.
pub async fn pay_after_the_lease(service: &OrderService, crashed: &CrashedPayment) -> Reply {
    let executed = retry_after_the_lease(&crashed.url, PAYER, &crashed.key, PAYMENT, crashed.sent).await;
    let payment = executed.json();
    assert_eq!(
        (payment["order_id"].as_str(), payment["status"].as_str()),
        (Some(&*crashed.order_id), Some("captured"))
    );
    assert_eq!(stats(service).await.1, crashed.charges + 1, "one charge in all");
    executed
}

/// An order whose process aborted right after the order was written,
/// before the handler returned.
#[derive(Debug)]
pub struct CrashedOrder {
    /// `orders_created` before the crash.
    pub orders_before: u64,
    key: String,
    sent: Instant,
}

/// On a service started with `--crash-after-order-insert`: creates an
/// order for [`ORDER_OWNER`]; the process aborts, so the client gets a
/// connection error. Restarts the service on its port without the knob.
/// What the crash left depends on the backend: the caller checks it.
pub async fn crash_after_order_insert(service: &mut OrderService) -> CrashedOrder {
    let (orders_before, _) = stats(service).await;
    let key = fresh_key();
    let sent = Instant::now();
    let reply = try_send(&service.at("/orders"), Some(ORDER_OWNER), Some(&key), Some(ORDER)).await;
    assert!(reply.is_err(), "the process aborted before it answered: {reply:?}");
    service.assert_aborts(ABORT_LIMIT).await;
    service.restart_with(&[], &[]).await;
    CrashedOrder { orders_before, key, sent }
}

/// Retries the crashed order with its key and body: 409 with `Retry-After`
/// until the dead owner's lease lapses, then exactly one 201 (not a
/// replay); one order more than before the crash, and the only one of its
/// owner. A further retry is a replay, byte for byte. Returns the order.
pub async fn create_after_the_lease(service: &OrderService, crashed: &CrashedOrder) -> Value {
    let executed = retry_after_the_lease(&service.at("/orders"), ORDER_OWNER, &crashed.key, ORDER, crashed.sent).await;
    let order = executed.json();
    assert_eq!(executed.location, Some(format!("/orders/{}", order["id"].as_str().expect("an order id"))));
    assert_eq!(stats(service).await.0, crashed.orders_before + 1, "one order in all");
    let listed = send(&service.at("/orders"), Some(ORDER_OWNER), None, None).await;
    assert_eq!(listed.json(), Value::Array(vec![order.clone()]), "the owner has that order and no other");
    order
}

/// Sends the request until it runs: 409 with `Retry-After` while the lease
/// taken at `sent` holds, then one execution, answered 201. Checks that a
/// further retry replays it, and returns it.
async fn retry_after_the_lease(url: &str, user: &str, key: &str, body: &str, sent: Instant) -> Reply {
    let mut conflicts = 0;
    let executed = loop {
        let reply = send(url, Some(user), Some(key), Some(body)).await;
        if reply.status != StatusCode::CONFLICT {
            break reply;
        }
        assert!(reply.retry_after.is_some(), "{reply:?}");
        conflicts += 1;
        assert!(sent.elapsed() < Duration::from_secs(60), "the lease never expired");
        actix_web::rt::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(conflicts > 0, "the retry right after the restart met the dead owner's lease");
    let after = sent.elapsed();
    assert!(after >= Duration::from_secs(25), "executed {after:?} after the crash, before the lease ran out");
    assert_eq!(executed.status, StatusCode::CREATED, "{executed:?}");
    assert!(executed.replayed.is_none(), "the retry executed: {executed:?}");
    let replay = send(url, Some(user), Some(key), Some(body)).await;
    assert_eq!((replay.status, replay.replayed.as_deref()), (StatusCode::CREATED, Some("true")), "{replay:?}");
    assert_eq!((&replay.body, &replay.location), (&executed.body, &executed.location), "byte for byte");
    executed
}
