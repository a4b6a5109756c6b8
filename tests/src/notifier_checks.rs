//! The event path end to end (§10, §13): orders created through the real
//! order service, their `order.created` events delivered through the
//! backend's outbox transport to real `order-notifier` processes that
//! redeliver on purpose, crash and get killed: exactly one notification per
//! order.

use std::time::{Duration, Instant};

use awc::http::StatusCode;
use futures_util::future::join_all;
use idem_runtime::outbox::Transport;

use crate::http::send;
use crate::notifier::Notifier;
use crate::order_checks::create_order;
use crate::service::OrderService;

/// How many orders the two-notifier check creates.
const ORDERS: usize = 200;

/// `GET /stats` as (orders_created, notifications_sent).
pub async fn notifications(service: &OrderService) -> (u64, u64) {
    let reply = send(&service.at("/stats"), None, None, None).await;
    assert_eq!(reply.status, StatusCode::OK);
    let body = reply.json();
    (body["orders_created"].as_u64().unwrap(), body["notifications_sent"].as_u64().unwrap())
}

/// Waits up to `limit` for every created order to be notified and the
/// transport to be empty, then checks that nothing more happens for a few
/// visibility timeouts (a late duplicate would show). Returns the count.
pub async fn settled(service: &OrderService, transport: Option<&dyn Transport>, limit: Duration) -> u64 {
    let deadline = Instant::now() + limit;
    loop {
        let (orders, sent) = notifications(service).await;
        assert!(sent <= orders, "more notifications ({sent}) than orders ({orders})");
        let backlog = match transport {
            Some(transport) => transport.backlog().await.expect("the transport's backlog"),
            None => 0,
        };
        if sent == orders && backlog == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{sent} of {orders} orders notified, {backlog} events pending");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (orders, sent) = notifications(service).await;
    assert_eq!(sent, orders, "notifications_sent equals orders_created, exactly");
    sent
}

/// 200 orders created while two notifiers run with `--redeliver-rate 0.3`;
/// one is killed with SIGKILL half way and restarted. Every order ends
/// notified exactly once; both notifiers then stop cleanly on SIGTERM.
pub async fn two_notifiers_and_a_kill(service: &OrderService, store: &str, transport: &dyn Transport) {
    let (before, _) = notifications(service).await;
    let mut killed = Notifier::start(store, &["--redeliver-rate", "0.3"]);
    let mut other = Notifier::start(store, &["--redeliver-rate", "0.3"]);
    for wave in 0..ORDERS / 10 {
        join_all((0..10).map(|n| create_order(service, if n % 2 == 0 { "olga" } else { "oscar" }))).await;
        match wave {
            9 => killed.kill9(),
            13 => killed.restart(),
            _ => {}
        }
    }
    let sent = settled(service, Some(transport), Duration::from_secs(90)).await;
    assert_eq!(sent, before + ORDERS as u64, "one notification per order");
    killed.terminate(Duration::from_secs(15));
    other.terminate(Duration::from_secs(15));
}

/// The counts around a notifier crash: before it, right after it, and
/// once a restarted notifier settled everything.
struct Crash {
    before: (u64, u64),
    at_crash: (u64, u64),
    settled: u64,
}

/// Starts a notifier with the fault `knob`, creates one order for `user`,
/// waits for the abort, checks that the event was never acknowledged,
/// restarts the notifier without the knob and waits until every order is
/// notified and the transport is empty.
async fn one_order_through_a_crash(
    service: &OrderService,
    store: &str,
    transport: &dyn Transport,
    knob: &str,
    user: &str,
) -> Crash {
    let before = notifications(service).await;
    let mut notifier = Notifier::start(store, &[knob]);
    create_order(service, user).await;
    notifier.assert_aborts(Duration::from_secs(20));
    let at_crash = notifications(service).await;
    assert_eq!(transport.backlog().await.expect("the backlog"), 1, "never acknowledged");
    notifier.restart();
    let settled = settled(service, Some(transport), Duration::from_secs(30)).await;
    notifier.terminate(Duration::from_secs(15));
    Crash { before, at_crash, settled }
}

/// A notifier that aborts once the notification is sent and recorded,
/// before acknowledging the message (a relay killed between publish and
/// mark-published): the event is delivered again, to the restarted
/// notifier, whose inbox finds it processed. One notification, and nothing
/// left in the transport.
pub async fn a_crash_before_the_ack(service: &OrderService, store: &str, transport: &dyn Transport) {
    let crash = one_order_through_a_crash(service, store, transport, "--crash-before-ack", "nina").await;
    let (orders, sent) = crash.before;
    assert_eq!(crash.at_crash, (orders + 1, sent + 1), "sent before the crash");
    assert_eq!(crash.settled, sent + 1, "not sent again");
}

/// A notifier that aborts right after sending, before the inbox recorded
/// it: the lease lapses, the redelivered event is taken over and its work
/// runs again, sending under the same derived key, so the outlet sends
/// nothing new (on Postgres the first send was rolled back with its
/// transaction). One notification.
pub async fn a_crash_after_the_send(service: &OrderService, store: &str, transport: &dyn Transport) {
    let crash = one_order_through_a_crash(service, store, transport, "--crash-after-send", "nick").await;
    let (orders, sent) = crash.before;
    assert!(crash.at_crash.1 <= sent + 1, "{} notifications after one order", crash.at_crash.1);
    assert_eq!(crash.settled, sent + 1, "one notification");
    assert_eq!(crash.at_crash.0, orders + 1);
}
