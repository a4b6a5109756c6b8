//! The `order.created` event: what the order service publishes through its
//! outbox, and what the notifier reads.

use idem_runtime::outbox::Event;
use serde::{Deserialize, Serialize};

/// The topic of the event each created order emits.
pub const ORDER_CREATED: &str = "order.created";

/// The Redis Stream the order service appends its events to. It carries the
/// hash tag of the order service's other keys, `{order-service}`: the
/// script that stores an order appends its event too, and on a Redis
/// Cluster the keys of one script must live in one slot.
pub const STREAM: &str = "{order-service}:events";

/// The consumer group of the notifiers on [`STREAM`].
pub const GROUP: &str = "order-notifier";

/// An order was created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderCreated {
    /// The order's id.
    pub order_id: String,
    /// Who created it (`X-User-ID`), the one to notify.
    pub owner: String,
    /// Its amount, in cents.
    pub amount_cents: i64,
    /// Its currency.
    pub currency: String,
}

impl OrderCreated {
    /// The event to publish: its id is the order's, so that the inbox of a
    /// notifier processes each order once, however often it is delivered.
    pub fn event(&self) -> Event {
        let payload = serde_json::to_string(self).unwrap_or_default();
        Event::new(format!("{ORDER_CREATED}:{}", self.order_id), ORDER_CREATED, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_round_trips() {
        let created =
            OrderCreated { order_id: "o1".into(), owner: "alice".into(), amount_cents: 1200, currency: "EUR".into() };
        let event = created.event();
        assert_eq!((event.id.as_str(), event.topic.as_str()), ("order.created:o1", ORDER_CREATED));
        assert_eq!(serde_json::from_str::<OrderCreated>(&event.payload).unwrap(), created);
    }
}
