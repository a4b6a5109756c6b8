//! The order service's events on Redis, on one server or a Redis Cluster:
//! its outbox stream as the notifiers' group reads it, and the list of the
//! orders the notifiers notified. The names are those of
//! `order_notifier::event` and `order_notifier::outlet` (§13 of the contract), with the
//! hash tags that keep each multi-key script in one cluster slot.

use idem_runtime::outbox::RedisOutbox;
use idem_runtime::{RedisConnection, RedisStore};

use crate::notifier_checks::notifications;
use crate::service::OrderService;

/// The order service's outbox stream (`order_notifier::event::STREAM`).
pub const STREAM: &str = "{order-service}:events";
/// The notifiers' consumer group on [`STREAM`] (`order_notifier::event::GROUP`).
pub const GROUP: &str = "order-notifier";
/// The orders notified, one entry per notification
/// (`order_notifier::outlet::NOTIFIED`).
pub const NOTIFIED: &str = "{order-notifier}:notified";

/// A consumer of the notifiers' group on the stream at `url` (a `redis://`
/// or `redis-cluster://` URL), for its backlog: it never receives.
pub async fn observer(url: &str) -> RedisOutbox {
    RedisOutbox::connect(url, STREAM, GROUP, "observer").await.expect("connecting to the order service's stream")
}

/// Checks that the notifiers' list at `url` names no order twice, and holds
/// as many orders as `/stats` says were created.
pub async fn each_order_notified_once(service: &OrderService, url: &str) {
    let mut connection = RedisConnection::open(url, &RedisStore::default_config()).await.expect("connecting to redis");
    let notified: Vec<String> = redis::AsyncCommands::lrange(&mut connection, NOTIFIED, 0, -1).await.unwrap();
    let distinct: std::collections::BTreeSet<&String> = notified.iter().collect();
    assert_eq!(distinct.len(), notified.len(), "no order notified twice");
    assert_eq!(notified.len() as u64, notifications(service).await.0, "one entry per order created");
}
